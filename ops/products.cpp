// The matrix-product policy (products.h).
#include "products.h"

#include "autocast.h"

namespace ag {

Products& Products::keep(const Tensor& t) {
  if (!bf16_ || t.dtype() != kFloat32 || t.numel() == 0) return *this;
  const float* base = t.const_data_ptr<float>();
  for (const Kept& k : kept_)
    if (k.base == base && k.size == t.numel()) return *this;
  kept_.push_back(Kept{base, t.numel(), detail::bf16_copy(t), detail::is_parameter(t)});
  return *this;
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

void Products::bf16_gemm(blas::Matrix<const float> a, blas::Matrix<const float> b, blas::Matrix<float> c, float beta,
                         float alpha) const {
  // A view reads the kept copy only when all of it lies in one kept tensor.
  auto copy_of = [&](const blas::Matrix<const float>& m) -> const std::uint16_t* {
    for (const Kept& k : kept_)
      if (inside(m, k.base, k.size)) return k.copy->data.get() + (m.data - k.base);
    return nullptr;
  };
  const std::uint16_t *a16 = copy_of(a), *b16 = copy_of(b);
  if (a16 && b16) return bf16::gemm(same_view(a, a16), same_view(b, b16), c, beta, alpha);
  if (a16) return bf16::gemm(same_view(a, a16), b, c, beta, alpha);
  if (b16) return bf16::gemm(a, same_view(b, b16), c, beta, alpha);
  bf16::gemm(a, b, c, beta, alpha);  // each operand rounded on the way in
}

}  // namespace ag
