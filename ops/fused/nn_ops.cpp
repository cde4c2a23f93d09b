// embedding, dropout and cross_entropy; linear and linear_gelu are in linear.cpp, layer_norm in
// layer_norm.cpp. Notation: R = rows (every dim but the last, flattened), D or C = the last dim.
#include "../nn_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "../../autograd/dispatch.h"
#include "../../autograd/forward.h"
#include "../../autograd/grad_mode.h"
#include "../../autograd/node.h"
#include "../binary.h"
#include "../elementwise.h"
#include "../reduce.h"
#include "../reference/reference.h"
#include "../route.h"

namespace ag {

// ---------------------------------------------------------------------------------------------
// embedding:  y[p, :] = W[ids[p], :]      W: [V, D]   ids: [P]   y: [P, D]
//   dW[v, :] = sum over positions p with ids[p] = v of dy[p, :]      (a scatter-add)
namespace {

// dW: dy's rows added into the rows their ids picked (a scatter-add; repeated ids add up), by
// the backend's kernel.
Tensor embedding_backward(const backends::Backend& backend, const Tensor& dy, const Tensor& ids, const Shape& w_shape) {
  Tensor dw = empty(w_shape, dy.dtype());
  dispatch_floating(dy.dtype(), "embedding", [&](auto tag) {
    using T = decltype(tag);
    backend.table<T>().embedding_backward(ids.numel(), w_shape[1], w_shape[0], ids.data_ptr<std::int64_t>(),
                                          dy.data_ptr<T>(), dw.mutable_data_ptr<T>());
  });
  return dw;
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  check_floating("embedding", weight);
  check_defined("embedding", ids);
  if (weight.dim() != 2) throw_invalid("embedding", "weight must be [V, D], got shape {}", shape_str(weight.shape()));
  if (ids.dtype() != kInt64)
    throw_invalid("embedding", "ids must be int64, got {} with shape {}", dtype_name(ids.dtype()),
                  shape_str(ids.shape()));
  std::int64_t vocab = weight.size(0), dim = weight.size(1), positions = ids.numel();
  const auto* pid = ids.data_ptr<std::int64_t>();
  for (std::int64_t p = 0; p < positions; ++p)
    if (pid[p] < 0 || pid[p] >= vocab)
      throw_invalid("embedding", "id {} at position {} is outside the table's {} rows (ids shape {})", pid[p], p, vocab,
                    shape_str(ids.shape()));
  // With create_graph: the chain rule through reference::embedding, a product with constant
  // one-hot rows, which is differentiable in dy.
  RoutedOp op{.kernel = KernelOp::Embedding, .inputs = {weight, ids}};
  op.reference = [](const std::vector<Tensor>& in) -> Routed { return {reference::embedding(in[0], in[1])}; };
  op.fast = [&](const Products&, const backends::Backend& backend) {
    Shape y_shape = ids.shape();
    y_shape.push_back(dim);
    Tensor y = detail::empty_for("embedding", y_shape, weight.dtype());
    dispatch_floating(weight.dtype(), "embedding", [&](auto tag) {
      using T = decltype(tag);
      backend.table<T>().embedding(positions, dim, weight.data_ptr<T>(), pid, y.mutable_data_ptr<T>());
    });
    const backends::Backend* kernels = &backend;
    auto backward = [kernels, ids, w_shape = weight.shape()](const Tensor& dy, const std::vector<bool>&) {
      return std::vector<Tensor>{embedding_backward(*kernels, dy, ids, w_shape), Tensor()};  // ids: not differentiable
    };
    // y = W[ids]:  dy = dW[ids]
    auto tangent = [ids](const std::vector<Tensor>& t) { return embedding(t[0], ids); };
    // The backward does not read W: its tangent is the same scatter of d(dy).
    auto gradient_tangent = [kernels, ids, w_shape = weight.shape()](const Tensor&, const Tensor& dy_t,
                                                                     const std::vector<Tensor>&,
                                                                     const std::vector<bool>&) {
      return std::vector<Tensor>{dy_t.defined() ? embedding_backward(*kernels, dy_t, ids, w_shape) : Tensor(),
                                 Tensor()};
    };
    return FastRun{y, backward, Saved{ids}, Tensor(), tangent, gradient_tangent};
  };
  return route(op).output;
}

// ---------------------------------------------------------------------------------------------
// dropout:  y = x * keep / (1 - p),  keep_i ~ Bernoulli(1 - p)
//   dx = dy * keep / (1 - p),  ẏ = ẋ * keep / (1 - p)     (the same scaled mask, saved)
Tensor dropout(const Tensor& x, double p, bool training, Generator& generator) {
  check_floating("dropout", x);
  if (!(p >= 0.0 && p <= 1.0)) throw_invalid("dropout", "probability must be in [0, 1], got {}", p);
  if (!training || p == 0.0) return x;
  Tensor scale = empty_like(x);  // keep / (1 - p): 0 or 1/(1-p)
  dispatch_floating(x.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    T* ps = scale.mutable_data_ptr<T>();
    T kept = p < 1.0 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    for (std::int64_t i = 0, n = x.numel(); i < n; ++i) ps[i] = generator.uniform() >= p ? kept : T(0);
  });
  Tensor y;
  {
    NoGradGuard no_grad;
    y = x * scale;
  }
  return record(
      {"dropout", profile::Family::Elementwise}, y, {x},
      [scale](const Tensor& dy, const std::vector<bool>&) { return std::vector<Tensor>{dy * scale}; }, Saved{scale},
      BackwardOrder::AnyOrder, [scale](const std::vector<Tensor>& t) { return t[0] * scale; });
}

// ---------------------------------------------------------------------------------------------
// cross_entropy, one row r per position (C classes, target t_r, N = rows not ignored):
//   loss = (1/N) sum_r (lse_r - x_{r, t_r}),   lse_r = log sum_c exp(x_rc)
//   dx_rc = dy (softmax(x_r)_c - [c = t_r]) / N,   and 0 on ignored rows
// Saved: the logits (shared, not copied) and lse per row; softmax is recomputed as exp(x - lse).
namespace {

// dlogits = dy (softmax(x) - onehot(target)) / N on counted rows, 0 on ignored ones, by the
// backend's kernel (softmax recomputed from the saved log-sum-exp as exp(x - lse)).
Tensor cross_entropy_backward(const backends::Backend& backend, const Tensor& dy, const Tensor& x,
                              const Tensor& targets, const Tensor& lse, std::int64_t counted,
                              std::int64_t ignore_index) {
  Tensor dx = empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    double g = counted == 0 ? 0.0 : static_cast<double>(dy.item<T>()) / static_cast<double>(counted);
    backend.table<T>().cross_entropy_backward(targets.numel(), x.shape().back(), x.data_ptr<T>(),
                                              targets.data_ptr<std::int64_t>(), ignore_index, lse.data_ptr<double>(), g,
                                              dx.mutable_data_ptr<T>());
  });
  return dx;
}

// Forward mode: the loss's tangent from the logits' tangent dx, with p = exp(x - lse) per row:
//   dloss = (1/N) sum over counted rows r of (sum_c p_rc dx_rc - dx_{r, t_r})
Tensor cross_entropy_tangent(const backends::Backend& backend, const Tensor& dx, const Tensor& x, const Tensor& targets,
                             const Tensor& lse, std::int64_t counted, std::int64_t ignore_index) {
  double total = 0.0;
  dispatch_floating(x.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    total =
        backend.table<T>().cross_entropy_jvp(targets.numel(), x.shape().back(), x.data_ptr<T>(), dx.data_ptr<T>(),
                                             targets.data_ptr<std::int64_t>(), ignore_index, lse.data_ptr<double>());
  });
  return scalar(counted == 0 ? 0.0 : total / static_cast<double>(counted), x.dtype());
}

// The loss row by row: the log-sum-exp of each counted row (kept for backward) minus its target's
// logit, averaged over the counted rows.
FastRun cross_entropy_fast(const backends::Backend& backend, const Tensor& logits, const Tensor& targets,
                           std::int64_t rows, std::int64_t classes, std::int64_t counted, std::int64_t ignore_index) {
  Tensor lse = empty({rows}, kFloat64);
  double total = 0.0;
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    total = backend.table<T>().cross_entropy(rows, classes, logits.data_ptr<T>(), targets.data_ptr<std::int64_t>(),
                                             ignore_index, lse.mutable_data_ptr<double>());
  });
  const backends::Backend* kernels = &backend;
  Tensor loss = scalar(counted == 0 ? 0.0 : total / static_cast<double>(counted), logits.dtype());
  auto backward = [kernels, x = logits, targets, lse, counted, ignore_index](const Tensor& dy,
                                                                             const std::vector<bool>&) {
    // targets: not differentiable
    return std::vector<Tensor>{cross_entropy_backward(*kernels, dy, x, targets, lse, counted, ignore_index), Tensor()};
  };
  FastRun run{loss, backward, Saved{logits, targets}};
  bool has_rules = logits.dtype() == kFloat32
                       ? backend.f32.cross_entropy_jvp && backend.f32.cross_entropy_backward_tangent
                       : backend.f64.cross_entropy_jvp && backend.f64.cross_entropy_backward_tangent;
  if (!has_rules) return run;  // forward mode and create_graph through the reference
  run.tangent = [kernels, x = logits, targets, lse, counted, ignore_index](const std::vector<Tensor>& t) {
    return cross_entropy_tangent(*kernels, t[0], x, targets, lse, counted, ignore_index);
  };
  // Forward over reverse: dx = dy (p - onehot) / N moves with dy, and with p:
  //   d(dx) = d(dy) (p - onehot) / N + dy p (dx - sum_c p_c dx_c) / N   on counted rows
  run.gradient_tangent = [kernels, x = logits, targets, lse, counted, ignore_index](
                             const Tensor& dy, const Tensor& dy_t, const std::vector<Tensor>& in_t,
                             const std::vector<bool>&) {
    Tensor t =
        dy_t.defined() ? cross_entropy_backward(*kernels, dy_t, x, targets, lse, counted, ignore_index) : Tensor();
    if (const Tensor& x_t = in_t[0]; x_t.defined() && counted > 0) {
      Tensor second = empty(x.shape(), x.dtype());
      dispatch_floating(x.dtype(), "cross_entropy", [&](auto tag) {
        using T = decltype(tag);
        double g = static_cast<double>(dy.item<T>()) / static_cast<double>(counted);
        kernels->table<T>().cross_entropy_backward_tangent(
            targets.numel(), x.shape().back(), x.data_ptr<T>(), x_t.data_ptr<T>(), targets.data_ptr<std::int64_t>(),
            ignore_index, lse.data_ptr<double>(), g, second.mutable_data_ptr<T>());
      });
      t = t.defined() ? t + second : second;
    }
    return std::vector<Tensor>{t, Tensor()};
  };
  return run;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index) {
  check_floating("cross_entropy", logits);
  check_defined("cross_entropy", targets);
  if (targets.dtype() != kInt64)
    throw_invalid("cross_entropy", "targets must be int64 class indices, got {} with shape {}",
                  dtype_name(targets.dtype()), shape_str(targets.shape()));
  if (logits.dim() < 1 || Shape(logits.shape().begin(), logits.shape().end() - 1) != targets.shape())
    throw_invalid("cross_entropy", "logits of shape {} need targets of shape {}, got {}", shape_str(logits.shape()),
                  logits.dim() < 1 ? "[...]" : shape_str(Shape(logits.shape().begin(), logits.shape().end() - 1)),
                  shape_str(targets.shape()));
  std::int64_t classes = logits.shape().back(), rows = targets.numel();
  // Not the "every row ignored" case below: a batch with no rows at all is a bug upstream.
  if (rows == 0)
    throw_invalid("cross_entropy", "logits of shape {} hold no positions: an empty batch has no mean loss",
                  shape_str(logits.shape()));
  const auto* pt = targets.data_ptr<std::int64_t>();
  std::int64_t counted = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    if (pt[r] == ignore_index) continue;
    if (pt[r] < 0 || pt[r] >= classes)
      throw_invalid("cross_entropy", "target {} at position {} is outside [0, {}) and is not ignore_index ({})", pt[r],
                    r, classes, ignore_index);
    ++counted;
  }
  // With create_graph: the chain rule through reference::cross_entropy's log_softmax,
  // masked_fill and sum, so that the second derivative (diag(p) - p p^T) / N follows.
  RoutedOp op{.kernel = KernelOp::CrossEntropy, .inputs = {logits, targets}};
  op.reference = [ignore_index](const std::vector<Tensor>& in) -> Routed {
    return {reference::cross_entropy(in[0], in[1], ignore_index)};
  };
  op.fast = [&](const Products&, const backends::Backend& backend) {
    return cross_entropy_fast(backend, logits, targets, rows, classes, counted, ignore_index);
  };
  return route(op).output;
}

}  // namespace ag
