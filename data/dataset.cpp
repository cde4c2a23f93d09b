#include "dataset.h"

#include <fmt/format.h>

#include <sstream>
#include <stdexcept>

#include "../autograd/format.h"
#include "../autograd/tensor.h"

namespace ag::data {

std::int64_t checked_example_count(const Tensor* tensors, std::size_t count) {
  std::vector<std::string> shapes;
  for (std::size_t k = 0; k < count; ++k) {
    if (!tensors[k].defined()) throw std::invalid_argument(fmt::format("TensorDataset: tensor {} is undefined", k));
    shapes.push_back(fmt::format("{}", tensors[k].shape()));
  }
  for (std::size_t k = 0; k < count; ++k) {
    if (tensors[k].dim() == 0)
      throw std::invalid_argument(fmt::format(
          "TensorDataset: tensor {} is a scalar; each tensor needs a first dim that counts the examples (shapes {})", k,
          fmt::join(shapes, ", ")));
    if (tensors[k].size(0) != tensors[0].size(0))
      throw std::invalid_argument(
          fmt::format("TensorDataset: tensor {} has {} rows and tensor 0 has {}; every tensor needs one row per "
                      "example (shapes {})",
                      k, tensors[k].size(0), tensors[0].size(0), fmt::join(shapes, ", ")));
  }
  return tensors[0].size(0);
}

BatchOrder::BatchOrder(std::int64_t examples, const LoaderOptions& options)
    : examples_(examples), options_(options), generator_(options.seed) {
  if (options.batch_size < 1)
    throw std::invalid_argument(fmt::format("DataLoader: batch_size {} is not positive", options.batch_size));
  if (examples < 0) throw std::invalid_argument(fmt::format("DataLoader: {} examples", examples));
  batches_ =
      options.drop_last ? examples / options.batch_size : (examples + options.batch_size - 1) / options.batch_size;
  if (batches_ == 0)
    throw std::invalid_argument(
        examples == 0
            ? std::string("DataLoader: the dataset has no example")
            : fmt::format("DataLoader: {} examples make no batch of {} with drop_last (an epoch would be empty)",
                          examples, options.batch_size));
}

std::int64_t BatchOrder::epoch() const {
  if (epochs_ == 0) return 0;
  return position_ == batches_ ? epochs_ : epochs_ - 1;
}

void BatchOrder::start_epoch() {
  epoch_start_ = generator_.state();
  order_ = options_.shuffle ? randperm(examples_, generator_) : arange(examples_);
  ++epochs_;
  position_ = 0;
}

Tensor BatchOrder::next() {
  if (epoch_done()) start_epoch();
  std::int64_t begin = position_ * options_.batch_size;
  std::int64_t end = std::min(begin + options_.batch_size, examples_);
  ++position_;
  return order_.slice(0, begin, end);
}

namespace {
constexpr const char* kStateFormat = "attograd-batch-order";
}

std::string BatchOrder::state() const {
  // The generator's own state text comes last: it holds spaces, and runs to the end of the line.
  return fmt::format("{} 1 examples {} batch_size {} shuffle {} drop_last {} epochs {} position {} generator {}",
                     kStateFormat, examples_, options_.batch_size, options_.shuffle ? 1 : 0, options_.drop_last ? 1 : 0,
                     epochs_, position_, epochs_ > 0 ? epoch_start_ : generator_.state());
}

void BatchOrder::set_state(const std::string& state) {
  auto refuse = [&](const std::string& why) {
    throw std::invalid_argument(fmt::format("DataLoader::set_state: {}", why));
  };
  std::istringstream in(state);
  std::string format;
  int version = 0;
  in >> format >> version;
  if (in.fail() || format != kStateFormat)
    refuse(fmt::format("the text does not start with \"{} 1\" (a loader's state())", kStateFormat));
  if (version != 1) refuse(fmt::format("version {} is not 1, the only version this library reads", version));
  auto field = [&](const char* name) {
    std::string key;
    long long value = 0;
    in >> key >> value;
    if (in.fail() || key != name) refuse(fmt::format("the field \"{}\" is missing or not a whole number", name));
    return static_cast<std::int64_t>(value);
  };
  std::int64_t examples = field("examples"), batch_size = field("batch_size"), shuffle = field("shuffle"),
               drop_last = field("drop_last"), epochs = field("epochs"), position = field("position");
  auto mismatch = [&](const char* name, std::int64_t saved, std::int64_t here) {
    if (saved != here)
      refuse(fmt::format("the state is of a loader with {} {}, and this one has {}", name, saved, here));
  };
  mismatch("examples", examples, examples_);
  mismatch("batch_size", batch_size, options_.batch_size);
  mismatch("shuffle", shuffle, options_.shuffle ? 1 : 0);
  mismatch("drop_last", drop_last, options_.drop_last ? 1 : 0);
  if (epochs < 0) refuse(fmt::format("epochs {} is negative", epochs));
  if (position < 0 || position > batches_ || (epochs == 0 && position != 0))
    refuse(fmt::format("position {} is outside 0..{} batches (epochs begun: {})", position, epochs == 0 ? 0 : batches_,
                       epochs));
  std::string key, generator_text;
  in >> key;
  if (in.fail() || key != "generator") refuse("the field \"generator\" is missing");
  std::getline(in >> std::ws, generator_text);
  Generator generator;
  try {
    generator.set_state(generator_text);
  } catch (const std::invalid_argument& e) {
    refuse(fmt::format("the generator's state is refused: {}", e.what()));
  }
  // Checked: now the order is redrawn from the generator as it was at the epoch's start.
  generator_ = generator;
  epochs_ = 0;
  position_ = 0;
  if (epochs > 0) {
    start_epoch();
    epochs_ = epochs;
    position_ = position;
  }
}

}  // namespace ag::data
