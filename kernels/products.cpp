// The matrix-product policy (products.h).
#include "products.h"

#include <stdexcept>

namespace ag {

void Products::keep(const float* base, std::int64_t size, std::shared_ptr<const bf16::Buffer> copy, bool parameter) {
  if (!bf16_ || size == 0 || copy_of(base, size)) return;
  kept_.push_back(Kept{base, size, std::move(copy), parameter});
}

std::shared_ptr<const bf16::Buffer> Products::copy_of(const float* base, std::int64_t size) const {
  if (!bf16_ || size == 0) return nullptr;
  for (const Kept& k : kept_)
    if (k.base == base && k.size == size) return k.copy;
  return nullptr;
}

Products Products::parameters_only() const {
  Products p;
  p.bf16_ = bf16_;
  for (const Kept& k : kept_)
    if (k.parameter) p.kept_.push_back(k);
  return p;
}

namespace {
// Whether the view m, read from its first element on, stays inside [base, base + size).
bool inside(const blas::Matrix<const float>& m, const float* base, std::int64_t size) {
  if (m.data < base || m.data >= base + size || m.rows == 0 || m.cols == 0) return false;
  return (m.data - base) + (m.rows - 1) * m.ld + m.cols <= size;
}

template <class U>
blas::Matrix<const U> same_view(const blas::Matrix<const float>& m, const U* data) {
  return {data, m.rows, m.cols, m.ld, m.transposed};
}
}  // namespace

// The kept copy of the view m, when all of it lies in one kept tensor; else null.
const std::uint16_t* Products::kept_view(const blas::Matrix<const float>& m) const {
  for (const Kept& k : kept_)
    if (inside(m, k.base, k.size)) return k.copy->data.get() + (m.data - k.base);
  return nullptr;
}

void Products::bf16_gemm(blas::Matrix<const float> a, blas::Matrix<const float> b, blas::Matrix<float> c, float beta,
                         float alpha, const float* bias) const {
  const std::uint16_t *a16 = kept_view(a), *b16 = kept_view(b);
  if (a16 && b16) return bf16::gemm(same_view(a, a16), same_view(b, b16), c, beta, alpha, bias);
  if (a16) return bf16::gemm(same_view(a, a16), b, c, beta, alpha, bias);
  if (b16) return bf16::gemm(a, same_view(b, b16), c, beta, alpha, bias);
  bf16::gemm(a, b, c, beta, alpha, bias);  // each operand rounded on the way in
}

void Products::gemm(blas::Matrix<const float> a, blas::Matrix<const std::uint16_t> b, blas::Matrix<float> c,
                    float beta, float alpha) const {
  if (!bf16_) throw std::logic_error("Products::gemm: a bf16 operand under the BLAS policy");
  if (const std::uint16_t* a16 = kept_view(a)) return bf16::gemm(same_view(a, a16), b, c, beta, alpha);
  bf16::gemm(a, b, c, beta, alpha);
}

void Products::gemm(blas::Matrix<const std::uint16_t> a, blas::Matrix<const float> b, blas::Matrix<float> c,
                    float beta, float alpha) const {
  if (!bf16_) throw std::logic_error("Products::gemm: a bf16 operand under the BLAS policy");
  if (const std::uint16_t* b16 = kept_view(b)) return bf16::gemm(a, same_view(b, b16), c, beta, alpha);
  bf16::gemm(a, b, c, beta, alpha);
}

void Products::gemm(blas::Matrix<const std::uint16_t> a, blas::Matrix<const std::uint16_t> b, blas::Matrix<float> c,
                    float beta, float alpha) const {
  if (!bf16_) throw std::logic_error("Products::gemm: a bf16 operand under the BLAS policy");
  bf16::gemm(a, b, c, beta, alpha);
}

}  // namespace ag
