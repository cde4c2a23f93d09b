// Recurrent networks: the models the attention chapter starts from. A cell reads one step's
// input and the previous state and returns the next state; a sequence module runs its cell over
// the T steps of a batch, one after another. Both are written with the library's differentiable
// ops, so backpropagation through time is the engine's ordinary backward through the unrolled
// loop (docs/recurrent.md).
//
// The equations, weights and gate order are PyTorch's, so that torch.nn.RNNCell / GRUCell /
// LSTMCell and single-layer, batch-first torch.nn.RNN / GRU / LSTM weights load by name
// (weight_ih, weight_hh, bias_ih, bias_hh; the sequence modules add the suffix _l0):
//
//   RNN    h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)                      W_ih: [H, I]
//   GRU    r = sigmoid(x W_ir^T + b_ir + h W_hr^T + b_hr)                    W_ih: [3H, I], rows r, z, n
//          z = sigmoid(x W_iz^T + b_iz + h W_hz^T + b_hz)
//          n = tanh(x W_in^T + b_in + r * (h W_hn^T + b_hn))
//          h' = (1 - z) * n + z * h
//   LSTM   i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of x W_i*^T + b_i* + h W_h*^T + b_h*
//          c' = f * c + i * g,  h' = o * tanh(c')                             W_ih: [4H, I], rows i, f, g, o
//
// Every weight and bias starts uniform in [-1/sqrt(H), 1/sqrt(H)], as PyTorch's do.
//
// Shapes: a cell takes x [B, I] and h (and c) [B, H]. A sequence module takes x [B, T, I]
// (batch first), an initial state [B, H] (zeros when undefined) and optionally `lengths`, int64
// [B] with 0 <= lengths[b] <= T: sequence b then stops after lengths[b] steps, as PyTorch's
// packed sequences do. Its states past the end are zeros and its last state is the one at step
// lengths[b] - 1 (the initial state when lengths[b] = 0).
#pragma once

#include <cstdint>
#include <utility>

#include "../autograd/generator.h"
#include "module.h"

namespace ag::nn {

// What a sequence module returns: every step's state [B, T, H], the last state [B, H] and, for
// an LSTM, the last cell state [B, H] (undefined otherwise).
struct RecurrentOutput {
  Tensor states;
  Tensor last;
  Tensor last_cell;
};

struct LSTMState {
  Tensor h;  // [B, H]
  Tensor c;  // [B, H]
};

enum class CellKind { RNN, GRU, LSTM };

// The four tensors of one cell (bias_ih and bias_hh undefined without bias), registered by a
// module under `suffix` (empty for the cells, "_l0" for the sequence modules).
class RecurrentWeights : public Module {
 public:
  RecurrentWeights(CellKind kind, std::int64_t input_size, std::int64_t hidden_size, bool bias, Generator& generator,
                   const char* op, const char* suffix);

  CellKind kind;
  std::int64_t input_size, hidden_size;
  Tensor weight_ih;  // [G H, I], G = 1, 3 or 4 gates
  Tensor weight_hh;  // [G H, H]
  Tensor bias_ih;    // [G H], or undefined
  Tensor bias_hh;    // [G H], or undefined

 protected:
  // One step from the input's projection xp = x W_ih^T + b_ih [B, G H]: the next h (and c).
  LSTMState step(const Tensor& xp, const LSTMState& state) const;
  // One step of a cell from x [B, I] and the state (zeros where undefined), checked.
  LSTMState cell(const Tensor& x, const LSTMState& state) const;
  // Every step of x [B, T, I] from `initial`, as the header describes.
  RecurrentOutput run(const Tensor& x, const LSTMState& initial, const Tensor& lengths) const;
  const char* op_;
};

class RNNCell : public RecurrentWeights {
 public:
  RNNCell(std::int64_t input_size, std::int64_t hidden_size, bool bias = true,
          Generator& generator = default_generator());
  Tensor forward(const Tensor& x, const Tensor& h) const;
  template <class... A>
  auto operator()(A&&... args) const {
    return forward(std::forward<A>(args)...);
  }  // as in libtorch: m(x)
};

class GRUCell : public RecurrentWeights {
 public:
  GRUCell(std::int64_t input_size, std::int64_t hidden_size, bool bias = true,
          Generator& generator = default_generator());
  Tensor forward(const Tensor& x, const Tensor& h) const;
  template <class... A>
  auto operator()(A&&... args) const {
    return forward(std::forward<A>(args)...);
  }  // as in libtorch: m(x)
};

class LSTMCell : public RecurrentWeights {
 public:
  LSTMCell(std::int64_t input_size, std::int64_t hidden_size, bool bias = true,
           Generator& generator = default_generator());
  LSTMState forward(const Tensor& x, const LSTMState& state) const;
  template <class... A>
  auto operator()(A&&... args) const {
    return forward(std::forward<A>(args)...);
  }  // as in libtorch: m(x)
};

// The sequence modules: one layer, batch first, the cell's tanh RNN, GRU or LSTM.
class RNN : public RecurrentWeights {
 public:
  RNN(std::int64_t input_size, std::int64_t hidden_size, bool bias = true,
      Generator& generator = default_generator());
  RecurrentOutput forward(const Tensor& x, const Tensor& h0 = {}, const Tensor& lengths = {}) const;
  template <class... A>
  auto operator()(A&&... args) const {
    return forward(std::forward<A>(args)...);
  }  // as in libtorch: m(x)
};

class GRU : public RecurrentWeights {
 public:
  GRU(std::int64_t input_size, std::int64_t hidden_size, bool bias = true,
      Generator& generator = default_generator());
  RecurrentOutput forward(const Tensor& x, const Tensor& h0 = {}, const Tensor& lengths = {}) const;
  template <class... A>
  auto operator()(A&&... args) const {
    return forward(std::forward<A>(args)...);
  }  // as in libtorch: m(x)
};

class LSTM : public RecurrentWeights {
 public:
  LSTM(std::int64_t input_size, std::int64_t hidden_size, bool bias = true,
       Generator& generator = default_generator());
  RecurrentOutput forward(const Tensor& x, const LSTMState& initial = {}, const Tensor& lengths = {}) const;
  template <class... A>
  auto operator()(A&&... args) const {
    return forward(std::forward<A>(args)...);
  }  // as in libtorch: m(x)
};

}  // namespace ag::nn
