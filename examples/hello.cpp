// The README's first program: compiled against the installed library by tests/install_test.sh.
#include <attograd/attograd.h>

int main() {
  ag::Tensor w = ag::tensor({1, 2, 3}, {3}).requires_grad_();
  ag::Tensor loss = (w * w).sum();  // loss = w1^2 + w2^2 + w3^2
  loss.backward();                  // d loss / dw = 2w
  fmt::print("loss = {}\ngrad = {}\n", loss.item(), w.grad());
}
