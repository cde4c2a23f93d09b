// The study notes' five self-test questions, each answered by running code rather than by
// recalling the answer. Where the notes' own answer disagrees with the computation, both are
// printed.
#include <cmath>
#include <limits>

#include "experiments.h"

namespace experiments {

using ag::Tensor;

namespace {

std::string row(const Tensor& t) {
  Tensor d = t.to(ag::kFloat64).reshape({t.numel()});
  std::string out = "[";
  for (std::int64_t i = 0; i < d.numel(); ++i) out += fmt::format("{}{:.3f}", i ? ", " : "", d.at<double>({i}));
  return out + "]";
}

bool same(const Tensor& a, const Tensor& b) {
  Tensor e = a - b;
  return (e * e).max().item() == 0.0;
}

}  // namespace

int self_test(const Options& o) {
  ag::Generator gen(o.seed);
  ag::NoGradGuard no_grad;
  const std::int64_t d = 8;
  ag::nn::MultiHeadAttention attn(d, 2, {}, gen);

  auto yes_no = [&](bool b) { return b ? say(o, "yes", "是") : say(o, "no", "否"); };
  fmt::print("{}", say(o, "Q1. Where do Q, K and V come from in self- and in cross-attention?\n",
                       "题 1. 自注意力和交叉注意力中，Q、K、V 各从哪里来？\n"));
  Tensor x = ag::randn({1, 3, d}, gen), memory = ag::randn({1, 5, d}, gen), other = ag::randn({1, 5, d}, gen);
  // Wq, Wk and Wv are the three row blocks of the module's [3D, D] projection.
  auto rows = [&](std::int64_t part) { return ag::slice(attn.qkv_proj->weight, 0, part * d, (part + 1) * d); };
  auto bias = [&](std::int64_t part) { return ag::slice(attn.qkv_proj->bias, 0, part * d, (part + 1) * d); };
  Tensor q = ag::linear(x, rows(0), bias(0));
  Tensor k_self = ag::linear(x, rows(1), bias(1)), k_cross = ag::linear(memory, rows(1), bias(1));
  // Rebuilt by hand from Q = x Wq^T and K, V = memory Wk^T, memory Wv^T: the module's
  // cross-attention output must be exactly this.
  Tensor by_hand = attn.out_proj->forward(
      attn.merge_heads(ag::scaled_dot_product_attention_bthd(attn.split_heads(q), attn.split_heads(k_cross),
                                                             attn.split_heads(ag::linear(memory, rows(2), bias(2))))
                           .output));
  bool q_from_x = same(attn.forward(x, memory), by_hand) && !same(attn.forward(x, memory), attn.forward(x, other));
  fmt::print(fmt::runtime(
                 say(o, "    self-attention: Q = x Wq^T {}, K = x Wk^T {}, V = x Wv^T: one input, three projections\n",
                     "    自注意力：Q = x Wq^T {}，K = x Wk^T {}，V = x Wv^T：同一个输入，三个投影\n")),
             ag::shape_str(q.shape()), ag::shape_str(k_self.shape()));
  fmt::print(
      fmt::runtime(say(o,
                       "    cross-attention: Q = x Wq^T {} from the decoder, K = memory Wk^T {} from the encoder;\n"
                       "    the module's output equals attention over exactly those Q, K, V, and swapping the memory\n"
                       "    for another changes it although x is the same: {}\n",
                       "    交叉注意力：Q = x Wq^T {} 来自解码器，K = memory Wk^T {} 来自编码器；\n"
                       "    模块的输出恰好等于对这组 Q、K、V 做注意力，而且 x 不变、只换掉 memory，输出就变：{}\n")),
      ag::shape_str(q.shape()), ag::shape_str(k_cross.shape()), yes_no(q_from_x));
  if (o.check) expect(q_from_x, "Q1: cross-attention reads its keys and values from the memory");

  fmt::print("{}", say(o, "\nQ2. d_k = 8, scores before scaling [2, 4, 2]: the weights?\n",
                       "\n题 2. d_k = 8，缩放前的分数为 [2, 4, 2]：权重是多少？\n"));
  Tensor scores = ag::tensor({2, 4, 2}, {3}, ag::kFloat64);
  Tensor scaled = ag::softmax(scores / std::sqrt(8.0), 0), unscaled = ag::softmax(scores, 0);
  fmt::print(fmt::runtime(say(o, "    computed: scores / sqrt 8 = {}, weights {}\n",
                              "    计算得：分数 / sqrt 8 = {}，权重 {}\n")),
             row(scores / std::sqrt(8.0)), row(scaled));
  fmt::print(
      fmt::runtime(say(
          o,
          "    the notes answer [0.09, 0.82, 0.09]; without scaling the weights would be {};\n"
          "    [0.09, 0.82, 0.09] needs a gap of ln(0.82 / 0.09) = {:.2f} between the scores, and the scaled gap is "
          "{:.2f}\n",
          "    笔记的答案是 [0.09, 0.82, 0.09]；不缩放时权重为 {}；\n"
          "    [0.09, 0.82, 0.09] 要求分数之间相差 ln(0.82 / 0.09) = {:.2f}，而缩放后只差 {:.2f}\n")),
      row(unscaled), std::log(0.82 / 0.09), 2 / std::sqrt(8.0));
  if (o.check)
    expect(std::abs(scaled.at<double>({1}) - 0.5035) < 1e-3, "Q2: the middle weight is 0.503, not the notes' 0.82");

  fmt::print("{}", say(o, "\nQ3. A generative model trained without the causal mask?\n",
                       "\n题 3. 训练生成模型时不加因果掩码会怎样？\n"));
  ag::Generator g2(o.seed);
  ag::nn::GPT gpt({.vocab_size = 10, .block_size = 8, .n_layer = 1, .n_head = 2, .n_embd = 8}, g2);
  Tensor ids = ag::from_vector<std::int64_t>({1, 2, 3, 4, 5}, {1, 5});
  Tensor ids_changed = ag::from_vector<std::int64_t>({1, 2, 3, 9, 5}, {1, 5});  // token 3 changed
  auto first3 = [&](const Tensor& i) { return gpt.forward(i).slice(1, 0, 3); };
  bool causal_blind = same(first3(ids), first3(ids_changed));
  gpt.causal = false;
  bool unmasked_sees = !same(first3(ids), first3(ids_changed));
  fmt::print(fmt::runtime(say(
                 o,
                 "    changing token 3 changes the predictions at positions 0-2: with the mask {}, without it {}.\n"
                 "    Without the mask, the prediction for token t+1 can read token t+1: the training loss measures\n"
                 "    copying, and generation, which has no future to read, gets none of that skill.\n"
                 "    `experiments causal` trains both and measures it.\n",
                 "    改变第 3 个词元，位置 0-2 的预测会不会变：有掩码时{}，没有掩码时{}。\n"
                 "    没有掩码，对第 t+1 个词元的预测可以直接读到第 t+1 个词元：训练损失衡量的是抄写，\n"
                 "    而生成时没有未来可读，这种“本领”一点也用不上。\n"
                 "    `experiments causal` 把两种模型都训练出来并加以测量。\n")),
             yes_no(!causal_blind), yes_no(unmasked_sees));
  if (o.check)
    expect(causal_blind && unmasked_sees, "Q3: only the unmasked model's early predictions see later tokens");

  fmt::print("{}", say(o, "\nQ4. Code reading: self-attention, or masked self-attention? Both variants, run:\n",
                       "\n题 4. 读代码：这是自注意力，还是带掩码的自注意力？把两种写法都运行一遍：\n"));
  Tensor qk = ag::randn({4, 4}, gen, ag::kFloat64);  // scores q k^T / sqrt(d) of 4 tokens
  Tensor variant_a = ag::softmax(qk, 1);
  Tensor upper = ag::logical_not(ag::causal_mask(4, 4));  // triu(ones, diagonal = 1): the future
  Tensor variant_b = ag::softmax(ag::masked_fill(qk, upper, -1e9), 1);
  Tensor with_inf = ag::softmax(ag::masked_fill(qk, upper, -std::numeric_limits<double>::infinity()), 1);
  fmt::print(fmt::runtime(say(o, "    (a) softmax(scores):                    row 0 = {}\n",
                              "    (a) softmax(scores)：                     第 0 行 = {}\n")),
             row(variant_a.slice(0, 0, 1)));
  fmt::print(fmt::runtime(say(o, "    (b) masked_fill(triu(1), -1e9), softmax: row 0 = {}\n",
                              "    (b) masked_fill(triu(1), -1e9)，softmax：第 0 行 = {}\n")),
             row(variant_b.slice(0, 0, 1)));
  double above = (variant_b * upper.to(ag::kFloat64)).sum().item();
  fmt::print(fmt::runtime(say(
                 o,
                 "    (b) puts {} weight above the diagonal: it is masked (causal) self-attention; -1e9 and -inf give\n"
                 "    identical weights here: {}\n",
                 "    (b) 在对角线以上的权重为 {}：它是带掩码的（因果）自注意力；这里 -1e9 与 -inf 给出的权重\n"
                 "    完全相同：{}\n")),
             above, yes_no(same(variant_b, with_inf)));
  if (o.check) expect(above == 0.0 && same(variant_b, with_inf), "Q4: variant (b) is causal; -1e9 acts as -inf");

  fmt::print(
      "{}",
      say(o,
          "\nQ5. Translation: the decoder is at its 3rd position (it has read <s>, word 1, word 2); 5 source words.\n",
          "\n题 5. 翻译：解码器位于第 3 个位置（已读入 <s>、第 1 个词、第 2 个词）；源句有 5 个词。\n"));
  // Where the queries come from depends on how the decoder is run; the notes' answer does not
  // say. The decoder's stream at positions 1..6 (<s>, word 1 .. word 5), one reading at a time:
  Tensor decoder_states = ag::randn({1, 6, d}, gen);
  Tensor forced, prefix, cached;
  //   teacher forcing (training): every target position at once, the right words as input;
  attn.forward(decoder_states, memory, {.weights = &forced});
  //   generating, no cache: the 3 positions written so far, recomputed at each step;
  attn.forward(decoder_states.slice(1, 0, 3), memory, {.weights = &prefix});
  //   generating with a KV cache: the newest position's query alone.
  attn.forward(decoder_states.slice(1, 2, 3), memory, {.weights = &cached});
  fmt::print(fmt::runtime(say(
                 o,
                 "    Q from the decoder, K and V from the encoder's {} outputs, in every reading; the weights are\n"
                 "    [batch, heads, tgt_len, src_len] with tgt_len the number of queries computed together:\n"
                 "      teacher forcing (training), all 6 target positions:  {}\n"
                 "      generating without a cache, the 3 written so far:    {}\n"
                 "      generating with a KV cache, the newest one only:     {}\n",
                 "    无论哪种运行方式，Q 都来自解码器，K 和 V 来自编码器的 {} 个输出；权重的形状是\n"
                 "    [batch, heads, tgt_len, src_len]，tgt_len 是一起计算的查询个数：\n"
                 "      强制教学（训练），全部 6 个目标位置：    {}\n"
                 "      不用缓存生成，已写出的 3 个位置：        {}\n"
                 "      用 KV 缓存生成，只算最新的一个：         {}\n")),
             memory.size(1), ag::shape_str(forced.shape()), ag::shape_str(prefix.shape()),
             ag::shape_str(cached.shape()));
  // Position 3's row (index 2) is the same in all three: each query's row depends on that
  // query alone (and, in a full decoder, on the positions before it, which the causal mask keeps
  // the same in every reading).
  // Equal up to float32 rounding: the projections of 6, 3 and 1 rows may take different
  // blocked paths through the matrix product.
  Tensor row_forced = forced.slice(2, 2, 3), row_prefix = prefix.slice(2, 2, 3);
  double differ =
      std::max((row_forced - row_prefix).pow(2).max().sqrt().item(), (row_forced - cached).pow(2).max().sqrt().item());
  bool same_row = differ < 1e-6;
  fmt::print(
      fmt::runtime(say(o, "    position 3's row of weights is the same in all three (largest difference {:.1e}): {}\n",
                       "    三种方式下位置 3 的那一行权重相同（最大差 {:.1e}）：{}\n")),
      differ, yes_no(same_row));
  if (o.check) {
    expect(forced.shape() == ag::Shape{1, 2, 6, 5} && prefix.shape() == ag::Shape{1, 2, 3, 5} &&
               cached.shape() == ag::Shape{1, 2, 1, 5},
           "Q5: cross-attention weights are [1, 2, 6, 5], [1, 2, 3, 5] or [1, 2, 1, 5] by reading");
    expect(same_row, "Q5: position 3's weights do not depend on the reading");
  }
  return exit_code();
}

}  // namespace experiments
