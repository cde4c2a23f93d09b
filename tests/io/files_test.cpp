// Checks io/files.cpp's writes against a directory someone else can write in: links planted
// where the writer might write are replaced or left alone, never followed; the target is
// replaced in one step; and what a killed writer left is removed, and nothing else.
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "../test_util.h"

namespace ag {
namespace {

namespace fs = std::filesystem;
using test::throws_with;

// A new directory of its own, removed with the test. `out` stands for a run's output
// directory, which others may write in; `outside` for the files they would like overwritten.
class Scratch {
 public:
  Scratch() {
    std::string pattern = (fs::temp_directory_path() / "attograd_files_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    root_ = pattern;
    fs::create_directories(root_ / "out");
    fs::create_directories(root_ / "outside");
  }
  ~Scratch() { fs::remove_all(root_); }
  std::string out(const std::string& name) const { return (root_ / "out" / name).string(); }
  std::string outside(const std::string& name) const { return (root_ / "outside" / name).string(); }
  std::set<std::string> names_in_out() const {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(root_ / "out")) names.insert(entry.path().filename().string());
    return names;
  }

 private:
  fs::path root_;
};

std::string contents(const std::string& path) { return io::read_file(path); }

bool is_regular_file_itself(const std::string& path) {
  return fs::symlink_status(path).type() == fs::file_type::regular;
}

// Whoever can write in the directory plants a symbolic link under the name the old writer used
// for its temporary file (path + ".tmp"): one to an existing file, one to a file that does not
// exist yet. Neither is followed, and neither is renamed over the target.
TEST(WriteFileAtomically, LinksAtTheOldTemporaryNameAreNotFollowed) {
  Scratch dir;
  io::write_file_atomically(dir.outside("precious"), "precious bytes");
  fs::create_symlink(dir.outside("precious"), dir.out("model.safetensors.tmp"));
  fs::create_symlink(dir.outside("new_file"), dir.out("log.csv.tmp"));

  io::write_file_atomically(dir.out("model.safetensors"), "weights");
  io::write_file_atomically(dir.out("log.csv"), "step,loss\n");

  EXPECT_EQ(contents(dir.outside("precious")), "precious bytes");
  EXPECT_FALSE(fs::exists(dir.outside("new_file")));
  EXPECT_TRUE(is_regular_file_itself(dir.out("model.safetensors")));
  EXPECT_TRUE(is_regular_file_itself(dir.out("log.csv")));
  EXPECT_EQ(contents(dir.out("model.safetensors")), "weights");
  EXPECT_EQ(contents(dir.out("log.csv")), "step,loss\n");
  // The planted links are left as they were, and no temporary file is left beside them.
  EXPECT_EQ(dir.names_in_out(),
            (std::set<std::string>{"model.safetensors", "model.safetensors.tmp", "log.csv", "log.csv.tmp"}));
}

// The target's own name holds a symbolic link, or a second hard link of a file elsewhere (and
// the old temporary name a link as well). The entry is replaced by a new regular file; the file
// it led to keeps its bytes; a reader that had the old file open reads it whole.
TEST(WriteFileAtomically, TheTargetEntryIsReplacedNeverWrittenThrough) {
  Scratch dir;
  io::write_file_atomically(dir.outside("linked"), "linked bytes");
  io::write_file_atomically(dir.outside("hard"), "hard-linked bytes");
  fs::create_symlink(dir.outside("linked"), dir.out("a.safetensors"));
  fs::create_symlink(dir.outside("linked"), dir.out("a.safetensors.tmp"));
  fs::create_hard_link(dir.outside("hard"), dir.out("b.safetensors"));
  fs::create_symlink(dir.outside("hard"), dir.out("b.safetensors.tmp"));
  struct stat before {};
  ASSERT_EQ(::stat(dir.out("b.safetensors").c_str(), &before), 0);
  std::FILE* reader = std::fopen(dir.out("b.safetensors").c_str(), "rb");
  ASSERT_NE(reader, nullptr);

  io::write_file_atomically(dir.out("a.safetensors"), "new a");
  io::write_file_atomically(dir.out("b.safetensors"), "new b");

  EXPECT_TRUE(is_regular_file_itself(dir.out("a.safetensors")));
  EXPECT_EQ(contents(dir.out("a.safetensors")), "new a");
  EXPECT_EQ(contents(dir.outside("linked")), "linked bytes");
  struct stat after {};
  ASSERT_EQ(::stat(dir.out("b.safetensors").c_str(), &after), 0);
  EXPECT_NE(after.st_ino, before.st_ino) << "the file was rewritten in place instead of replaced";
  EXPECT_EQ(after.st_nlink, 1u);
  EXPECT_EQ(contents(dir.out("b.safetensors")), "new b");
  EXPECT_EQ(contents(dir.outside("hard")), "hard-linked bytes");
  char old[64] = {};
  EXPECT_EQ(std::fread(old, 1, sizeof old - 1, reader), std::string("hard-linked bytes").size());
  EXPECT_STREQ(old, "hard-linked bytes");
  std::fclose(reader);
}

// A write that fails half-way (here: over the process's file-size limit) names the target, not a
// temporary name the user never chose, leaves the old file as it was and no temporary behind.
TEST(WriteFileAtomically, AFailedWriteNamesTheTargetAndLeavesNoTemporary) {
  Scratch dir;
  std::string path = dir.out("big.bin");
  io::write_file_atomically(path, "old");
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  auto previous = std::signal(SIGXFSZ, SIG_IGN);  // the write returns EFBIG instead of killing the test
  bool named = throws_with<std::runtime_error>([&] { io::write_file_atomically(path, std::string(1 << 16, 'x')); },
                                               fmt::format("cannot write '{}': File too large", path));
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, previous);
  EXPECT_TRUE(named);
  EXPECT_EQ(contents(path), "old");
  EXPECT_EQ(dir.names_in_out(), (std::set<std::string>{"big.bin"}));
}

// What a killed writer leaves is ".<name>.tmp-" and six letters or digits; remove_stale_temporaries
// removes those that are files or symbolic links (the link itself, not what it points to), and
// nothing else: not a directory of that name, nor a name that only looks similar.
TEST(RemoveStaleTemporaries, RemovesWhatAKilledWriterLeftAndNothingElse) {
  Scratch dir;
  io::write_file_atomically(dir.outside("precious"), "precious bytes");
  io::write_file_atomically(dir.out(".minigpt.safetensors.tmp-Ab3dE9"), "half a checkpoint");
  io::write_file_atomically(dir.out(".loss.png.tmp-000000"), "half a picture");
  fs::create_symlink(dir.outside("precious"), dir.out(".train_log.csv.tmp-zzzzzz"));
  fs::create_directories(dir.out(".kept.tmp-AAAAAA"));
  io::write_file_atomically(dir.out(".kept.tmp-AAAAAA/inside"), "kept");
  const std::set<std::string> others{
      "minigpt.safetensors", "minigpt.safetensors.tmp", ".five.tmp-abcde", ".seven.tmp-abcdefg", "no_dot.tmp-abcdef",
      ".tmp-abcdef",         ".punctuation.tmp-ab.def", ".notes.tmp"};
  for (const std::string& name : others) io::write_file_atomically(dir.out(name), "the user's");

  std::vector<std::string> removed = io::remove_stale_temporaries(dir.out(""));

  EXPECT_EQ(removed, (std::vector<std::string>{".loss.png.tmp-000000", ".minigpt.safetensors.tmp-Ab3dE9",
                                               ".train_log.csv.tmp-zzzzzz"}));
  std::set<std::string> left = others;
  left.insert(".kept.tmp-AAAAAA");
  EXPECT_EQ(dir.names_in_out(), left);
  EXPECT_EQ(contents(dir.outside("precious")), "precious bytes");
  EXPECT_EQ(contents(dir.out(".kept.tmp-AAAAAA/inside")), "kept");
  for (const std::string& name : others) EXPECT_EQ(contents(dir.out(name)), "the user's") << name;
  // A directory that cannot be read has nothing to remove.
  EXPECT_TRUE(io::remove_stale_temporaries(dir.out("missing")).empty());
}

// A writer killed between creating its temporary file and renaming it leaves one; the next write
// of the same file is not in its way, and removing the leftover takes only the leftover.
TEST(RemoveStaleTemporaries, AWriteAfterAKilledOneSucceedsAndItsLeftoverGoes) {
  Scratch dir;
  std::string path = dir.out("minigpt.train.safetensors");
  io::write_file_atomically(path, "step 100");
  io::write_file_atomically(dir.out(".minigpt.train.safetensors.tmp-k1LLed"), "step 2");
  io::write_file_atomically(path, "step 200");
  EXPECT_EQ(io::remove_stale_temporaries(dir.out("")),
            (std::vector<std::string>{".minigpt.train.safetensors.tmp-k1LLed"}));
  EXPECT_EQ(dir.names_in_out(), (std::set<std::string>{"minigpt.train.safetensors"}));
  EXPECT_EQ(contents(path), "step 200");
}

}  // namespace
}  // namespace ag
