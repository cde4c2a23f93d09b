// Batches from tensors: a dataset whose examples are the rows of a few tensors, and a loader
// that deals them out in batches, in a seeded shuffled order that a checkpoint can save.
//
//   ag::data::TensorDataset train(x, y);                // x [N, ...], y [N, ...]: example i is (x[i], y[i])
//   ag::data::DataLoader loader(train, {.batch_size = 32, .shuffle = true, .seed = 1});
//   for (int epoch = 0; epoch < 10; ++epoch)
//     for (auto [xb, yb] : loader) { ... }              // one epoch: xb [32, ...], yb [32, ...]
//
// Each range-for over the loader runs one epoch (or the rest of the one in progress); next()
// gives batch after batch across epochs, for a loop counted in steps. The order depends on the
// seed alone, so it is the same on every machine (the generator is ag::Generator), and state()
// is the loader's whole position as text: saved beside a model and restored by set_state, a
// resumed run gets exactly the batches the unbroken run would have had.
//
// Like torch.utils.data.TensorDataset and DataLoader(batch_size, shuffle, drop_last) with a
// seeded generator. The examples are picked with index_select, one copy per batch.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <type_traits>
#include <utility>

#include "../autograd/generator.h"
#include "../autograd/tensor.h"
#include "../ops/indexing.h"

namespace ag::data {

// Checks what TensorDataset needs of its tensors (at least one dim each, one size(0) for all),
// naming the tensor at fault and every shape. Returns that size(0).
std::int64_t checked_example_count(const Tensor* tensors, std::size_t count);

// N tensors with one first dimension; example i is their rows i. Any dtype (int64 token ids,
// float features, bool masks). `TensorDataset data(x, y);` deduces N.
template <std::size_t N>
class TensorDataset {
  static_assert(N >= 1, "TensorDataset: give it at least one tensor");

 public:
  using Example = std::array<Tensor, N>;

  explicit TensorDataset(Example tensors) : tensors_(std::move(tensors)) {
    size_ = checked_example_count(tensors_.data(), N);
  }
  template <class... T>
  requires(sizeof...(T) == N && (std::is_convertible_v<T, Tensor> && ...)) explicit TensorDataset(T&&... tensors)
      : TensorDataset(Example{Tensor(std::forward<T>(tensors))...}) {}

  std::int64_t size() const { return size_; }
  const Example& tensors() const { return tensors_; }
  // The examples at `indices` (int64 [m], each in 0..size-1), stacked: each tensor's rows.
  Example get(const Tensor& indices) const {
    Example out;
    for (std::size_t k = 0; k < N; ++k) out[k] = index_select(tensors_[k], 0, indices);
    return out;
  }

 private:
  Example tensors_;
  std::int64_t size_ = 0;
};

template <class... T>
TensorDataset(T...) -> TensorDataset<sizeof...(T)>;

struct LoaderOptions {
  std::int64_t batch_size = 1;
  bool shuffle = false;    // as in PyTorch: the dataset's order unless asked
  bool drop_last = false;  // leave out a last batch smaller than batch_size
  std::uint64_t seed = 0;  // the shuffling generator's seed
};

// The order of the examples, epoch by epoch: which indices each batch takes. DataLoader is this
// plus the dataset; it is apart so the order can be used (and tested) without tensors.
class BatchOrder {
 public:
  // Refuses batch_size < 1, and an epoch of no batch (an empty dataset, or drop_last with fewer
  // examples than one batch), naming the numbers.
  BatchOrder(std::int64_t examples, const LoaderOptions& options);

  std::int64_t batches_per_epoch() const { return batches_; }
  // The epoch the next batch comes from, counting from 0.
  std::int64_t epoch() const;
  // True when the epoch in progress has given all its batches (or none has begun).
  bool epoch_done() const { return epochs_ == 0 || position_ == batches_; }
  // The indices (int64 [batch]) of the next batch of the epoch in progress, starting the next
  // epoch first when this one is done.
  Tensor next();

  // The whole position as one line of text: the options it must be restored into, the epochs
  // begun, the batches given in the last of them, and the generator as it was when that epoch
  // drew its order. set_state checks every field, and that the options are this order's (the
  // dataset size and batch size, shuffle and drop_last; not the seed, which the saved generator
  // replaces), and changes nothing when it refuses.
  std::string state() const;
  void set_state(const std::string& state);

 private:
  void start_epoch();
  std::int64_t examples_, batches_;
  LoaderOptions options_;
  Generator generator_;
  std::string epoch_start_;  // the generator's state before the epoch in progress drew its order
  std::int64_t epochs_ = 0, position_ = 0;
  Tensor order_;  // int64 [examples]
};

template <std::size_t N>
class DataLoader {
 public:
  using Batch = typename TensorDataset<N>::Example;

  DataLoader(TensorDataset<N> dataset, const LoaderOptions& options)
      : dataset_(std::move(dataset)), order_(dataset_.size(), options) {}

  // The next batch, across epochs without end: for a loop counted in steps.
  Batch next() { return dataset_.get(order_.next()); }

  // A range over the rest of the epoch in progress, or over the next epoch when it is done.
  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    explicit Iterator(DataLoader* loader) : loader_(loader) { advance(); }
    const Batch& operator*() const { return batch_; }
    const Batch* operator->() const { return &batch_; }
    Iterator& operator++() {
      advance();
      return *this;
    }
    bool operator==(std::default_sentinel_t) const { return loader_ == nullptr; }

   private:
    void advance() {
      if (loader_->order_.epoch_done() && started_) {
        loader_ = nullptr;
        return;
      }
      started_ = true;
      batch_ = loader_->next();
    }
    DataLoader* loader_ = nullptr;
    bool started_ = false;
    Batch batch_;
  };
  Iterator begin() { return Iterator(this); }
  std::default_sentinel_t end() const { return {}; }

  const TensorDataset<N>& dataset() const { return dataset_; }
  std::int64_t size() const { return order_.batches_per_epoch(); }  // batches per epoch
  std::int64_t epoch() const { return order_.epoch(); }
  std::string state() const { return order_.state(); }
  void set_state(const std::string& state) { order_.set_state(state); }
  // What a checkpoint saves of the loader (io::save_checkpoint): the order alone, as the
  // dataset is the program's to rebuild.
  BatchOrder& order() { return order_; }
  const BatchOrder& order() const { return order_; }

 private:
  TensorDataset<N> dataset_;
  BatchOrder order_;
};

}  // namespace ag::data
