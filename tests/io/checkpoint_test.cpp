// Checks io/checkpoint.cpp: safetensors and .npy against hand-built files, bit-exact round
// trips, every kind of malformed file, and GPT checkpoints that load all or nothing.
#include <cstring>
#include <filesystem>

#include "../test_util.h"

namespace ag {
namespace {

using test::all_close;
using test::throws_with;

// A scratch directory removed with the test.
class Scratch {
 public:
  Scratch() : dir_(std::filesystem::temp_directory_path() / fmt::format("attograd_ckpt_{}", ::getpid())) {
    std::filesystem::create_directories(dir_);
  }
  ~Scratch() { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  std::filesystem::path dir_;
};

// A safetensors file built byte by byte, as the format's description says.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  std::uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

std::string floats(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) out.append(reinterpret_cast<const char*>(&v), 4);
  return out;
}

TEST(Safetensors, ReadsAHandBuiltFile) {
  std::string header = R"({"__metadata__":{"note":"hi"},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
                       R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  io::TensorFile f = io::parse_safetensors(safetensors_bytes(header, floats({1.5f, -2.0f, 7.0f})));
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors[0].first, "a");  // listed in data order, whatever the header's order
  EXPECT_TRUE(all_close(*f.find("a"), {1.5, -2.0}, 0));
  EXPECT_TRUE(all_close(*f.find("b"), {7.0}, 0));
  EXPECT_EQ(f.metadata.at("note"), "hi");
}

TEST(Safetensors, RoundTripIsBitExactForEveryDtype) {
  Scratch dir;
  Generator gen(1);
  std::vector<nn::NamedTensor> tensors = {
      {"f32", randn({3, 5}, gen)},
      {"f64", randn({2, 2, 2}, gen, kFloat64)},
      {"ids", from_vector<std::int64_t>({-5, 0, 1LL << 40}, {3})},
      {"mask", from_vector<bool>({true, false, true}, {3})},
      {"scalar", scalar(3.25, kFloat64)},
      {"empty", zeros({0, 4})},
  };
  io::save_safetensors(dir.path("t.safetensors"), tensors, {{"config", "{\"x\": 1}"}});
  std::string bytes = io::read_file(dir.path("t.safetensors"));
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u);  // data starts 8-byte aligned
  io::TensorFile back = io::load_safetensors(dir.path("t.safetensors"));
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    const Tensor* u = back.find(name);
    ASSERT_NE(u, nullptr) << name;
    EXPECT_EQ(u->shape(), t.shape()) << name;
    EXPECT_EQ(u->dtype(), t.dtype()) << name;
    EXPECT_EQ(std::memcmp(u->raw_data(), t.raw_data(), static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype())), 0)
        << name;
  }
  EXPECT_EQ(back.metadata.at("config"), "{\"x\": 1}");
  EXPECT_FALSE(std::filesystem::exists(dir.path("t.safetensors.tmp")));  // the temporary was renamed
}

TEST(Safetensors, RejectsEveryKindOfMalformedFile) {
  std::string good_header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string good = safetensors_bytes(good_header, floats({1, 2}));
  // Truncated anywhere: in the length, in the header, in the data.
  for (std::size_t cut = 0; cut < good.size(); ++cut)
    EXPECT_THROW(io::parse_safetensors(good.substr(0, cut)), std::invalid_argument) << "cut at " << cut;
  auto rejects = [](const std::string& bytes, const std::string& message) {
    return throws_with<std::invalid_argument>([&] { io::parse_safetensors(bytes, "f"); }, message);
  };
  std::string huge(8, '\0');
  std::uint64_t n = 1ULL << 63;
  std::memcpy(huge.data(), &n, 8);
  EXPECT_TRUE(rejects(huge + "{}", "f: header length 9223372036854775808 is larger than the 2 bytes that follow it"));
  EXPECT_TRUE(rejects(std::string(8, '\0') + "{}", "f: header length is 0"));
  EXPECT_TRUE(rejects(safetensors_bytes("not json", ""), "f: header is not valid JSON"));
  EXPECT_TRUE(rejects(safetensors_bytes("[1, 2]", ""), "f: header must be a JSON object"));
  EXPECT_TRUE(rejects(safetensors_bytes(R"({"a": 5})", ""), "f: entry 'a' must be an object"));
  EXPECT_TRUE(rejects(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2]}})", ""),
                      "needs exactly \"dtype\", \"shape\" and \"data_offsets\""));
  EXPECT_TRUE(rejects(safetensors_bytes(R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", floats({1})),
                      "f: tensor 'a' has dtype \"F16\"; supported: F32, F64, I64, BOOL"));
  EXPECT_TRUE(rejects(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}})", floats({1, 2})),
                      "f: tensor 'a' data_offsets [0, 12] fall outside the 8 bytes of data"));
  EXPECT_TRUE(rejects(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", floats({1, 2})),
                      "f: tensor 'a' is float32 [3] (12 bytes) but its data_offsets span 8 bytes"));
  EXPECT_TRUE(rejects(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                                        floats({1, 2})),
                      "f: tensor 'a' has shape [4294967296, 4294967296] whose element count overflows"));
  EXPECT_TRUE(rejects(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", floats({1, 2})),
                      "f: tensor 'a' has a negative size in its shape"));
  EXPECT_TRUE(rejects(
      safetensors_bytes(
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
          floats({1, 2})),
      "f: tensor 'b' starts at byte 4 but the previous tensor ends at byte 8 (overlap or gap)"));
  EXPECT_TRUE(rejects(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", floats({1, 2})),
                      "f: tensor 'a' starts at byte 4 but the previous tensor ends at byte 0 (overlap or gap)"));
  EXPECT_TRUE(rejects(safetensors_bytes(good_header, floats({1, 2, 3})), "f: 4 bytes of data follow the last tensor"));
  EXPECT_TRUE(rejects(
      safetensors_bytes(
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
          floats({1, 2})),
      "duplicate key \"a\""));
  EXPECT_TRUE(
      rejects(safetensors_bytes(R"({"m":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}})", std::string(1, '\x07')),
              "f: tensor 'm' holds a BOOL byte that is neither 0 nor 1"));
  EXPECT_TRUE(throws_with<std::runtime_error>([] { io::load_safetensors("/nonexistent/x.safetensors"); },
                                              "cannot open '/nonexistent/x.safetensors' for reading"));
}

// Offsets are integers read exactly: through a double, 2^53 + 1 would become 2^53.
TEST(Safetensors, OffsetsAreReadExactly) {
  std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,9007199254740993]}})";
  std::string bytes = safetensors_bytes(header, floats({1, 2}));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::parse_safetensors(bytes, "f"); },
                                                 "f: tensor 'a' data_offsets [0, 9007199254740993] fall outside"));
}

TEST(Npy, RoundTripAndAHandBuiltFile) {
  Scratch dir;
  for (Tensor t : {randn({2, 3}, kFloat64), arange(4), from_vector<bool>({true, false}, {2}), scalar(2.5)}) {
    io::save_npy(dir.path("t.npy"), t);
    Tensor back = io::load_npy(dir.path("t.npy"));
    EXPECT_EQ(back.shape(), t.shape());
    EXPECT_EQ(back.dtype(), t.dtype());
    EXPECT_EQ(std::memcmp(back.raw_data(), t.raw_data(), static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype())),
              0);
  }
  // The bytes NumPy writes for np.array([[1, 2, 3]], dtype='<i8'): magic, version 1.0, header length 118.
  std::string header = "{'descr': '<i8', 'fortran_order': False, 'shape': (1, 3), }";
  header.append(128 - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string bytes =
      std::string("\x93NUMPY\x01\x00", 8) + std::string(1, static_cast<char>(header.size())) + '\0' + header;
  for (std::int64_t v : {1, 2, 3}) bytes.append(reinterpret_cast<const char*>(&v), 8);
  Tensor t = io::parse_npy(bytes);
  EXPECT_EQ(t.shape(), (Shape{1, 3}));
  EXPECT_EQ(t.to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { io::parse_npy(bytes.substr(0, bytes.size() - 1), "f.npy"); },
                                         "f.npy: shape [1, 3] of int64 needs 24 bytes of data, the file has 23"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { io::parse_npy("PK\x03\x04 not npy", "f.npy"); },
                                                 "f.npy: not a .npy file"));
}

nn::GPTConfig small_gpt() { return {.vocab_size = 7, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 8}; }

TEST(GPTCheckpoint, NanoGPTLayoutAndBitExactRoundTrip) {
  Scratch dir;
  Generator g1(1), g2(2);
  nn::GPT a(small_gpt(), g1), b(small_gpt(), g2);
  auto tok = data::CharTokenizer::from_text("abcdefg");
  io::save_gpt(dir.path("m.safetensors"), a, tok);
  io::GPTCheckpoint ckpt = io::read_gpt_checkpoint(dir.path("m.safetensors"));
  EXPECT_EQ(ckpt.vocab, tok.tokens());
  EXPECT_EQ(ckpt.config.n_embd, 8);
  const Tensor* c_attn = ckpt.file.find("transformer.h.1.attn.c_attn.weight");
  ASSERT_NE(c_attn, nullptr);
  EXPECT_EQ(c_attn->shape(), (Shape{24, 8}));  // [3C, C]: q, k, v stacked, the module's own layout
  EXPECT_TRUE(all_close(*c_attn, (*a.blocks)[1].attn->qkv_proj->weight, 0));
  // That rows [C, 2C) are the keys' (nanoGPT's order) is what tools/pytorch_parity.py checks:
  // PyTorch splits c_attn's output into q, k, v and must get attograd's loss and gradients.
  for (const char* name : {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.bias",
                           "transformer.h.0.attn.c_proj.weight", "transformer.h.0.mlp.c_fc.weight",
                           "transformer.h.0.mlp.c_proj.bias", "transformer.ln_f.weight"})
    EXPECT_NE(ckpt.file.find(name), nullptr) << name;
  io::load_gpt(b, ckpt);
  auto pa = a.named_parameters(), pb = b.named_parameters();
  for (std::size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].second.to_vector<float>(), pb[i].second.to_vector<float>()) << pa[i].first;
  Tensor ids = from_vector<std::int64_t>({1, 2, 3, 4}, {1, 4});
  EXPECT_EQ(a.forward(ids).to_vector<float>(), b.forward(ids).to_vector<float>());
}

// Every way a GPT checkpoint can be wrong; the target model must come out unchanged each time.
TEST(GPTCheckpoint, FailedLoadLeavesTheModelUntouched) {
  Scratch dir;
  Generator g1(3), g2(4);
  nn::GPT source(small_gpt(), g1), target(small_gpt(), g2);
  auto tok = data::CharTokenizer::from_text("abcdefg");
  io::save_gpt(dir.path("m.safetensors"), source, tok);
  io::GPTCheckpoint good = io::read_gpt_checkpoint(dir.path("m.safetensors"));
  std::vector<std::vector<float>> before;
  for (const Tensor& p : target.parameters()) before.push_back(p.to_vector<float>());

  auto mutate = [&](auto change) {
    io::GPTCheckpoint c = good;
    change(c);
    return c;
  };
  struct Case {
    io::GPTCheckpoint ckpt;
    std::string message;
  };
  std::vector<Case> cases = {
      {mutate([](auto& c) { c.file.tensors.erase(c.file.tensors.begin() + 3); }), "is missing from the checkpoint"},
      {mutate([](auto& c) { c.file.tensors.emplace_back("transformer.extra", ones({1})); }),
       "unexpected tensor 'transformer.extra' in the checkpoint"},
      {mutate([](auto& c) {
         for (auto& [name, t] : c.file.tensors)
           if (name == "transformer.ln_f.bias") t = zeros({9});
       }),
       "tensor 'transformer.ln_f.bias' has shape [9] in the checkpoint, the model needs [8]"},
      {mutate([](auto& c) {
         for (auto& [name, t] : c.file.tensors)
           if (name == "transformer.ln_f.bias") t = zeros({8}, kInt64);
       }),
       "weights must be F32 or F64"},
      {mutate([](auto& c) { c.config.n_layer = 3; }), "checkpoint config (vocab 7, block 8, layers 3"},
      {mutate([](auto& c) {
         c.file.tensors.emplace_back("lm_head.weight", zeros({3, 8}));
       }),
       "lm_head.weight has shape [3, 8] but must equal wte's [7, 8]"},
      {mutate([](auto& c) {
         c.file.tensors.emplace_back("lm_head.weight", zeros({7, 8}));
       }),
       "lm_head.weight differs from transformer.wte.weight"},
  };
  for (const Case& c : cases) {
    EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::load_gpt(target, c.ckpt); }, c.message));
    auto params = target.parameters();
    for (std::size_t i = 0; i < params.size(); ++i) ASSERT_EQ(params[i].to_vector<float>(), before[i]) << c.message;
  }
  // A tied lm_head equal to wte is accepted.
  io::GPTCheckpoint tied = good;
  tied.file.tensors.emplace_back("lm_head.weight", *good.file.find("transformer.wte.weight"));
  EXPECT_NO_THROW(io::load_gpt(target, tied));
}

// A float64 checkpoint (from PyTorch in double precision, say) with its tied head stored: the
// head equals wte as stored, and a float32 model loads it. Comparing the head with wte after
// wte was rounded to float32 refused it.
TEST(GPTCheckpoint, Float64TiedHeadLoadsIntoAFloat32Model) {
  Generator gen(5);
  nn::GPT source(small_gpt(), gen), target(small_gpt());
  source.to(kFloat64);
  io::GPTCheckpoint ckpt;
  ckpt.config = source.config;
  ckpt.file.tensors = io::gpt_state_dict(source);
  // Off the float32 grid, as weights trained in float64 are (float32 values widened would
  // survive the rounding and hide the bug).
  Tensor wte;
  for (auto& [name, t] : ckpt.file.tensors)
    if (name == "transformer.wte.weight") wte = t = (t * (1 + 1e-9)).detach();
  ASSERT_EQ(wte.dtype(), kFloat64);
  ASSERT_NE(wte.to(kFloat32).to(kFloat64).to_vector<double>(), wte.to_vector<double>());
  ckpt.file.tensors.emplace_back("lm_head.weight", wte.clone());
  ASSERT_NO_THROW(io::load_gpt(target, ckpt));
  EXPECT_EQ(target.wte->weight.to_vector<float>(), wte.to(kFloat32).to_vector<float>());
  // A head that differs from the float64 wte, even by less than float32 can show, is still refused.
  Tensor nudged = wte.clone();
  nudged.data_ptr<double>()[0] += 1e-12;
  ckpt.file.tensors.back().second = nudged;
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::load_gpt(target, ckpt); },
                                                 "lm_head.weight differs from transformer.wte.weight"));
}

TEST(GPTCheckpoint, MetadataErrors) {
  Scratch dir;
  nn::GPT model(small_gpt());
  auto state = io::gpt_state_dict(model);
  io::save_safetensors(dir.path("nometa.safetensors"), state);
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::read_gpt_checkpoint(dir.path("nometa.safetensors")); },
                                                 "metadata has no \"config\" entry"));
  auto meta = io::gpt_metadata(model.config, data::CharTokenizer::from_text("abcdefg"));
  meta["vocab"] = "[\"a\", \"b\"]";
  io::save_safetensors(dir.path("badvocab.safetensors"), state, meta);
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::read_gpt_checkpoint(dir.path("badvocab.safetensors")); },
                                                 "metadata lists 2 vocabulary tokens but config.vocab_size is 7"));
  meta["config"] = "{\"vocab_size\": \"seven\"}";
  io::save_safetensors(dir.path("badconfig.safetensors"), state, meta);
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::read_gpt_checkpoint(dir.path("badconfig.safetensors")); },
                                                 "bad metadata: json: config.vocab_size must be an integer"));
}

// The vocabulary is written as a JSON array and read back: quotes, backslashes, control
// characters and multi-byte UTF-8 must all survive the escaping.
TEST(GPTCheckpoint, VocabularySurvivesJson) {
  Scratch dir;
  auto tok = data::CharTokenizer::from_text("a\b\t\n\x01\"\\/\x7f\xc3\xa9\xe6\xb3\xa8\xf0\x9f\x98\x80");
  nn::GPTConfig config = small_gpt();
  config.vocab_size = tok.size();
  Generator gen(3);
  nn::GPT model(config, gen);
  io::save_gpt(dir.path("v.safetensors"), model, tok);
  EXPECT_EQ(io::read_gpt_checkpoint(dir.path("v.safetensors")).vocab, tok.tokens());
  EXPECT_EQ(tok.size(), 12);
}

}  // namespace
}  // namespace ag
