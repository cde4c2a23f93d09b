// The cpu backend's kernels (cpu/table.cpp puts them in its table; kernels/table.h says what
// each computes). Internal: the ops reach them through the table only.
#pragma once

#include <cstdint>

#include "../products.h"
#include "../table.h"

namespace ag::backends::cpu {

// elementwise.cpp
template <class T>
void unary(Unary op, double p, std::int64_t n, const T* x, T* y);
template <class T>
void unary_backward(Unary op, double p, std::int64_t n, const T* saved, const T* dy, T* dx);

// broadcast.cpp
template <class T>
void arithmetic(Arithmetic op, const BroadcastSizes& n, const T* a, const T* b, T* y);
template <class T>
void broadcast(const BroadcastSizes& n, const T* x, T* y);
template <class T>
void sum_broadcast(const BroadcastSizes& n, const T* g, T* y);

// along_dim.cpp: sums, max, softmax and masked_fill along one dim
template <class T>
void sum_dim(const DimSizes& n, const T* x, T* y);
template <class T>
void max_dim(const DimSizes& n, const T* x, T* y, std::int64_t* index);
template <class T>
void take_along(const DimSizes& n, const T* x, const std::int64_t* index, T* y);
template <class T>
void put_along(const DimSizes& n, const T* x, const std::int64_t* index, T* y);
template <class T>
bool softmax(const DimSizes& n, bool log, const T* x, T* y);
template <class T>
bool dead_rows(const DimSizes& n, const T* y, bool* dead);
template <class T>
void masked_fill(std::int64_t n, const T* x, const bool* mask, double value, T* y);
template <class T>
void where(std::int64_t n, const bool* cond, const T* a, const T* b, T* y);
template <class T>
void gather(const DimSizes& n, std::int64_t m, const T* x, const std::int64_t* index, T* y);
template <class T>
void scatter_add(const DimSizes& n, std::int64_t m, const T* src, const std::int64_t* index, T* y);
template <class T>
void index_add(const DimSizes& n, std::int64_t m, const T* src, const std::int64_t* index, T* y);

// moves.cpp: slice, cat and permute's copies, for every dtype; convert, arange and fill
void copy_along(const CopySizes& n, const void* src, void* dst);
void select_along(const DimSizes& n, std::int64_t m, std::int64_t element, const void* x, const std::int64_t* index,
                  void* y);
void permute(const PermuteSizes& n, const void* x, void* y);
std::int64_t convert(Scalar from, Scalar to, std::int64_t n, const void* src, void* dst);
void arange(Scalar to, double start, double step, std::int64_t n, void* dst);
void fill(Scalar to, double value, std::int64_t n, void* dst);

// masks.cpp: the boolean masks of ops/masking.cpp
void causal_mask(std::int64_t tq, std::int64_t tk, bool* y);
void key_padding_mask(std::int64_t b, std::int64_t t, const std::int64_t* lengths, bool* y);
void logical(Logical op, std::int64_t n, const bool* a, const bool* b, bool* y);

// broadcast.cpp, beside arithmetic: the comparisons of ops/binary.cpp, for every dtype
void compare(Comparison op, Scalar type, const BroadcastSizes& n, const void* a, const void* b, bool* y);

// along_dim.cpp, beside sum_dim: the exact sum of bool or int64 elements
std::int64_t sum_integers(Scalar type, const DimSizes& n, const void* x, std::int64_t* y);

// gelu.cpp. The loops on one thread (linear_gelu runs them on each band it computed), and the
// bf16 form, whose Phi is accurate to a relative 3e-5 only: its output and slope are rounded to
// bf16 next (fast::normal_bf16).
void gelu_loop(const float* x, float* y, float* slope, std::int64_t n, GeluForm form);
void gelu_loop(const double* x, double* y, double* slope, std::int64_t n, GeluForm form);
void gelu_loop_bf16(const float* x, float* y, float* slope, std::int64_t n, GeluForm form);
template <class T>
void gelu(std::int64_t n, const T* x, T* y, T* slope, GeluForm form);
template <class T>
void gelu_curvature(std::int64_t n, const T* x, T* out, GeluForm form);

// linear.cpp
template <class T>
void linear(const Products& products, const LinearSizes& n, const T* x, const T* w, const T* b, T* y);
template <class T>
void linear_gelu(const Products& products, const LinearSizes& n, const T* x, const T* w, const T* b, T* y, T* slope,
                 GeluForm form);
template <class T>
void linear_backward(const Products& products, const LinearSizes& n, const T* dy, const T* slope, const T* x,
                     const std::uint16_t* x_rounded, const T* w, T* dx, T* dw, T* db);

// swiglu.cpp
template <class T>
void swiglu(const Products& products, const SwigluSizes& n, const T* x, const T* w1, const T* w3, const T* w2, T* y,
            T* h1, T* h3);
template <class T>
void swiglu_backward(const Products& products, const SwigluSizes& n, const T* dy, const T* x, const T* w1, const T* w3,
                     const T* w2, const T* h1, const T* h3, T* dx, T* dw1, T* dw3, T* dw2);

// norms.cpp
template <class T>
void layer_norm(std::int64_t rows, std::int64_t d, double eps, const T* x, const T* w, const T* b, T* y, double* mean,
                double* rstd);
template <class T>
void layer_norm_backward(std::int64_t rows, std::int64_t d, const T* x, const T* w, const double* mean,
                         const double* rstd, const T* dy, T* dx, T* dw, T* db);
template <class T>
void rms_norm(std::int64_t rows, std::int64_t d, double eps, const T* x, const T* w, T* y, double* rrms);
template <class T>
void rms_norm_backward(std::int64_t rows, std::int64_t d, const T* x, const T* w, const double* rrms, const T* dy,
                       T* dx, T* dw);

// lookup.cpp: embedding and cross_entropy
template <class T>
void embedding(std::int64_t positions, std::int64_t dim, const T* w, const std::int64_t* ids, T* y);
template <class T>
void embedding_backward(std::int64_t positions, std::int64_t dim, std::int64_t vocab, const std::int64_t* ids,
                        const T* dy, T* dw);
template <class T>
double cross_entropy(std::int64_t rows, std::int64_t classes, const T* x, const std::int64_t* targets,
                     std::int64_t ignore_index, double* lse);
template <class T>
void cross_entropy_backward(std::int64_t rows, std::int64_t classes, const T* x, const std::int64_t* targets,
                            std::int64_t ignore_index, const double* lse, double g, T* dx);
template <class T>
double cross_entropy_jvp(std::int64_t rows, std::int64_t classes, const T* x, const T* dx, const std::int64_t* targets,
                         std::int64_t ignore_index, const double* lse);
template <class T>
void cross_entropy_backward_tangent(std::int64_t rows, std::int64_t classes, const T* x, const T* x_t,
                                    const std::int64_t* targets, std::int64_t ignore_index, const double* lse, double g,
                                    T* out);

// optim.cpp
template <class T>
void adam_update(std::int64_t n, T* w, const T* g, T* m, T* v, const AdamSettings& s);
template <class T>
void sgd_update(std::int64_t n, T* w, const T* g, T* buf, const SgdSettings& s);
template <class T>
double sum_of_squares(std::int64_t n, const T* x);
template <class T>
void scale(std::int64_t n, T* x, double factor);

}  // namespace ag::backends::cpu
