#include "digit_tasks.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "finite.h"
#include "progress.h"
#include "stop.h"

namespace ag::examples::digits {

bool is_held_out(const Sequence& s) {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (auto d : s) h = (h ^ static_cast<std::uint64_t>(d + 1)) * 1099511628211ULL;
  return h % 10 == 0;
}

Sequence random_sequence(const Task& task, Generator& gen) {
  auto span = static_cast<std::uint64_t>(task.max_len - task.min_len + 1);
  auto len = task.min_len + static_cast<std::int64_t>(gen.next_u64() % span);
  Sequence s(static_cast<std::size_t>(len));
  for (auto& d : s) d = static_cast<std::int64_t>(gen.next_u64() % 10);
  return s;
}

Sequence answer(const Task& task, Sequence s) {
  if (task.kind == "sort")
    std::sort(s.begin(), s.end());
  else
    std::reverse(s.begin(), s.end());
  return s;
}

std::string to_string(const Sequence& s) {
  std::string out;
  for (auto d : s) out += d < 10 ? static_cast<char>('0' + d) : '?';
  return out;
}

Batch make_batch(const Task& task, const std::vector<Sequence>& sources) {
  auto b = static_cast<std::int64_t>(sources.size());
  std::int64_t s_len = 0;
  for (const auto& s : sources) s_len = std::max<std::int64_t>(s_len, static_cast<std::int64_t>(s.size()));
  std::int64_t t_len = s_len + 1;
  std::vector<std::int64_t> src(static_cast<std::size_t>(b * s_len), kPad),
      tin(static_cast<std::size_t>(b * t_len), kPad), tout(static_cast<std::size_t>(b * t_len), kPad), lengths;
  for (std::int64_t i = 0; i < b; ++i) {
    const Sequence& s = sources[static_cast<std::size_t>(i)];
    Sequence a = answer(task, s);
    lengths.push_back(static_cast<std::int64_t>(s.size()));
    auto row_s = static_cast<std::size_t>(i * s_len), row_t = static_cast<std::size_t>(i * t_len);
    for (std::size_t j = 0; j < s.size(); ++j) src[row_s + j] = s[j];
    tin[row_t] = kBos;
    for (std::size_t j = 0; j < a.size(); ++j) {
      tin[row_t + j + 1] = a[j];
      tout[row_t + j] = a[j];
    }
    tout[row_t + a.size()] = kEos;
  }
  return {from_vector(src, {b, s_len}), key_padding_mask(lengths, s_len), from_vector(tin, {b, t_len}),
          from_vector(tout, {b, t_len})};
}

double train(nn::Transformer& model, const Task& task, const TrainSettings& s, Generator& data, const std::string& label,
             const Forward& forward) {
  if (forward) return train(static_cast<nn::Module&>(model), task, s, data, label, forward);
  return train(static_cast<nn::Module&>(model), task, s, data, label,
               [&model](const Batch& b) { return model.forward(b.src, b.tgt_in, b.src_mask); });
}

double train(nn::Module& model, const Task& task, const TrainSettings& s, Generator& data, const std::string& label,
             const Forward& forward) {
  if (!forward) throw std::invalid_argument("digits::train: a model other than a Transformer needs its forward");
  optim::AdamW opt(optim::decay_groups(model, 0.01), {.lr = s.lr, .beta2 = 0.98});
  optim::WarmupCosine schedule{
      .warmup = std::min<std::int64_t>(100, s.steps), .total = s.steps, .max_lr = s.lr, .min_lr = s.lr / 20};
  dist::DataParallel dp(model.parameters(), {.micro_batches = s.grad_accum});
  const std::int64_t micro = dp.micro_batches();
  const std::vector<std::int64_t> mine = dp.my_micro_batches();
  model.train();
  std::optional<ProgressBar> bar;
  if (dist::is_main_process()) bar.emplace(s.steps);
  std::int64_t tokens = 0;  // source and target tokens seen
  double loss_value = 0;
  for (std::int64_t step = 0; step < s.steps; ++step) {
    // The step's micro x batch sequences, drawn in order by every rank; micro-batch k is the
    // k-th run of `batch`. The loss is the mean over the step's target tokens, so a micro-batch
    // weighs its share of them: padding makes the shares unequal.
    std::vector<Batch> batches;
    std::vector<double> targets;
    double all_targets = 0;
    for (std::int64_t k = 0; k < micro; ++k) {
      std::vector<Sequence> sources;
      while (static_cast<std::int64_t>(sources.size()) < s.batch) {
        Sequence seq = random_sequence(task, data);
        if (!is_held_out(seq)) sources.push_back(seq);
      }
      Batch b = make_batch(task, sources);
      tokens += b.src.numel() + b.tgt_in.numel();
      std::vector<std::int64_t> out = b.tgt_out.to_vector<std::int64_t>();
      auto n = static_cast<double>(out.size()) - static_cast<double>(std::count(out.begin(), out.end(), kPad));
      all_targets += n;
      if (dist::world_size() > 1 && k != mine.front()) continue;  // another rank's micro-batch
      batches.push_back(std::move(b));
      targets.push_back(n);
    }
    opt.set_lr(schedule.lr_at(step));
    std::vector<double> losses;
    for (std::size_t i = 0; i < batches.size(); ++i) {
      const Batch& b = batches[i];
      dp.begin_micro_batch();
      Tensor logits = forward(b);
      Tensor loss = cross_entropy(logits, b.tgt_out, kPad);
      double weight = micro == 1 ? 1.0 : targets[i] / all_targets;
      loss.backward(dp.loss_weight(loss, weight));
      dp.end_micro_batch();
      losses.push_back(loss.item() * weight);
    }
    loss_value = dp.sum_over_micro_batches(losses);
    // Every rank has the same summed loss, so all stop here alike, before the update.
    if (!std::isfinite(loss_value))
      throw std::runtime_error(
          fmt::format("the loss of step {} is {}: training diverged (a smaller --lr may help)", step + 1, loss_value));
    optim::clip_grad_norm(model.parameters(), 1.0);
    opt.step();
    if (bar) bar->update(step + 1, tokens, fmt::format("{}{}loss {:.4f}", label, label.empty() ? "" : "  ", loss_value));
    // Under mpirun a stop request is answered here, by all ranks together (a signal only
    // interrupts an op in a single process: examples/common/stop.h).
    if (dist::world_size() > 1 && dist::any(StopOnSignal::requested())) throw Interrupted();
  }
  if (bar) bar->finish();
  // The last update can leave weights no step has read yet (a huge --lr): nothing after this
  // (the evaluation, the picture) would mean anything with them.
  if (std::optional<std::string> bad = first_bad_value(model.named_parameters()))
    throw std::runtime_error(fmt::format("after the last step, {}: training diverged (a smaller --lr may help)", *bad));
  model.eval();
  return loss_value;
}

Accuracy teacher_forced_accuracy(const Task& task, const std::vector<Sequence>& sequences, const Forward& forward) {
  NoGradGuard no_grad;
  Batch b = make_batch(task, sequences);
  Tensor predicted = argmax(forward(b), -1);  // [N, L + 1]
  const auto* p = predicted.data_ptr<std::int64_t>();
  const auto* y = b.tgt_out.data_ptr<std::int64_t>();
  std::int64_t n = predicted.size(0), t = predicted.size(1), digits_right = 0, digits_total = 0, whole = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    bool all = true;
    for (std::int64_t j = 0; j < t; ++j) {
      if (y[i * t + j] == kPad) continue;
      bool right = p[i * t + j] == y[i * t + j];
      all = all && right;
      if (y[i * t + j] != kEos) digits_right += right, ++digits_total;
    }
    whole += all;
  }
  return {static_cast<double>(digits_right) / static_cast<double>(digits_total),
          static_cast<double>(whole) / static_cast<double>(n)};
}

Sequence decode(nn::Transformer& model, const Sequence& source, std::vector<Tensor>* cross) {
  NoGradGuard no_grad;
  auto n = static_cast<std::int64_t>(source.size());
  Tensor memory = model.encode(from_vector(source, {1, n}));
  Sequence out{kBos};
  for (std::int64_t step = 0; step <= n; ++step) {
    Tensor logits = model.decode(from_vector(out, {1, static_cast<std::int64_t>(out.size())}), memory, {}, cross);
    Tensor last = logits.slice(1, logits.size(1) - 1, logits.size(1)).reshape({kVocab});
    std::int64_t next = argmax(last.unsqueeze(0), 1).item<std::int64_t>();
    if (next == kEos) break;
    out.push_back(next);
  }
  return Sequence(out.begin() + 1, out.end());
}

std::vector<Sequence> held_out_set(const Task& task, std::int64_t count, Generator& gen) {
  std::vector<Sequence> held_out;
  std::set<Sequence> seen;
  // Short lengths have few held-out sequences: stop drawing after enough attempts.
  for (std::int64_t attempt = 0; static_cast<std::int64_t>(held_out.size()) < count && attempt < 1000000; ++attempt) {
    Sequence s = random_sequence(task, gen);
    if (is_held_out(s) && seen.insert(s).second) held_out.push_back(s);
  }
  return held_out;
}

double exact_accuracy(nn::Transformer& model, const Task& task, const std::vector<Sequence>& sequences) {
  std::int64_t correct = 0;
  for (const Sequence& s : sequences) correct += decode(model, s) == answer(task, s);
  return sequences.empty() ? 0.0 : static_cast<double>(correct) / static_cast<double>(sequences.size());
}

}  // namespace ag::examples::digits
