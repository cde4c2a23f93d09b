// Checks io/training_state.cpp: a training state saved after a few steps restores the model,
// the optimizer, the step and every generator exactly, and a state wrong in any one part is
// refused, naming the file and the entry, with nothing changed.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "../test_util.h"

namespace ag {
namespace {

using test::throws_with;

class Scratch {
 public:
  Scratch() : dir_(std::filesystem::temp_directory_path() / fmt::format("attograd_state_{}", ::getpid())) {
    std::filesystem::create_directories(dir_);
  }
  ~Scratch() { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  std::filesystem::path dir_;
};

const std::string kText = "the cat sat on the mat. the dog sat on the log.\n";

// A small run: a GPT with dropout (so it has dropout generators), AdamW over decay groups.
struct TinyRun {
  data::CharTokenizer tokenizer = data::CharTokenizer::from_text(kText);
  nn::GPTConfig config{
      .vocab_size = tokenizer.size(), .block_size = 8, .n_layer = 1, .n_head = 2, .n_embd = 8, .dropout = 0.1};
  Generator init;
  nn::GPT model;
  optim::AdamW opt;
  optim::WarmupCosine schedule{.warmup = 2, .total = 10, .max_lr = 1e-2, .min_lr = 1e-3};
  Generator data_gen;
  data::TextDataset ds{tokenizer.encode(kText), 0.0};

  explicit TinyRun(std::uint64_t seed)
      : init(seed), model(config, init), opt(optim::decay_groups(model, 0.1), {.lr = 1e-2}), data_gen(seed + 1) {}
  io::TrainingState state() { return {model, opt, schedule, data_gen}; }
  void train(std::int64_t steps) {
    for (std::int64_t i = 0; i < steps; ++i) {
      opt.set_lr(schedule.lr_at(opt.steps_taken()));
      auto batch = ds.sample(data::TextDataset::Split::Train, 2, config.block_size, data_gen);
      Tensor loss = model.loss(batch.x, batch.y);
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
  }
};

// Everything a resume restores, as bytes: parameters, optimizer state, generator states.
std::vector<std::string> snapshot(TinyRun& run) {
  std::vector<std::string> out;
  auto bytes = [](const Tensor& t) {
    return std::string(static_cast<const char*>(t.raw_data()),
                       static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype()));
  };
  for (const auto& [name, p] : run.model.named_parameters()) out.push_back(name + bytes(p));
  for (const auto& [name, t] : run.opt.state()) out.push_back(name + bytes(t));
  out.push_back(run.data_gen.state());
  return out;
}

TEST(TrainingState, ResumeRestoresEveryPartExactly) {
  Scratch dir;
  TinyRun a(1), b(2);
  a.train(3);
  io::save_training_state(dir.path("s.safetensors"), a.state(), a.tokenizer, 3);
  io::ResumedTraining resumed = io::load_training_state(dir.path("s.safetensors"), b.state(), b.tokenizer);
  EXPECT_EQ(resumed.step, 3);
  EXPECT_EQ(resumed.schedule.total, 10);
  EXPECT_EQ(resumed.schedule.max_lr, 1e-2);
  EXPECT_EQ(snapshot(b), snapshot(a));
  // Both continue identically, dropout masks included: the dropout generators came along too.
  a.train(2);
  b.train(2);
  EXPECT_EQ(snapshot(b), snapshot(a));
}

// A good state, then the same made wrong in one way each: the run loading it must not change.
TEST(TrainingState, EachBadPartIsRefusedAndNothingChanges) {
  Scratch dir;
  TinyRun a(1);
  a.train(2);
  const std::string good_path = dir.path("good.safetensors");
  io::save_training_state(good_path, a.state(), a.tokenizer, 2);
  const io::TensorFile good = io::load_safetensors(good_path);

  struct Case {
    std::string what;
    std::function<void(io::TensorFile&)> change;
    std::string message;
  };
  auto drop = [](std::string name) {
    return [name](io::TensorFile& f) { std::erase_if(f.tensors, [&](const auto& nt) { return nt.first == name; }); };
  };
  auto rename = [](std::string from, std::string to) {
    return [from, to](io::TensorFile& f) {
      for (auto& [name, _] : f.tensors)
        if (name == from) name = to;
    };
  };
  auto set_meta = [](std::string key, std::string value) {
    return [key, value](io::TensorFile& f) { f.metadata[key] = value; };
  };
  std::vector<Case> cases = {
      {"one moment missing", drop("optim.3.exp_avg_sq"), "tensor 'optim.3.exp_avg_sq' is missing: after step 2"},
      {"both moments of a parameter missing",
       [&](io::TensorFile& f) {
         drop("optim.0.exp_avg")(f);
         drop("optim.0.exp_avg_sq")(f);
       },
       "tensor 'optim.0.exp_avg' is missing"},
      {"every moment missing",
       [](io::TensorFile& f) {
         std::erase_if(f.tensors, [](const auto& nt) { return nt.first.find("exp_avg") != std::string::npos; });
       },
       "tensor 'optim.0.exp_avg' is missing: after step 2 every parameter has its exp_avg"},
      {"leading zero", rename("optim.1.exp_avg", "optim.01.exp_avg"),
       "tensor 'optim.01.exp_avg' is not named INDEX.SLOT"},
      {"plus sign", rename("optim.1.exp_avg", "optim.+1.exp_avg"), "tensor 'optim.+1.exp_avg' is not named INDEX.SLOT"},
      {"letters after the index", rename("optim.1.exp_avg", "optim.1x.exp_avg"), "'optim.1x.exp_avg' is not named"},
      {"no index", rename("optim.1.exp_avg", "optim.exp_avg"), "'optim.exp_avg' is not named INDEX.SLOT"},
      {"index past the parameters", rename("optim.1.exp_avg", "optim.99.exp_avg"),
       "tensor 'optim.99.exp_avg' is for parameter 99, but the model has"},
      {"unknown slot", rename("optim.1.exp_avg", "optim.1.momentum"),
       "tensor 'optim.1.momentum' is no state this optimizer keeps (exp_avg, exp_avg_sq)"},
      {"moment of the wrong shape",
       [](io::TensorFile& f) {
         for (auto& [name, t] : f.tensors)
           if (name == "optim.1.exp_avg") t = zeros({1});
       },
       "state '1.exp_avg' is float32 [1] but parameter 1 is"},
      {"NaN in a moment",
       [](io::TensorFile& f) {
         for (auto& [name, t] : f.tensors)
           if (name == "optim.2.exp_avg_sq") t = full(t.shape(), std::nan(""), t.dtype());
       },
       "tensor 'optim.2.exp_avg_sq' holds nan at element 0"},
      {"negative second moment",
       [](io::TensorFile& f) {
         for (auto& [name, t] : f.tensors)
           if (name == "optim.2.exp_avg_sq") {
             t = t.clone();
             t.mutable_data_ptr<float>()[1] = -0.5f;
           }
       },
       "tensor 'optim.2.exp_avg_sq' holds -0.5 at element 1: a second moment (a mean of squares) is never negative"},
      {"optimizer step disagrees", set_meta("step", "5"),
       "the optimizer has taken 2 steps but the metadata says step 5"},
      {"no optimizer step", drop("optim.step"), "tensor 'optim.step' is missing"},
      {"negative step", set_meta("step", "-1"), "step \"-1\" is not a non-negative integer"},
      {"step with a leading zero", set_meta("step", "02"), "step \"02\" is not a non-negative integer"},
      {"schedule not JSON", set_meta("schedule", "{\"warmup\": 2,"), "bad schedule metadata"},
      {"schedule without total", set_meta("schedule", R"({"warmup": 2, "max_lr": 0.01, "min_lr": 0.001})"),
       "bad schedule metadata: schedule: missing \"total\""},
      {"bad batch generator", set_meta("generator", "not a state"),
       "metadata \"generator\": Generator: cannot restore"},
      {"bad dropout generator", set_meta("generator.blocks.0.mlp.drop", "x"),
       "metadata \"generator.blocks.0.mlp.drop\": Generator"},
      {"dropout generator missing", [](io::TensorFile& f) { f.metadata.erase("generator.blocks.0.mlp.drop"); },
       "no \"generator.blocks.0.mlp.drop\" in its metadata"},
      {"generator of no dropout", set_meta("generator.blocks.7.drop", a.data_gen.state()),
       "metadata \"generator.blocks.7.drop\" names a generator the model does not have"},
      {"model tensor missing", drop("model.transformer.h.0.ln_1.bias"),
       "tensor 'transformer.h.0.ln_1.bias' is missing from the checkpoint"},
      {"NaN in a weight",
       [](io::TensorFile& f) {
         for (auto& [name, t] : f.tensors)
           if (name == "model.transformer.ln_f.weight") t = full(t.shape(), INFINITY, t.dtype());
       },
       "tensor 'transformer.ln_f.weight' holds inf at element 0"},
      {"stray tensor", [](io::TensorFile& f) { f.tensors.emplace_back("extra", zeros({1})); },
       "unexpected tensor 'extra' (neither model. nor optim.)"},
      {"another format", set_meta("format", "attograd-gpt"),
       "not a training checkpoint (format \"attograd-gpt\"); a training state's format is \"attograd-gpt-training\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    io::TensorFile bad = good;
    c.change(bad);
    std::string path = dir.path("bad.safetensors");
    io::save_safetensors(path, bad.tensors, bad.metadata);
    TinyRun b(5);
    b.train(1);  // a run with state of its own, which must survive the failed resume
    auto before = snapshot(b);
    EXPECT_TRUE(
        throws_with<std::invalid_argument>([&] { io::load_training_state(path, b.state(), b.tokenizer); }, c.message));
    EXPECT_TRUE(
        throws_with<std::invalid_argument>([&] { io::load_training_state(path, b.state(), b.tokenizer); }, path));
    EXPECT_TRUE(snapshot(b) == before) << "a failed resume changed the run";
  }
}

TEST(TrainingState, NonFiniteWeightsLoadWhenAllowed) {
  Scratch dir;
  TinyRun a(1), b(2);
  a.train(1);
  Tensor w = a.model.named_parameters().front().second;
  w.mutable_data_ptr<float>()[0] = std::nanf("");
  io::save_training_state(dir.path("s.safetensors"), a.state(), a.tokenizer, 1);
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { io::load_training_state(dir.path("s.safetensors"), b.state(), b.tokenizer); }, "holds nan at element 0"));
  io::load_training_state(dir.path("s.safetensors"), b.state(), b.tokenizer, {.allow_non_finite = true});
  EXPECT_TRUE(std::isnan(b.model.named_parameters().front().second.data_ptr<float>()[0]));
}

TEST(TrainingState, AtStepZeroThereAreNoMoments) {
  Scratch dir;
  TinyRun a(1), b(2);
  io::save_training_state(dir.path("s.safetensors"), a.state(), a.tokenizer, 0);
  EXPECT_EQ(io::load_training_state(dir.path("s.safetensors"), b.state(), b.tokenizer).step, 0);
  EXPECT_EQ(b.opt.state().size(), 1u);  // "step" alone
}

// The program's options come back as written, quotes, backslashes and line breaks included; a
// file without them (as every file before they were recorded) has none; a malformed entry is
// refused, naming the file and the entry.
TEST(TrainingState, OptionsComeBackAsWritten) {
  Scratch dir;
  TinyRun a(1);
  io::TrainingState state = a.state();
  state.options = {{"batch", "8"}, {"weight-decay", "0.05"}, {"prompt", "say \"hi\"\\\n\u4e2d"}};
  io::save_training_state(dir.path("s.safetensors"), state, a.tokenizer, 0);
  io::TrainedModel read = io::read_training_model(dir.path("s.safetensors"));
  EXPECT_EQ(read.options, state.options);
  EXPECT_EQ(read.schedule.total, 10);
  EXPECT_EQ(read.schedule.warmup, 2);
  EXPECT_EQ(read.schedule.max_lr, 1e-2);
  EXPECT_EQ(read.schedule.min_lr, 1e-3);
  EXPECT_EQ(read.vocab, a.tokenizer.tokens());

  io::save_training_state(dir.path("none.safetensors"), a.state(), a.tokenizer, 0);
  EXPECT_EQ(io::load_safetensors(dir.path("none.safetensors")).metadata.count("options"), 0u);
  EXPECT_TRUE(io::read_training_model(dir.path("none.safetensors")).options.empty());

  io::TensorFile file = io::load_safetensors(dir.path("s.safetensors"));
  for (auto [text, message] : {std::pair{"[1, 2]", "options must be an object, got an array"},
                               std::pair{R"({"batch": 8})", "options.batch must be a string, got a number"},
                               std::pair{R"({"batch": "8")", "bad options metadata"}}) {
    SCOPED_TRACE(text);
    file.metadata["options"] = text;
    std::string path = dir.path("bad.safetensors");
    io::save_safetensors(path, file.tensors, file.metadata);
    EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::read_training_model(path); }, message));
    EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::read_training_model(path); }, path));
  }
}

}  // namespace
}  // namespace ag
