// Checks nn/transformer.cpp: encoder and decoder blocks (pre- and post-LN) and the
// encoder-decoder model, by finite differences and by the properties they must have.
#include "../test_util.h"

namespace ag {
namespace {

using test::all_close;
using test::gradcheck_module;
using test::normal_leaf;
using test::throws_with;

nn::BlockOptions small_block(bool norm_first) {
  return {.d_model = 12, .n_heads = 3, .d_ff = 20, .dropout = 0.0, .norm_first = norm_first};
}

TEST(EncoderBlock, GradcheckPreAndPostLN) {
  Generator gen(1);
  for (bool norm_first : {true, false}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(fmt::format("norm_first {} causal {}", norm_first, causal));
      nn::SelfAttentionBlock block(small_block(norm_first), gen);
      block.to(kFloat64);
      Tensor x = normal_leaf({2, 5, 12}, gen);
      Tensor mask = key_padding_mask({5, 4}, 5);
      EXPECT_TRUE(gradcheck_module(block, {x}, [&] { return block.forward(x, mask, causal); }));
    }
  }
}

TEST(EncoderBlock, ParameterNames) {
  nn::SelfAttentionBlock block(small_block(true));
  std::vector<std::string> names;
  for (const auto& [name, _] : block.named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"ln_1.weight", "ln_1.bias", "attn.qkv_proj.weight", "attn.qkv_proj.bias",
                                             "attn.out_proj.weight", "attn.out_proj.bias", "ln_2.weight", "ln_2.bias",
                                             "mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias"}));
  // The decoder's cross-attention has a query projection and one key-value projection.
  nn::TransformerDecoderBlock decoder(small_block(true));
  std::vector<Shape> shapes;
  for (const auto& [name, p] : decoder.named_parameters())
    if (name.starts_with("cross_attn.") && name.ends_with("_proj.weight")) shapes.push_back(p.shape());
  EXPECT_EQ(shapes, (std::vector<Shape>{{12, 12}, {24, 12}, {12, 12}}));  // q_proj, kv_proj, out_proj
}

TEST(DecoderBlock, GradcheckWithMemoryOfAnotherLength) {
  Generator gen(2);
  for (bool norm_first : {true, false}) {
    SCOPED_TRACE(fmt::format("norm_first {}", norm_first));
    nn::TransformerDecoderBlock block(small_block(norm_first), gen);
    block.to(kFloat64);
    Tensor x = normal_leaf({2, 5, 12}, gen), memory = normal_leaf({2, 7, 12}, gen);
    Tensor memory_mask = key_padding_mask({7, 3}, 7);
    EXPECT_TRUE(gradcheck_module(block, {x, memory}, [&] { return block.forward(x, memory, memory_mask); }));
    Tensor self_weights, cross_weights;
    block.forward(x, memory, memory_mask, &self_weights, &cross_weights);
    EXPECT_EQ(self_weights.shape(), (Shape{2, 3, 5, 5}));
    EXPECT_EQ(cross_weights.shape(), (Shape{2, 3, 5, 7}));  // [batch, heads, tgt_len, src_len]
    EXPECT_TRUE(all_close(cross_weights.slice(0, 1, 2).slice(3, 3, 7), std::vector<double>(3 * 5 * 4, 0.0), 0));
  }
}

TEST(Transformer, ShapesGradcheckAndCausalDecoding) {
  Generator gen(3);
  nn::TransformerConfig config{.src_vocab = 9,
                               .tgt_vocab = 7,
                               .d_model = 12,
                               .n_heads = 3,
                               .d_ff = 16,
                               .n_encoder_layers = 1,
                               .n_decoder_layers = 1,
                               .max_len = 16};
  nn::Transformer model(config, gen);
  model.to(kFloat64);
  Tensor src = from_vector<std::int64_t>({1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0}, {2, 7});
  Tensor tgt = from_vector<std::int64_t>({1, 2, 3, 4, 5, 6, 5, 4, 3, 2}, {2, 5});
  Tensor src_mask = key_padding_mask({7, 2}, 7);
  Tensor logits = model.forward(src, tgt, src_mask);
  EXPECT_EQ(logits.shape(), (Shape{2, 5, 7}));
  EXPECT_TRUE(gradcheck_module(model, {}, [&] { return model.forward(src, tgt, src_mask); }));
  // The decoder is causal: changing target token 3 leaves the logits at positions 0..2 alone.
  Tensor tgt2 = from_vector<std::int64_t>({1, 2, 3, 0, 0, 6, 5, 4, 3, 2}, {2, 5});
  Tensor logits2 = model.forward(src, tgt2, src_mask);
  EXPECT_TRUE(all_close(logits2.slice(1, 0, 3), logits.slice(1, 0, 3), 1e-13));
  EXPECT_FALSE(all_close(logits2.slice(1, 3, 5), logits.slice(1, 3, 5), 1e-6));
  // Padding is invisible: changing a padded source token changes nothing.
  Tensor src2 = from_vector<std::int64_t>({1, 2, 3, 4, 5, 6, 7, 8, 0, 5, 5, 5, 5, 5}, {2, 7});
  EXPECT_TRUE(all_close(model.forward(src2, tgt, src_mask), logits, 1e-13));
}

TEST(Transformer, GradcheckEveryKindOfPositions) {
  for (auto kind : {nn::Positions::None, nn::Positions::Learned, nn::Positions::Rotary}) {
    SCOPED_TRACE(static_cast<int>(kind));
    Generator gen(4);
    nn::Transformer model({.src_vocab = 9,
                           .tgt_vocab = 7,
                           .d_model = 12,
                           .n_heads = 3,
                           .d_ff = 16,
                           .n_encoder_layers = 1,
                           .n_decoder_layers = 1,
                           .max_len = 16,
                           .positions = kind},
                          gen);
    model.to(kFloat64);
    Tensor src = from_vector<std::int64_t>({1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0}, {2, 7});
    Tensor tgt = from_vector<std::int64_t>({1, 2, 3, 4, 5, 6, 5, 4, 3, 2}, {2, 5});
    Tensor src_mask = key_padding_mask({7, 2}, 7);
    EXPECT_TRUE(gradcheck_module(model, {}, [&] { return model.forward(src, tgt, src_mask); }));
    // Without positions the encoder cannot tell source order: reversing the (unpadded) source
    // leaves the decoder's output unchanged. With positions it does not.
    Tensor src_rev = from_vector<std::int64_t>({7, 6, 5, 4, 3, 2, 1, 8, 0, 0, 0, 0, 0, 0}, {2, 7});
    bool order_blind = all_close(model.forward(src_rev, tgt, src_mask), model.forward(src, tgt, src_mask), 1e-12);
    EXPECT_EQ(order_blind, kind == nn::Positions::None);
  }
}

TEST(Transformer, Errors) {
  nn::Transformer model({.max_len = 4});
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { model.forward(arange(3), arange(3)); },
                                                 "Transformer: src must be int64 [B, S], got shape [3]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        model.forward(arange(5).reshape({1, 5}), arange(3).reshape({1, 3}));
      },
      "SinusoidalPositionalEncoding: positions 0 to 4 (input shape [1, 5, 64]) run past the table's 4 positions"));
}

}  // namespace
}  // namespace ag
