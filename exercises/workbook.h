// The workbook: the functions a learner writes, one group per exercise, in the chapter's order.
//
// Each exercise's function is declared here once and defined three times, in three folders:
//   yours/       the learner's file: a statement in English and Chinese, and a body that says it
//                is not written yet (it throws NotWritten). This is the file to edit.
//   solutions/   a reference answer, apart from the stubs: look only after trying.
//   wrong/       a deliberately wrong answer (a missing term, a 0 for a −inf), which the grader's
//                own test (tests/exercises/grader_test.sh) must catch with the check its comment names.
// The grader (grader.cpp, checks.cpp) is built once with each folder: `workbook` with yours/,
// `workbook_solutions` and `workbook_wrong` for that test. scripts/exercise builds and runs it.
#pragma once

#include <attograd/attograd.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace workbook {

using ag::Tensor;

// What an unwritten answer throws: the grader reports its exercise as not attempted.
struct NotWritten : std::runtime_error {
  explicit NotWritten(const std::string& function) : std::runtime_error(function + " is not written yet") {}
};

// 1. The notes' worked example, by hand: one query against three keys, d_k = 4.
struct WorkedExample {
  std::vector<double> scores;   // q . k_j, for the three keys
  std::vector<double> scaled;   // the scores divided by sqrt(d_k)
  std::vector<double> weights;  // softmax of the scaled scores
};
WorkedExample worked_example();

// 2. Softmax over the last dim that neither overflows nor loses a −inf.
Tensor stable_softmax(const Tensor& x);

// 3. Softmax's backward over the last dim: dx from the output y = softmax(x) and dy.
Tensor softmax_backward(const Tensor& y, const Tensor& dy);

// 4. Softmax over the last dim of scores [..., Tq, Tk] with a mask: `keep` is bool and
// broadcasts to the scores' shape, true where a query may attend to a key.
Tensor masked_softmax(const Tensor& scores, const Tensor& keep);

// 5. Scaled dot-product attention: q [B, Tq, d], k [B, Tk, d], v [B, Tk, dv] -> [B, Tq, dv];
// with `causal`, query i sees keys 0..i only.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal);

// 6. Attention's backward, one head and no mask: q [Tq, d], k [Tk, d], v [Tk, dv] and
// dout = dL/dO [Tq, dv] -> dL/dq, dL/dk, dL/dv, each shaped like its tensor.
struct AttentionGrads {
  Tensor dq, dk, dv;
};
AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout);

// 7. The mean of the past as a weight matrix: W [T, T] from a softmax of zero scores masked
// with −inf above the diagonal, and O = W x for x [T, C].
Tensor causal_average_weights(std::int64_t t);
Tensor average_the_past(const Tensor& x);

// 8. Multi-head: x [B, T, D] -> [B, H, T, D/H], head h of token t holding channels
// h·D/H .. (h+1)·D/H − 1; and back.
Tensor split_heads(const Tensor& x, std::int64_t heads);
Tensor merge_heads(const Tensor& x);

// 9. The sinusoidal position table [T, D] (D even), float64.
Tensor sinusoidal_positions(std::int64_t t, std::int64_t d);

// 10. Layer norm's backward over each row of x [R, D], with weight w [D]: dx, dw, db.
struct LayerNormGrads {
  Tensor dx, dw, db;
};
LayerNormGrads layer_norm_backward(const Tensor& x, const Tensor& w, const Tensor& dy, double eps);

// 11. Cross-entropy's backward: dL/dlogits [R, C] for the mean over the rows whose target
// (int64, [R]) is not −100, given dL/dloss.
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, double dloss);

// 12. Additive (Bahdanau) attention: q [Tq, dq], k [Tk, dk], v [Tk, dv], W_q [H, dq],
// W_k [H, dk], a [H]; score_ij = a · tanh(W_q q_i + W_k k_j) -> [Tq, dv].
Tensor additive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& w_q, const Tensor& w_k,
                          const Tensor& a);

// 13. A tanh RNN over x [T, I] from h0 [H]: h_t = tanh(W_x x_t + W_h h_{t−1} + b), W_x [H, I],
// W_h [H, H], b [H]. Its last state, and the gradients of all five from dL/dh_T.
struct RnnGrads {
  Tensor dx, dh0, dw_x, dw_h, db;
};
Tensor rnn_last_state(const Tensor& x, const Tensor& h0, const Tensor& w_x, const Tensor& w_h, const Tensor& b);
RnnGrads rnn_backward(const Tensor& x, const Tensor& h0, const Tensor& w_x, const Tensor& w_h, const Tensor& b,
                      const Tensor& dh_last);

// 14. An attention layer as a module, trained: a lookup in a small dictionary. Each example is
// n pairs (key_j, value_j) of symbols and a query equal to one of its keys; the answer is that
// key's value. keys and values [B, n] and query [B] are int64; forward returns logits [B, values].
class Lookup : public ag::nn::Module {
 public:
  Lookup(std::int64_t key_symbols, std::int64_t value_symbols, std::int64_t d, ag::Generator& generator);
  Tensor forward(const Tensor& keys, const Tensor& values, const Tensor& query) const;

  std::shared_ptr<ag::nn::Embedding> key_embedding;    // [key_symbols, d]: the keys and the query
  std::shared_ptr<ag::nn::Embedding> value_embedding;  // [value_symbols, d]
  std::shared_ptr<ag::nn::Linear> w_q, w_k, w_v;       // d -> d each
  std::shared_ptr<ag::nn::Linear> w_o;                 // d -> value_symbols: the logits
};

// 15. A KV cache: one causal head that decodes a token at a time. W_q, W_k [dk, d], W_v [dv, d];
// step(x_t) takes one token x_t [d], appends its key and value to the cache and returns its
// output [dv], which must equal row t of the whole sequence's causal attention.
struct KvCache {
  Tensor w_q, w_k, w_v;
  Tensor keys, values;  // [t, dk] and [t, dv] after t steps; undefined before the first
  Tensor step(const Tensor& x_t);
};

}  // namespace workbook
