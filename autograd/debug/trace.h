// Op traces: every value a training step computes, written to a file, so that two runs that
// should agree byte for byte (1 and 2 threads, one process and several, two builds) or that
// should differ only by rounding (two kernel routes, bf16 against float32) can be compared op
// by op, and the first op that differs named.
//
//   {
//     ag::debug::OpTrace trace("run.trace");  // this thread's ops go to the file
//     trace.set_place(step, 0);                // what follows belongs to step `step`, micro-batch 0
//     Tensor loss = model.loss(x, y);          // each op's output: a "forward" entry
//     loss.backward();                         // each gradient an op's backward returns: "backward"
//     trace.pause();
//     opt.step();
//     for (auto& [name, p] : model.named_parameters()) trace.add(step, name, p);  // "update"
//   }
//   ag::debug::TraceComparison c = ag::debug::compare_traces({"a.trace"}, {"b.trace"});
//
// compare_traces reads two traces entry by entry and stops at the first entry that differs:
// by op (the runs took different paths: it names both) or by value (it names the op, its call
// index within its pass, its input shapes, the largest difference and where). A trace made of
// several files (one per process under mpirun, each with its own micro-batches) is read as
// one, its entries in the order of (step, micro-batch); the update entries come after a step's
// micro-batches.
//
// It watches through the graph observer of ../hooks.h, as anomaly mode does, and passes what it
// sees on to the observer it replaced (and puts that one back when it ends). The file holds the raw bytes of every
// value in this machine's byte order: a debugging artifact of one machine, not a format to keep. Traces grow with every
// op of every step: a few steps of a small model are what it is for.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "../hooks.h"

namespace ag::debug {

class OpTrace final : public GraphObserver {
 public:
  // Creates (or replaces) `path` and installs the trace as this thread's graph observer. Throws
  // std::runtime_error if the file cannot be written.
  explicit OpTrace(const std::string& path);
  ~OpTrace() override;
  OpTrace(const OpTrace&) = delete;
  OpTrace& operator=(const OpTrace&) = delete;

  // The ops that follow belong to this step and micro-batch (both from 0), until pause().
  void set_place(std::int64_t step, std::int64_t micro_batch);
  // Ops run while paused (an evaluation, say) are not written.
  void pause();
  // A value computed outside the graph after step `step`'s micro-batches: a parameter after the
  // optimizer's update, under its name.
  void add(std::int64_t step, const std::string& name, const Tensor& value);
  // Entries written so far.
  std::int64_t entries() const { return entries_; }

  void recorded(const std::string& op, const Tensor& output, const std::vector<Tensor>& inputs, Node* node) override;
  void before_backward(Node& node, const Tensor& grad_output) override;
  void after_backward(const Node& node, const std::vector<Tensor>& grads, const Tensor& grad_output) override;

 private:
  void write(const std::string& phase, const std::string& op, std::int64_t call, std::int64_t input,
             const std::string& inputs, const Tensor& value, std::int64_t micro_batch, std::int64_t step);
  std::int64_t call_index(const std::string& phase, const std::string& op);

  std::string path_;
  GraphObserver* previous_;
  std::ofstream out_;
  bool active_ = false;
  std::int64_t step_ = 0, micro_batch_ = 0, entries_ = 0;
  std::vector<std::pair<std::string, std::int64_t>> calls_;  // (phase + op, calls so far) in this place
  std::int64_t update_step_ = -1;
};

// What compare_traces found.
struct TraceComparison {
  bool identical = false;  // every entry of both, byte for byte, and as many of each
  std::int64_t same = 0;   // entries equal before the first difference
  std::string report;      // what a person reads: the first difference, or that there is none
};

// Compares trace `a` (one file, or one per process) with trace `b`. Throws std::invalid_argument
// naming the file for one that is not a trace or is cut short.
TraceComparison compare_traces(const std::vector<std::string>& a, const std::vector<std::string>& b);

}  // namespace ag::debug
