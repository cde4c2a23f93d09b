// Coreference, the chapter's own example of what attention resolves (§1, §3.3): which noun does
// "it" name? Here the answer is fixed by a cue word that comes after the pronoun, and the cue
// alone does not decide it: the verb does too (a Winograd-style grammar).
//
//   the N1 did not fit in the N2 because it was too big        it = N1
//   the N1 did not fit in the N2 because it was too small      it = N2
//   the N1 did not hold the N2 because it was too small        it = N1
//   the N1 did not hold the N2 because it was too big          it = N2
//   (and "could not lift" / "could not be lifted by", with weak and heavy)
//
// N1 and N2 are two different nouns of 16. The pairs whose two nouns have the same index mod 5,
// 36 of the 240 ordered pairs (15 %), both orders of each, never appear in training, and the
// model is scored on those. A small Transformer encoder (no causal
// mask: the cue comes after the pronoun) predicts, at the pronoun, the noun it names. Chance is
// 50 %: a model that knows "it" is one of the two nouns but not which. Ignoring the verb and
// reading the cue word alone also scores 50 %, since each cue names N1 in one verb's sentences
// and N2 in the other's.
//
// Two models without attention train beside the encoder on the same batches: an MLP that reads
// the whole sentence, each word in its place, and a bag of words, which sees every word but not
// where it is. The bag of words cannot pass 50 %: each test sentence's bag is also that of the
// same sentence with the two nouns swapped, whose answer is the other noun.
//
// Then, for each head of each layer, how much of the pronoun's attention goes to the right noun
// and how much to the other one, and what happens to the accuracy when that head's output is
// zeroed (the other heads untouched). The first is what a picture of attention shows; the second
// is whether the model uses it (experiments importance: a weight is not an importance).
#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>

#include "../common/plot.h"
#include "../common/progress.h"
#include "experiments.h"

namespace experiments {

using ag::Tensor;

namespace {

constexpr std::int64_t kWidth = 64, kHeads = 4, kLayers = 2, kIgnore = -1;

const std::vector<std::string> kNouns{"trophy", "suitcase", "box",  "bag",   "ball", "crate",  "table",  "chair",
                                      "lamp",   "bottle",   "drum", "piano", "sofa", "barrel", "basket", "statue"};

// One template: the words between the two nouns and after the second, and which cue names N1.
struct Template {
  std::vector<std::string> middle;  // after "the N1", before "the N2"
  std::string cue_n1, cue_n2;       // the cue that makes "it" name N1, and the one for N2
};
const std::vector<Template> kTemplates{
    {{"did", "not", "fit", "in"}, "big", "small"},
    {{"did", "not", "hold"}, "small", "big"},
    {{"could", "not", "lift"}, "weak", "heavy"},
    {{"could", "not", "be", "lifted", "by"}, "heavy", "weak"},
};

// The vocabulary: padding first, then every word the templates and nouns use.
struct Vocabulary {
  std::vector<std::string> words{"<pad>"};
  std::map<std::string, std::int64_t> ids{{"<pad>", 0}};
  std::int64_t id(const std::string& w) {
    auto [it, added] = ids.emplace(w, static_cast<std::int64_t>(words.size()));
    if (added) words.push_back(w);
    return it->second;
  }
  Vocabulary() {
    for (const std::string& n : kNouns) id(n);
    for (const Template& t : kTemplates) {
      for (const std::string& w : t.middle) id(w);
      id(t.cue_n1);
      id(t.cue_n2);
    }
    for (const char* w : {"the", "because", "it", "was", "too"}) id(w);
  }
};

struct Sentence {
  std::vector<std::int64_t> ids;
  std::int64_t pronoun = 0, n1_at = 1, n2_at = 0;  // positions
  std::int64_t answer = 0;                         // the noun "it" names (a word id)
  std::int64_t other = 0;                          // the other noun
};

Sentence make_sentence(Vocabulary& v, std::size_t n1, std::size_t n2, const Template& t, bool names_n1) {
  Sentence s;
  auto add = [&](const std::string& w) { s.ids.push_back(v.id(w)); };
  add("the");
  add(kNouns[n1]);
  for (const std::string& w : t.middle) add(w);
  add("the");
  s.n2_at = static_cast<std::int64_t>(s.ids.size());
  add(kNouns[n2]);
  add("because");
  s.pronoun = static_cast<std::int64_t>(s.ids.size());
  add("it");
  add("was");
  add("too");
  add(names_n1 ? t.cue_n1 : t.cue_n2);
  s.answer = v.id(kNouns[names_n1 ? n1 : n2]);
  s.other = v.id(kNouns[names_n1 ? n2 : n1]);
  return s;
}

// Held out, never in training and always in the test: the pairs with n1 = n2 mod 5 (symmetric,
// so a pair's other order is held out too).
bool held_out_pair(std::size_t n1, std::size_t n2) { return n1 % 5 == n2 % 5; }

// Every held-out sentence: each held-out pair, template and cue.
std::vector<Sentence> test_set(Vocabulary& v) {
  std::vector<Sentence> out;
  for (std::size_t a = 0; a < kNouns.size(); ++a)
    for (std::size_t b = 0; b < kNouns.size(); ++b)
      if (a != b && held_out_pair(a, b))
        for (const Template& t : kTemplates)
          for (bool names_n1 : {true, false}) out.push_back(make_sentence(v, a, b, t, names_n1));
  return out;
}

Sentence random_training_sentence(Vocabulary& v, ag::Generator& gen) {
  for (;;) {
    auto a = static_cast<std::size_t>(gen.integer(0, std::ssize(kNouns)));
    auto b = static_cast<std::size_t>(gen.integer(0, std::ssize(kNouns)));
    if (a == b || held_out_pair(a, b)) continue;
    const Template& t = kTemplates[static_cast<std::size_t>(gen.integer(0, std::ssize(kTemplates)))];
    return make_sentence(v, a, b, t, gen.integer(0, 2) == 0);
  }
}

struct Batch {
  Tensor ids, mask, targets;  // [B, T] int64, [B, 1, 1, T] bool (real tokens), [B, T] (kIgnore but at "it")
};

Batch make_batch(const std::vector<Sentence>& sentences) {
  std::int64_t t = 0, b = std::ssize(sentences);
  for (const Sentence& s : sentences) t = std::max(t, std::ssize(s.ids));
  std::vector<std::int64_t> ids(static_cast<std::size_t>(b * t), 0), targets(ids.size(), kIgnore), lengths;
  for (std::int64_t i = 0; i < b; ++i) {
    const Sentence& s = sentences[static_cast<std::size_t>(i)];
    std::copy(s.ids.begin(), s.ids.end(), ids.begin() + i * t);
    targets[static_cast<std::size_t>(i * t + s.pronoun)] = s.answer;
    lengths.push_back(std::ssize(s.ids));
  }
  return {ag::from_vector(ids, {b, t}), ag::key_padding_mask(lengths, t), ag::from_vector(targets, {b, t})};
}

// Embeddings plus learned positions, two pre-LN encoder blocks, a final LayerNorm and a linear
// head over the vocabulary.
class Encoder : public ag::nn::Module {
 public:
  Encoder(std::int64_t vocab, std::int64_t max_len, ag::Generator& gen) {
    embed = register_module("embed", std::make_shared<ag::nn::Embedding>(vocab, kWidth, gen));
    positions = register_module("positions", std::make_shared<ag::nn::Embedding>(max_len, kWidth, gen));
    blocks = register_module("blocks", std::make_shared<ag::nn::ModuleList<ag::nn::SelfAttentionBlock>>());
    for (std::int64_t i = 0; i < kLayers; ++i)
      blocks->push_back(std::make_shared<ag::nn::SelfAttentionBlock>(
          ag::nn::BlockOptions{.d_model = kWidth, .n_heads = kHeads, .d_ff = 4 * kWidth}, gen));
    norm = register_module("norm", std::make_shared<ag::nn::LayerNorm>(kWidth));
    head = register_module("head", std::make_shared<ag::nn::Linear>(kWidth, vocab, true, gen));
  }

  // Logits [B, T, vocab]. `weights` receives each layer's [B, H, T, T]. `zeroed`, when given as
  // (layer, heads), zeroes those heads' outputs before the block's output projection; the block
  // is then written out here (pre-LN: x + attn(ln_1 x), then + mlp(ln_2 .)), as the module
  // computes it. No heads zeroes nothing: the written-out block alone, to check it against the
  // module.
  Tensor forward(const Batch& b, std::vector<Tensor>* weights = nullptr,
                 const std::optional<std::pair<std::int64_t, std::vector<std::int64_t>>>& zeroed = std::nullopt) {
    const std::int64_t n = b.ids.size(0), t = b.ids.size(1);
    Tensor x = embed->forward(b.ids) + positions->forward(ag::arange(0, t, 1, ag::kInt64)).unsqueeze(0);
    std::int64_t layer = 0;
    for (auto& block : *blocks) {
      Tensor w;
      if (!zeroed || zeroed->first != layer) {
        x = block->forward(x, b.mask, false, weights ? &w : nullptr);
      } else {
        Tensor h = block->ln_1->forward(x);
        auto [q, k, v] = block->attn->project_heads(h, h, {});  // [B, T, H, d] each
        ag::AttentionResult r = ag::scaled_dot_product_attention_bthd(q, k, v, b.mask, false, weights != nullptr);
        std::vector<double> keep(kHeads, 1.0);
        for (std::int64_t z : zeroed->second) keep[static_cast<std::size_t>(z)] = 0.0;
        Tensor heads = r.output * ag::tensor(keep, {1, 1, kHeads, 1});
        x = x + block->attn->out_proj->forward(heads.reshape({n, t, kWidth}));
        x = x + block->mlp->forward(block->ln_2->forward(x));
        w = r.weights;
      }
      if (weights) weights->push_back(w);
      ++layer;
    }
    return head->forward(norm->forward(x));
  }

  std::shared_ptr<ag::nn::Embedding> embed, positions;
  std::shared_ptr<ag::nn::ModuleList<ag::nn::SelfAttentionBlock>> blocks;
  std::shared_ptr<ag::nn::LayerNorm> norm;
  std::shared_ptr<ag::nn::Linear> head;
};

// The baselines without attention predict the noun "it" names once per sentence, from the
// sentence's ids [B, L] padded to L = the longest sentence.
Tensor padded_ids(const std::vector<Sentence>& sentences, std::int64_t length) {
  std::vector<std::int64_t> ids(sentences.size() * static_cast<std::size_t>(length), 0);
  for (std::size_t i = 0; i < sentences.size(); ++i)
    std::copy(sentences[i].ids.begin(), sentences[i].ids.end(), ids.begin() + static_cast<std::ptrdiff_t>(i) * length);
  return ag::from_vector(ids, {std::ssize(sentences), length});
}
// The noun each sentence's "it" names: [B] word ids.
Tensor answers(const std::vector<Sentence>& sentences) {
  std::vector<std::int64_t> out;
  for (const Sentence& s : sentences) out.push_back(s.answer);
  return ag::from_vector(out, {std::ssize(sentences)});
}

// ids [B, L] -> logits [B, vocab] from the L embeddings side by side, through one tanh layer: each
// word in its place, mixed with weights fixed per place (the window MLP of experiments.h with the
// whole sentence as its window, written with one embedding lookup).
class SentenceMLP : public ag::nn::Module {
 public:
  SentenceMLP(std::int64_t vocab, std::int64_t length, std::int64_t hidden_size, ag::Generator& gen) {
    emb = register_module("emb", std::make_shared<ag::nn::Embedding>(vocab, kWidth, gen));
    hidden = register_module("hidden", std::make_shared<ag::nn::Linear>(length * kWidth, hidden_size, true, gen));
    out = register_module("out", std::make_shared<ag::nn::Linear>(hidden_size, vocab, true, gen));
  }
  Tensor forward(const Tensor& ids) const {
    return out->forward(hidden->forward(emb->forward(ids).reshape({ids.size(0), -1})).tanh());
  }
  std::shared_ptr<ag::nn::Embedding> emb;
  std::shared_ptr<ag::nn::Linear> hidden, out;
};

// ids [B, L] -> logits [B, vocab] from the mean of the L embeddings, through one tanh layer: it
// knows every word (and, from the padding, the length) but not where any of them is.
class BagOfWords : public ag::nn::Module {
 public:
  BagOfWords(std::int64_t vocab, std::int64_t hidden_size, ag::Generator& gen) {
    emb = register_module("emb", std::make_shared<ag::nn::Embedding>(vocab, kWidth, gen));
    hidden = register_module("hidden", std::make_shared<ag::nn::Linear>(kWidth, hidden_size, true, gen));
    out = register_module("out", std::make_shared<ag::nn::Linear>(hidden_size, vocab, true, gen));
  }
  Tensor forward(const Tensor& ids) const { return out->forward(hidden->forward(emb->forward(ids).mean(1)).tanh()); }
  std::shared_ptr<ag::nn::Embedding> emb;
  std::shared_ptr<ag::nn::Linear> hidden, out;
};

// The share of `sentences` whose pronoun the model resolves right, from the logits [B, T, V].
double accuracy(const std::vector<Sentence>& sentences, const Tensor& logits) {
  Tensor predicted = ag::argmax(logits, -1);  // [B, T]
  std::int64_t t = predicted.size(1), right = 0;
  const auto* p = predicted.data_ptr<std::int64_t>();
  for (std::size_t i = 0; i < sentences.size(); ++i)
    right += p[static_cast<std::int64_t>(i) * t + sentences[i].pronoun] == sentences[i].answer;
  return static_cast<double>(right) / static_cast<double>(sentences.size());
}

}  // namespace

int coreference(const Options& o) {
  Vocabulary vocab;
  const std::vector<Sentence> test = test_set(vocab);
  const Batch test_batch = make_batch(test);
  const std::int64_t max_len = test_batch.ids.size(1);
  fmt::print(
      "Which noun does \"it\" name? {} templates x 2 cue words, {} nouns; {} held-out sentences whose noun pairs\n"
      "never appear in training. A {}-layer encoder with {} heads of width {}, {} of {} sentences.\n"
      "Chance: 50 % (one of the two nouns); the cue word alone, without the verb, also scores 50 %.\n\n",
      kTemplates.size(), kNouns.size(), test.size(), kLayers, kHeads, kWidth, ag::examples::plural(o.steps, "step"),
      4 * o.batch);

  ag::Generator init(o.seed), data(o.seed + 1);
  const auto vocab_size = static_cast<std::int64_t>(vocab.words.size());
  Encoder model(vocab_size, max_len, init);
  // The baselines without attention train beside it, on the same batches.
  ag::Generator mlp_init(o.seed), bag_init(o.seed);
  SentenceMLP mlp(vocab_size, max_len, 2 * kWidth, mlp_init);
  BagOfWords bag(vocab_size, 2 * kWidth, bag_init);
  ag::optim::AdamW opt(ag::optim::decay_groups(model, 0.01), {.lr = 3e-3}),
      mlp_opt(ag::optim::decay_groups(mlp, 0.01), {.lr = 3e-3}),
      bag_opt(ag::optim::decay_groups(bag, 0.01), {.lr = 3e-3});
  ag::optim::WarmupCosine schedule{
      .warmup = std::min<std::int64_t>(50, o.steps), .total = o.steps, .max_lr = 3e-3, .min_lr = 3e-4};
  auto train_step = [](ag::nn::Module& m, ag::optim::AdamW& optimizer, double lr,
                       const std::function<Tensor()>& loss_of) {
    optimizer.set_lr(lr);
    optimizer.zero_grad();
    Tensor loss = loss_of();
    loss.backward();
    ag::optim::clip_grad_norm(m.parameters(), 1.0);
    optimizer.step();
    return loss.item();
  };
  ag::examples::ProgressBar bar(o.steps);
  model.train();
  for (std::int64_t step = 0; step < o.steps; ++step) {
    std::vector<Sentence> sentences;
    for (std::int64_t i = 0; i < 4 * o.batch; ++i) sentences.push_back(random_training_sentence(vocab, data));
    Batch b = make_batch(sentences);
    const double lr = schedule.lr_at(step);
    double loss = train_step(model, opt, lr, [&] { return ag::cross_entropy(model.forward(b), b.targets, kIgnore); });
    Tensor ids = padded_ids(sentences, max_len), targets = answers(sentences);
    train_step(mlp, mlp_opt, lr, [&] { return ag::cross_entropy(mlp.forward(ids), targets); });
    train_step(bag, bag_opt, lr, [&] { return ag::cross_entropy(bag.forward(ids), targets); });
    bar.update(step + 1, 0, fmt::format("loss {:.4f}", loss));
  }
  bar.finish();
  model.eval();

  ag::NoGradGuard no_grad;
  std::vector<Tensor> weights;
  Tensor logits = model.forward(test_batch, &weights);
  const double acc = accuracy(test, logits);
  // The written-out block must compute what the module does: with no head zeroed, the same logits.
  double written_out_gap = 0;
  const std::vector<float> module_logits = logits.to_vector<float>();
  for (std::int64_t layer = 0; layer < kLayers; ++layer) {
    std::vector<float> mine =
        model.forward(test_batch, nullptr, std::pair{layer, std::vector<std::int64_t>{}}).to_vector<float>();
    for (std::size_t i = 0; i < mine.size(); ++i)
      written_out_gap = std::max(written_out_gap, std::abs(static_cast<double>(mine[i] - module_logits[i])));
  }
  // The baselines' answer is their argmax over the vocabulary, as the encoder's is at "it".
  auto baseline_accuracy = [&](const Tensor& logits) {  // [N, V]
    std::vector<std::int64_t> predicted = ag::argmax(logits, -1).to_vector<std::int64_t>();
    std::int64_t right = 0;
    for (std::size_t i = 0; i < test.size(); ++i) right += predicted[i] == test[i].answer;
    return static_cast<double>(right) / static_cast<double>(test.size());
  };
  const Tensor test_ids = padded_ids(test, max_len);
  const double mlp_acc = baseline_accuracy(mlp.forward(test_ids)), bag_acc = baseline_accuracy(bag.forward(test_ids));
  fmt::print("\nHeld-out accuracy ({} sentences; chance 50 %):\n", test.size());
  print_table({"model", "parameters", "held-out accuracy"},
              {{"encoder: 2 layers of attention", fmt::format("{}", model.parameter_count()),
                fmt::format("{:.1f} %", 100 * acc)},
               {"MLP over the sentence, each word in its place", fmt::format("{}", mlp.parameter_count()),
                fmt::format("{:.1f} %", 100 * mlp_acc)},
               {"bag of words: the embeddings' mean, then an MLP", fmt::format("{}", bag.parameter_count()),
                fmt::format("{:.1f} %", 100 * bag_acc)}});
  fmt::print("\n");

  // Per head: the pronoun's weight on the right noun and on the other, the same weight by position
  // (on N1, on N2: a head can look at one place whatever the answer, which right against wrong
  // alone would hide), and the accuracy without it.
  struct Head {
    std::int64_t layer, head;
    double on_answer = 0, on_other = 0, on_n1 = 0, on_n2 = 0, accuracy_without = 0;
  };
  std::vector<Head> heads;
  const std::int64_t t = test_batch.ids.size(1);
  for (std::int64_t layer = 0; layer < kLayers; ++layer) {
    std::vector<float> w = weights[static_cast<std::size_t>(layer)].to_vector<float>();  // [N, H, T, T]
    for (std::int64_t h = 0; h < kHeads; ++h) {
      Head r{layer, h};
      for (std::size_t i = 0; i < test.size(); ++i) {
        const Sentence& s = test[i];
        auto at = [&](std::int64_t key) {
          return static_cast<double>(
              w[static_cast<std::size_t>(((static_cast<std::int64_t>(i) * kHeads + h) * t + s.pronoun) * t + key)]);
        };
        bool answer_is_n1 = s.answer == s.ids[static_cast<std::size_t>(s.n1_at)];
        r.on_answer += at(answer_is_n1 ? s.n1_at : s.n2_at);
        r.on_other += at(answer_is_n1 ? s.n2_at : s.n1_at);
        r.on_n1 += at(s.n1_at);
        r.on_n2 += at(s.n2_at);
      }
      for (double* mean : {&r.on_answer, &r.on_other, &r.on_n1, &r.on_n2}) *mean /= static_cast<double>(test.size());
      r.accuracy_without = accuracy(test, model.forward(test_batch, nullptr, std::pair{layer, std::vector{h}}));
      heads.push_back(r);
    }
  }
  std::vector<std::vector<std::string>> rows;
  for (const Head& h : heads)
    rows.push_back({fmt::format("{}", h.layer), fmt::format("{}", h.head), fmt::format("{:.3f}", h.on_answer),
                    fmt::format("{:.3f}", h.on_other), fmt::format("{:.3f}", h.on_n1), fmt::format("{:.3f}", h.on_n2),
                    fmt::format("{:.1f} %", 100 * h.accuracy_without)});
  std::vector<double> layer_zeroed;  // the accuracy with every head of a layer zeroed
  for (std::int64_t layer = 0; layer < kLayers; ++layer) {
    std::vector<std::int64_t> all(kHeads);
    std::iota(all.begin(), all.end(), 0);
    layer_zeroed.push_back(accuracy(test, model.forward(test_batch, nullptr, std::pair{layer, all})));
    rows.push_back(
        {fmt::format("{}", layer), "all", "", "", "", "", fmt::format("{:.1f} %", 100 * layer_zeroed.back())});
  }
  fmt::print("The pronoun's attention, mean over the held-out sentences, and the accuracy with heads zeroed:\n");
  print_table({"layer", "head", "on the right noun", "on the other noun", "on the first noun", "on the second noun",
               "accuracy without it"},
              rows);

  // The head whose picture looks most like the answer, and the one the model can least do without.
  const Head& clearest = *std::max_element(heads.begin(), heads.end(), [](const Head& a, const Head& b) {
    return a.on_answer - a.on_other < b.on_answer - b.on_other;
  });
  const Head& needed = *std::min_element(
      heads.begin(), heads.end(), [](const Head& a, const Head& b) { return a.accuracy_without < b.accuracy_without; });
  fmt::print(
      "\nClearest picture: layer {} head {}, {:.3f} of the pronoun's attention on the right noun and {:.3f} on the\n"
      "other; zeroed alone, the accuracy is {:.1f} %. Most needed alone: layer {} head {} ({:.1f} % without it,\n"
      "{:.3f} on the right noun and {:.3f} on the other).\n",
      clearest.layer, clearest.head, clearest.on_answer, clearest.on_other, 100 * clearest.accuracy_without,
      needed.layer, needed.head, 100 * needed.accuracy_without, needed.on_answer, needed.on_other);

  // The rule that reads the cue word and not the verb: "big" and "weak" name N1 in one template
  // each, so it is right on exactly half of the test.
  std::int64_t cue_rule_right = 0;
  for (const Sentence& sentence : test) {
    const std::string& cue = vocab.words[static_cast<std::size_t>(sentence.ids.back())];
    bool says_n1 = cue == kTemplates[0].cue_n1 || cue == kTemplates[2].cue_n1;
    cue_rule_right += (sentence.answer == sentence.ids[static_cast<std::size_t>(sentence.n1_at)]) == says_n1;
  }
  const double cue_rule = static_cast<double>(cue_rule_right) / static_cast<double>(test.size());
  fmt::print("The cue word without the verb (big and weak name N1): {:.1f} % of the test.\n", 100 * cue_rule);

  // The two heads' rows for one held-out pair in the first template, with each of its cues.
  ag::plot::Heatmap map{.title = "where \"it\" looks: the clearest head and the most needed one",
                        .row_title = "layer L, head H: cue word",
                        .col_title = "the sentence (cue: big / small)",
                        .value_title = "attention weight of \"it\""};
  std::vector<Sentence> pair;
  for (const Sentence& sentence : test)
    if (pair.size() < 2 && sentence.ids.size() == test.front().ids.size() && sentence.ids[1] == test.front().ids[1] &&
        sentence.n2_at == test.front().n2_at &&
        sentence.ids[static_cast<std::size_t>(sentence.n2_at)] ==
            test.front().ids[static_cast<std::size_t>(test.front().n2_at)])
      pair.push_back(sentence);
  std::vector<Tensor> pair_weights;
  model.forward(make_batch(pair), &pair_weights);
  for (const Head* h : {&clearest, &needed})
    for (std::size_t i = 0; i < pair.size(); ++i) {
      Tensor w = pair_weights[static_cast<std::size_t>(h->layer)];  // [2, H, T, T]
      std::vector<double> row;
      for (std::int64_t key = 0; key < std::ssize(pair[i].ids); ++key)
        row.push_back(static_cast<double>(w.at<float>({static_cast<std::int64_t>(i), h->head, pair[i].pronoun, key})));
      map.values.push_back(row);
      map.row_labels.push_back(
          fmt::format("L{}H{}:{}", h->layer, h->head, vocab.words[static_cast<std::size_t>(pair[i].ids.back())]));
    }
  for (std::size_t k = 0; k < pair[0].ids.size(); ++k)
    map.col_labels.push_back(k + 1 == pair[0].ids.size() ? "big/small"
                                                         : vocab.words[static_cast<std::size_t>(pair[0].ids[k])]);
  std::filesystem::create_directories(o.out);
  std::string png = (std::filesystem::path(o.out) / "coreference.png").string();
  ag::plot::heatmap_png(png, map);
  fmt::print("wrote {}\n\n", png);

  if (o.check) {
    expect(written_out_gap < 1e-4,
           fmt::format("the written-out blocks give the module's logits (largest difference {:.1e})", written_out_gap));
    expect(cue_rule == 0.5, "the cue word without the verb is right on exactly half of the test");
    expect(acc > 0.9, "the encoder resolves more than 90 % of the held-out pronouns (chance 50 %)");
    expect(
        clearest.on_answer > 0.5 && clearest.on_answer > 5 * clearest.on_other,
        "one head puts more than half of the pronoun's attention on the right noun, 5 times its weight on the other");
    expect(*std::min_element(layer_zeroed.begin(), layer_zeroed.end()) < acc - 0.2,
           "zeroing every head of one layer costs more than 20 points of accuracy");
    expect(clearest.accuracy_without > needed.accuracy_without + 0.05,
           "the head with the clearest picture is not the one the model needs most: zeroed alone it costs 5 points "
           "less than the most needed head");
    expect(bag_acc < 0.55, "the bag of words resolves at most about half of the test: it cannot tell N1 from N2");
    expect(acc > bag_acc + 0.3, "the encoder resolves over 30 points more of the test than the bag of words");
    // Not attention's doing alone: in this grammar each noun sits at one of a few fixed places.
    expect(mlp_acc > 0.9, "the MLP over the whole sentence, with no attention, also resolves more than 90 %");
  }
  return exit_code();
}

}  // namespace experiments
