#include "recurrent.h"

#include <cmath>
#include <string>
#include <vector>

#include "../ops/binary.h"
#include "../ops/elementwise.h"
#include "../ops/nn_ops.h"
#include "../ops/shape.h"
#include "../runtime/error.h"

namespace ag::nn {

namespace {

std::int64_t gate_count(CellKind kind) { return kind == CellKind::RNN ? 1 : kind == CellKind::GRU ? 3 : 4; }

}  // namespace

RecurrentWeights::RecurrentWeights(CellKind kind_, std::int64_t input_size_, std::int64_t hidden_size_, bool bias,
                                   Generator& generator, const char* op, const char* suffix)
    : kind(kind_), input_size(input_size_), hidden_size(hidden_size_), op_(op) {
  if (input_size <= 0 || hidden_size <= 0)
    throw_invalid(op, "sizes must be positive, got input_size={} hidden_size={}", input_size, hidden_size);
  std::int64_t rows = gate_count(kind) * hidden_size;
  double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  auto uniform = [&](const Shape& shape) { return ((rand(shape, generator) * 2.0 - 1.0) * bound).detach(); };
  std::string s = suffix;
  weight_ih = register_parameter("weight_ih" + s, uniform({rows, input_size}));
  weight_hh = register_parameter("weight_hh" + s, uniform({rows, hidden_size}));
  if (bias) {
    bias_ih = register_parameter("bias_ih" + s, uniform({rows}));
    bias_hh = register_parameter("bias_hh" + s, uniform({rows}));
  }
}

LSTMState RecurrentWeights::step(const Tensor& xp, const LSTMState& state) const {
  Tensor hp = linear(state.h, weight_hh, bias_hh);  // h W_hh^T + b_hh, [B, G H]
  if (kind == CellKind::RNN) return {tanh(xp + hp), Tensor()};
  if (kind == CellKind::GRU) {
    std::vector<Tensor> xi = split(xp, hidden_size, 1), hh = split(hp, hidden_size, 1);  // r, z, n
    Tensor r = sigmoid(xi[0] + hh[0]), z = sigmoid(xi[1] + hh[1]);
    Tensor n = tanh(xi[2] + r * hh[2]);  // the reset gate scales h's part only, as PyTorch's
    return {n + z * (state.h - n), Tensor()};  // (1 - z) n + z h
  }
  std::vector<Tensor> g = split(xp + hp, hidden_size, 1);  // i, f, g, o
  Tensor c = sigmoid(g[1]) * state.c + sigmoid(g[0]) * tanh(g[2]);
  return {sigmoid(g[3]) * tanh(c), c};
}

namespace {

// A state [B, H] given or zeros; a given one must match.
Tensor state_or_zeros(const char* op, const char* name, const Tensor& t, std::int64_t batch, std::int64_t hidden,
                      DType dtype) {
  if (!t.defined()) return zeros({batch, hidden}, dtype);
  if (t.dim() != 2 || t.size(0) != batch || t.size(1) != hidden || t.dtype() != dtype)
    throw_invalid(op, "{} must be {} [{}, {}] (batch, hidden_size), got {} {}", name, dtype_name(dtype), batch, hidden,
                  dtype_name(t.dtype()), shape_str(t.shape()));
  return t;
}

void check_input(const char* op, const Tensor& x, std::int64_t dims, std::int64_t input_size, DType dtype) {
  if (!x.defined() || x.dim() != dims || x.size(dims - 1) != input_size)
    throw_invalid(op, "input must be [{}] with input_size {} last, got {}",
                  dims == 2 ? "batch, input_size" : "batch, T, input_size", input_size,
                  x.defined() ? shape_str(x.shape()) : "an undefined tensor");
  if (x.dtype() != dtype)
    throw_invalid(op, "input is {} but the weights are {}; convert one (Module::to, Tensor::to)", dtype_name(x.dtype()),
                  dtype_name(dtype));
}

}  // namespace

LSTMState RecurrentWeights::cell(const Tensor& x, const LSTMState& state) const {
  DType dtype = weight_ih.dtype();
  check_input(op_, x, 2, input_size, dtype);
  LSTMState s{state_or_zeros(op_, "h", state.h, x.size(0), hidden_size, dtype),
              kind == CellKind::LSTM ? state_or_zeros(op_, "c", state.c, x.size(0), hidden_size, dtype) : Tensor()};
  return step(linear(x, weight_ih, bias_ih), s);
}

RecurrentOutput RecurrentWeights::run(const Tensor& x, const LSTMState& initial, const Tensor& lengths) const {
  DType dtype = weight_ih.dtype();
  check_input(op_, x, 3, input_size, dtype);
  std::int64_t batch = x.size(0), steps = x.size(1);
  Tensor h = state_or_zeros(op_, "the initial state h0", initial.h, batch, hidden_size, dtype);
  Tensor c = kind == CellKind::LSTM ? state_or_zeros(op_, "the initial cell state c0", initial.c, batch, hidden_size, dtype)
                                    : Tensor();
  std::vector<std::int64_t> length(static_cast<std::size_t>(batch), steps);
  if (lengths.defined()) {
    if (lengths.dtype() != kInt64 || lengths.dim() != 1 || lengths.size(0) != batch)
      throw_invalid(op_, "lengths must be int64 [{}] (one per sequence), got {} {}", batch, dtype_name(lengths.dtype()),
                    shape_str(lengths.shape()));
    const std::int64_t* pl = lengths.data_ptr<std::int64_t>();
    for (std::int64_t b = 0; b < batch; ++b) {
      if (pl[b] < 0 || pl[b] > steps)
        throw_invalid(op_, "lengths[{}] = {} is outside [0, T] = [0, {}]", b, pl[b], steps);
      length[static_cast<std::size_t>(b)] = pl[b];
    }
  }
  // The input's share of every step at once: one product for all T steps, then cut into the
  // T steps' pieces (by halves: ops/shape.h).
  Tensor xp = linear(x, weight_ih, bias_ih);  // [B, T, G H]
  std::vector<Tensor> pieces = steps > 0 ? split(xp, 1, 1) : std::vector<Tensor>{};
  std::vector<Tensor> states;
  for (std::int64_t t = 0; t < steps; ++t) {
    LSTMState next = step(pieces[static_cast<std::size_t>(t)].reshape({batch, -1}), {h, c});
    std::vector<double> active(static_cast<std::size_t>(batch));
    bool all = true;
    for (std::int64_t b = 0; b < batch; ++b) {
      active[static_cast<std::size_t>(b)] = t < length[static_cast<std::size_t>(b)] ? 1.0 : 0.0;
      all = all && t < length[static_cast<std::size_t>(b)];
    }
    if (all) {
      h = next.h;
      c = next.c;
      states.push_back(h.unsqueeze(1));
      continue;
    }
    // A finished sequence keeps its state (m = 0) and shows zeros from here on: h = m h' + (1 - m) h.
    Tensor m = tensor(active, {batch, 1}, dtype), rest = 1.0 - m;
    h = m * next.h + rest * h;
    if (c.defined()) c = m * next.c + rest * c;
    states.push_back((m * h).unsqueeze(1));
  }
  Tensor all_states = steps > 0 ? cat(states, 1) : zeros({batch, 0, hidden_size}, dtype);
  return {all_states, h, c};
}

RNNCell::RNNCell(std::int64_t input_size, std::int64_t hidden_size, bool bias, Generator& generator)
    : RecurrentWeights(CellKind::RNN, input_size, hidden_size, bias, generator, "RNNCell", "") {}

Tensor RNNCell::forward(const Tensor& x, const Tensor& h) const { return cell(x, {h, Tensor()}).h; }

GRUCell::GRUCell(std::int64_t input_size, std::int64_t hidden_size, bool bias, Generator& generator)
    : RecurrentWeights(CellKind::GRU, input_size, hidden_size, bias, generator, "GRUCell", "") {}

Tensor GRUCell::forward(const Tensor& x, const Tensor& h) const { return cell(x, {h, Tensor()}).h; }

LSTMCell::LSTMCell(std::int64_t input_size, std::int64_t hidden_size, bool bias, Generator& generator)
    : RecurrentWeights(CellKind::LSTM, input_size, hidden_size, bias, generator, "LSTMCell", "") {}

LSTMState LSTMCell::forward(const Tensor& x, const LSTMState& state) const { return cell(x, state); }

RNN::RNN(std::int64_t input_size, std::int64_t hidden_size, bool bias, Generator& generator)
    : RecurrentWeights(CellKind::RNN, input_size, hidden_size, bias, generator, "RNN", "_l0") {}

RecurrentOutput RNN::forward(const Tensor& x, const Tensor& h0, const Tensor& lengths) const {
  return run(x, {h0, Tensor()}, lengths);
}

GRU::GRU(std::int64_t input_size, std::int64_t hidden_size, bool bias, Generator& generator)
    : RecurrentWeights(CellKind::GRU, input_size, hidden_size, bias, generator, "GRU", "_l0") {}

RecurrentOutput GRU::forward(const Tensor& x, const Tensor& h0, const Tensor& lengths) const {
  return run(x, {h0, Tensor()}, lengths);
}

LSTM::LSTM(std::int64_t input_size, std::int64_t hidden_size, bool bias, Generator& generator)
    : RecurrentWeights(CellKind::LSTM, input_size, hidden_size, bias, generator, "LSTM", "_l0") {}

RecurrentOutput LSTM::forward(const Tensor& x, const LSTMState& initial, const Tensor& lengths) const {
  return run(x, initial, lengths);
}

}  // namespace ag::nn
