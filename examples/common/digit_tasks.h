// Digit-sequence tasks for encoder-decoder models: reverse (or sort) a sequence of digits.
// Shared by the seq2seq example and the experiments.
//
//   source  3 1 4 1 5          decoder input   <s> 5 1 4 1 3
//   target  5 1 4 1 3 </s>     (teacher forcing: the right answer so far, shifted by one)
//
// One sequence in ten is held out, by a hash that does not depend on the run; training never
// draws those.
#pragma once

#include <attograd/attograd.h>

#include <functional>
#include <string>
#include <vector>

namespace ag::examples::digits {

constexpr std::int64_t kBos = 10, kEos = 11, kPad = 12, kVocab = 13;

using Sequence = std::vector<std::int64_t>;

struct Task {
  std::string kind = "reverse";  // or "sort"
  std::int64_t min_len = 4, max_len = 8;
};

bool is_held_out(const Sequence& s);
Sequence random_sequence(const Task& task, Generator& gen);
Sequence answer(const Task& task, Sequence s);
std::string to_string(const Sequence& s);

struct Batch {
  Tensor src, src_mask, tgt_in, tgt_out;
};
// Pads to the longest sequence; the source mask marks real tokens, and padded target positions
// are ignored by the loss (ignore_index = kPad).
Batch make_batch(const Task& task, const std::vector<Sequence>& sources);

struct TrainSettings {
  std::int64_t steps = 1500, batch = 64;
  double lr = 2e-3;
  // Micro-batches of `batch` sequences per step, their gradients summed in order; under
  // mpirun each process runs one (ag::dist::DataParallel).
  std::int64_t grad_accum = 1;
};
// How a batch becomes logits [B, T, kVocab]; empty means model.forward(src, tgt_in, src_mask).
// An experiment passes its own to change what the decoder reads.
using Forward = std::function<Tensor(const Batch&)>;

// AdamW with warm-up + cosine on batches of training (not held-out) sequences, with a
// progress bar labelled `label` (rank 0's only, under mpirun). Returns the last step's loss.
double train(nn::Transformer& model, const Task& task, const TrainSettings& s, Generator& data,
             const std::string& label = "", const Forward& forward = {});
// The same for any model, `forward` required: a recurrent encoder-decoder, say.
double train(nn::Module& model, const Task& task, const TrainSettings& s, Generator& data, const std::string& label,
             const Forward& forward);

// Teacher-forced accuracy of `forward` on `sequences`, run without a graph (the caller puts the
// model in evaluation mode; train() leaves it there):
// the share of output digits predicted right, and the share of sequences with every digit and
// the end marker right. The second is exactly what greedy decoding gets right, since a greedy
// decoder that has made no mistake so far sees the same input as teacher forcing.
struct Accuracy {
  double per_digit = 0, whole = 0;
};
Accuracy teacher_forced_accuracy(const Task& task, const std::vector<Sequence>& sequences, const Forward& forward);

// Greedy decoding of one source sequence; `cross` receives the last step's cross-attention.
Sequence decode(nn::Transformer& model, const Sequence& source, std::vector<Tensor>* cross = nullptr);
// Up to `count` distinct held-out sequences (fewer when short lengths do not have that many).
std::vector<Sequence> held_out_set(const Task& task, std::int64_t count, Generator& gen);
// The fraction of `sequences` decoded exactly right.
double exact_accuracy(nn::Transformer& model, const Task& task, const std::vector<Sequence>& sequences);

}  // namespace ag::examples::digits
