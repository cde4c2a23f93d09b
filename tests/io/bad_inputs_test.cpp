// The bad-input corpus: every file in tests/data/bad/ (written by tests/data/make_corpus.py,
// listed in its MANIFEST.tsv) must be rejected by its loader with the listed error, and a
// checkpoint that fails to load must leave the model exactly as it was. The fuzzers' seed
// files, all valid, must load.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../test_util.h"

namespace ag {
namespace {

namespace fs = std::filesystem;
using test::throws_with;

const fs::path kData = AG_TEST_DATA_DIR;  // tests/data in the source tree
const fs::path kSeeds = AG_FUZZ_CORPUS_DIR;

struct BadFile {
  std::string name, loader, expected;
};

std::vector<BadFile> manifest() {
  std::ifstream in(kData / "bad" / "MANIFEST.tsv");
  EXPECT_TRUE(in) << "cannot read " << (kData / "bad" / "MANIFEST.tsv");
  std::vector<BadFile> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    BadFile row;
    std::getline(fields, row.name, '\t');
    std::getline(fields, row.loader, '\t');
    std::getline(fields, row.expected);
    rows.push_back(row);
  }
  return rows;
}

// The config of tests/data/tiny_gpt.safetensors.
nn::GPTConfig tiny_config() { return {.vocab_size = 5, .block_size = 4, .n_layer = 1, .n_head = 1, .n_embd = 4}; }

// Every parameter's bytes, to compare a model before and after a failed load.
std::vector<std::string> snapshot(const nn::GPT& model) {
  std::vector<std::string> out;
  for (const auto& [name, p] : model.named_parameters())
    out.emplace_back(static_cast<const char*>(p.raw_data()),
                     static_cast<std::size_t>(p.numel()) * dtype_size(p.dtype()));
  return out;
}

TEST(BadInputs, ManifestListsEveryFile) {
  std::set<std::string> listed, present;
  for (const BadFile& row : manifest()) listed.insert(row.name);
  for (const auto& entry : fs::directory_iterator(kData / "bad"))
    if (entry.path().filename() != "MANIFEST.tsv") present.insert(entry.path().filename().string());
  EXPECT_EQ(listed, present);
  EXPECT_GE(listed.size(), 110u);
}

TEST(BadInputs, EachIsRejectedWithItsErrorAndNothingLoads) {
  for (const BadFile& row : manifest()) {
    SCOPED_TRACE(row.name);
    std::string path = (kData / "bad" / row.name).string();
    if (row.loader == "safetensors") {
      EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::load_safetensors(path); }, row.expected));
      EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::load_safetensors(path); }, path));  // names the file
    } else if (row.loader == "npy") {
      EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::load_npy(path); }, row.expected));
      EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::load_npy(path); }, path));
    } else if (row.loader == "gpt") {
      Generator gen(7);
      nn::GPT model(tiny_config(), gen);
      auto before = snapshot(model);
      EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::load_gpt(model, io::read_gpt_checkpoint(path)); },
                                                     row.expected));
      EXPECT_TRUE(throws_with<std::invalid_argument>([&] { io::load_gpt(model, io::read_gpt_checkpoint(path)); },
                                                     path));  // names the file, whichever step refuses it
      EXPECT_TRUE(snapshot(model) == before) << "a failed load changed the model";
    } else {
      ADD_FAILURE() << "unknown loader '" << row.loader << "'";
    }
  }
}

// The base of the GPT cases loads, and does change the model: so the cases above fail for the
// one reason each was made for.
TEST(BadInputs, TheGoodCheckpointLoads) {
  Generator gen(7);
  nn::GPT model(tiny_config(), gen);
  auto before = snapshot(model);
  io::GPTCheckpoint ckpt = io::read_gpt_checkpoint((kData / "tiny_gpt.safetensors").string());
  EXPECT_EQ(ckpt.vocab, (std::vector<std::string>{"\n", " ", "a", "b", "c"}));
  io::load_gpt(model, ckpt);
  EXPECT_FALSE(snapshot(model) == before);
}

TEST(BadInputs, EverySeedFileIsValid) {
  for (const auto& entry : fs::directory_iterator(kSeeds / "safetensors")) {
    SCOPED_TRACE(entry.path().string());
    EXPECT_FALSE(io::load_safetensors(entry.path().string()).tensors.empty());
  }
  for (const auto& entry : fs::directory_iterator(kSeeds / "npy")) {
    SCOPED_TRACE(entry.path().string());
    EXPECT_NO_THROW(io::load_npy(entry.path().string()));
  }
  Tensor t = io::load_npy((kSeeds / "npy" / "f32_2x3.npy").string());
  EXPECT_TRUE(test::all_close(t, {1, 2, 3, 4, 5, 6}, 0));
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
}

}  // namespace
}  // namespace ag
