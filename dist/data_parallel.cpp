#include "data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "../autograd/dispatch.h"
#include "../autograd/error.h"
#include "dist.h"
#include "launcher.h"

namespace ag::dist {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// acc += g, element by element in acc's dtype: the same additions, in the same order, as
// sum_in_rank_order makes across ranks.
void add_into(Tensor& acc, const Tensor& g) {
  acc.impl()->storage->bump_version();
  dispatch_floating(acc.dtype(), "DataParallel", [&](auto tag) {
    using T = decltype(tag);
    T* a = acc.data_ptr<T>();
    const T* b = g.data_ptr<T>();
    for (std::int64_t i = 0, n = acc.numel(); i < n; ++i) a[i] += b[i];
  });
}

void set_grad(const Tensor& param, const Tensor& grad) { param.impl()->grad = grad.impl(); }

}  // namespace

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
  bucket_of_.resize(parameters_.size());
  for (std::size_t j = parameters_.size(); j-- > 0;) {
    const Tensor& p = parameters_[j];
    std::int64_t bytes = p.numel() * static_cast<std::int64_t>(dtype_size(p.dtype()));
    bool fits = !buckets_.empty() && buckets_.back().dtype == p.dtype() &&
                (buckets_.back().numel * static_cast<std::int64_t>(dtype_size(p.dtype())) + bytes <=
                 options_.bucket_bytes);
    if (!fits) buckets_.push_back({{}, 0, p.dtype()});
    buckets_.back().params.push_back(j);
    buckets_.back().numel += p.numel();
    bucket_of_[j] = buckets_.size() - 1;
  }
  waiting_.resize(buckets_.size());
  ready_.assign(buckets_.size(), 0);
  finished_.assign(parameters_.size(), 0);
  grads_.resize(parameters_.size());
  for (std::size_t j = 0; j < parameters_.size(); ++j)
    hooks_.push_back(parameters_[j].register_post_accumulate_grad_hook([this, j](const Tensor&) { on_gradient_ready(j); }));
  if (options_.overlap && detail::background_communication()) thread_ = std::thread([this] { communicate(); });
}

DataParallel::~DataParallel() {
  for (std::size_t j = 0; j < hooks_.size(); ++j) parameters_[j].remove_post_accumulate_grad_hook(hooks_[j]);
  if (!thread_.joinable()) return;
  bool in_flight;
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    in_flight = armed_ && reduced_ < buckets_.size();
  }
  cv_.notify_all();
  // A step abandoned half-way (an exception on this rank) may have left the thread inside
  // MPI, waiting for ranks that will never answer: it cannot be joined. The process is about to
  // end with dist::abort, which stops every rank.
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
  std::lock_guard lock(mutex_);
  if (error_) std::rethrow_exception(error_);
  for (Tensor& p : parameters_) p.zero_grad();
  for (std::size_t b = 0; b < buckets_.size(); ++b) waiting_[b] = static_cast<int>(buckets_[b].params.size());
  std::fill(finished_.begin(), finished_.end(), 0);
  reduced_ = 0;
  reduce_seconds_in_step_ = 0;
  stats_ = {};
  armed_ = true;
}

void DataParallel::on_gradient_ready(std::size_t j) {
  if (!armed_) return;  // a backward pass outside begin/end_micro_batch: not ours to reduce
  if (finished_[j])
    throw_state("DataParallel",
                "parameter {} (shape {}) received a second gradient in one micro-batch: run one backward pass "
                "between begin_micro_batch() and end_micro_batch()",
                j, shape_str(parameters_[j].shape()));
  finished_[j] = 1;
  grads_[j] = parameters_[j].grad();
  std::size_t b = bucket_of_[j];
  if (--waiting_[b] > 0) return;
  if (!thread_.joinable()) return;  // no communication thread: end_micro_batch reduces everything
  {
    std::lock_guard lock(mutex_);
    ready_[b] = 1;
  }
  cv_.notify_all();
}

void DataParallel::end_micro_batch() {
  if (!distributed_) {
    if (micro_batch_in_step_ > 0 || total_ > 1) {
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
  stats_.buckets_started_during_backward =
      static_cast<std::int64_t>(std::count(waiting_.begin(), waiting_.end(), 0));
  // A parameter this backward did not reach contributes zeros, so that every rank sends the
  // same buckets in the same order.
  for (std::size_t j = 0; j < parameters_.size(); ++j) {
    if (finished_[j]) continue;
    if (!parameters_[j].impl()->grad) set_grad(parameters_[j], zeros(parameters_[j].shape(), parameters_[j].dtype()));
    on_gradient_ready(j);
  }
  auto start = Clock::now();
  if (thread_.joinable()) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return reduced_ == buckets_.size() || error_; });
    if (error_) std::rethrow_exception(error_);
    stats_.reduce_seconds = reduce_seconds_in_step_;
  } else {
    for (const Bucket& bucket : buckets_) reduce_bucket(bucket);
    stats_.reduce_seconds = seconds_since(start);
  }
  stats_.exposed_seconds = seconds_since(start);
  stats_.buckets = static_cast<std::int64_t>(buckets_.size());
  armed_ = false;
  for (Tensor& g : grads_) g = Tensor();
}

void DataParallel::reduce_bucket(const Bucket& bucket) {
  std::int64_t before = bytes_sent();
  std::size_t elem = dtype_size(bucket.dtype);
  std::vector<char> flat(static_cast<std::size_t>(bucket.numel) * elem);
  std::size_t offset = 0;
  for (std::size_t j : bucket.params) {
    std::size_t n = static_cast<std::size_t>(grads_[j].numel()) * elem;
    std::memcpy(flat.data() + offset, grads_[j].raw_data(), n);
    offset += n;
  }
  sum_in_rank_order(flat.data(), bucket.numel, bucket.dtype);
  offset = 0;
  for (std::size_t j : bucket.params) {
    std::size_t n = static_cast<std::size_t>(grads_[j].numel()) * elem;
    grads_[j].impl()->storage->bump_version();
    std::memcpy(const_cast<void*>(grads_[j].raw_data()), flat.data() + offset, n);
    offset += n;
  }
  stats_.bytes_sent += bytes_sent() - before;
}

void DataParallel::communicate() {
  std::size_t next = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || ready_[next]; });
      if (stop_) return;
      ready_[next] = 0;
    }
    auto start = Clock::now();
    try {
      reduce_bucket(buckets_[next]);
    } catch (...) {
      std::lock_guard lock(mutex_);
      error_ = std::current_exception();
      cv_.notify_all();
      return;
    }
    {
      std::lock_guard lock(mutex_);
      reduce_seconds_in_step_ += seconds_since(start);
      ++reduced_;
    }
    cv_.notify_all();
    next = (next + 1) % buckets_.size();
  }
}

}  // namespace ag::dist
