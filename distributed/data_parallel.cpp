#include "data_parallel.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <unordered_set>

#include "../autograd/dispatch.h"
#include "../runtime/error.h"
#include "dist.h"
#include "launch.h"

namespace ag::dist {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// acc += g, element by element in acc's dtype: the same additions, in the same order, as
// sum_in_rank_order makes across ranks.
void add_into(Tensor& acc, const Tensor& g) {
  dispatch_floating(acc.dtype(), "DataParallel", [&](auto tag) {
    using T = decltype(tag);
    T* a = acc.mutable_data_ptr<T>();
    const T* b = g.data_ptr<T>();
    for (std::int64_t i = 0, n = acc.numel(); i < n; ++i) a[i] += b[i];
  });
}

void set_grad(const Tensor& param, const Tensor& grad) { param.impl()->grad = grad.impl(); }

}  // namespace

struct DataParallel::Channel {
  std::vector<Bucket> buckets;
  std::vector<Tensor> grads;  // per parameter: its finished gradient, set before its bucket is ready
  std::mutex mutex;
  std::condition_variable cv;
  // Under mutex:
  std::vector<char> ready;  // per bucket
  std::size_t reduced = 0;  // buckets reduced this micro-batch
  bool stop = false;
  std::exception_ptr error;
  double reduce_seconds = 0;
  std::int64_t bytes_sent = 0;

  // Sums one bucket across ranks: its gradients copied into one buffer, reduced in rank order,
  // and copied back.
  void reduce(const Bucket& bucket) {
    std::int64_t before = dist::bytes_sent();
    std::size_t elem = dtype_size(bucket.dtype);
    std::vector<char> flat(static_cast<std::size_t>(bucket.numel) * elem);
    std::size_t offset = 0;
    for (std::size_t j : bucket.params) {
      std::size_t n = static_cast<std::size_t>(grads[j].numel()) * elem;
      std::memcpy(flat.data() + offset, grads[j].raw_data(), n);
      offset += n;
    }
    sum_in_rank_order(flat.data(), bucket.numel, bucket.dtype);
    offset = 0;
    for (std::size_t j : bucket.params) {
      std::size_t n = static_cast<std::size_t>(grads[j].numel()) * elem;
      Tensor g = grads[j];  // a handle to the gradient itself
      std::memcpy(g.mutable_raw_data(), flat.data() + offset, n);
      offset += n;
    }
    std::lock_guard lock(mutex);
    bytes_sent += dist::bytes_sent() - before;
  }

  // The communication thread: each bucket in turn, as soon as the main thread says it is ready.
  void communicate() {
    std::size_t next = 0;
    for (;;) {
      {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return stop || ready[next]; });
        if (stop) return;
        ready[next] = 0;
      }
      auto start = Clock::now();
      try {
        reduce(buckets[next]);
      } catch (...) {
        std::lock_guard lock(mutex);
        error = std::current_exception();
        cv.notify_all();
        return;
      }
      {
        std::lock_guard lock(mutex);
        reduce_seconds += seconds_since(start);
        ++reduced;
      }
      cv.notify_all();
      next = (next + 1) % buckets.size();
    }
  }
};

double CommunicationStats::overlap() const {
  if (reduce_seconds <= 0) return 0;
  return std::clamp(1.0 - exposed_seconds / reduce_seconds, 0.0, 1.0);
}

DataParallel::DataParallel(std::vector<Tensor> parameters, DataParallelOptions options)
    : parameters_(std::move(parameters)), options_(options) {
  if (options_.micro_batches < 1)
    throw_invalid("DataParallel", "micro_batches must be at least 1, got {}", options_.micro_batches);
  if (options_.bucket_bytes < 1)
    throw_invalid("DataParallel", "bucket_bytes must be at least 1, got {}", options_.bucket_bytes);
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const Tensor& p = parameters_[i];
    if (!p.defined() || !p.requires_grad() || p.grad_fn() || !is_floating(p.dtype()))
      throw_invalid("DataParallel", "parameter {} is not a floating-point leaf that requires grad", i);
  }
  // A tensor listed twice would be summed twice.
  std::unordered_set<const TensorImpl*> seen;
  for (std::size_t i = 0; i < parameters_.size(); ++i)
    if (!seen.insert(parameters_[i].impl().get()).second)
      throw_invalid("DataParallel", "parameter {} (shape {}) is listed twice", i, shape_str(parameters_[i].shape()));
  distributed_ = world_size() > 1;
  if (distributed_ && options_.micro_batches != 1)
    throw_invalid("DataParallel",
                  "{} micro-batches per process with {} processes: under mpirun each process is one micro-batch "
                  "(the sum across processes is fixed in rank order; partial sums inside each would change it). Use "
                  "mpirun -np {} instead",
                  options_.micro_batches, world_size(), options_.micro_batches * world_size());
  total_ = distributed_ ? world_size() : options_.micro_batches;
  if (!distributed_) return;

  // Buckets, last parameter first: backward reaches the output's layers first. A new bucket
  // starts when the dtype changes or the current one is full.
  channel_ = std::make_shared<Channel>();
  std::vector<Bucket>& buckets = channel_->buckets;
  bucket_of_.resize(parameters_.size());
  for (std::size_t j = parameters_.size(); j-- > 0;) {
    const Tensor& p = parameters_[j];
    std::int64_t bytes = p.numel() * static_cast<std::int64_t>(dtype_size(p.dtype()));
    bool fits =
        !buckets.empty() && buckets.back().dtype == p.dtype() &&
        (buckets.back().numel * static_cast<std::int64_t>(dtype_size(p.dtype())) + bytes <= options_.bucket_bytes);
    if (!fits) buckets.push_back({{}, 0, p.dtype()});
    buckets.back().params.push_back(j);
    buckets.back().numel += p.numel();
    bucket_of_[j] = buckets.size() - 1;
  }
  waiting_.resize(buckets.size());
  channel_->ready.assign(buckets.size(), 0);
  finished_.assign(parameters_.size(), 0);
  channel_->grads.resize(parameters_.size());
  for (std::size_t j = 0; j < parameters_.size(); ++j)
    hooks_.push_back(
        parameters_[j].register_post_accumulate_grad_hook([this, j](const Tensor&) { on_gradient_ready(j); }));
  if (options_.overlap && !buckets.empty() && detail::background_communication())
    thread_ = std::thread([channel = channel_] { channel->communicate(); });
}

DataParallel::~DataParallel() {
  for (std::size_t j = 0; j < hooks_.size(); ++j) parameters_[j].remove_post_accumulate_grad_hook(hooks_[j]);
  if (!thread_.joinable()) return;
  bool in_flight;
  {
    std::lock_guard lock(channel_->mutex);
    channel_->stop = true;
    in_flight = armed_ && channel_->reduced < channel_->buckets.size();
  }
  channel_->cv.notify_all();
  // A step abandoned half-way (an exception on this rank) may have left the thread inside MPI,
  // waiting for ranks that will never answer: it cannot be joined. It keeps the channel alive;
  // the process is about to end with dist::abort, which stops every rank.
  if (in_flight)
    thread_.detach();
  else
    thread_.join();
}

std::vector<std::int64_t> DataParallel::my_micro_batches() const {
  if (distributed_) return {rank()};
  std::vector<std::int64_t> all(static_cast<std::size_t>(total_));
  for (std::int64_t k = 0; k < total_; ++k) all[static_cast<std::size_t>(k)] = k;
  return all;
}

Tensor DataParallel::loss_weight(const Tensor& loss, double weight) const {
  if (!(weight >= 0 && weight <= 1))
    throw_invalid("DataParallel::loss_weight", "a micro-batch's weight must be in [0, 1], got {}", weight);
  return full(loss.shape(), weight, loss.dtype());
}

double DataParallel::sum_over_micro_batches(const std::vector<double>& mine) const {
  if (mine.size() != (distributed_ ? 1 : static_cast<std::size_t>(total_)))
    throw_invalid("DataParallel::sum_over_micro_batches", "got {} values; this process ran {} micro-batches",
                  mine.size(), distributed_ ? 1 : total_);
  std::vector<double> all = distributed_ ? all_gather(mine[0]) : mine;
  double total = 0;
  for (double v : all) total += v;
  return total;
}

void DataParallel::begin_micro_batch() {
  if (!distributed_) {
    // The first micro-batch of a step starts from no gradient; later ones set the sum so far aside.
    if (micro_batch_in_step_ == 0) {
      accumulated_.assign(parameters_.size(), Tensor());
      for (Tensor& p : parameters_) p.zero_grad();
      return;
    }
    for (std::size_t j = 0; j < parameters_.size(); ++j) {
      accumulated_[j] = parameters_[j].impl()->grad ? Tensor(parameters_[j].impl()->grad) : Tensor();
      parameters_[j].zero_grad();
    }
    return;
  }
  std::lock_guard lock(channel_->mutex);
  if (channel_->error) std::rethrow_exception(channel_->error);
  for (Tensor& p : parameters_) p.zero_grad();
  for (std::size_t b = 0; b < waiting_.size(); ++b) waiting_[b] = static_cast<int>(channel_->buckets[b].params.size());
  std::fill(finished_.begin(), finished_.end(), 0);
  channel_->reduced = 0;
  channel_->reduce_seconds = 0;
  channel_->bytes_sent = 0;
  stats_ = {};
  armed_ = true;
}

// The summed gradient is written in place, outside any graph: a gradient that carries one
// (backward with create_graph) would silently lose it.
void DataParallel::refuse_graph(std::size_t j) const {
  const Tensor& p = parameters_[j];
  if (p.impl()->grad && p.impl()->grad->grad_fn)
    throw_state("DataParallel",
                "parameter {} (shape {}) received a gradient with a graph (backward with create_graph): the "
                "summed gradient is written outside that graph, so higher-order gradients cannot be reduced; "
                "differentiate with ag::grad, or without create_graph",
                j, shape_str(p.shape()));
}

void DataParallel::on_gradient_ready(std::size_t j) {
  if (!armed_) return;  // a backward pass outside begin/end_micro_batch: not ours to reduce
  if (finished_[j])
    throw_state("DataParallel",
                "parameter {} (shape {}) received a second gradient in one micro-batch: run one backward pass "
                "between begin_micro_batch() and end_micro_batch()",
                j, shape_str(parameters_[j].shape()));
  finished_[j] = 1;
  // Every op that used the parameter may have returned no gradient: it then contributes zeros.
  const Tensor& p = parameters_[j];
  refuse_graph(j);
  if (!p.impl()->grad) set_grad(p, zeros(p.shape(), p.dtype()));
  channel_->grads[j] = p.grad();
  std::size_t b = bucket_of_[j];
  if (--waiting_[b] > 0) return;
  if (!thread_.joinable()) return;  // no communication thread: end_micro_batch reduces everything
  {
    std::lock_guard lock(channel_->mutex);
    channel_->ready[b] = 1;
  }
  channel_->cv.notify_all();
}

void DataParallel::end_micro_batch() {
  if (!distributed_) {
    if (micro_batch_in_step_ > 0 || total_ > 1) {
      for (std::size_t j = 0; j < parameters_.size(); ++j) refuse_graph(j);
      for (std::size_t j = 0; j < parameters_.size(); ++j) {
        const Tensor& p = parameters_[j];
        Tensor g = p.impl()->grad ? Tensor(p.impl()->grad) : zeros(p.shape(), p.dtype());
        Tensor& acc = accumulated_[j];
        if (micro_batch_in_step_ == 0) {
          set_grad(p, g);  // the step's first gradient: nothing to add yet
          continue;
        }
        if (!acc.defined()) acc = zeros(p.shape(), p.dtype());
        add_into(acc, g);
        set_grad(p, acc);
      }
    }
    micro_batch_in_step_ = (micro_batch_in_step_ + 1) % total_;
    return;
  }
  if (!armed_) throw_state("DataParallel", "end_micro_batch() without begin_micro_batch()");
  Channel& channel = *channel_;
  if (thread_.joinable())
    stats_.buckets_started_during_backward = static_cast<std::int64_t>(std::count(waiting_.begin(), waiting_.end(), 0));
  // A parameter this backward did not reach contributes zeros, so that every rank sends the
  // same buckets in the same order.
  for (std::size_t j = 0; j < parameters_.size(); ++j)
    if (!finished_[j]) on_gradient_ready(j);
  auto start = Clock::now();
  if (thread_.joinable()) {
    std::unique_lock lock(channel.mutex);
    channel.cv.wait(lock, [&] { return channel.reduced == channel.buckets.size() || channel.error; });
    if (channel.error) std::rethrow_exception(channel.error);
  } else {
    for (const Bucket& bucket : channel.buckets) {
      auto bucket_start = Clock::now();
      channel.reduce(bucket);
      channel.reduce_seconds += seconds_since(bucket_start);
    }
  }
  stats_.exposed_seconds = seconds_since(start);
  {
    std::lock_guard lock(channel.mutex);
    stats_.reduce_seconds = channel.reduce_seconds;
    stats_.bytes_sent = channel.bytes_sent;
  }
  stats_.buckets = static_cast<std::int64_t>(channel.buckets.size());
  armed_ = false;
  for (Tensor& g : channel.grads) g = Tensor();
}

}  // namespace ag::dist
