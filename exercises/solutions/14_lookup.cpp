// Exercise 14, a reference answer: the query against every key, the values weighted and summed.
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

Tensor Lookup::forward(const Tensor& keys, const Tensor& values, const Tensor& query) const {
  Tensor q = (*w_q)((*key_embedding)(query)).unsqueeze(1);  // [B, 1, d]
  Tensor k = (*w_k)((*key_embedding)(keys));                // [B, n, d]
  Tensor v = (*w_v)((*value_embedding)(values));            // [B, n, d]
  double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor p = (q.matmul(k.transpose(-2, -1)) * scale).softmax(-1);  // [B, 1, n]
  return (*w_o)(p.matmul(v).squeeze(1));                           // [B, value_symbols]
}

}  // namespace workbook
