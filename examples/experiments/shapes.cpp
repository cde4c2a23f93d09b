// Self-attention vs cross-attention: where Q, K and V come from.
//
// In self-attention one sequence supplies all three (through three different projections); in
// cross-attention the queries come from the decoder's sequence and the keys and values from the
// encoder's output, so the weights are [batch, heads, target length, source length]. This
// trains a small encoder-decoder to reverse digits and prints the shapes that flow through it.
#include <filesystem>

#include "../common/digit_tasks.h"
#include "../common/plot.h"
#include "experiments.h"

namespace experiments {

using ag::Tensor;
namespace digits = ag::examples::digits;

namespace {

std::string shape(const Tensor& t) { return ag::shape_str(t.shape()); }

}  // namespace

int shapes(const Options& o) {
  digits::Task task{.kind = "reverse", .min_len = 6, .max_len = 6};
  ag::Generator init(o.seed), data(o.seed + 1);
  ag::nn::Transformer model({.src_vocab = digits::kVocab,
                             .tgt_vocab = digits::kVocab,
                             .d_model = 32,
                             .n_heads = 4,
                             .d_ff = 64,
                             .n_encoder_layers = 1,
                             .n_decoder_layers = 1,
                             .max_len = 8},
                            init);
  if (o.zh)
    fmt::print("训练一个 1 + 1 层的编码器-解码器（d_model 32，4 个头）把 6 个数字倒过来，共 {} 步\n\n", o.steps);
  else
    fmt::print("Training a 1 + 1 layer encoder-decoder (d_model 32, 4 heads) to reverse 6 digits, {}\n\n",
               ag::examples::plural(o.steps, "step"));
  digits::train(model, task, {.steps = o.steps, .batch = 64, .lr = 3e-3}, data);

  ag::NoGradGuard no_grad;
  digits::Batch b = digits::make_batch(task, {{3, 1, 4, 1, 5, 9}, {2, 7, 1, 8, 2, 8}});
  auto& enc = (*model.encoder)[0];
  auto& dec = (*model.decoder)[0];
  Tensor x = enc.ln_1->forward(model.embed(*model.src_embed, b.src));  // what the encoder's attention reads
  Tensor enc_self_weights;
  enc.attn->forward(x, x, {.attn_mask = b.src_mask, .weights = &enc_self_weights});
  Tensor memory = model.encode(b.src, b.src_mask);
  Tensor y = dec.ln_1->forward(model.embed(*model.tgt_embed, b.tgt_in));
  Tensor dec_self_weights;
  dec.self_attn->forward(y, y, {.causal = true, .weights = &dec_self_weights});
  std::vector<Tensor> cross;
  model.decode(b.tgt_in, memory, b.src_mask, &cross);
  Tensor yq = dec.ln_2->forward(y);  // stands in for the decoder stream at the cross-attention (same shape)

  std::int64_t h = enc.attn->n_heads, dh = enc.attn->head_dim;
  auto split = [&](const Tensor& t) { return shape(enc.attn->split_heads(t)); };
  auto enc_qkv = enc.attn->project(x, x), dec_qkv = dec.self_attn->project(y, y);
  auto cross_qkv = dec.cross_attn->project(yq, memory);
  const char* source = say(o, "source", "源序列");
  const char* target = say(o, "target", "目标序列");
  print_table({say(o, "attention", "注意力"), say(o, "Q from", "Q 来自"), "Q", say(o, "K, V from", "K、V 来自"), "K",
               "V", say(o, "per head", "每个头"), say(o, "weights", "权重")},
              {{say(o, "encoder self", "编码器自注意力"), source, shape(enc_qkv[0]), source, shape(enc_qkv[1]),
                shape(enc_qkv[2]), split(enc_qkv[0]), shape(enc_self_weights)},
               {say(o, "decoder self (causal)", "解码器自注意力（因果）"), target, shape(dec_qkv[0]), target,
                shape(dec_qkv[1]), shape(dec_qkv[2]), split(dec_qkv[0]), shape(dec_self_weights)},
               {say(o, "decoder cross", "解码器交叉注意力"), target, shape(cross_qkv[0]),
                say(o, "encoder output", "编码器输出"), shape(cross_qkv[1]), shape(cross_qkv[2]), split(cross_qkv[0]),
                shape(cross[0])}});
  fmt::print(fmt::runtime(
                 say(o, "\nbatch 2, source length S = {}, target length T = {} (<s> + 6 digits), {} heads of {} dims\n",
                     "\n批量大小 2，源序列长度 S = {}，目标序列长度 T = {}（<s> + 6 个数字），{} 个头，每个 {} 维\n")),
             b.src.size(1), b.tgt_in.size(1), h, dh);

  Tensor w = cross[0].mean(1).to(ag::kFloat64);  // [B, T, S], mean over heads
  fmt::print("{}",
             say(o, "\ncross-attention of the first example, mean over heads (rows: target positions, cols: source)\n",
                 "\n第一个样本的交叉注意力，对各头取平均（行：目标位置，列：源位置）\n"));
  std::int64_t mirrored = 0;
  for (std::int64_t i = 0; i < w.size(1); ++i) {
    std::string line;
    std::int64_t best = 0;
    for (std::int64_t j = 0; j < w.size(2); ++j) {
      line += fmt::format(" {:.2f}", w.at<double>({0, i, j}));
      if (w.at<double>({0, i, j}) > w.at<double>({0, i, best})) best = j;
    }
    if (i < w.size(2) && best == w.size(2) - 1 - i) ++mirrored;
    fmt::print("  t={}:{}\n", i, line);
  }
  fmt::print(fmt::runtime(say(o, "{} of {} output digits attend most to the mirrored source position\n",
                              "{} 个输出数字中有 {} 个最关注镜像对称的源位置\n")),
             o.zh ? w.size(2) : mirrored, o.zh ? mirrored : w.size(2));
  std::vector<std::vector<double>> grid;
  for (std::int64_t i = 0; i < w.size(1); ++i) {
    grid.emplace_back();
    for (std::int64_t j = 0; j < w.size(2); ++j) grid.back().push_back(w.at<double>({0, i, j}));
  }
  std::vector<std::string> rows{"<s>"}, cols;
  for (auto d : {9, 5, 1, 4, 1, 3}) rows.push_back(std::to_string(d));  // the decoder's input: <s> + answer
  for (auto d : {3, 1, 4, 1, 5, 9}) cols.push_back(std::to_string(d));
  std::filesystem::create_directories(o.out);
  std::string png = (std::filesystem::path(o.out) / "cross_attention_shapes.png").string();
  ag::plot::heatmap_png(png, {.values = grid,
                              .row_labels = rows,
                              .col_labels = cols,
                              .title = "cross-attention [B, H, T, S]: batch 0, mean of 4 heads",
                              .row_title = "query: decoder input (T)",
                              .col_title = "key: source digit (S)",
                              .value_title = "attention weight"});
  fmt::print(fmt::runtime(say(o, "wrote {}\n", "已写出 {}\n")), png);
  if (o.check) {
    expect(shape(enc_self_weights) == "[2, 4, 6, 6]", "encoder self-attention weights are [B, H, S, S]");
    expect(shape(dec_self_weights) == "[2, 4, 7, 7]", "decoder self-attention weights are [B, H, T, T]");
    expect(shape(cross[0]) == "[2, 4, 7, 6]", "cross-attention weights are [B, H, T, S] (target by source)");
  }
  return exit_code();
}

}  // namespace experiments
