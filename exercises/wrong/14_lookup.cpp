// Exercise 14, wrong on purpose: the keys are made from the pairs' values instead of their keys
// (an argument passed in the wrong place). Every part still gets a gradient, but the query can
// no longer find its pair. Caught by 14.trained.
#include "../workbook.h"

#include <cmath>

namespace workbook {

Lookup::Lookup(std::int64_t key_symbols, std::int64_t value_symbols, std::int64_t d, ag::Generator& generator) {
  key_embedding = register_module("key_embedding", std::make_shared<ag::nn::Embedding>(key_symbols, d, generator));
  value_embedding =
      register_module("value_embedding", std::make_shared<ag::nn::Embedding>(value_symbols, d, generator));
  w_q = register_module("w_q", std::make_shared<ag::nn::Linear>(d, d, true, generator));
  w_k = register_module("w_k", std::make_shared<ag::nn::Linear>(d, d, true, generator));
  w_v = register_module("w_v", std::make_shared<ag::nn::Linear>(d, d, true, generator));
  w_o = register_module("w_o", std::make_shared<ag::nn::Linear>(d, value_symbols, true, generator));
}

Tensor Lookup::forward([[maybe_unused]] const Tensor& keys, const Tensor& values, const Tensor& query) const {
  Tensor q = (*w_q)((*key_embedding)(query)).unsqueeze(1);
  Tensor k = (*w_k)((*value_embedding)(values));  // should embed `keys`
  Tensor v = (*w_v)((*value_embedding)(values));
  double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor p = (q.matmul(k.transpose(-2, -1)) * scale).softmax(-1);
  return (*w_o)(p.matmul(v).squeeze(1));
}

}  // namespace workbook
