// Op traces (autograd/debug/trace.h): what a trace holds, and what comparing two says.
#include "autograd/debug/trace.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../test_util.h"

namespace ag {
namespace {

namespace fs = std::filesystem;

class Scratch {
 public:
  Scratch() {
    std::string pattern = (fs::temp_directory_path() / "attograd_trace_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    root_ = pattern;
  }
  ~Scratch() { fs::remove_all(root_); }
  std::string path(const std::string& name) const { return (root_ / name).string(); }

 private:
  fs::path root_;
};

// One "step" of loss = sum(x * w) on micro-batch `micro`, traced, then w -= 0.5 * grad as the
// update. Entries: forward mul and sum; backward: sum's gradient for its input, mul's for x and
// for w; one update entry, after the last micro-batch.
void traced_step(debug::OpTrace& trace, const std::vector<double>& x_values, Tensor& w, std::int64_t micro,
                 bool update) {
  Tensor x = tensor(x_values, {2, 3});
  x.requires_grad_();
  trace.set_place(0, micro);
  Tensor loss = (x * w).sum();
  loss.backward();
  trace.pause();
  if (update) {
    NoGradGuard no_grad;
    std::vector<float> wv = w.to_vector<float>(), g = w.grad().to_vector<float>();
    for (std::size_t i = 0; i < wv.size(); ++i) wv[i] -= 0.5f * g[i];
    w = tensor(std::vector<double>(wv.begin(), wv.end()), {2, 3});
    w.requires_grad_();
    trace.add(0, "w", w);
  }
}

Tensor weights() {
  Tensor w = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  w.requires_grad_();
  return w;
}

const std::vector<double> kX = {0.5, -1, 2, 0.25, 3, -2};

TEST(OpTrace, HoldsEveryOutputAndGradientAndUpdate) {
  Scratch dir;
  Tensor w = weights();
  std::int64_t written = 0;
  {
    debug::OpTrace trace(dir.path("a"));
    traced_step(trace, kX, w, 0, true);
    written = trace.entries();
  }
  EXPECT_EQ(written, 6);  // mul, sum; sum's gradient, mul's two; w after the update
  debug::TraceComparison same = debug::compare_traces({dir.path("a")}, {dir.path("a")});
  EXPECT_TRUE(same.identical);
  EXPECT_EQ(same.same, 6);
  EXPECT_EQ(same.report, "identical: 6 entries, byte for byte");
  EXPECT_EQ(graph_observer(), nullptr);  // the trace took itself away
}

TEST(OpTrace, NamesTheFirstOpThatDiffersAndByHowMuch) {
  Scratch dir;
  Tensor w = weights(), w2 = weights();
  {
    debug::OpTrace trace(dir.path("a"));
    traced_step(trace, kX, w, 0, true);
  }
  std::vector<double> x2 = kX;
  x2[4] = 3.25;  // x[1][1]: x * w changes there by 0.25 * 5 = 1.25, and nowhere else
  {
    debug::OpTrace trace(dir.path("b"));
    traced_step(trace, x2, w2, 0, true);
  }
  debug::TraceComparison c = debug::compare_traces({dir.path("a")}, {dir.path("b")});
  EXPECT_FALSE(c.identical);
  EXPECT_EQ(c.same, 0);
  EXPECT_NE(c.report.find("first difference, entry 1: step 1, micro-batch 0, forward: mul (call 1 in this pass) of "
                          "[2, 3], [2, 3] -> [2, 3] float32"),
            std::string::npos)
      << c.report;
  EXPECT_NE(c.report.find("1 of 6 elements differ; the largest difference is 1.25 at [1, 1] (A 15, B 16.25"),
            std::string::npos)
      << c.report;
}

TEST(OpTrace, ReadsOneFilePerProcessAsOneTrace) {
  Scratch dir;
  // One process: micro-batches 0 and 1, then the update.
  Tensor w = weights();
  {
    debug::OpTrace trace(dir.path("one"));
    traced_step(trace, kX, w, 0, false);
    traced_step(trace, kX, w, 1, true);
  }
  // Two processes: the second micro-batch and the update in the first's file, the first
  // micro-batch in the other's (their order in the files does not matter, their places do).
  Tensor w2 = weights();
  {
    debug::OpTrace trace(dir.path("rank1"));
    traced_step(trace, kX, w2, 0, false);
  }
  {
    debug::OpTrace trace(dir.path("rank0"));
    traced_step(trace, kX, w2, 1, true);
  }
  debug::TraceComparison c = debug::compare_traces({dir.path("one")}, {dir.path("rank0"), dir.path("rank1")});
  EXPECT_TRUE(c.identical) << c.report;
  EXPECT_EQ(c.same, 11);  // 5 a micro-batch, one update
  // Without the second file, B ends where A's second micro-batch begins.
  debug::TraceComparison cut = debug::compare_traces({dir.path("one")}, {dir.path("rank0")});
  EXPECT_FALSE(cut.identical);
  EXPECT_NE(cut.report.find("the runs part at entry 1"), std::string::npos) << cut.report;
}

TEST(OpTrace, RunsOfOtherOpsAreComparedByTheirWeights) {
  Scratch dir;
  Tensor w = weights(), w2 = weights();
  {
    debug::OpTrace trace(dir.path("a"));
    traced_step(trace, kX, w, 0, true);
  }
  {  // (x * w).sum() written as (w * x).sum() * 1: other ops, the same update
    debug::OpTrace trace(dir.path("b"));
    Tensor x = tensor(kX, {2, 3});
    trace.set_place(0, 0);
    Tensor loss = (w2 * x).sum() * 1.0;
    loss.backward();
    trace.pause();
    NoGradGuard no_grad;
    std::vector<float> wv = w2.to_vector<float>(), g = w2.grad().to_vector<float>();
    for (std::size_t i = 0; i < wv.size(); ++i) wv[i] -= 0.5f * g[i];
    trace.add(0, "w", tensor(std::vector<double>(wv.begin(), wv.end()), {2, 3}));
  }
  debug::TraceComparison c = debug::compare_traces({dir.path("a")}, {dir.path("b")});
  EXPECT_FALSE(c.identical);
  EXPECT_NE(c.report.find("the weights after every update are identical, byte for byte (1 tensors)"), std::string::npos)
      << c.report;
}

TEST(OpTrace, RefusesWhatIsNotATraceNamingTheFile) {
  Scratch dir;
  { std::ofstream(dir.path("text")) << "hello\n"; }
  Tensor w = weights();
  {
    debug::OpTrace trace(dir.path("a"));
    traced_step(trace, kX, w, 0, true);
  }
  std::string bytes = [&] {
    std::ifstream in(dir.path("a"), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  { std::ofstream(dir.path("cut"), std::ios::binary) << bytes.substr(0, bytes.size() - 3); }
  {
    // Cut inside the last entry's line, with dimensions that would ask for 2^40 bytes of data
    // were the rest of the file taken for it.
    std::size_t last = bytes.rfind("entry 0 -1 update ");  // the last entry: w after the update
    ASSERT_NE(last, std::string::npos);
    std::ofstream(dir.path("cutline"), std::ios::binary)
        << bytes.substr(0, last) << "entry 0 -1 update 1 -1 float32 2 1048576 1048576 1 0";
  }
  auto message = [&](const std::string& name) -> std::string {
    try {
      debug::compare_traces({dir.path(name)}, {dir.path("a")});
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message("text").find(dir.path("text") + ": not an op trace"), std::string::npos) << message("text");
  EXPECT_NE(message("cut").find(dir.path("cut") + ": entry 6 is not readable: the file ends inside it"),
            std::string::npos)
      << message("cut");
  EXPECT_NE(message("cutline").find(dir.path("cutline") + ": entry 6 is not readable: the file ends inside it"),
            std::string::npos)
      << message("cutline");
  EXPECT_NE(message("missing").find("cannot be read"), std::string::npos);
  EXPECT_THROW(debug::OpTrace(dir.path("no/such/dir/t")), std::runtime_error);
}

}  // namespace
}  // namespace ag
