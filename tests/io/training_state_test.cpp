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

// ---- save_checkpoint / load_checkpoint: one's own module, its optimizer, its batch order ----

struct OwnRun {
  Generator init;
  std::shared_ptr<nn::Sequential> model;
  optim::AdamW opt;
  data::DataLoader<2> loader;
  OwnRun(std::uint64_t seed, std::int64_t batch_size = 4)
      : init(seed),
        model(std::make_shared<nn::Sequential>(
            std::make_shared<nn::Linear>(5, 7, true, init), std::make_shared<nn::Dropout>(0.3, init),
            std::make_shared<nn::Linear>(7, 3, true, init))),
        opt(model->parameters(), {.lr = 1e-2}),
        loader(data_set(), {.batch_size = batch_size, .shuffle = true, .seed = seed}) {
    model->to(kFloat64);
  }
  static data::TensorDataset<2> data_set() {
    Generator gen(5);
    return data::TensorDataset(randn({18, 5}, gen, kFloat64), randint(3, {18}, gen));
  }
  double step() {
    auto [x, y] = loader.next();
    Tensor loss = cross_entropy(model->forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss.item();
  }
  Generator& dropout() { return std::dynamic_pointer_cast<nn::Dropout>(model->named_children()[1].second)->generator(); }
  // Everything a load may change, as text and values, to see that a refused one changed nothing.
  std::vector<double> snapshot() {
    std::vector<double> all;
    for (const Tensor& p : model->parameters())
      for (double v : p.to_vector<double>()) all.push_back(v);
    for (auto& [name, t] : opt.state())
      for (double v : t.to(kFloat64).to_vector<double>()) all.push_back(v);
    return all;
  }
  std::string positions() { return loader.state() + " | " + dropout().state(); }
};

TEST(Checkpoint, OwnModuleOptimizerAndBatchOrderResumeExactly) {
  Scratch scratch;
  OwnRun unbroken(1);
  for (int i = 0; i < 6; ++i) unbroken.step();  // past an epoch's end: 18 examples are 5 batches of 4
  ASSERT_GT(unbroken.opt.state().size(), 1u);
  io::save_checkpoint(scratch.path("own.safetensors"), *unbroken.model, unbroken.opt, &unbroken.loader.order(),
                      {{"note", "six steps"}});
  OwnRun resumed(2);  // another init, another seed: all of it comes from the file
  io::Metadata meta =
      io::load_checkpoint(scratch.path("own.safetensors"), *resumed.model, resumed.opt, &resumed.loader.order());
  EXPECT_EQ(meta.at("note"), "six steps");
  EXPECT_EQ(meta.at("format"), "attograd-checkpoint");
  EXPECT_EQ(resumed.positions(), unbroken.positions());
  for (int i = 0; i < 7; ++i) EXPECT_EQ(resumed.step(), unbroken.step()) << "step " << i;  // bit for bit
  EXPECT_EQ(resumed.snapshot(), unbroken.snapshot());
}

TEST(Checkpoint, EachBadPartIsRefusedAndNothingChanges) {
  Scratch scratch;
  OwnRun saved(1);
  for (int i = 0; i < 3; ++i) saved.step();
  const std::string good = scratch.path("good.safetensors");
  io::save_checkpoint(good, *saved.model, saved.opt, &saved.loader.order());

  OwnRun target(2);
  target.step();
  const std::vector<double> before = target.snapshot();
  const std::string positions = target.positions();
  auto refused = [&](const std::function<void()>& load, const std::string& message) {
    ::testing::AssertionResult r = throws_with<std::invalid_argument>(load, message);
    if (r && target.snapshot() != before) return ::testing::AssertionFailure() << "the values changed";
    if (r && target.positions() != positions) return ::testing::AssertionFailure() << "the positions changed";
    return r;
  };
  auto load = [&](const std::string& path, data::BatchOrder* order) {
    return [&, path, order] { io::load_checkpoint(path, *target.model, target.opt, order); };
  };
  io::TensorFile file = io::load_safetensors(good);
  auto rewrite = [&](const std::string& name, const std::function<void(io::TensorFile&)>& change) {
    io::TensorFile copy = file;
    change(copy);
    io::save_safetensors(scratch.path(name), copy.tensors, copy.metadata);
    return scratch.path(name);
  };

  // The batch order: of another batch size, bad text, missing, or not asked for.
  OwnRun other_batches(3, 5);
  other_batches.step();
  const std::string five = scratch.path("five.safetensors");
  io::save_checkpoint(five, *other_batches.model, other_batches.opt, &other_batches.loader.order());
  EXPECT_TRUE(refused(load(five, &target.loader.order()),
                      "metadata \"batch_order\": DataLoader::set_state: the state is of a loader with batch_size 5"));
  EXPECT_TRUE(refused(load(rewrite("text.safetensors", [](io::TensorFile& f) { f.metadata["batch_order"] = "x"; }),
                           &target.loader.order()),
                      "metadata \"batch_order\": DataLoader::set_state: the text does not start with"));
  EXPECT_TRUE(refused(load(rewrite("none.safetensors", [](io::TensorFile& f) { f.metadata.erase("batch_order"); }),
                           &target.loader.order()),
                      "holds no batch order"));
  EXPECT_TRUE(refused(load(good, nullptr), "holds a batch order (metadata \"batch_order\")"));
  // The Dropout's generator.
  EXPECT_TRUE(refused(load(rewrite("gen.safetensors", [](io::TensorFile& f) { f.metadata["generator.1"] = "0 0"; }),
                           &target.loader.order()),
                      "metadata \"generator.1\""));
  EXPECT_TRUE(
      refused(load(rewrite("extra_gen.safetensors", [](io::TensorFile& f) { f.metadata["generator.5"] = "1"; }),
                   &target.loader.order()),
              "metadata \"generator.5\" names a Dropout the module does not have"));
  // The model's part and the optimizer's.
  EXPECT_TRUE(refused(load(rewrite("shape.safetensors",
                                   [](io::TensorFile& f) {
                                     for (auto& [name, t] : f.tensors)
                                       if (name == "model.0.bias") t = zeros({6}, kFloat64);
                                   }),
                           &target.loader.order()),
                      "tensor '0.bias' has shape [6] in the file, the module needs [7]"));
  EXPECT_TRUE(refused(load(rewrite("moment.safetensors",
                                   [](io::TensorFile& f) {
                                     std::erase_if(f.tensors, [](auto& e) { return e.first == "optim.2.exp_avg"; });
                                   }),
                           &target.loader.order()),
                      "tensor 'optim.2.exp_avg' is missing"));
  EXPECT_TRUE(refused(load(rewrite("stray.safetensors",
                                   [](io::TensorFile& f) { f.tensors.emplace_back("extra", zeros({1})); }),
                           &target.loader.order()),
                      "unexpected tensor 'extra' (neither model. nor optim.)"));
  EXPECT_TRUE(
      refused(load(rewrite("format.safetensors", [](io::TensorFile& f) { f.metadata["format"] = "attograd-gpt"; }),
                   &target.loader.order()),
              "not a checkpoint of a module and its optimizer (format \"attograd-gpt\""));
  // A caller's key that would shadow the checkpoint's own is refused when saving.
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { io::save_checkpoint(scratch.path("x"), *saved.model, saved.opt, nullptr, {{"format", "mine"}}); },
      "save_checkpoint: metadata key \"format\" is the checkpoint's own"));
  // And the good file still loads.
  io::load_checkpoint(good, *target.model, target.opt, &target.loader.order());
  EXPECT_EQ(target.positions(), saved.positions());
}

}  // namespace
}  // namespace ag
