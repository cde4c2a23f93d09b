// The broadcast loops of ops/binary.cpp as a reader writes them first: one loop over the
// output's elements, each element's coordinates recovered by division, and each input's offset
// the sum of coordinate times stride (kernels/table.h, BroadcastSizes). The fast twins are in
// kernels/cpu/broadcast.cpp.
//
//   arithmetic:  y[o] = a[ia] op b[ib], op one of + - * / maximum minimum      broadcast_to:  y[o] = x[ix]      sum_to:
//   y[iy] += g[o] compare (ops/binary.cpp):  y[o] = a[ia] op b[ib], a bool
#include <cmath>

#include "naive.h"

namespace ag::backends::naive {

namespace {

// The offset in an input with these strides of element o of n's shape: o's coordinates, read
// from the last dim (the fastest) to the first, each times its stride.
std::int64_t offset(const BroadcastSizes& n, const std::int64_t* strides, std::int64_t o) {
  std::int64_t at = 0;
  for (std::size_t d = n.rank; d-- > 0;) {
    at += (o % n.shape[d]) * strides[d];
    o /= n.shape[d];
  }
  return at;
}

}  // namespace

template <class T>
void arithmetic(Arithmetic op, const BroadcastSizes& n, const T* a, const T* b, T* y) {
  count_call();
  const std::int64_t total = element_count(n);
  for (std::int64_t o = 0; o < total; ++o) {
    T u = a[offset(n, n.a_strides, o)], v = b[offset(n, n.b_strides, o)];
    switch (op) {
      case Arithmetic::Add: y[o] = u + v; break;
      case Arithmetic::Sub: y[o] = u - v; break;
      case Arithmetic::Mul: y[o] = u * v; break;
      case Arithmetic::Div: y[o] = u / v; break;
      case Arithmetic::Maximum: y[o] = std::isnan(u) || u > v ? u : v; break;
      case Arithmetic::Minimum: y[o] = std::isnan(u) || u < v ? u : v; break;
    }
  }
}

template <class T>
void broadcast(const BroadcastSizes& n, const T* x, T* y) {
  count_call();
  const std::int64_t total = element_count(n);
  for (std::int64_t o = 0; o < total; ++o) y[o] = x[offset(n, n.a_strides, o)];
}

template <class T>
void sum_broadcast(const BroadcastSizes& n, const T* g, T* y) {
  count_call();
  const std::int64_t total = element_count(n);
  for (std::int64_t o = 0; o < total; ++o) y[offset(n, n.a_strides, o)] += g[o];
}

namespace {

template <class T>
void compare_as(Comparison op, const BroadcastSizes& n, const T* a, const T* b, bool* y) {
  const std::int64_t total = element_count(n);
  for (std::int64_t o = 0; o < total; ++o) {
    T u = a[offset(n, n.a_strides, o)], v = b[offset(n, n.b_strides, o)];
    switch (op) {
      case Comparison::Eq: y[o] = u == v; break;
      case Comparison::Ne: y[o] = u != v; break;
      case Comparison::Lt: y[o] = u < v; break;
      case Comparison::Le: y[o] = u <= v; break;
      case Comparison::Gt: y[o] = u > v; break;
      case Comparison::Ge: y[o] = u >= v; break;
    }
  }
}

}  // namespace

void compare(Comparison op, Scalar type, const BroadcastSizes& n, const void* a, const void* b, bool* y) {
  count_call();
  with_element(type, [&](auto tag) {
    using T = decltype(tag);
    compare_as(op, n, static_cast<const T*>(a), static_cast<const T*>(b), y);
  });
}

// The two precisions of the table (table.cpp).
template void arithmetic(Arithmetic, const BroadcastSizes&, const float*, const float*, float*);
template void arithmetic(Arithmetic, const BroadcastSizes&, const double*, const double*, double*);
template void broadcast(const BroadcastSizes&, const float*, float*);
template void broadcast(const BroadcastSizes&, const double*, double*);
template void sum_broadcast(const BroadcastSizes&, const float*, float*);
template void sum_broadcast(const BroadcastSizes&, const double*, double*);

}  // namespace ag::backends::naive
