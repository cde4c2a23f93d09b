// first_transformer: a model of one's own, from the parts in ag::nn, trained to answer "what is
// the largest digit in this sequence?". docs/models.md walks through it line by line.
//
//   ids [B, T]  (digits 0-9, then padding up to T)
//     -> Embedding + learned positions          [B, T, D]
//     -> SelfAttentionBlock x 2 (padding masked) [B, T, D]
//     -> masked mean over positions              [B, D]     (a custom op: masked_mean_pool)
//     -> Linear head                             [B, 10]    (a score for each digit 0-9)
//   loss = cross_entropy(scores, largest digit)
//
// The pooling is written here as a new differentiable op, forward and backward by hand, and
// checked with ag::gradcheck before anything trains. The program exits 1 if the held-out
// accuracy is below --min-accuracy (a test runs it so).
#include <attograd/attograd.h>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <set>

namespace {

constexpr std::int64_t kDigits = 10, kPad = 10, kVocab = 11;  // ids 0-9 are digits, 10 pads
constexpr std::int64_t kMinLen = 3, kMaxLen = 8;

// ---- A custom op ----------------------------------------------------------------------------
// The mean of x over the positions where mask is 1 (the real tokens, not the padding):
//
//   y[b, d] = sum_t m[b, t] x[b, t, d] / n[b],     n[b] = sum_t m[b, t]
//
// y is linear in x, so its gradient is the same weights read backwards:
//
//   dL/dx[b, t, d] = m[b, t] / n[b] * dL/dy[b, d]
//
// x: [B, T, D] (float32 or float64), mask: [B, T] of 0/1 in x's dtype, every row with a 1.
// ag::Function runs forward with the graph off and records one node whose backward is ours.
struct MaskedMeanPool : ag::Function<MaskedMeanPool> {
  static constexpr const char* name = "masked_mean_pool";
  static ag::Tensor forward(ag::FunctionContext& ctx, const ag::Tensor& x, const ag::Tensor& mask) {
    if (x.dim() != 3 || mask.dim() != 2 || mask.size(0) != x.size(0) || mask.size(1) != x.size(1))
      throw std::invalid_argument(
          fmt::format("masked_mean_pool: x {} and mask {}: want [B, T, D] and [B, T]", x.shape(), mask.shape()));
    ag::Tensor count = mask.sum(1, /*keepdim=*/true);
    if (count.min().item() <= 0)  // a row that is all padding
      throw std::invalid_argument("masked_mean_pool: a row of the mask has no 1");
    ag::Tensor w = (mask / count).unsqueeze(2);  // the weights m / n, [B, T, 1]
    ctx.save_for_backward({w});                  // checked unchanged when backward runs
    return (x * w).sum(1);
  }
  // dL/dy [B, D] -> one gradient per tensor argument: x's, and none for the mask.
  static std::vector<ag::Tensor> backward(ag::FunctionContext& ctx, const ag::Tensor& dy) {
    return {dy.unsqueeze(1) * ctx.saved()[0], ag::Tensor()};  // [B, 1, D] * [B, T, 1] -> [B, T, D]
  }
};

ag::Tensor masked_mean_pool(const ag::Tensor& x, const ag::Tensor& mask) { return MaskedMeanPool::apply(x, mask); }

// The mask masked_mean_pool wants: [B, T], 1 where t < lengths[b].
ag::Tensor real_positions(const std::vector<std::int64_t>& lengths, std::int64_t T) {
  std::vector<float> m;
  for (std::int64_t n : lengths)
    for (std::int64_t t = 0; t < T; ++t) m.push_back(t < n ? 1.0f : 0.0f);
  return ag::from_vector(m, {static_cast<std::int64_t>(lengths.size()), T});
}

// ---- The model ------------------------------------------------------------------------------
struct Settings {
  std::int64_t d_model = 32, n_heads = 2, layers = 2;
};

class MaxDigitModel : public ag::nn::Module {
 public:
  MaxDigitModel(const Settings& s, ag::Generator& gen) {
    tokens = register_module("tokens", std::make_shared<ag::nn::Embedding>(kVocab, s.d_model, gen));
    positions =
        register_module("positions", std::make_shared<ag::nn::LearnedPositionalEmbedding>(kMaxLen, s.d_model, gen));
    blocks = register_module("blocks", std::make_shared<ag::nn::ModuleList<ag::nn::SelfAttentionBlock>>());
    ag::nn::BlockOptions block{.d_model = s.d_model, .n_heads = s.n_heads, .d_ff = 4 * s.d_model};
    for (std::int64_t i = 0; i < s.layers; ++i)
      blocks->push_back(std::make_shared<ag::nn::SelfAttentionBlock>(block, gen));
    norm = register_module("norm", std::make_shared<ag::nn::LayerNorm>(s.d_model));
    head = register_module("head", std::make_shared<ag::nn::Linear>(s.d_model, kDigits, true, gen));
  }

  // ids: int64 [B, T]; lengths: how many of each row's T ids are digits (the rest pad).
  // -> scores [B, 10]
  ag::Tensor forward(const ag::Tensor& ids, const std::vector<std::int64_t>& lengths) {
    std::int64_t T = ids.size(1);
    ag::Tensor x = positions->forward(tokens->forward(ids));  // token vectors + position vectors
    // Attention may look at real tokens only: a bool [B, 1, 1, T] mask, broadcast over heads
    // and queries.
    ag::Tensor may_attend = ag::key_padding_mask(lengths, T);
    for (auto& block : *blocks) x = block->forward(x, may_attend);
    return head->forward(masked_mean_pool(norm->forward(x), real_positions(lengths, T)));
  }

  std::shared_ptr<ag::nn::Embedding> tokens;
  std::shared_ptr<ag::nn::LearnedPositionalEmbedding> positions;
  std::shared_ptr<ag::nn::ModuleList<ag::nn::SelfAttentionBlock>> blocks;
  std::shared_ptr<ag::nn::LayerNorm> norm;
  std::shared_ptr<ag::nn::Linear> head;
};

// ---- Data -----------------------------------------------------------------------------------
using Sequence = std::vector<std::int64_t>;

Sequence random_sequence(ag::Generator& gen) {
  Sequence s(static_cast<std::size_t>(kMinLen + static_cast<std::int64_t>(gen.next_u64() % (kMaxLen - kMinLen + 1))));
  for (auto& d : s) d = static_cast<std::int64_t>(gen.next_u64() % kDigits);
  return s;
}

struct Batch {
  ag::Tensor ids, target;
  std::vector<std::int64_t> lengths;
};

Batch make_batch(const std::vector<Sequence>& seqs) {
  auto B = static_cast<std::int64_t>(seqs.size());
  std::vector<std::int64_t> ids(static_cast<std::size_t>(B * kMaxLen), kPad), target, lengths;
  for (std::size_t b = 0; b < seqs.size(); ++b) {
    std::copy(seqs[b].begin(), seqs[b].end(), ids.begin() + static_cast<std::ptrdiff_t>(b * kMaxLen));
    target.push_back(*std::max_element(seqs[b].begin(), seqs[b].end()));
    lengths.push_back(static_cast<std::int64_t>(seqs[b].size()));
  }
  return {ag::from_vector(ids, {B, kMaxLen}), ag::from_vector(target, {B}), lengths};
}

// The fraction of the batch whose largest digit the model names.
double accuracy(MaxDigitModel& model, const Batch& batch) {
  ag::NoGradGuard no_grad;
  ag::Tensor predicted = model.forward(batch.ids, batch.lengths).argmax(1);
  return (predicted == batch.target).mean().item();  // the mean of a bool tensor: the fraction true
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage = "usage: first_transformer [--min-accuracy A]   (A in [0, 1], default 0.99)\n";
  double min_accuracy = 0.99;
  if (argc == 2 && std::string(argv[1]) == "--help") {
    fmt::print("{}", usage);
    return 0;
  }
  if (argc == 3 && std::string(argv[1]) == "--min-accuracy") {
    char* end = nullptr;
    min_accuracy = std::strtod(argv[2], &end);
    if (*end != '\0' || !(min_accuracy >= 0 && min_accuracy <= 1)) {
      fmt::print(stderr, "first_transformer: --min-accuracy {:?} is not a number in [0, 1]\n", argv[2]);
      return 2;
    }
  } else if (argc != 1) {
    fmt::print(stderr, "{}", usage);
    return 2;
  }

  // 1. Check the custom op's backward against finite differences, in float64, on odd shapes
  //    with a row that is mostly padding.
  {
    ag::Generator gen(7);
    ag::Tensor x = ag::randn({3, 5, 4}, gen, ag::kFloat64).requires_grad_();
    ag::Tensor mask = ag::tensor({1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0}, {3, 5}, ag::kFloat64);
    ag::GradcheckResult check =
        ag::gradcheck([&](const std::vector<ag::Tensor>& in) { return masked_mean_pool(in[0], mask); }, {x});
    fmt::print("gradcheck of masked_mean_pool: {}\n", check ? "passed" : check.report);
    if (!check) return 1;
  }

  // 2. The data: a fixed held-out set, never drawn for training.
  ag::Generator data(1);
  std::set<Sequence> held_out_set;
  while (held_out_set.size() < 2000) held_out_set.insert(random_sequence(data));
  std::vector<Sequence> held_out(held_out_set.begin(), held_out_set.end());
  auto training_batch = [&](std::int64_t size) {
    std::vector<Sequence> seqs;
    while (static_cast<std::int64_t>(seqs.size()) < size) {
      Sequence s = random_sequence(data);
      if (!held_out_set.count(s)) seqs.push_back(std::move(s));
    }
    return make_batch(seqs);
  };

  // 3. The model and its optimizer.
  ag::Generator init(0);
  MaxDigitModel model(Settings{}, init);
  fmt::print("model: {} parameters\n", model.parameter_count());
  ag::optim::AdamW opt(model.parameters(), {.lr = 3e-3});  // weight decay 0.01, as in PyTorch

  // 4. Train: the usual loop.
  auto started = std::chrono::steady_clock::now();
  const int steps = 400;
  for (int step = 1; step <= steps; ++step) {
    Batch batch = training_batch(64);
    ag::Tensor loss = ag::cross_entropy(model.forward(batch.ids, batch.lengths), batch.target);
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (step % 100 == 0) fmt::print("step {:4}: loss {:.4f}\n", step, loss.item());
  }

  std::chrono::duration<double> took = std::chrono::steady_clock::now() - started;
  fmt::print("trained {} steps in {:.1f} s\n", steps, took.count());

  // 5. Measure on sequences it never saw.
  double acc = accuracy(model, make_batch(held_out));
  fmt::print("held-out accuracy: {:.2f}% of {} sequences (needed {:.2f}%)\n", 100 * acc, held_out.size(),
             100 * min_accuracy);
  return acc >= min_accuracy ? 0 : 1;
}
