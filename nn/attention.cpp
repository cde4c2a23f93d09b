#include "attention.h"

#include "../ops/nn_ops.h"
#include "../ops/shape.h"
#include "../runtime/error.h"

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

Tensor MultiHeadAttention::split_heads(const Tensor& x) const {
  return x.reshape({x.size(0), x.size(1), n_heads, head_dim});
}

Tensor MultiHeadAttention::merge_heads(const Tensor& x) const { return x.reshape({x.size(0), x.size(1), d_model}); }

namespace {

bool same(const Tensor& a, const Tensor& b) { return a.impl() == b.impl(); }

// Rows [part * n, (part + 1) * n) of a stacked projection, applied to x: one of its weights.
Tensor part_of(const Linear& stacked, std::int64_t part, std::int64_t n, const Tensor& x) {
  Tensor w = slice(stacked.weight, 0, part * n, (part + 1) * n);
  Tensor b = stacked.bias.defined() ? slice(stacked.bias, 0, part * n, (part + 1) * n) : Tensor();
  return linear(x, w, b);
}

}  // namespace

std::array<Tensor, 3> MultiHeadAttention::project(const Tensor& query, const Tensor& key_value) const {
  std::int64_t d = d_model;
  if (cross) {
    Tensor q = q_proj->forward(query);
    std::vector<Tensor> kv = split(kv_proj->forward(key_value), d, 2);
    return {q, kv[0], kv[1]};
  }
  if (same(query, key_value)) {
    std::vector<Tensor> qkv = split(qkv_proj->forward(query), d, 2);
    return {qkv[0], qkv[1], qkv[2]};
  }
  return {part_of(*qkv_proj, 0, d, query), part_of(*qkv_proj, 1, d, key_value), part_of(*qkv_proj, 2, d, key_value)};
}

std::array<Tensor, 3> MultiHeadAttention::project_heads(const Tensor& query, const Tensor& key_value,
                                                        const AttentionCall& call) const {
  auto [pq, pk, pv] = project(query, key_value);
  Tensor q = split_heads(pq);  // [B, Tq, H, D/H]
  Tensor k = split_heads(pk);  // [B, Tk, H, D/H]
  Tensor v = split_heads(pv);  // [B, Tk, H, D/H]
  KVCache* cache = call.cache;
  std::int64_t offset = cache ? cache->length() : call.offset;  // new tokens come right after the cached ones
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
  return {q, k, v};
}

Tensor MultiHeadAttention::forward(const Tensor& query, const Tensor& key_value, const AttentionCall& call) {
  if (!query.defined() || !key_value.defined())
    throw_invalid("MultiHeadAttention", "query and key_value must both be defined tensors");
  if (query.dim() != 3 || query.size(2) != d_model || key_value.dim() != 3 || key_value.size(2) != d_model)
    throw_invalid("MultiHeadAttention", "query and key_value must be [B, T, {}], got shapes {} and {}", d_model,
                  shape_str(query.shape()), shape_str(key_value.shape()));
  if (query.size(0) != key_value.size(0))
    throw_invalid("MultiHeadAttention", "batch sizes differ: query {}, key_value {}", shape_str(query.shape()),
                  shape_str(key_value.shape()));
  std::int64_t tk = key_value.size(1) + (call.cache ? call.cache->length() : 0);
  check_attention_mask("MultiHeadAttention", call.attn_mask, query.size(0), n_heads, query.size(1), tk);
  bool need_weights = call.weights != nullptr;

  // One route: project, split into heads, attend, merge, project out. Only the layout the op
  // reads differs. Self-attention on one sequence with nothing between the projection and the
  // op (no RoPE, no cache: the GPT's training step) hands the op the [B, T, 3D] product itself;
  // it reads Q, K and V in place and its gradient is one tensor shaped like that product.
  // Otherwise Q, K and V are [B, T, H, D/H] views of their own products, which the op also
  // reads in place, head by head: no [B, H, T, D/H] copies either way.
  bool packed = !cross && same(query, key_value) && !rotary && !call.cache;
  Tensor qkv, q, k, v;
  if (packed) {
    qkv = qkv_proj->forward(query);
  } else {
    std::array<Tensor, 3> heads = project_heads(query, key_value, call);
    q = heads[0], k = heads[1], v = heads[2];
  }
  AttentionResult r;
  try {
    r = packed ? scaled_dot_product_attention_packed(qkv, n_heads, call.attn_mask, call.causal, need_weights, scale)
               : scaled_dot_product_attention_bthd(q, k, v, call.attn_mask, call.causal, need_weights, scale);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("MultiHeadAttention (query {}, key_value {}): {}", shape_str(query.shape()),
                                            shape_str(key_value.shape()), e.what()));
  }
  if (call.weights) *call.weights = r.weights;
  return drop->forward(out_proj->forward(merge_heads(r.output)));
}

}  // namespace ag::nn
