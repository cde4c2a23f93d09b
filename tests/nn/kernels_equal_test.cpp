// The fast kernels, the reference kernels and the naive backend's plain loops (ops/kernels.h,
// ops/reference/, kernels/naive/) train the same model to the same numbers: whole training steps
// of the GPT and of the encoder-decoder Transformer (forward, loss, backward, gradient clipping,
// AdamW) under each setting, compared loss by loss, gradient by gradient and parameter by
// parameter.
//
// The bound is relative: a gradient's max |fast - reference| over the largest element of any
// gradient of that step, a parameter's over the largest parameter. Not each tensor's own
// largest element: some gradients are exactly 0 in exact arithmetic (the key projection's bias,
// since softmax ignores a shift shared by every key of a row), and both routes leave only
// rounding noise there, which per-tensor relative error would compare with itself.
// float64, two steps: every loss, gradient and parameter to 1e-12 (the two routes only add in
// different orders).
//
// float32, one step from the same parameters: loss and gradients to 1e-5 (float32's fast kernels
// also use their own exp and erfc, good to about 1e-7). The parameters after AdamW cannot be
// held to that: Adam divides each element's gradient by its own running size,
// m / (sqrt(v) + eps), so for an element whose gradient is near eps = 1e-8 a float32 rounding
// difference in that gradient moves the update by up to lr (the update's slope there is
// lr / eps). Measured, the worst parameter differs by about 2 % of one learning-rate step; the
// bound is 5 % of a step, lr / 20. For the same reason a second float32 step would compare
// gradients taken at parameters that already differ, so float32 runs one step. The update
// itself is held to 1e-5 on equal gradients in tests/ops/reference_test.cpp
// (Reference.AdamAndClipping).
#include <algorithm>
#include <cmath>
#include <iostream>
#include <optional>
#include <thread>

#include "../../kernels/table.h"
#include "../../ops/call_counts.h"
#include "../../ops/kernel_ops.h"
#include "../../ops/route.h"
#include "../test_util.h"

namespace ag {
namespace {

double max_abs(const Tensor& t) {
  Tensor d = t.to(kFloat64);
  double m = 0;
  for (std::int64_t i = 0; i < d.numel(); ++i) m = std::max(m, std::abs(d.data_ptr<double>()[i]));
  return m;
}

// max |fast - reference| over the tensor, divided by `scale`.
double error(const Tensor& fast, const Tensor& reference, double scale) {
  return max_abs(fast.to(kFloat64) - reference.to(kFloat64)) / scale;
}

// The largest element of any of the tensors.
double scale_of(const std::vector<Tensor>& tensors) {
  double m = 0;
  for (const Tensor& t : tensors) m = std::max(m, max_abs(t));
  return m;
}

// What one run of a few training steps leaves behind, for comparing two runs.
struct Run {
  std::vector<double> losses, norms;
  std::vector<std::vector<Tensor>> grads;  // per step, before clipping, in parameter order
  std::vector<Tensor> params;              // after the last step
  std::vector<std::string> names;
};

// `steps` steps of: zero_grad, loss, backward, clip_grad_norm(max_norm), AdamW. `make_loss`
// builds the model's loss for step s; the model and its dropout generators are built from the
// same seed for every run, so both routes see the same weights, batches and masks.
constexpr double kLr = 1e-2;

template <class Model>
Run train(Kernels kernels, Model& model, DType dtype, int steps, const std::function<Tensor(Model&, int)>& make_loss) {
  KernelGuard guard(kernels);
  model.to(dtype);
  model.train();
  optim::AdamW opt(optim::decay_groups(model, 0.1), {.lr = kLr, .weight_decay = 0.1});
  Run run;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss = make_loss(model, s);
    loss.backward();
    run.losses.push_back(loss.item());
    std::vector<Tensor> grads;
    for (const Tensor& p : model.parameters()) grads.push_back(p.grad().clone());
    run.grads.push_back(grads);
    run.norms.push_back(optim::clip_grad_norm(model.parameters(), 0.5));  // small enough to clip
    opt.step();
  }
  for (auto& [name, p] : model.named_parameters()) {
    run.names.push_back(name);
    run.params.push_back(p.detach().clone());
  }
  return run;
}

// Every loss, gradient and parameter of `fast` within `tol` of `reference`; returns the worst
// relative error seen, and prints it.
double expect_equal_runs(const Run& fast, const Run& reference, DType dtype, const std::string& what) {
  double tol = dtype == kFloat64 ? 1e-12 : 1e-5;
  double worst = 0, worst_param = 0;
  auto check = [&](double error, const std::string& where) {
    worst = std::max(worst, error);
    EXPECT_LE(error, tol) << what << ": " << where;
  };
  EXPECT_EQ(fast.losses.size(), reference.losses.size());
  for (std::size_t s = 0; s < fast.losses.size(); ++s) {
    check(std::abs(fast.losses[s] - reference.losses[s]) / std::abs(reference.losses[s]),
          fmt::format("loss of step {}", s));
    check(std::abs(fast.norms[s] - reference.norms[s]) / reference.norms[s], fmt::format("grad norm of step {}", s));
    double grad_scale = scale_of(reference.grads[s]);
    for (std::size_t i = 0; i < fast.grads[s].size(); ++i)
      check(error(fast.grads[s][i], reference.grads[s][i], grad_scale),
            fmt::format("gradient of {} at step {}", reference.names[i], s));
  }
  double param_scale = scale_of(reference.params);
  for (std::size_t i = 0; i < fast.params.size(); ++i) {
    double e = error(fast.params[i], reference.params[i], param_scale);
    worst_param = std::max(worst_param, e);
    if (dtype == kFloat64)
      check(e, "updated " + reference.names[i]);
    else  // in steps: the largest difference over lr (see the top of this file)
      EXPECT_LE(e * param_scale / kLr, 0.05) << what << ": updated " << reference.names[i];
  }
  std::cout << what << ": worst relative error of losses and gradients " << worst << ", of parameters " << worst_param
            << " (" << worst_param * param_scale / kLr << " of a learning-rate step)\n";
  return worst;
}

// Ids drawn uniformly from [first, vocab).
Tensor random_ids(Generator& gen, std::int64_t vocab, Shape shape, std::int64_t first = 0) {
  Tensor t = empty(shape, kInt64);
  auto range = static_cast<std::uint64_t>(vocab - first);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.mutable_data_ptr<std::int64_t>()[i] = first + static_cast<std::int64_t>(gen.next_u64() % range);
  return t;
}

// The GPT of the odd sizes: 3 heads of 16, block 17, batch 3.
// float64 runs two steps, float32 one (see the top of this file).
int steps_for(DType dtype) { return dtype == kFloat64 ? 2 : 1; }

Run gpt_run(Kernels kernels, DType dtype, bool bias, double dropout, nn::NormKind norm = nn::NormKind::Layer,
            nn::MlpKind mlp = nn::MlpKind::Gelu) {
  Generator gen(11);
  nn::GPT model({.vocab_size = 29,
                 .block_size = 17,
                 .n_layer = 2,
                 .n_head = 3,
                 .n_embd = 48,
                 .dropout = dropout,
                 .bias = bias,
                 .norm = norm,
                 .mlp = mlp},
                gen);
  Generator data(5);
  std::vector<Tensor> x, y;
  for (int s = 0; s < 2; ++s) {
    x.push_back(random_ids(data, 29, {3, 17}));
    y.push_back(random_ids(data, 29, {3, 17}));
  }
  return train<nn::GPT>(kernels, model, dtype, steps_for(dtype), [&](nn::GPT& m, int s) { return m.loss(x[s], y[s]); });
}

TEST(KernelsEqual, GPTTrainingStepsFloat64) {
  for (bool bias : {true, false})
    for (double dropout : {0.0, 0.2}) {
      std::string what = fmt::format("GPT float64, bias {}, dropout {}", bias, dropout);
      SCOPED_TRACE(what);
      expect_equal_runs(gpt_run(Kernels::Fast, kFloat64, bias, dropout),
                        gpt_run(Kernels::Reference, kFloat64, bias, dropout), kFloat64, what);
    }
}

TEST(KernelsEqual, GPTTrainingStepsFloat32) {
  for (bool bias : {true, false})
    for (double dropout : {0.0, 0.2}) {
      std::string what = fmt::format("GPT float32, bias {}, dropout {}", bias, dropout);
      SCOPED_TRACE(what);
      expect_equal_runs(gpt_run(Kernels::Fast, kFloat32, bias, dropout),
                        gpt_run(Kernels::Reference, kFloat32, bias, dropout), kFloat32, what);
    }
}

// The same GPT with RMSNorm in every block and before the head (no norm biases): the new op
// through the router's two routes, whole steps, both dtypes.
TEST(KernelsEqual, GPTWithRmsNormTrainingSteps) {
  for (DType dtype : {kFloat64, kFloat32})
    for (double dropout : {0.0, 0.2}) {
      std::string what = fmt::format("GPT {} with RMSNorm, dropout {}", dtype_name(dtype), dropout);
      SCOPED_TRACE(what);
      testing::CountCalls counting;
      auto reference_run = gpt_run(Kernels::Reference, dtype, true, dropout, nn::NormKind::Rms);
      EXPECT_EQ(counting.reference()["rms_norm"], steps_for(dtype) * (2 * 2 + 1));  // ln_1, ln_2 per block, ln_f
      EXPECT_EQ(counting.reference().count("layer_norm"), 0u);
      expect_equal_runs(gpt_run(Kernels::Fast, dtype, true, dropout, nn::NormKind::Rms), reference_run, dtype, what);
    }
}

// The naive backend (kernels/naive/) against the reference twins, whole steps: two
// implementations written independently of each other and of the fast kernels. float32 is held
// against the fast route, as the reference is above.
TEST(KernelsEqual, NaiveBackendTrainsTheGPTLikeTheOtherRoutes) {
  for (nn::NormKind norm : {nn::NormKind::Layer, nn::NormKind::Rms})
    for (bool bias : {true, false})
      for (double dropout : {0.0, 0.2}) {
        std::string what = fmt::format("GPT float64, {} norm, bias {}, dropout {}: naive against reference",
                                       norm == nn::NormKind::Rms ? "RMS" : "layer", bias, dropout);
        SCOPED_TRACE(what);
        expect_equal_runs(gpt_run(Kernels::Naive, kFloat64, bias, dropout, norm),
                          gpt_run(Kernels::Reference, kFloat64, bias, dropout, norm), kFloat64, what);
      }
  for (double dropout : {0.0, 0.2}) {
    std::string what = fmt::format("GPT float32, dropout {}: naive against fast", dropout);
    SCOPED_TRACE(what);
    expect_equal_runs(gpt_run(Kernels::Naive, kFloat32, true, dropout), gpt_run(Kernels::Fast, kFloat32, true, dropout),
                      kFloat32, what);
  }
}

// A LLaMA-shaped GPT (RMSNorm, SwiGLU MLPs): the three routes, whole steps, both dtypes; the
// reference route runs the swiglu twin once per block and step.
TEST(KernelsEqual, GPTWithSwigluTrainingSteps) {
  for (DType dtype : {kFloat64, kFloat32})
    for (double dropout : {0.0, 0.2}) {
      std::string what = fmt::format("GPT {} with SwiGLU, dropout {}", dtype_name(dtype), dropout);
      SCOPED_TRACE(what);
      testing::CountCalls counting;
      auto reference_run = gpt_run(Kernels::Reference, dtype, false, dropout, nn::NormKind::Rms, nn::MlpKind::Swiglu);
      EXPECT_EQ(counting.reference()["swiglu"], steps_for(dtype) * 2);  // one MLP per block
      EXPECT_EQ(counting.reference().count("linear_gelu"), 0u);
      expect_equal_runs(gpt_run(Kernels::Fast, dtype, false, dropout, nn::NormKind::Rms, nn::MlpKind::Swiglu),
                        reference_run, dtype, what + ": fast against reference");
      if (dtype == kFloat64)
        expect_equal_runs(gpt_run(Kernels::Naive, dtype, false, dropout, nn::NormKind::Rms, nn::MlpKind::Swiglu),
                          reference_run, dtype, what + ": naive against reference");
    }
}

// The encoder-decoder Transformer: padded sources (key padding in the encoder's self-attention
// and in every cross-attention), a causal decoder, padding targets ignored by the loss.
Run transformer_run(Kernels kernels, DType dtype, double dropout) {
  constexpr std::int64_t kPad = 0;
  Generator gen(3);
  nn::Transformer model({.src_vocab = 13,
                         .tgt_vocab = 11,
                         .d_model = 48,
                         .n_heads = 3,
                         .d_ff = 40,
                         .n_encoder_layers = 2,
                         .n_decoder_layers = 2,
                         .max_len = 32,
                         .dropout = dropout},
                        gen);
  Generator data(8);
  Tensor src = random_ids(data, 13, {3, 7}, 1), tgt = random_ids(data, 11, {3, 6}, 1);  // 0 is padding
  std::vector<std::int64_t> lengths{7, 4, 2};
  for (std::int64_t b = 0; b < 3; ++b)
    for (std::int64_t j = lengths[static_cast<std::size_t>(b)]; j < 7; ++j)
      src.mutable_data_ptr<std::int64_t>()[b * 7 + j] = kPad;
  tgt.mutable_data_ptr<std::int64_t>()[2 * 6 + 5] = kPad;  // one ignored target
  Tensor src_mask = key_padding_mask(lengths, 7);
  Tensor tgt_in = slice(tgt, 1, 0, 5), tgt_out = slice(tgt, 1, 1, 6);
  return train<nn::Transformer>(kernels, model, dtype, steps_for(dtype), [&](nn::Transformer& m, int) {
    return cross_entropy(m.forward(src, tgt_in, src_mask), tgt_out, kPad);
  });
}

TEST(KernelsEqual, TransformerTrainingSteps) {
  for (DType dtype : {kFloat64, kFloat32})
    for (double dropout : {0.0, 0.2}) {
      std::string what = fmt::format("Transformer {}, dropout {}", dtype_name(dtype), dropout);
      SCOPED_TRACE(what);
      expect_equal_runs(transformer_run(Kernels::Fast, dtype, dropout),
                        transformer_run(Kernels::Reference, dtype, dropout), dtype, what);
    }
}

TEST(KernelsEqual, NaiveBackendTrainsTheTransformerLikeTheReference) {
  std::string what = "Transformer float64: naive against reference";
  expect_equal_runs(transformer_run(Kernels::Naive, kFloat64, 0.2), transformer_run(Kernels::Reference, kFloat64, 0.2),
                    kFloat64, what);
}

// The naive route runs the naive loops and no reference twin; the other two routes run no naive
// loop.
TEST(KernelsEqual, NaiveRouteRunsItsOwnKernels) {
  testing::CountCalls counting;
  gpt_run(Kernels::Fast, kFloat64, true, 0.0);
  gpt_run(Kernels::Reference, kFloat64, true, 0.0);
  EXPECT_EQ(counting.naive(), 0);
  counting.reset();
  gpt_run(Kernels::Naive, kFloat64, true, 0.0);
  EXPECT_TRUE(counting.reference().empty());
  // Two steps of a two-layer GPT. Forward: 2 embeddings, 5 layer norms, 2 x (qkv, out, head...)
  // at least one kernel per op and step; backward as many again; AdamW one per parameter.
  EXPECT_GT(counting.naive(), 2 * (2 + 5 + 2 * 4 + 1 + 1) * 2);
}

// The reference route really runs the reference kernels, every one of them, and the fast route
// none of them.
TEST(KernelsEqual, EachRouteRunsItsOwnKernels) {
  testing::CountCalls counting;
  gpt_run(Kernels::Fast, kFloat64, true, 0.0);
  transformer_run(Kernels::Fast, kFloat64, 0.0);
  EXPECT_TRUE(counting.reference().empty());

  gpt_run(Kernels::Reference, kFloat64, true, 0.0);
  std::map<std::string, std::int64_t> gpt = counting.reference();
  // Two steps of a two-layer GPT, counted op by op.
  EXPECT_EQ(gpt["embedding"], 2 * 2);             // wte and wpe, two steps
  EXPECT_EQ(gpt["layer_norm"], 2 * (2 * 2 + 1));  // ln_1 and ln_2 per block, ln_f
  EXPECT_EQ(gpt["linear_gelu"], 2 * 2);           // each block's MLP
  EXPECT_EQ(gpt["gelu"], 2 * 2);                  // inside linear_gelu
  EXPECT_EQ(gpt["scaled_dot_product_attention"], 2 * 2);
  EXPECT_EQ(gpt["cross_entropy"], 2);
  EXPECT_EQ(gpt["clip_grad_norm"], 2);
  EXPECT_GT(gpt["linear"], 0);
  EXPECT_GT(gpt["adam_update"], 0);

  counting.reset();
  transformer_run(Kernels::Reference, kFloat64, 0.0);
  std::map<std::string, std::int64_t> seq2seq = counting.reference();
  // Per step: 2 encoder self-attentions, 2 decoder self- and 2 cross-attentions.
  EXPECT_EQ(seq2seq["scaled_dot_product_attention"], 2 * 6);
  EXPECT_EQ(seq2seq["cross_entropy"], 2);
  EXPECT_EQ(seq2seq["embedding"], 2 * 2);
}

// One op alone on its reference kernel: only that op's twin runs.
TEST(KernelsEqual, OneOpAloneOnItsReferenceKernel) {
  set_reference_ops({"layer_norm"});
  EXPECT_TRUE(use_reference(KernelOp::LayerNorm));
  EXPECT_FALSE(use_reference(KernelOp::Linear));
  testing::CountCalls counting;
  gpt_run(Kernels::Fast, kFloat64, true, 0.0);
  std::map<std::string, std::int64_t> counts = counting.reference();
  set_reference_ops({});
  EXPECT_EQ(counts.size(), 1u);
  EXPECT_EQ(counts["layer_norm"], 2 * (2 * 2 + 1));
  EXPECT_FALSE(use_reference(KernelOp::LayerNorm));
  EXPECT_TRUE(test::throws_with<std::invalid_argument>(
      [] { set_reference_ops({"softmax"}); },
      "kernels: no op 'softmax' has a reference kernel to switch to; the ops are "
      "linear, linear_gelu, gelu, layer_norm"));
  EXPECT_FALSE(use_reference(KernelOp::Gelu));  // a refused list changes nothing
}

TEST(KernelsEqual, GuardRestoresAndNamesParse) {
  EXPECT_EQ(kernels(), Kernels::Fast);
  {
    KernelGuard outer(Kernels::Reference);
    EXPECT_EQ(kernels(), Kernels::Reference);
    {
      KernelGuard inner(Kernels::Fast);
      EXPECT_EQ(kernels(), Kernels::Fast);
    }
    EXPECT_EQ(kernels(), Kernels::Reference);
  }
  EXPECT_EQ(kernels(), Kernels::Fast);
  EXPECT_EQ(parse_kernels("reference"), Kernels::Reference);
  EXPECT_EQ(parse_kernels("naive"), Kernels::Naive);
  for (Kernels k : {Kernels::Fast, Kernels::Reference, Kernels::Naive}) EXPECT_EQ(parse_kernels(kernels_name(k)), k);
  EXPECT_TRUE(test::throws_with<std::invalid_argument>(
      [] { parse_kernels("Fast"); }, "kernels: unknown kernels 'Fast': expected 'fast', 'reference' or 'naive'"));
  EXPECT_TRUE(test::throws_with<std::invalid_argument>(
      [] { parse_kernels(""); }, "kernels: unknown kernels '': expected 'fast', 'reference' or 'naive'"));
}

}  // namespace
// The kernel switch, grad mode and autocast have one scope, the calling thread (ops/route.h): a
// new thread starts with fast kernels, grad on and autocast off, and what it sets stays its own.
TEST(KernelsEqual, TheThreeSwitchesBelongToTheCallingThread) {
  Generator gen(3);
  Tensor x = randn({3, 5}, gen), w = randn({4, 5}, gen);
  KernelGuard reference(Kernels::Reference);
  NoGradGuard no_grad;
  std::optional<AutocastGuard> autocast;
  if (bf16_support().available) autocast.emplace();
  testing::CountCalls counting;
  Kernels seen_kernels = Kernels::Reference;
  bool seen_grad = false, seen_autocast = true;
  std::int64_t counted_there = -1;
  std::thread other([&] {
    seen_kernels = kernels();
    seen_grad = is_grad_enabled();
    seen_autocast = is_autocast_enabled();
    linear(x, w, Tensor());  // the fast kernel: no reference call counted
    counted_there = counting.reference()["linear"];
    set_kernels(Kernels::Reference);  // this thread's own setting, gone with it
    set_grad_enabled(false);
  });
  other.join();
  EXPECT_EQ(seen_kernels, Kernels::Fast);
  EXPECT_TRUE(seen_grad);
  EXPECT_FALSE(seen_autocast);
  EXPECT_EQ(counted_there, 0);
  EXPECT_EQ(kernels(), Kernels::Reference);
  linear(x, w, Tensor());  // here the reference runs
  EXPECT_EQ(counting.reference()["linear"], 1);
  std::thread fresh([&] { seen_kernels = kernels(); });
  fresh.join();
  EXPECT_EQ(seen_kernels, Kernels::Fast);  // the first thread's setting did not reach a new one
}

// A node's backward runs with the route its forward chose, whatever the switch says when
// backward is called: the fast forward's hand-derived backward, not the reference.
TEST(KernelsEqual, BackwardFollowsTheForwardsRoute) {
  Generator gen(4);
  Tensor x = test::normal_leaf({3, 5}, gen), w = test::normal_leaf({4, 5}, gen);
  Tensor y = layer_norm(linear(x, w, Tensor()), Tensor(), Tensor(), 1e-5).sum();
  Tensor expected_dx, expected_dw;
  {
    Tensor xr = x.detach().requires_grad_(), wr = w.detach().requires_grad_();
    KernelGuard reference(Kernels::Reference);
    layer_norm(linear(xr, wr, Tensor()), Tensor(), Tensor(), 1e-5).sum().backward();
    expected_dx = xr.grad();
    expected_dw = wr.grad();
  }
  testing::CountCalls counting;
  {
    KernelGuard reference(Kernels::Reference);
    y.backward();
  }
  EXPECT_TRUE(counting.reference().empty()) << "a fast node's backward called a reference kernel";
  EXPECT_TRUE(test::all_close(x.grad(), expected_dx, 1e-12));
  EXPECT_TRUE(test::all_close(w.grad(), expected_dw, 1e-12));

  // A naive forward's backward runs the naive loops under the fast setting too, and a fast
  // forward's none of them under the naive setting: the node's formula runs under the switch
  // its forward ran under, so the primitive ops it calls (sum's backward is a broadcast) follow,
  // and so do the pass's seed, made for the root, and the engine's sum of what a node hands on
  // (w.grad, from the backward above, takes the last pass's gradient by an add in place).
  Tensor xn = x.detach().requires_grad_(), wn = w.detach().requires_grad_();
  Tensor yn;
  {
    KernelGuard naive(Kernels::Naive);
    yn = layer_norm(linear(xn, wn, Tensor()), Tensor(), Tensor(), 1e-5).sum();
  }
  counting.reset();
  yn.backward();
  EXPECT_EQ(counting.naive(), 4);  // the seed (ones), sum's broadcast, layer_norm's backward, then linear's
  EXPECT_TRUE(test::all_close(xn.grad(), expected_dx, 1e-12));
  EXPECT_TRUE(test::all_close(wn.grad(), expected_dw, 1e-12));
  Tensor xf = x.detach().requires_grad_();
  Tensor yf = layer_norm(linear(xf, w, Tensor()), Tensor(), Tensor(), 1e-5).sum();
  counting.reset();
  {
    KernelGuard naive(Kernels::Naive);
    yf.backward();
  }
  EXPECT_EQ(counting.naive(), 0);
  // The converse: a second naive pass into xn and wn, under the fast setting, adds into the
  // gradients the first left there on the naive loops too.
  {
    KernelGuard naive(Kernels::Naive);
    yn = layer_norm(linear(xn, wn, Tensor()), Tensor(), Tensor(), 1e-5).sum();
  }
  counting.reset();
  yn.backward();
  EXPECT_EQ(counting.naive(), 6);  // the four calls above, then the adds into xn.grad and wn.grad
  EXPECT_TRUE(test::all_close(wn.grad(), expected_dw * 2.0, 1e-12));
}

}  // namespace ag
