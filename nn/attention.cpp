#include "attention.h"

#include <cmath>
#include "../autograd/error.h"

#include "../ops/binary.h"
#include "../ops/masking.h"
#include "../ops/matmul.h"
#include "../ops/nn_ops.h"
#include "../ops/shape.h"
#include "../ops/softmax.h"

namespace ag::nn {

MultiHeadAttention::MultiHeadAttention(std::int64_t d_model_, std::int64_t n_heads_, MultiHeadAttentionOptions options,
                                       Generator& generator)
    : d_model(d_model_), n_heads(n_heads_), head_dim(n_heads_ > 0 ? d_model_ / n_heads_ : 0), cross(options.cross) {
  if (d_model <= 0 || n_heads <= 0 || d_model % n_heads != 0)
    throw_invalid("MultiHeadAttention", "d_model {} is not divisible into {} heads", d_model, n_heads);
  if (cross) {
    q_proj = register_module("q_proj", std::make_shared<Linear>(d_model, d_model, options.bias, generator));
    kv_proj = register_module("kv_proj", std::make_shared<Linear>(d_model, 2 * d_model, options.bias, generator));
  } else {
    qkv_proj = register_module("qkv_proj", std::make_shared<Linear>(d_model, 3 * d_model, options.bias, generator));
  }
  out_proj = register_module("out_proj", std::make_shared<Linear>(d_model, d_model, options.bias, generator));
  drop = register_module("drop", std::make_shared<Dropout>(options.dropout, generator));
  if (options.rotary) rotary = register_module("rotary", std::make_shared<RotaryEmbedding>(head_dim, options.max_len));
}

// softmax(S) V with masked scores replaced by 0 rather than -inf. exp(0) = 1 is not small next
// to the allowed scores, so every masked key keeps a share of the weight. q, k, v are
// [B, T, H, d] and so is the output.
AttentionResult MultiHeadAttention::zero_filled_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                                          const Tensor& mask, bool causal) const {
  Tensor qh = q.transpose(1, 2), kh = k.transpose(1, 2), vh = v.transpose(1, 2);  // [B, H, T, d]
  double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
  Tensor scores = qh.matmul(kh.transpose(-2, -1)) * s;
  Tensor allowed = mask;
  if (causal) {
    Tensor c = causal_mask(qh.size(2), kh.size(2));
    allowed = allowed.defined() ? logical_and(allowed, c) : c;
  }
  if (allowed.defined()) scores = masked_fill(scores, logical_not(allowed), 0.0);
  Tensor weights = softmax(scores, -1);
  return {weights.matmul(vh).transpose(1, 2), weights.detach()};
}

Tensor MultiHeadAttention::split_heads(const Tensor& x) const {
  return x.reshape({x.size(0), x.size(1), n_heads, head_dim});
}

Tensor MultiHeadAttention::merge_heads(const Tensor& x) const { return x.reshape({x.size(0), x.size(1), d_model}); }

// The mask must broadcast to [B, H, Tq, Tk]. Checked here, before the op, so that the message
// names this module and the shapes a caller can pass; a [B, Tk] padding mask is the usual slip
// (nn.MultiHeadAttention in PyTorch takes it as key_padding_mask).
void MultiHeadAttention::check_mask(const Tensor& mask, std::int64_t b, std::int64_t tq, std::int64_t tk) const {
  if (!mask.defined()) return;
  Shape full = {b, n_heads, tq, tk};
  const Shape& m = mask.shape();
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
  throw_invalid("MultiHeadAttention",
                "mask of shape {} does not broadcast to [B, H, Tq, Tk] = {}; expected [Tq, Tk] = [{}, {}] (one "
                "pattern for the batch), [B, 1, 1, Tk] = [{}, 1, 1, {}] (key padding) or [B, 1, Tq, Tk] = [{}, 1, {}, "
                "{}]{}",
                shape_str(m), shape_str(full), tq, tk, b, tk, b, tq, tk, padding_hint);
}

namespace {

bool same(const Tensor& a, const Tensor& b) { return a.impl() == b.impl(); }

// Rows [part * n, (part + 1) * n) of a stacked projection, applied to x: one of its weights.
Tensor part_of(const Linear& stacked, std::int64_t part, std::int64_t n, const Tensor& x) {
  Tensor w = slice(stacked.weight, 0, part * n, (part + 1) * n);
  Tensor b = stacked.bias.defined() ? slice(stacked.bias, 0, part * n, (part + 1) * n) : Tensor();
  return linear(x, w, b);
}

}  // namespace

std::array<Tensor, 3> MultiHeadAttention::project(const Tensor& query, const Tensor& key, const Tensor& value) const {
  std::int64_t d = d_model;
  if (!cross) {
    if (same(query, key) && same(key, value)) {
      std::vector<Tensor> qkv = split(qkv_proj->forward(query), d, 2);
      return {qkv[0], qkv[1], qkv[2]};
    }
    return {part_of(*qkv_proj, 0, d, query), part_of(*qkv_proj, 1, d, key), part_of(*qkv_proj, 2, d, value)};
  }
  Tensor q = q_proj->forward(query);
  if (same(key, value)) {
    std::vector<Tensor> kv = split(kv_proj->forward(key), d, 2);
    return {q, kv[0], kv[1]};
  }
  return {q, part_of(*kv_proj, 0, d, key), part_of(*kv_proj, 1, d, value)};
}

Tensor MultiHeadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& mask,
                                   bool causal, Tensor* weights, std::int64_t offset, KVCache* cache) {
  for (const Tensor* t : {&query, &key, &value})
    if (!t->defined()) throw_invalid("MultiHeadAttention", "query, key and value must all be defined tensors");
  for (const Tensor* t : {&query, &key, &value})
    if (t->dim() != 3 || t->size(2) != d_model)
      throw_invalid("MultiHeadAttention", "query, key and value must be [B, T, {}], got shapes {}, {} and {}", d_model,
                    shape_str(query.shape()), shape_str(key.shape()), shape_str(value.shape()));
  if (key.size(1) != value.size(1))
    throw_invalid("MultiHeadAttention", "key length {} and value length {} differ (shapes {} and {})", key.size(1),
                  value.size(1), shape_str(key.shape()), shape_str(value.shape()));
  if (query.size(0) != key.size(0) || key.size(0) != value.size(0))
    throw_invalid("MultiHeadAttention", "batch sizes differ: query {}, key {}, value {}", shape_str(query.shape()),
                  shape_str(key.shape()), shape_str(value.shape()));
  check_mask(mask, query.size(0), query.size(1), key.size(1) + (cache ? cache->length() : 0));
  bool need_weights = weights != nullptr;

  // Self-attention on one sequence with no rotary positions and no cache: the fused op reads q,
  // k and v in place from the one [B, T, 3D] product. Every other case has them as [B, T, H, d]
  // views of their own products.
  bool packed = !cross && same(query, key) && same(key, value) && !rotary && !cache && !zero_fill_mask;
  Tensor qkv, q, k, v;
  if (packed) {
    qkv = qkv_proj->forward(query);
  } else {
    auto [pq, pk, pv] = project(query, key, value);
    q = split_heads(pq);                  // [B, Tq, H, D/H]
    k = split_heads(pk);                  // [B, Tk, H, D/H]
    v = split_heads(pv);                  // [B, Tk, H, D/H]
    if (cache) offset = cache->length();  // the new tokens come right after the cached ones
    if (rotary) {
      q = rotary->forward(q, offset + k.size(1) - q.size(1), /*heads_last=*/true);
      k = rotary->forward(k, offset, /*heads_last=*/true);
    }
    if (cache) {
      if (cache->k.defined()) {
        k = cat({cache->k, k}, 1);
        v = cat({cache->v, v}, 1);
      }
      cache->k = k.detach();
      cache->v = v.detach();
    }
  }
  AttentionResult r;
  try {
    if (packed)
      r = scaled_dot_product_attention_packed(qkv, n_heads, mask, causal, need_weights, scale);
    else if (zero_fill_mask)
      r = zero_filled_attention(q, k, v, mask, causal);
    else  // the fused op reads each head's columns in place: no [B, H, T, D/H] copies
      r = scaled_dot_product_attention_bthd(q, k, v, mask, causal, need_weights, scale);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("MultiHeadAttention (query {}, key {}): {}", shape_str(query.shape()),
                                            shape_str(key.shape()), e.what()));
  }
  if (weights) *weights = r.weights;
  return drop->forward(out_proj->forward(merge_heads(r.output)));
}

}  // namespace ag::nn
