// The README's first program: the study notes' worked example (the query of "cat" against the
// keys of "The", "cat", "sat", d_k = 4), attention's output, its gradient by backward(), and a
// float64 gradcheck of both against finite differences. tests/install_test.sh compiles it
// against the installed library and checks what it prints against the closed form.
#include <attograd/attograd.h>

#include <cmath>

int main() {
  using ag::Tensor;
  Tensor q = ag::tensor({1, 0, 1, 0}, {1, 4}, ag::kFloat64).requires_grad_();         // "cat"
  Tensor k = ag::tensor({1, 1, 0, 0, 1, 0, 1, 0, 0, 1, 1, 0}, {3, 4}, ag::kFloat64);  // The, cat, sat
  Tensor v = ag::tensor({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 4}, ag::kFloat64).requires_grad_();
  auto attention = [&](const Tensor& q, const Tensor& v) {
    Tensor weights = (q.matmul(k.t()) / std::sqrt(4.0)).softmax(-1);  // softmax(q Kᵀ / √d_k): [1, 3]
    return std::pair{weights, weights.matmul(v)};                     // the weighted sum of V: [1, 4]
  };
  auto [weights, out] = attention(q, v);
  out.sum().backward();  // L = the sum of the output; dL/dv row j = weight j
  fmt::print("weights = {}\ndL/dv = {}\n", weights.detach(), v.grad());
  auto loss = [&](const std::vector<Tensor>& x) { return attention(x[0], x[1]).second.sum(); };
  fmt::print("gradcheck: {}\n", ag::gradcheck(loss, {q, v}).passed ? "passed" : "failed");
}
