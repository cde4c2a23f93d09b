// Scaled dot-product attention, for one (batch, head) pair at a time:
//
//   S = scale Q K^T          [Tq, Tk]   how well each query matches each key
//   S_ij = -inf where masked
//   P = softmax_rows(S)      [Tq, Tk]   the attention weights; each row sums to 1 (or is 0)
//   O = P V                  [Tq, dv]   each output row a weighted average of value rows
//
// Backward, from dO (docs/attention.md derives each line):
//
//   dV = P^T dO                          (O = P V, the matmul rule)
//   dP = dO V^T
//   dS_ij = P_ij (dP_ij - sum_k dP_ik P_ik)   (softmax's Jacobian-vector product, per row)
//   dQ = scale dS K,   dK = scale dS^T Q      (S = scale Q K^T, the matmul rule again)
//
// Masked positions have P = 0, so dS = 0 there: no gradient flows through a masked score.
//
// Forward mode, from the tangents dQ, dK, dV (docs/forward_mode.md derives each line):
//
//   dS = scale (dQ K^T + Q dK^T)              (the product rule on S = scale Q K^T)
//   dP_ij = P_ij (dS_ij - sum_k P_ik dS_ik)   (softmax's Jacobian, per row: the same formula)
//   dO = dP V + P dV                          (the product rule on O = P V)
//
// streamed like the forward, one block of queries at a time, with P recomputed from the saved
// log-sum-exp: no [Tq, Tk] tensor.
#include "../attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../../autograd/dispatch.h"
#include "../../autograd/forward.h"
#include "../../kernels/cpu/attention_tiles.h"
#include "../../kernels/cpu/blas.h"
#include "../autocast_internal.h"
#include "../reference/reference.h"
#include "../route.h"
#include "../rows.h"

namespace ag {

// The mask must broadcast to [B, H, Tq, Tk]. A [B, Tk] padding mask is the usual slip (PyTorch's
// nn.MultiheadAttention takes one as key_padding_mask), so the message says how to make it fit.
void check_attention_mask(std::string_view op, const Tensor& attn_mask, std::int64_t b, std::int64_t h, std::int64_t tq,
                          std::int64_t tk) {
  if (!attn_mask.defined()) return;
  const Shape& m = attn_mask.shape();
  if (attn_mask.dtype() != kBool)
    throw_invalid(op, "attn_mask must be bool (true = may attend), got {} with shape {}", dtype_name(attn_mask.dtype()),
                  shape_str(m));
  Shape full{b, h, tq, tk};
  bool fits = m.size() <= full.size();
  for (std::size_t i = 0; fits && i < m.size(); ++i) {
    std::int64_t want = full[full.size() - m.size() + i];
    fits = m[i] == 1 || m[i] == want;
  }
  if (fits) return;
  std::string padding_hint =
      m.size() == 2 && m[0] == b && m[1] == tk
          ? fmt::format(
                "; a [B, Tk] key padding mask must be [B, 1, 1, Tk]: build it with ag::key_padding_mask(lengths, "
                "{}), or reshape yours with mask.reshape({{{}, 1, 1, {}}})",
                tk, b, tk)
          : fmt::format("; for key padding use ag::key_padding_mask(lengths, {}), which is [B, 1, 1, Tk]", tk);
  throw_invalid(op,
                "attn_mask of shape {} does not broadcast to the scores' shape {} = [B, H, Tq, Tk]; expected [Tq, "
                "Tk] = [{}, {}] (one pattern for the batch), [B, 1, 1, Tk] = [{}, 1, 1, {}] (key padding) or [B, 1, "
                "Tq, Tk] = [{}, 1, {}, {}]{}",
                shape_str(m), shape_str(full), tq, tk, b, tk, b, tq, tk, padding_hint);
}

namespace {

using namespace attention_kernels;  // Dims, View, Layouts, MaskReader, the kernels

Dims check_qkv(std::string_view op, const Tensor& q, const Tensor& k, const Tensor& v) {
  check_floating(op, q);
  check_same_floating(op, q, k);
  check_same_floating(op, q, v);
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4)
    throw_invalid(op, "q, k and v must be [B, H, T, d], got shapes {}, {} and {}", shape_str(q.shape()),
                  shape_str(k.shape()), shape_str(v.shape()));
  Dims n{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
  if (k.size(0) != n.b || v.size(0) != n.b || k.size(1) != n.h || v.size(1) != n.h)
    throw_invalid(op, "q, k and v must agree in batch and heads, got shapes {}, {} and {}", shape_str(q.shape()),
                  shape_str(k.shape()), shape_str(v.shape()));
  if (k.size(3) != n.d)
    throw_invalid(op, "query and key dims differ: q {} and k {} (the scores q k^T need the same d)",
                  shape_str(q.shape()), shape_str(k.shape()));
  if (n.d == 0)
    throw_invalid(op, "q and k have head dim 0 (shapes {} and {})", shape_str(q.shape()), shape_str(k.shape()));
  if (v.size(2) != n.tk)
    throw_invalid(op, "key length {} and value length {} differ: k {} and v {}", n.tk, v.size(2), shape_str(k.shape()),
                  shape_str(v.shape()));
  // An empty batch is rejected rather than answered with an empty (or, for Tk = 0, zero) output.
  if (n.b == 0 || n.h == 0 || n.tq == 0 || n.tk == 0)
    throw_invalid(op, "q, k and v need at least one batch entry, head, query and key, got shapes {}, {} and {}",
                  shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  return n;
}

double default_scale(std::string_view op, std::optional<double> scale, std::int64_t d) {
  if (scale && !std::isfinite(*scale)) throw_invalid(op, "scale must be finite, got {}", *scale);  // else NaN weights
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(d));
}

MaskReader mask_reader(std::string_view op, const Tensor& attn_mask, bool causal, const Dims& n) {
  MaskReader r;
  r.causal = causal;
  r.shift = n.tk - n.tq;
  if (!attn_mask.defined()) return r;
  check_attention_mask(op, attn_mask, n.b, n.h, n.tq, n.tk);
  Shape s = attn_mask.shape();
  while (s.size() < 4) s.insert(s.begin(), 1);
  std::int64_t stride = 1, strides[4];
  for (int d = 3; d >= 0; --d) {
    strides[d] = s[static_cast<std::size_t>(d)] == 1 ? 0 : stride;
    stride *= s[static_cast<std::size_t>(d)];
  }
  r.mask = attn_mask.data_ptr<bool>();
  r.sb = strides[0], r.sh = strides[1], r.si = strides[2], r.sj = strides[3];
  return r;
}

// Where q, k or v is found among the node's inputs: input `input`, from element `offset` on.
struct Operand {
  std::size_t input;
  std::int64_t offset;
};

// What the fused op keeps for backward: its inputs, where q, k and v sit in them, the mask and
// one number per query, the log-sum-exp of its scores. The inputs are held as passed (shared
// with the caller, not copied), or, under bf16 when the forward released them (fused_attention),
// weakly beside their bf16 copies (detail::Held::rounded), which are all that backward's products
// read.
struct FusedSaved {
  std::vector<detail::Held> inputs = {};
  bool released = false;  // the inputs are held beside their copies
  DType dtype;
  std::array<Operand, 3> at;
  Tensor mask;
  Tensor lse;
  Dims n;
  Layouts L;
  double scale;
  bool causal;
  const char* op;
  Products products;  // the forward's product policy, which backward keeps
  const backends::Backend* kernels;  // and the backend whose kernels ran it
};

// Under bf16 products, `products` with q, k and v (and `also`, dout in backward) rounded whole
// once for this call, so that the tile products read the rounded copies instead of rounding
// their operands each time. Forward pays for it with several query blocks (each would round K
// and V again); with one, a tile rounding its own operands into a per-thread scratch costs less
// than a pass over the whole tensors. Backward always does: each block reads Q twice (the scores
// again, dK) and dO twice (dP, dV). The copies go with the call; what backward keeps is the
// forward's own policy. When a backward is to come, the forward keeps its copies of q, k and v
// for it instead (fused_attention). Measured: docs/performance.md.
Products rounded_once(Products products, const Dims& n, const std::vector<Tensor>& inputs, const Tensor& also = {}) {
  if (!products.in_bf16() || (n.tq <= kQueryBlock && !also.defined())) return products;
  for (const Tensor& t : inputs) detail::keep_rounded(products, t);
  if (also.defined()) detail::keep_rounded(products, also);
  return products;
}

// The inputs as tensors: the caller's, or, once a released one is gone, made again from its copy.
std::vector<Tensor> held_inputs(const FusedSaved& s) {
  std::vector<Tensor> inputs;
  for (const detail::Held& h : s.inputs) inputs.push_back(h.get());
  return inputs;
}

// dq, dk and dv, written where q, k and v were read; only the inputs' gradients asked for are
// allocated, the others stay undefined.
std::vector<Tensor> fused_attention_backward(const FusedSaved& s, const Tensor& dout, const std::vector<bool>& need) {
  const Dims& n = s.n;
  bool runs = n.tq > 0 && n.tk > 0;
  std::vector<Tensor> grads(s.inputs.size());
  for (std::size_t i = 0; i < s.inputs.size(); ++i)
    if (need[i]) grads[i] = runs ? empty(s.inputs[i].shape(), s.dtype) : zeros(s.inputs[i].shape(), s.dtype);
  if (!runs) return grads;
  MaskReader mask = mask_reader(s.op, s.mask, s.causal, n);
  // The kernel, reading input i's data (T, or its bf16 copy) from bases[i].
  auto run = [&](auto tag, const auto& bases, const Products& products) {
    using T = decltype(tag);
    auto in = [&](int i) { return bases[s.at[i].input] + s.at[i].offset; };
    auto grad = [&](int i) {
      return need[s.at[i].input] ? grads[s.at[i].input].template mutable_data_ptr<T>() + s.at[i].offset : nullptr;
    };
    const auto& table = s.kernels->table<T>();
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(*in(0))>, std::uint16_t>)
      table.attention_backward_rounded(n, s.L, mask, s.scale, in(0), in(1), in(2), s.lse.data_ptr<T>(),
                                       dout.data_ptr<T>(), grad(0), grad(1), grad(2), products);
    else
      table.attention_backward(n, s.L, mask, s.scale, in(0), in(1), in(2), s.lse.data_ptr<T>(), dout.data_ptr<T>(),
                               grad(0), grad(1), grad(2), products);
  };
  if (s.released) {  // T = float, q, k and v read from the forward's bf16 copies
    std::vector<const std::uint16_t*> bases;
    for (const detail::Held& h : s.inputs)  // an empty v (dv = 0) has no copy and is never read
      bases.push_back(h.rounded() ? h.rounded()->data.get() : nullptr);
    Products products = s.products;
    detail::keep_rounded(products, dout);  // dout rounded whole once: each block reads it twice
    run(float{}, bases, products);
    return grads;
  }
  std::vector<Tensor> inputs = held_inputs(s);
  dispatch_floating(s.dtype, s.op, [&](auto tag) {
    using T = decltype(tag);
    std::vector<const T*> bases;
    for (const Tensor& t : inputs) bases.push_back(t.template data_ptr<T>());
    run(tag, bases, rounded_once(s.products, n, inputs, dout));
  });
  return grads;
}

// The output's tangent from the inputs' tangents (undefined where an input has none), by the
// fused kernel: written where the output is, read where q, k and v are read.
Tensor fused_attention_jvp(const FusedSaved& s, const std::vector<Tensor>& tangents, const Shape& out_shape) {
  const Dims& n = s.n;
  Tensor dout = empty(out_shape, s.dtype);
  std::vector<Tensor> inputs = held_inputs(s);
  dispatch_floating(s.dtype, s.op, [&](auto tag) {
    using T = decltype(tag);
    auto in = [&](int i) { return inputs[s.at[i].input].template data_ptr<T>() + s.at[i].offset; };
    auto tangent = [&](int i) -> const T* {
      const Tensor& t = tangents[s.at[i].input];
      return t.defined() ? t.template data_ptr<T>() + s.at[i].offset : nullptr;
    };
    MaskReader mask = mask_reader(s.op, s.mask, s.causal, n);
    s.kernels->table<T>().attention_jvp(n, s.L, mask, s.scale, in(0), in(1), in(2), s.lse.data_ptr<T>(), tangent(0),
                                        tangent(1), tangent(2), dout.mutable_data_ptr<T>(), s.products);
  });
  return dout;
}

// The gradients' tangents when q, k, v (`in_t`, per input) and dout move (ops/route.h,
// GradientTangentRule), by the fused kernel (attention_tiles.h); written where q, k and v were
// read.
std::vector<Tensor> fused_attention_gradient_tangent(const FusedSaved& s, const Tensor& dout, const Tensor& dout_t,
                                                     const std::vector<Tensor>& in_t, const std::vector<bool>& need) {
  std::vector<Tensor> tangents(s.inputs.size());
  for (std::size_t i = 0; i < s.inputs.size(); ++i)
    if (need[i]) tangents[i] = zeros(s.inputs[i].shape(), s.dtype);  // every part is written
  std::vector<Tensor> inputs = held_inputs(s);
  dispatch_floating(s.dtype, s.op, [&](auto tag) {
    using T = decltype(tag);
    auto in = [&](int i) { return inputs[s.at[i].input].template data_ptr<T>() + s.at[i].offset; };
    auto moving = [&](int i) -> const T* {
      const Tensor& t = in_t[s.at[i].input];
      return t.defined() ? t.template data_ptr<T>() + s.at[i].offset : nullptr;
    };
    auto out = [&](int i) -> T* {
      return need[s.at[i].input] ? tangents[s.at[i].input].template mutable_data_ptr<T>() + s.at[i].offset : nullptr;
    };
    MaskReader mask = mask_reader(s.op, s.mask, s.causal, s.n);
    s.kernels->table<T>().attention_backward_tangent(s.n, s.L, mask, s.scale, in(0), in(1), in(2), s.lse.data_ptr<T>(),
                                                     dout.data_ptr<T>(), moving(0), moving(1), moving(2),
                                                     data_or_null<T>(dout_t), out(0), out(1), out(2), s.products);
  });
  return tangents;
}

// The fused kernel over any layout: `inputs` are the node's inputs, q, k and v are found in them
// at `at`, laid out as `L` says; `n`, the mask and the scale have been checked. Each input's
// gradient has the input's shape, and q's, k's and v's gradients land where q, k and v were read.
FastRun fused_attention(const Products& products, const backends::Backend& backend, const char* op,
                        const std::vector<Tensor>& inputs, std::array<Operand, 3> at, const Layouts& L,
                        const Shape& out_shape, const Dims& n, const Tensor& attn_mask, bool causal, bool need_weights,
                        double scale) {
  MaskReader mask = mask_reader(op, attn_mask, causal, n);
  for (std::int64_t size : {n.tq, n.tk, n.d, n.dv}) blas::detail::to_int(size);  // before any work starts
  const Tensor& first = inputs[0];
  // Every output row is written below (a product with beta 0, or zeros for a query that sees
  // no key); only an empty product leaves it to this fill.
  bool runs = n.tq > 0 && n.tk > 0;
  Tensor out = runs ? detail::empty_for(op, out_shape, first.dtype()) : zeros(out_shape, first.dtype());
  Tensor lse = empty({n.b, n.h, n.tq}, first.dtype());  // per query: log of its softmax denominator
  Tensor weights = need_weights ? zeros({n.b, n.h, n.tq, n.tk}, first.dtype()) : Tensor();
  // Under bf16 (float32 inputs) with a backward to come and no DualLevel live
  // (detail::may_release_inputs), q, k and v are rounded whole once here and backward reads those
  // copies alone, as linear does with its input: the float32 tensors are not kept for it, nor
  // rounded again.
  bool release = products.in_bf16() && detail::may_release_inputs(inputs);
  Products forward = products;
  std::vector<std::shared_ptr<const bf16::Buffer>> rounded;
  if (release)
    for (const Tensor& t : inputs) rounded.push_back(detail::keep_rounded(forward, t));
  if (runs)
    dispatch_floating(first.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      auto in = [&](int i) { return inputs[at[i].input].data_ptr<T>() + at[i].offset; };
      backend.table<T>().attention(n, L, mask, scale, in(0), in(1), in(2), lse.mutable_data_ptr<T>(),
                                   mutable_data_or_null<T>(weights), out.mutable_data_ptr<T>(),
                                   release ? forward : rounded_once(products, n, inputs));
    });
  FusedSaved saved{.released = release,
                   .dtype = first.dtype(),
                   .at = at,
                   .mask = attn_mask,
                   .lse = lse,
                   .n = n,
                   .L = L,
                   .scale = scale,
                   .causal = causal,
                   .op = op,
                   .products = products,
                   .kernels = &backend};
  for (std::size_t i = 0; i < inputs.size(); ++i)
    saved.inputs.emplace_back(inputs[i], release ? rounded[i] : nullptr);  // weakly beside its copy, or held
  Saved read = inputs;  // q, k and v, and the mask (not an input: it gets no gradient)
  read.push_back(attn_mask);
  auto backward = [saved](const Tensor& dout, const std::vector<bool>& need) {
    return fused_attention_backward(saved, dout, need);
  };
  auto tangent = [saved, out_shape](const std::vector<Tensor>& t) { return fused_attention_jvp(saved, t, out_shape); };
  auto gradient_tangent = [saved](const Tensor& dout, const Tensor& dout_t, const std::vector<Tensor>& in_t,
                                  const std::vector<bool>& need) {
    return fused_attention_gradient_tangent(saved, dout, dout_t, in_t, need);
  };
  // A backend without the forward-mode kernels leaves both rules to the reference's ops.
  bool has_rules = first.dtype() == kFloat32 ? backend.f32.attention_jvp && backend.f32.attention_backward_tangent
                                             : backend.f64.attention_jvp && backend.f64.attention_backward_tangent;
  if (!has_rules) return {out, backward, read, weights, {}, {}, rounded};
  return {out, backward, read, weights, tangent, gradient_tangent, rounded};
}

// Every layout: the mask and the scale checked, then routed (ops/route.h). `reference` is the
// layout's reference twin, given the inputs and the scale; its QK^T and PV may take bf16 inputs.
AttentionResult attend(const char* op, const std::vector<Tensor>& inputs, std::array<Operand, 3> at, const Layouts& L,
                       const Shape& out_shape, const Dims& n, const Tensor& attn_mask, bool causal, bool need_weights,
                       std::optional<double> scale,
                       std::function<AttentionResult(const std::vector<Tensor>&, double)> reference) {
  check_attention_mask(op, attn_mask, n.b, n.h, n.tq, n.tk);
  double s = default_scale(op, scale, n.d);
  RoutedOp route_op{.kernel = KernelOp::Attention, .name = op, .bf16_products = true, .inputs = inputs};
  route_op.reference = [reference, s, need_weights](const std::vector<Tensor>& in) -> Routed {
    AttentionResult a = reference(in, s);
    return {a.output, need_weights ? a.weights : Tensor()};
  };
  route_op.fast = [&](const Products& products, const backends::Backend& backend) {
    return fused_attention(products, backend, op, inputs, at, L, out_shape, n, attn_mask, causal, need_weights, s);
  };
  Routed r = route(route_op);
  return {r.output, r.aside};
}

// The [B, H, T, d] and [B, T, H, d] ops: q, k and v are three inputs.
AttentionResult attend(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Dims& n,
                       bool heads_are_last, const Tensor& attn_mask, bool causal, bool need_weights,
                       std::optional<double> scale) {
  auto view = heads_are_last ? heads_last : heads_first;
  Layouts L{view(n.h, n.tq, n.d), view(n.h, n.tk, n.d), view(n.h, n.tk, n.dv), view(n.h, n.tq, n.dv)};
  Shape out_shape = heads_are_last ? Shape{n.b, n.tq, n.h, n.dv} : Shape{n.b, n.h, n.tq, n.dv};
  auto reference = [heads_are_last, attn_mask, causal](const std::vector<Tensor>& in, double s) {
    return heads_are_last ? reference::scaled_dot_product_attention_bthd(in[0], in[1], in[2], attn_mask, causal, s)
                          : reference::scaled_dot_product_attention(in[0], in[1], in[2], attn_mask, causal, s);
  };
  return attend(op, {q, k, v}, {Operand{0, 0}, Operand{1, 0}, Operand{2, 0}}, L, out_shape, n, attn_mask, causal,
                need_weights, scale, reference);
}

}  // namespace

AttentionResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                             bool causal, bool need_weights, std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention";
  return attend(op, q, k, v, check_qkv(op, q, k, v), false, attn_mask, causal, need_weights, scale);
}

AttentionResult scaled_dot_product_attention_bthd(const Tensor& q, const Tensor& k, const Tensor& v,
                                                  const Tensor& attn_mask, bool causal, bool need_weights,
                                                  std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention_bthd";
  // Checked as [B, H, T, d] views of the same numbers: swap dims 1 and 2 in the shapes only.
  auto swapped = [](const Tensor& t) {
    if (!t.defined() || t.dim() != 4) return Shape{};
    return Shape{t.size(0), t.size(2), t.size(1), t.size(3)};
  };
  Tensor vq = q.defined() && q.dim() == 4 ? q.detach().reshape(swapped(q)) : q;
  Tensor vk = k.defined() && k.dim() == 4 ? k.detach().reshape(swapped(k)) : k;
  Tensor vv = v.defined() && v.dim() == 4 ? v.detach().reshape(swapped(v)) : v;
  return attend(op, q, k, v, check_qkv(op, vq, vk, vv), true, attn_mask, causal, need_weights, scale);
}

AttentionResult scaled_dot_product_attention_packed(const Tensor& qkv, std::int64_t heads, const Tensor& attn_mask,
                                                    bool causal, bool need_weights, std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention_packed";
  check_floating(op, qkv);
  if (qkv.dim() != 3 || heads < 1 || qkv.size(2) % (3 * heads) != 0)
    throw_invalid(op, "qkv must be [B, T, 3 * heads * d] with heads >= 1, got shape {} and {} heads",
                  shape_str(qkv.shape()), heads);
  std::int64_t t = qkv.size(1), width = qkv.size(2) / 3, d = width / heads;
  Dims n{qkv.size(0), heads, t, t, d, d};
  // As for the other layouts (check_qkv): no empty batch or sequence, no empty heads.
  if (n.b == 0 || t == 0)
    throw_invalid(op, "q, k and v need at least one batch entry, head, query and key, got qkv of shape {}",
                  shape_str(qkv.shape()));
  if (d == 0) throw_invalid(op, "q and k have head dim 0 (qkv of shape {}, {} heads)", shape_str(qkv.shape()), heads);
  // Position p's query, key and value are its row's three thirds; head h is d columns of each.
  View packed{t * 3 * width, d, 3 * width};
  Layouts L{packed, packed, packed, heads_last(heads, t, d)};
  return attend(op, {qkv}, {Operand{0, 0}, Operand{0, width}, Operand{0, 2 * width}}, L, Shape{n.b, t, heads, d}, n,
                attn_mask, causal, need_weights, scale,
                [heads, attn_mask, causal](const std::vector<Tensor>& in, double s) {
                  return reference::scaled_dot_product_attention_packed(in[0], heads, attn_mask, causal, s);
                });
}

AttentionResult attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    bool causal, std::optional<double> scale, double masked_score) {
  const char* op = "attention_reference";
  Dims n = check_qkv(op, q, k, v);
  check_attention_mask(op, attn_mask, n.b, n.h, n.tq, n.tk);
  // NaN or +inf in a masked score would make its whole row NaN.
  if (std::isnan(masked_score) || masked_score == std::numeric_limits<double>::infinity())
    throw_invalid(op, "masked_score must be -inf or finite, got {}", masked_score);
  return reference::scaled_dot_product_attention(q, k, v, attn_mask, causal, default_scale(op, scale, n.d),
                                                 masked_score);
}

}  // namespace ag
