// Checks io/checkpoint.cpp: safetensors and .npy against hand-built files, bit-exact round
// trips, every kind of malformed file, and GPT checkpoints that load all or nothing.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "../test_util.h"

namespace ag {
namespace {

using test::all_close;
using test::throws_with;
using namespace std::string_literals;

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
  // The temporary file was renamed: the directory holds the file alone.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path("")), {}), 1);
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
// Whatever save_safetensors accepts loads back unchanged; whatever it refuses, it refuses before
// writing, naming the entry.
TEST(Safetensors, MetadataThatSavesLoadsBackAndTheRestIsRefusedByName) {
  Scratch dir;
  std::vector<nn::NamedTensor> one = {{"a", ones({2})}};
  std::vector<io::Metadata> good = {
      {{"note", "plain"}},
      {{"", "an empty key"}, {"empty value", ""}},
      {{"__metadata__", "the reserved name, as a key inside the metadata"}},
      {{"quotes \" and \\ backslashes", "tab\t newline\n nul"s + '\0' + " \x01 \x7f"}},
      {{"注意力", "naïve café 😀"}},
      {{"long", std::string(1 << 20, 'x')}},
  };
  for (const io::Metadata& meta : good) {
    io::save_safetensors(dir.path("ok.safetensors"), one, meta);
    EXPECT_EQ(io::load_safetensors(dir.path("ok.safetensors")).metadata, meta);
  }
  struct Bad {
    io::Metadata meta;
    std::vector<nn::NamedTensor> tensors;
    std::string message;
  };
  std::vector<Bad> bad = {
      {{{"bad\xff key", "v"}}, one, "metadata key 'bad\xff key' is not valid UTF-8"},
      {{{"key", "bad \xc0\xaf value"}}, one, "the value of metadata key 'key' is not valid UTF-8"},  // overlong '/'
      {{{"surrogate", "\xed\xa0\x80"}}, one, "the value of metadata key 'surrogate' is not valid UTF-8"},
      {{{"cut", "\xe6\xb3"}}, one, "the value of metadata key 'cut' is not valid UTF-8"},
      {{}, {{"w\xfe", ones({1})}}, "tensor name 'w\xfe' is not valid UTF-8"},
      {{}, {{"__metadata__", ones({1})}}, "tensor name '__metadata__' is reserved or repeated"},
      {{}, {{"a", ones({1})}, {"a", ones({1})}}, "tensor name 'a' is reserved or repeated"},
  };
  for (const Bad& b : bad) {
    std::string path = dir.path("bad.safetensors");
    EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::save_safetensors(path, b.tensors, b.meta); }, b.message));
    EXPECT_FALSE(std::filesystem::exists(path)) << b.message;
  }
}

// The 100 MB limit of Hugging Face's reader: a header past it is refused when written, naming
// the entry that makes it so large.
TEST(Safetensors, RefusesToWriteAHeaderReadersRefuse) {
  Scratch dir;
  io::Metadata huge = {{"small", "x"}, {"big", std::string(io::kMaxHeaderBytes, 'x')}};
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::save_safetensors(dir.path("h.safetensors"), {}, huge); },
                                                 "the largest metadata entry is 'big'"));
  EXPECT_FALSE(std::filesystem::exists(dir.path("h.safetensors")));
}

TEST(Files, ErrorsNameThePath) {
  Scratch dir;
  std::string d = dir.path("a_directory");
  std::filesystem::create_directories(d);
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { io::read_file(d); },
                                              fmt::format("cannot read '{}': it is a directory, not a file", d)));
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { io::load_safetensors(d); }, d));
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { io::load_npy(d); }, d));
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { io::read_gpt_checkpoint(d); }, d));
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { io::read_text_file(d); }, d));
  std::string missing = dir.path("missing.txt");
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { io::read_text_file(missing); },
                                              fmt::format("cannot open '{}' for reading: No such file", missing)));
  std::string empty = dir.path("empty.txt"), latin1 = dir.path("latin1.txt"), good = dir.path("good.txt");
  io::write_file_atomically(empty, "");
  io::write_file_atomically(latin1, "caf\xe9 au lait\n");  // é in Latin-1: a 3-byte lead, then a space
  io::write_file_atomically(good, "café\n");
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::read_text_file(empty); },
                                                 fmt::format("{}: the file is empty", empty)));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { io::read_text_file(latin1); },
      fmt::format("{} is not valid UTF-8: utf8: invalid UTF-8: byte 0x20 at byte offset 4 should continue a character",
                  latin1)));
  EXPECT_EQ(io::read_text_file(good), "café\n");
}

TEST(Files, UnreadableFileNamesThePath) {
  Scratch dir;
  std::string path = dir.path("locked.txt");
  io::write_file_atomically(path, "text");
  std::filesystem::permissions(path, std::filesystem::perms::none);
  if (std::FILE* f = std::fopen(path.c_str(), "rb")) {  // root reads everything
    std::fclose(f);
    GTEST_SKIP() << "running with the right to read any file";
  }
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { io::read_file(path); },
                                              fmt::format("cannot open '{}' for reading: Permission denied", path)));
}

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

// The header exactly as NumPy 1.24's np.save writes it for these arrays (header length 118, so
// magic + version + length + header = 128 bytes, a multiple of 64, ending in '\n').
TEST(Npy, WritesTheBytesNumPyWrites) {
  auto numpy_header = [](std::string dict) {
    dict.append(117 - dict.size(), ' ');
    return std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict + '\n';
  };
  struct Case {
    Tensor t;
    std::string dict;
  };
  for (const Case& c :
       {Case{zeros({2, 3}), "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"},
        Case{scalar(2.5, kFloat64), "{'descr': '<f8', 'fortran_order': False, 'shape': (), }"},
        Case{from_vector<bool>({true, false, true}, {3}), "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }"},
        Case{arange(4, kInt64), "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }"}}) {
    SCOPED_TRACE(c.dict);
    std::string bytes = io::npy_bytes(c.t);
    ASSERT_GE(bytes.size(), 128u);
    EXPECT_EQ(bytes.substr(0, 128), numpy_header(c.dict));
    EXPECT_EQ(bytes.size(), 128 + static_cast<std::size_t>(c.t.numel()) * dtype_size(c.t.dtype()));
  }
}

// A header built by hand: `dict`, padded to `align` bytes, in format version `major`.
std::string npy_file(const std::string& dict, int major = 1, std::size_t align = 64,
                     std::string data = floats({1, 2})) {
  std::size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  header.append((align - (prefix + header.size() + 1) % align) % align, ' ');
  header += '\n';
  std::string out = std::string("\x93NUMPY", 6) + static_cast<char>(major) + '\0';
  auto n = static_cast<std::uint32_t>(header.size());
  out.append(reinterpret_cast<const char*>(&n), major == 1 ? 2 : 4);
  return out + header + data;
}

// Every way of writing the dict that Python reads as the same literal, and NumPy therefore reads.
TEST(Npy, ReadsTheHeaderAsAPythonLiteral) {
  for (const std::string dict : {
           "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",  // NumPy's own
           "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",    // no trailing comma
           "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2,)}",
           "{'shape': (2,), 'fortran_order': False, 'descr': '<f4'}",  // any key order
           "{'descr':'<f4','fortran_order':False,'shape':(2,)}",
           "{ 'descr' :\t'<f4' ,\n 'fortran_order' : False ,\r\n 'shape' : ( 2 , ) , }",
           "{'descr': '<f4', 'fortran_order': False, 'shape': (+2,), }",  // a unary plus is still 2
       }) {
    SCOPED_TRACE(dict);
    for (int major : {1, 2, 3}) {
      Tensor t = io::parse_npy(npy_file(dict, major));
      EXPECT_EQ(t.shape(), (Shape{2}));
      EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2}));
    }
  }
  // NumPy before 1.9 aligned the data to 16 bytes; its reader still takes such files.
  EXPECT_EQ(io::parse_npy(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 1, 16)).numel(), 2);
  EXPECT_EQ(io::parse_npy(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }")).shape(),
            (Shape{1, 2}));
  EXPECT_EQ(
      io::parse_npy(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 1, 64, floats({3}))).shape(),
      Shape{});
}

TEST(Npy, RefusesWhatPythonOrNumPyRefuses) {
  auto refuses = [](const std::string& dict, const std::string& message) {
    return throws_with<std::invalid_argument>([&] { io::parse_npy(npy_file(dict), "f.npy"); }, message);
  };
  // (2) is the integer 2 in parentheses, not a tuple: NumPy's "shape is not valid".
  EXPECT_TRUE(refuses("{'descr': '<f4', 'fortran_order': False, 'shape': (2), }",
                      "f.npy: shape must be a tuple such as (), (3,) or (2, 3), got the integer 2"));
  // Byte 9 is the quote after "{'descr' ": the ':' should have come first.
  EXPECT_TRUE(refuses("{'descr' '<f4', 'fortran_order': False, 'shape': (2,), }",
                      "f.npy: .npy header, byte 9: expected ':' after the key 'descr', found '''"));
  EXPECT_TRUE(refuses("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}",
                      "f.npy: header has an unknown key 'extra'"));
  EXPECT_TRUE(refuses("{'descr': '<f4', 'fortran_order': False}", "f.npy: header has no 'shape' entry"));
  EXPECT_TRUE(refuses("{'descr': '<f4', 'fortran_order': 1, 'shape': (2,)}",
                      "'fortran_order' must be True or False, got the integer 1"));
  EXPECT_TRUE(refuses("{'descr': '<f4', 'fortran_order': False, 'shape': (2,,)}", "expected an integer, found ','"));
  EXPECT_TRUE(refuses("{'descr': '<f4', 'fortran_order': False, 'shape': (1_0,)}",
                      "an integer written in decimal digits only, found '_'"));
  std::string v4 = npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 2);
  v4[6] = 4;
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { io::parse_npy(v4, "f.npy"); }, "f.npy: unsupported .npy version 4.0"));
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

// A GPT with RMSNorm keeps its choice in the config ("norm": "rms"), holds no norm biases, and
// is refused by a LayerNorm model, which stays as it was.
TEST(GPTCheckpoint, RmsNormIsSavedInTheConfigAndChecked) {
  Scratch dir;
  Generator g1(1), g2(2), g3(3);
  nn::GPTConfig rms = small_gpt();
  rms.norm = nn::NormKind::Rms;
  nn::GPT a(rms, g1), b(rms, g2), layer(small_gpt(), g3);
  auto tok = data::CharTokenizer::from_text("abcdefg");
  io::save_gpt(dir.path("m.safetensors"), a, tok);
  io::GPTCheckpoint ckpt = io::read_gpt_checkpoint(dir.path("m.safetensors"));
  EXPECT_EQ(ckpt.config.norm, nn::NormKind::Rms);
  EXPECT_EQ(ckpt.file.find("transformer.h.0.ln_1.bias"), nullptr);
  EXPECT_NE(ckpt.file.find("transformer.h.0.attn.c_proj.bias"), nullptr);  // the linears keep theirs
  io::load_gpt(b, ckpt);
  Tensor ids = from_vector<std::int64_t>({1, 2, 3, 4}, {1, 4});
  EXPECT_EQ(a.forward(ids).to_vector<float>(), b.forward(ids).to_vector<float>());
  std::vector<float> before = layer.forward(ids).to_vector<float>();
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([&] { io::load_gpt(layer, ckpt); }, "norm rms, mlp gelu) differs from"));
  EXPECT_EQ(layer.forward(ids).to_vector<float>(), before);
  // A checkpoint without the key is a LayerNorm one, as every earlier file and nanoGPT's are.
  io::save_gpt(dir.path("l.safetensors"), layer, tok);
  EXPECT_EQ(io::read_gpt_checkpoint(dir.path("l.safetensors")).config.norm, nn::NormKind::Layer);
}

// A GPT with SwiGLU MLPs keeps its choice in the config ("mlp": "swiglu"), holds three
// projections per MLP under LLaMA's names and no MLP biases, and is refused by a GELU model,
// which stays as it was.
TEST(GPTCheckpoint, SwigluIsSavedInTheConfigAndChecked) {
  Scratch dir;
  Generator g1(1), g2(2), g3(3);
  nn::GPTConfig swiglu = small_gpt();
  swiglu.mlp = nn::MlpKind::Swiglu;
  nn::GPT a(swiglu, g1), b(swiglu, g2), gelu(small_gpt(), g3);
  auto tok = data::CharTokenizer::from_text("abcdefg");
  io::save_gpt(dir.path("m.safetensors"), a, tok);
  io::GPTCheckpoint ckpt = io::read_gpt_checkpoint(dir.path("m.safetensors"));
  EXPECT_EQ(ckpt.config.mlp, nn::MlpKind::Swiglu);
  std::int64_t d = swiglu.n_embd, hidden = nn::swiglu_hidden(4 * d);
  for (const char* name : {"transformer.h.0.mlp.gate_proj.weight", "transformer.h.0.mlp.up_proj.weight"}) {
    ASSERT_NE(ckpt.file.find(name), nullptr) << name;
    EXPECT_EQ(ckpt.file.find(name)->shape(), (Shape{hidden, d}));
  }
  ASSERT_NE(ckpt.file.find("transformer.h.0.mlp.down_proj.weight"), nullptr);
  EXPECT_EQ(ckpt.file.find("transformer.h.0.mlp.down_proj.weight")->shape(), (Shape{d, hidden}));
  EXPECT_EQ(ckpt.file.find("transformer.h.0.mlp.c_fc.weight"), nullptr);
  EXPECT_EQ(ckpt.file.find("transformer.h.0.mlp.down_proj.bias"), nullptr);
  io::load_gpt(b, ckpt);
  Tensor ids = from_vector<std::int64_t>({1, 2, 3, 4}, {1, 4});
  EXPECT_EQ(a.forward(ids).to_vector<float>(), b.forward(ids).to_vector<float>());
  std::vector<float> before = gelu.forward(ids).to_vector<float>();
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::load_gpt(gelu, ckpt); }, "mlp swiglu) differs from"));
  EXPECT_EQ(gelu.forward(ids).to_vector<float>(), before);
  // A checkpoint without the key is a GELU one, as every earlier file and nanoGPT's are.
  io::save_gpt(dir.path("g.safetensors"), gelu, tok);
  EXPECT_EQ(io::read_gpt_checkpoint(dir.path("g.safetensors")).config.mlp, nn::MlpKind::Gelu);
  // An unknown MLP name in the metadata is refused by name.
  io::TensorFile file = io::load_safetensors(dir.path("m.safetensors"));
  file.metadata["config"] =
      R"({"vocab_size": 7, "block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 16, "mlp": "relu"})";
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::gpt_checkpoint(file, "x.safetensors"); },
                                                 "unknown MLP 'relu': expected 'gelu' or 'swiglu'"));
}

// A config key this version does not read, and a file with no model format or another one, are
// refused by name rather than read as far as they go.
TEST(GPTCheckpoint, UnknownConfigKeysAndOtherFormatsAreRefused) {
  Scratch dir;
  Generator gen(6);
  nn::GPT model(small_gpt(), gen);
  io::save_gpt(dir.path("m.safetensors"), model, data::CharTokenizer::from_text("abcdefg"));
  io::TensorFile good = io::load_safetensors(dir.path("m.safetensors"));
  EXPECT_NO_THROW(io::gpt_checkpoint(good, "x.safetensors"));
  io::TensorFile extra = good;
  std::string& config = extra.metadata["config"];
  config.insert(config.rfind('}'), R"(, "n_kv_head": 1)");
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { io::gpt_checkpoint(extra, "x.safetensors"); },
      "x.safetensors: bad metadata: config: \"n_kv_head\" is no setting of a GPT this version reads"));
  io::TensorFile no_format = good;
  no_format.metadata.erase("format");
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::gpt_checkpoint(no_format, "x.safetensors"); },
                                                 "metadata has no \"format\" entry"));
  io::TensorFile other = good;
  other.metadata["format"] = "attograd-gpt-training";
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { io::gpt_checkpoint(other, "x.safetensors"); },
      "format: \"attograd-gpt-training\" is not a GPT checkpoint's (\"attograd-gpt\")"));
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
  nudged.mutable_data_ptr<double>()[0] += 1e-12;
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

// A checkpoint whose weights hold NaN or infinity is refused, naming the file, the tensor and
// the element, unless the caller asks for it; the model is untouched by the refusal.
TEST(GPTCheckpoint, NonFiniteWeightsAreRefusedUnlessAllowed) {
  Scratch dir;
  Generator g1(1), g2(2);
  nn::GPT source(small_gpt(), g1), target(small_gpt(), g2);
  auto tok = data::CharTokenizer::from_text("abcdefg");
  std::string path = dir.path("nan.safetensors");
  for (double bad : {std::nan(""), HUGE_VAL, -HUGE_VAL}) {
    Tensor w = std::dynamic_pointer_cast<nn::FeedForward>((*source.blocks)[1].mlp)->fc->weight;
    w.mutable_data_ptr<float>()[5] = static_cast<float>(bad);
    io::save_gpt(path, source, tok);
    std::vector<float> before = target.named_parameters().front().second.to_vector<float>();
    EXPECT_TRUE(throws_with<std::invalid_argument>(
        [&] { io::load_gpt(target, io::read_gpt_checkpoint(path)); },
        fmt::format("{}: load_gpt: tensor 'transformer.h.1.mlp.c_fc.weight' holds {} at element 5 (1 non-finite "
                    "values in all); pass LoadOptions{{.allow_non_finite = true}}",
                    path, bad)));
    EXPECT_EQ(target.named_parameters().front().second.to_vector<float>(), before);
    io::load_gpt(target, io::read_gpt_checkpoint(path), {.allow_non_finite = true});
    float loaded = std::dynamic_pointer_cast<nn::FeedForward>((*target.blocks)[1].mlp)->fc->weight.data_ptr<float>()[5];
    EXPECT_TRUE(std::isnan(bad) ? std::isnan(loaded) : loaded == static_cast<float>(bad));
    w.mutable_data_ptr<float>()[5] = 0;
  }
  // A float64 weight beyond float32's range becomes infinite in the float32 model: refused too.
  io::save_gpt(path, source, tok);  // finite again
  io::GPTCheckpoint ckpt = io::read_gpt_checkpoint(path);
  EXPECT_NO_THROW(io::load_gpt(target, ckpt));
  for (auto& [name, t] : ckpt.file.tensors)
    if (name == "transformer.ln_f.weight") t = full(t.shape(), 1e300, kFloat64);
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::load_gpt(target, ckpt); },
                                                 "tensor 'transformer.ln_f.weight' holds inf at element 0"));
}

// A GPT without biases saves none and needs none; a biased one needs every bias, and the error
// names the missing tensor and the file.
TEST(GPTCheckpoint, BiasFreeModelsNeedNoBiasTensors) {
  Scratch dir;
  nn::GPTConfig config = small_gpt();
  config.bias = false;
  Generator g1(1), g2(2);
  nn::GPT source(config, g1), target(config, g2);
  auto tok = data::CharTokenizer::from_text("abcdefg");
  io::save_gpt(dir.path("nobias.safetensors"), source, tok);
  io::GPTCheckpoint ckpt = io::read_gpt_checkpoint(dir.path("nobias.safetensors"));
  for (const auto& [name, _] : ckpt.file.tensors) EXPECT_FALSE(name.ends_with(".bias")) << name;
  EXPECT_FALSE(ckpt.config.bias);
  io::load_gpt(target, ckpt);
  auto pa = source.named_parameters(), pb = target.named_parameters();
  for (std::size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].second.to_vector<float>(), pb[i].second.to_vector<float>());
  // A bias in a bias-free checkpoint is a stray tensor.
  io::GPTCheckpoint stray = ckpt;
  stray.file.tensors.emplace_back("transformer.ln_f.bias", zeros({8}));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { io::load_gpt(target, stray); },
      "unexpected tensor 'transformer.ln_f.bias' in the checkpoint (its config has bias = false)"));
  // A biased model and a checkpoint missing one bias.
  nn::GPT biased(small_gpt(), g1), other(small_gpt(), g2);
  std::string path = dir.path("bias.safetensors");
  io::save_gpt(path, biased, tok);
  io::GPTCheckpoint missing = io::read_gpt_checkpoint(path);
  std::erase_if(missing.file.tensors, [](const auto& nt) { return nt.first == "transformer.h.1.attn.c_proj.bias"; });
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] { io::load_gpt(other, missing); },
      fmt::format("{}: load_gpt: tensor 'transformer.h.1.attn.c_proj.bias' is missing from the checkpoint (its config "
                  "has bias = true",
                  path)));
}

// Vocabulary metadata that is not one character per entry, has a character twice or is out of
// order is refused when the checkpoint is read, naming the file and the entry.
TEST(GPTCheckpoint, VocabularyMetadataErrorsNameTheFileAndEntry) {
  Scratch dir;
  nn::GPT model(small_gpt());
  auto meta = io::gpt_metadata(model.config, data::CharTokenizer::from_text("abcdefg"));
  std::string path = dir.path("vocab.safetensors");
  struct Case {
    std::string vocab, message;
  };
  for (const Case& c : {
           Case{R"(["a", "b", "c", "c", "e", "f", "g"])", "lists \"c\" (U+0063) twice (entries 2 and 3)"},
           Case{R"(["a", "c", "b", "d", "e", "f", "g"])",
                "must be sorted by code point; entry 2, \"b\" (U+0062), comes after \"c\" (U+0063)"},
           Case{R"(["a", "bc", "d", "e", "f", "g", "h"])", "token \"bc\" is not exactly one character (entry 1"},
           Case{R"(["a", "", "d", "e", "f", "g", "h"])", "token \"\" is not exactly one character (entry 1"},
       }) {
    meta["vocab"] = c.vocab;
    io::save_safetensors(path, io::gpt_state_dict(model), meta);
    EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::read_gpt_checkpoint(path); },
                                                   fmt::format("{}: bad vocab metadata: CharTokenizer: ", path)));
    EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::read_gpt_checkpoint(path); }, c.message));
  }
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

namespace ag {
namespace {

// A model of one's own, as docs/models.md builds them: a buffer besides the parameters, and
// submodules in a ModuleList.
class OwnModel : public nn::Module {
 public:
  explicit OwnModel(Generator& gen) {
    embed = register_module("embed", std::make_shared<nn::Embedding>(5, 4, gen));
    layers = register_module("layers", std::make_shared<nn::ModuleList<nn::Linear>>());
    layers->push_back(std::make_shared<nn::Linear>(4, 4, true, gen));
    layers->push_back(std::make_shared<nn::Linear>(4, 3, false, gen));
    scale = register_buffer("scale", randn({3}, gen));
  }
  Tensor forward(const Tensor& ids) {
    Tensor x = embed->forward(ids);
    for (const auto& layer : *layers) x = layer->forward(x).tanh();
    return x * scale;
  }
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::ModuleList<nn::Linear>> layers;
  Tensor scale;
};

std::vector<std::vector<double>> values_of(const nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (const auto& [_, t] : m.named_parameters()) out.push_back(t.to(kFloat64).to_vector<double>());
  for (const auto& [_, t] : m.named_buffers()) out.push_back(t.to(kFloat64).to_vector<double>());
  return out;
}

TEST(ModuleCheckpoint, RoundTripRestoresEveryParameterAndBuffer) {
  Scratch dir;
  Generator g1(1), g2(2);
  OwnModel source(g1), target(g2);
  ASSERT_NE(values_of(source), values_of(target));
  io::save_module(dir.path("own.safetensors"), source);
  io::TensorFile file = io::load_safetensors(dir.path("own.safetensors"));
  std::vector<std::string> names;
  for (const auto& [name, _] : file.tensors) names.push_back(name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{"embed.weight", "layers.0.bias", "layers.0.weight", "layers.1.weight", "scale"}));
  io::load_module(target, dir.path("own.safetensors"));
  EXPECT_EQ(values_of(source), values_of(target));
  Tensor ids = from_vector<std::int64_t>({0, 4, 2}, {3});
  EXPECT_TRUE(test::all_close(target.forward(ids), source.forward(ids), 0.0));
  // Loaded parameters are still parameters: they train.
  target.forward(ids).sum().backward();
  EXPECT_TRUE(target.layers->operator[](1).weight.grad().defined());
}

TEST(ModuleCheckpoint, Float64FileLoadsIntoAFloat32Module) {
  Scratch dir;
  Generator g1(1), g2(2);
  OwnModel source(g1), target(g2);
  source.to(kFloat64);
  io::save_module(dir.path("own64.safetensors"), source);
  io::load_module(target, dir.path("own64.safetensors"));
  EXPECT_EQ(target.embed->weight.dtype(), kFloat32);
  auto a = values_of(source), b = values_of(target);
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = 0; j < a[i].size(); ++j) EXPECT_EQ(static_cast<float>(a[i][j]), b[i][j]);
}

TEST(ModuleCheckpoint, FailedLoadLeavesTheModuleUntouched) {
  Scratch dir;
  Generator g1(1), g2(2);
  OwnModel source(g1), target(g2);
  io::save_module(dir.path("own.safetensors"), source);
  const io::TensorFile good = io::load_safetensors(dir.path("own.safetensors"));
  const auto before = values_of(target);
  auto mutate = [&](auto change) {
    io::TensorFile f = good;
    change(f);
    return f;
  };
  auto replace = [](io::TensorFile& f, const std::string& name, const Tensor& t) {
    for (auto& [n, v] : f.tensors)
      if (n == name) v = t;
  };
  struct Case {
    io::TensorFile file;
    std::string message;
  };
  std::vector<Case> cases = {
      {mutate([](auto& f) { f.tensors.pop_back(); }), "is missing from the file"},
      {mutate([](auto& f) { f.tensors.emplace_back("layers.2.weight", ones({1})); }),
       "unexpected tensor 'layers.2.weight': the module has no such parameter or buffer"},
      {mutate([&](auto& f) { replace(f, "layers.0.bias", zeros({5})); }),
       "tensor 'layers.0.bias' has shape [5] in the file, the module needs [4]"},
      {mutate([&](auto& f) { replace(f, "scale", zeros({3}, kInt64)); }),
       "tensor 'scale' is int64 in the file, the module holds float32"},
      {mutate([&](auto& f) {
         replace(f, "embed.weight", full({5, 4}, std::nan("")));
       }),
       "embed.weight"},
  };
  for (const Case& c : cases) {
    EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::load_module(target, c.file, {}, "own.safetensors"); },
                                                   "own.safetensors: load_module"))
        << c.message;
    EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::load_module(target, c.file); }, c.message));
    ASSERT_EQ(values_of(target), before) << c.message;
  }
  // NaN weights load when asked for.
  io::load_module(target, cases.back().file, {.allow_non_finite = true});
  EXPECT_TRUE(std::isnan(target.embed->weight.to_vector<float>()[0]));
}

}  // namespace
}  // namespace ag
