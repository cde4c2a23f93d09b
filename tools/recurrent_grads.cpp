// recurrent_grads: the attograd side of the recurrent modules' PyTorch parity check
// (tools/recurrent_parity.py).
//
//   recurrent_grads KIND IN_DIR OUT_DIR        KIND: rnn gru lstm rnn_cell gru_cell lstm_cell
//
// Reads from IN_DIR (float64 .npy; lengths int64):
//   x             the input, [B, T, I] for a sequence module, [B, I] for a cell
//   h0, c0        the initial state [B, H] (c0 for an LSTM); absent: zeros
//   lengths       int64 [B], the sequence modules only; absent: every sequence runs T steps
//   weight_ih, weight_hh, bias_ih, bias_hh   the weights under PyTorch's names (without _l0);
//                 no bias files: a module without bias
//   g_<output>    the weight of each output in the scalar whose gradient is taken:
//                 loss = sum over outputs of sum(output * g_output)
// The outputs are states, last and last_cell for a sequence module, h and c for a cell. Writes
// each output as OUT_DIR/<output>.npy and the loss's gradient with respect to x, h0, c0 and each
// weight as OUT_DIR/grad_<name>.npy.
#include <attograd/attograd.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "npy_case.h"

namespace {

using tools::Case;

// A leaf that takes gradients, read from the case (undefined when the file is absent).
ag::Tensor leaf(const Case& c, const std::string& name) {
  if (!c.has(name)) return {};
  ag::Tensor t = c.read(name);
  t.requires_grad_();
  return t;
}

// The module of `kind` with the case's weights, in float64.
std::unique_ptr<ag::nn::RecurrentWeights> module(const std::string& kind, const Case& c) {
  ag::Tensor w_ih = c.read("weight_ih");
  std::int64_t hidden = c.read("weight_hh").size(1), input = w_ih.size(1);
  bool bias = c.has("bias_ih");
  std::unique_ptr<ag::nn::RecurrentWeights> m;
  if (kind == "rnn") m = std::make_unique<ag::nn::RNN>(input, hidden, bias);
  if (kind == "gru") m = std::make_unique<ag::nn::GRU>(input, hidden, bias);
  if (kind == "lstm") m = std::make_unique<ag::nn::LSTM>(input, hidden, bias);
  if (kind == "rnn_cell") m = std::make_unique<ag::nn::RNNCell>(input, hidden, bias);
  if (kind == "gru_cell") m = std::make_unique<ag::nn::GRUCell>(input, hidden, bias);
  if (kind == "lstm_cell") m = std::make_unique<ag::nn::LSTMCell>(input, hidden, bias);
  if (!m) throw std::invalid_argument("unknown kind '" + kind + "'");
  m->to(ag::kFloat64);
  m->weight_ih.set_data(w_ih);
  m->weight_hh.set_data(c.read("weight_hh"));
  if (bias) {
    m->bias_ih.set_data(c.read("bias_ih"));
    m->bias_hh.set_data(c.read("bias_hh"));
  }
  return m;
}

void run(const std::string& kind, const Case& c) {
  std::unique_ptr<ag::nn::RecurrentWeights> m = module(kind, c);
  ag::Tensor x = leaf(c, "x"), h0 = leaf(c, "h0"), c0 = leaf(c, "c0");
  ag::Tensor lengths = c.has("lengths") ? c.read("lengths") : ag::Tensor();
  std::map<std::string, ag::Tensor> outputs;
  if (kind == "rnn" || kind == "gru" || kind == "lstm") {
    ag::nn::RecurrentOutput out;
    if (kind == "rnn") out = static_cast<ag::nn::RNN&>(*m).forward(x, h0, lengths);
    if (kind == "gru") out = static_cast<ag::nn::GRU&>(*m).forward(x, h0, lengths);
    if (kind == "lstm") out = static_cast<ag::nn::LSTM&>(*m).forward(x, {h0, c0}, lengths);
    outputs = {{"states", out.states}, {"last", out.last}};
    if (out.last_cell.defined()) outputs["last_cell"] = out.last_cell;
  } else {
    if (kind == "rnn_cell") outputs["h"] = static_cast<ag::nn::RNNCell&>(*m).forward(x, h0);
    if (kind == "gru_cell") outputs["h"] = static_cast<ag::nn::GRUCell&>(*m).forward(x, h0);
    if (kind == "lstm_cell") {
      ag::nn::LSTMState s = static_cast<ag::nn::LSTMCell&>(*m).forward(x, {h0, c0});
      outputs = {{"h", s.h}, {"c", s.c}};
    }
  }
  ag::Tensor loss = ag::zeros({}, ag::kFloat64);
  for (const auto& [name, value] : outputs) {
    c.write(name, value.detach());
    loss = loss + (value * c.read("g_" + name)).sum();
  }
  loss.backward();
  for (const auto& [name, t] : std::map<std::string, ag::Tensor>{{"x", x}, {"h0", h0}, {"c0", c0}})
    if (t.defined()) c.write("grad_" + name, t.grad());
  for (const auto& [name, p] : m->named_parameters()) {
    std::string plain = name.ends_with("_l0") ? name.substr(0, name.size() - 3) : name;
    c.write("grad_" + plain, p.grad());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: recurrent_grads rnn|gru|lstm|rnn_cell|gru_cell|lstm_cell IN_DIR OUT_DIR\n";
    return 2;
  }
  try {
    run(argv[1], Case{argv[2], argv[3]});
  } catch (const std::exception& e) {
    std::cerr << "recurrent_grads: " << argv[1] << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}
