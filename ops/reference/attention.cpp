// Scaled dot-product attention, composed from primitive ops: the textbook formula line by line.
//
//   S = scale Q K^T                        [B, H, Tq, Tk]   matmul_transposed: k read transposed
//   S_ij = -inf where i may not see j      masked_fill; causal adds causal_mask(Tq, Tk)
//                                          (masked_score, -inf unless an experiment says otherwise)
//   P = softmax(S) over the keys           a fully masked row gives zeros (ops/softmax.h)
//   O = P V                                [B, H, Tq, dv]
//
// Backward is the chain rule through matmul, masked_fill and softmax; docs/attention.md writes
// it out, and the fused kernel of ops/fused/attention.cpp computes the same lines tile by tile without
// ever holding S or P for a whole sequence.
#include "../binary.h"
#include "../kernel_ops.h"
#include "../masking.h"
#include "../matmul.h"
#include "../shape.h"
#include "../softmax.h"
#include "reference.h"

namespace ag::reference {

AttentionResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                             bool causal, double scale, double masked_score) {
  count_call(KernelOp::Attention);
  Tensor scores = matmul_transposed(q, false, k, true) * scale;  // [B, H, Tq, Tk]
  Tensor allowed = attn_mask;                             // true = may attend
  if (causal) {
    Tensor future_hidden = causal_mask(q.size(2), k.size(2));
    allowed = allowed.defined() ? logical_and(allowed, future_hidden) : future_hidden;
  }
  if (allowed.defined()) scores = masked_fill(scores, logical_not(allowed), masked_score);
  Tensor weights = softmax(scores, -1);
  return {weights.matmul(v), weights};
}

// [B, T, H, d] in and out: swap T and H, attend, swap back.
AttentionResult scaled_dot_product_attention_bthd(const Tensor& q, const Tensor& k, const Tensor& v,
                                                  const Tensor& attn_mask, bool causal, double scale) {
  AttentionResult r = reference::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                              attn_mask, causal, scale);
  return {r.output.transpose(1, 2), r.weights};
}

// qkv [B, T, 3 * heads * d]: the query, key and value thirds, each split into heads.
AttentionResult scaled_dot_product_attention_packed(const Tensor& qkv, std::int64_t heads, const Tensor& attn_mask,
                                                    bool causal, double scale) {
  std::int64_t b = qkv.size(0), t = qkv.size(1), width = qkv.size(2) / 3;
  std::vector<Tensor> thirds = split(qkv, width, 2);  // q, k, v: [B, T, heads * d] each
  auto heads_of = [&](const Tensor& x) { return x.reshape({b, t, heads, width / heads}); };
  return reference::scaled_dot_product_attention_bthd(heads_of(thirds[0]), heads_of(thirds[1]), heads_of(thirds[2]),
                                                      attn_mask, causal, scale);
}

}  // namespace ag::reference
