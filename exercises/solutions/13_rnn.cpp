// Exercise 13, a reference answer: the forward keeps every state; the backward walks them back.
#include "../workbook.h"

namespace workbook {

namespace {

// W v for a matrix W and a vector v.
Tensor times(const Tensor& w, const Tensor& v) { return w.matmul(v.unsqueeze(1)).squeeze(1); }

// The column u times the row v: [len u, len v].
Tensor outer(const Tensor& u, const Tensor& v) { return u.unsqueeze(1).matmul(v.unsqueeze(0)); }

std::vector<Tensor> states(const Tensor& x, const Tensor& h0, const Tensor& w_x, const Tensor& w_h, const Tensor& b) {
  std::vector<Tensor> h{h0};
  for (std::int64_t t = 0; t < x.size(0); ++t)
    h.push_back((times(w_x, x.slice(0, t, t + 1).squeeze(0)) + times(w_h, h.back()) + b).tanh());
  return h;  // h_0 .. h_T
}

}  // namespace

Tensor rnn_last_state(const Tensor& x, const Tensor& h0, const Tensor& w_x, const Tensor& w_h, const Tensor& b) {
  return states(x, h0, w_x, w_h, b).back();
}

RnnGrads rnn_backward(const Tensor& x, const Tensor& h0, const Tensor& w_x, const Tensor& w_h, const Tensor& b,
                      const Tensor& dh_last) {
  std::vector<Tensor> h = states(x, h0, w_x, w_h, b);
  Tensor dh = dh_last, dw_x = ag::zeros_like(w_x), dw_h = ag::zeros_like(w_h), db = ag::zeros_like(b);
  std::vector<Tensor> dx(static_cast<std::size_t>(x.size(0)));
  for (std::int64_t t = x.size(0); t-- > 0;) {  // step t reads h[t] and makes h[t + 1]
    Tensor x_t = x.slice(0, t, t + 1).squeeze(0);
    Tensor da = dh * (1 - h[static_cast<std::size_t>(t + 1)].pow(2.0));  // through tanh
    db = db + da;
    dw_x = dw_x + outer(da, x_t);
    dw_h = dw_h + outer(da, h[static_cast<std::size_t>(t)]);
    dx[static_cast<std::size_t>(t)] = times(w_x.t(), da).unsqueeze(0);
    dh = times(w_h.t(), da);  // on to the state before
  }
  return {ag::cat(dx, 0), dh, dw_x, dw_h, db};
}

}  // namespace workbook
