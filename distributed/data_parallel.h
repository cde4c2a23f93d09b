// Data-parallel training: one step's gradient as the sum of M micro-batches' gradients, each
// computed by its own backward pass, and summed in a fixed order. One process runs all M in
// turn (gradient accumulation); N processes under mpirun run one each, at the same time, and
// reduce their gradients across the world while backward is still running. Both give the same
// bits (docs/distributed.md).
//
//   ag::dist::DataParallel dp(model.parameters(), {.micro_batches = accumulate});
//   for (std::int64_t k : dp.my_micro_batches()) {     // 0..M-1 alone; {rank} under mpirun
//     dp.begin_micro_batch();
//     Batch b = the k-th slice of the step's global batch;
//     ag::Tensor loss = model.loss(b.x, b.y);
//     loss.backward(dp.loss_weight(loss));              // d(total)/d(loss_k) = 1 / M
//     dp.end_micro_batch();
//     mine.push_back(loss.item() / M);
//   }
//   double step_loss = dp.sum_over_micro_batches(mine);  // the same on every rank
//   // every rank's .grad() now holds g_0 + g_1 + ... + g_(M-1), added in that order
//
// Under mpirun the parameters are grouped into buckets of about `bucket_bytes`, last layers
// first (backward finishes them first). A post-accumulate-grad hook (Tensor::
// register_post_accumulate_grad_hook) counts each bucket's finished gradients; when a bucket
// is complete a communication thread sums it across ranks (sum_in_rank_order) while the main
// thread goes on with the rest of backward. end_micro_batch() waits for what is still in
// flight: that wait is the communication backward could not hide.
#pragma once

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "../autograd/tensor.h"

namespace ag::dist {

struct DataParallelOptions {
  // Micro-batches per step in a single process (gradient accumulation). Under mpirun each
  // process is one micro-batch, so this must be 1 there: M = world_size(). Each micro-batch is
  // one backward pass (under mpirun a second one between begin and end is an error).
  std::int64_t micro_batches = 1;
  // Gradient bytes per bucket (a larger parameter gets a bucket of its own). Smaller buckets
  // start reducing earlier and overlap more of backward; each costs one more round of messages.
  std::int64_t bucket_bytes = 256 << 10;
  // Reduce each bucket during backward, on a communication thread, as soon as it is complete.
  // false: reduce every bucket after backward, on the calling thread (the same sums; for
  // measuring what the overlap buys).
  bool overlap = true;
};

// Figures of the last step under mpirun, summed over its buckets.
struct CommunicationStats {
  std::int64_t buckets = 0;
  // Reduced while backward ran, started by the engine's hooks (with overlap; the rest wait for
  // end_micro_batch).
  std::int64_t buckets_started_during_backward = 0;
  std::int64_t bytes_sent = 0;  // by this process
  double reduce_seconds = 0;    // reducing: on the communication thread, or after backward without overlap
  double exposed_seconds = 0;   // waited for in end_micro_batch(), after backward had finished
  // The share of the reduction time hidden behind backward: 1 - exposed / reduce, within [0, 1].
  double overlap() const;
};

class DataParallel {
 public:
  explicit DataParallel(std::vector<Tensor> parameters, DataParallelOptions options = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // M, the step's micro-batches over all processes, and the global indices this one runs.
  std::int64_t micro_batches() const { return total_; }
  std::vector<std::int64_t> my_micro_batches() const;
  // The gradient to seed a micro-batch's backward with: its weight in the step's loss, in the
  // loss's dtype. The step minimises the mean over all the step's tokens; a micro-batch whose
  // loss is the mean over its own n_k of N tokens weighs n_k / N (1 / M when all hold as many:
  // the default). Every rank knows N: it draws the whole global batch.
  Tensor loss_weight(const Tensor& loss) const { return loss_weight(loss, 1.0 / static_cast<double>(total_)); }
  Tensor loss_weight(const Tensor& loss, double weight) const;

  // Around each micro-batch's forward and backward. begin sets the gradients so far aside
  // (the parameters' .grad() is undefined, ready for this micro-batch's own); end adds the
  // micro-batch's gradients to them, or under mpirun waits for the reduction across ranks.
  void begin_micro_batch();
  void end_micro_batch();

  // The step's loss, on every rank: the weighted micro-batch losses (weight x loss) this
  // process computed, in my_micro_batches() order, summed with everyone's in global order.
  double sum_over_micro_batches(const std::vector<double>& mine) const;

  const CommunicationStats& last_step() const { return stats_; }

 private:
  struct Bucket {
    std::vector<std::size_t> params;  // indices into the parameters
    std::int64_t numel = 0;
    DType dtype = kFloat32;
  };
  // Everything the communication thread touches: the buckets, the finished gradients, and the
  // flags it and the main thread exchange under a mutex. Both hold it through a shared_ptr, so
  // that a DataParallel destroyed half-way through a step (an exception on this rank, which
  // then stops every rank) can leave its thread, detached, with state that still exists.
  struct Channel;
  void on_gradient_ready(std::size_t param);
  void refuse_graph(std::size_t param) const;

  std::vector<Tensor> parameters_;
  DataParallelOptions options_;
  std::int64_t total_ = 1;
  bool distributed_ = false;
  // Gradient accumulation: what earlier micro-batches summed to.
  std::vector<Tensor> accumulated_;
  std::int64_t micro_batch_in_step_ = 0;
  // Under mpirun; the main thread's own bookkeeping.
  std::vector<std::size_t> bucket_of_;
  std::vector<std::uint64_t> hooks_;
  std::vector<int> waiting_;    // per bucket: gradients not yet finished
  std::vector<char> finished_;  // per parameter, this micro-batch
  bool armed_ = false;
  std::shared_ptr<Channel> channel_;
  std::thread thread_;
  CommunicationStats stats_;
};

}  // namespace ag::dist
