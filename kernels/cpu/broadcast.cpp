// The broadcast loops of ops/binary.cpp (kernels/table.h): arithmetic on two inputs read through
// broadcast strides, broadcast_to, sum_to, and the comparisons (the same walk, a bool out). The
// naive twins are in kernels/naive/broadcast.cpp.
//
// One walk serves all three: an odometer over every dim but the last, with the last dim a plain
// inner loop, so an input's offset is updated by one addition per element rather than
// recomputed from the coordinates. Same-shape arithmetic, the common case (residual adds,
// dropout's mask), is one flat loop split across the pool.
#include <vector>

#include "../../runtime/parallel.h"
#include "kernels.h"

namespace ag::backends::cpu {

namespace {

// Calls f(o, ia, ib) for every element o of n's shape, in order, with the offsets of a and b.
template <class F>
void for_each_broadcast(const BroadcastSizes& n, F&& f) {
  std::int64_t total = element_count(n);
  if (total == 0) return;
  if (n.rank == 0) {
    f(0, 0, 0);
    return;
  }
  const std::int64_t* sb = n.b_strides ? n.b_strides : n.a_strides;
  std::size_t last = n.rank - 1;
  std::int64_t inner = n.shape[last], a_step = n.a_strides[last], b_step = sb[last];
  std::vector<std::int64_t> counter(n.rank, 0);
  std::int64_t ia = 0, ib = 0;
  for (std::int64_t o = 0; o < total; o += inner) {
    for (std::int64_t j = 0; j < inner; ++j) f(o + j, ia + j * a_step, ib + j * b_step);
    for (std::size_t d = last; d-- > 0;) {  // advance the odometer over dims rank-2 .. 0
      ia += n.a_strides[d];
      ib += sb[d];
      if (++counter[d] < n.shape[d]) break;
      ia -= n.a_strides[d] * n.shape[d];
      ib -= sb[d] * n.shape[d];
      counter[d] = 0;
    }
  }
}

// Whether strides read the shape as stored, row-major with nothing broadcast.
bool plain(const BroadcastSizes& n, const std::int64_t* strides) {
  std::int64_t stride = 1;
  for (std::size_t d = n.rank; d-- > 0;) {
    if (n.shape[d] != 1 && strides[d] != stride) return false;
    stride *= n.shape[d];
  }
  return true;
}

template <class T, class Y, class F>
void apply(const BroadcastSizes& n, const T* a, const T* b, Y* y, F f) {
  std::int64_t total = element_count(n);
  if (total == 0) return;
  if (plain(n, n.a_strides) && plain(n, n.b_strides)) {  // the same shape: one flat loop
    parallel_for(total, 1 << 15, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) y[i] = f(a[i], b[i]);
    });
    return;
  }
  for_each_broadcast(n, [&](std::int64_t o, std::int64_t ia, std::int64_t ib) { y[o] = f(a[ia], b[ib]); });
}

}  // namespace

template <class T>
void arithmetic(Arithmetic op, const BroadcastSizes& n, const T* a, const T* b, T* y) {
  switch (op) {
    case Arithmetic::Add: return apply(n, a, b, y, [](T u, T v) { return u + v; });
    case Arithmetic::Sub: return apply(n, a, b, y, [](T u, T v) { return u - v; });
    case Arithmetic::Mul: return apply(n, a, b, y, [](T u, T v) { return u * v; });
    case Arithmetic::Div: return apply(n, a, b, y, [](T u, T v) { return u / v; });
    case Arithmetic::Maximum: return apply(n, a, b, y, [](T u, T v) { return u > v || u != u ? u : v; });
    case Arithmetic::Minimum: return apply(n, a, b, y, [](T u, T v) { return u < v || u != u ? u : v; });
  }
}

template <class T>
void broadcast(const BroadcastSizes& n, const T* x, T* y) {
  for_each_broadcast(n, [&](std::int64_t o, std::int64_t ix, std::int64_t) { y[o] = x[ix]; });
}

template <class T>
void sum_broadcast(const BroadcastSizes& n, const T* g, T* y) {
  for_each_broadcast(n, [&](std::int64_t o, std::int64_t iy, std::int64_t) { y[iy] += g[o]; });
}

namespace {

template <class T>
void compare_as(Comparison op, const BroadcastSizes& n, const T* a, const T* b, bool* y) {
  switch (op) {
    case Comparison::Eq: return apply(n, a, b, y, [](T u, T v) { return u == v; });
    case Comparison::Ne: return apply(n, a, b, y, [](T u, T v) { return u != v; });
    case Comparison::Lt: return apply(n, a, b, y, [](T u, T v) { return u < v; });
    case Comparison::Le: return apply(n, a, b, y, [](T u, T v) { return u <= v; });
    case Comparison::Gt: return apply(n, a, b, y, [](T u, T v) { return u > v; });
    case Comparison::Ge: return apply(n, a, b, y, [](T u, T v) { return u >= v; });
  }
}

}  // namespace

void compare(Comparison op, Scalar type, const BroadcastSizes& n, const void* a, const void* b, bool* y) {
  with_element(type, [&](auto tag) {
    using T = decltype(tag);
    compare_as(op, n, static_cast<const T*>(a), static_cast<const T*>(b), y);
  });
}

template void arithmetic(Arithmetic, const BroadcastSizes&, const float*, const float*, float*);
template void arithmetic(Arithmetic, const BroadcastSizes&, const double*, const double*, double*);
template void broadcast(const BroadcastSizes&, const float*, float*);
template void broadcast(const BroadcastSizes&, const double*, double*);
template void sum_broadcast(const BroadcastSizes&, const float*, float*);
template void sum_broadcast(const BroadcastSizes&, const double*, double*);

}  // namespace ag::backends::cpu
