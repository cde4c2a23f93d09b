#include "sequential.h"

#include <fmt/format.h>

#include <stdexcept>

#include "../runtime/error.h"

namespace ag::nn {

Tensor Sequential::forward(const Tensor& x) const {
  if (items_.empty()) throw_invalid("Sequential", "forward on an empty Sequential: push_back a module first");
  Tensor h = x;
  for (std::size_t i = 0; i < items_.size(); ++i) {
    try {
      h = items_[i].forward(h);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(
          fmt::format("Sequential: module {} ({}): {}", i, type_name(typeid(*items_[i].module)), e.what()));
    }
  }
  return h;
}

const Sequential::Item& Sequential::item(std::size_t i) const {
  if (i >= items_.size())
    throw std::out_of_range(fmt::format("Sequential: index {} is out of range for its {} modules", i, items_.size()));
  return items_[i];
}

void Sequential::throw_null() { throw_invalid("Sequential", "push_back got a null module"); }

void Sequential::throw_wrong_type(std::size_t i, const std::type_info& wanted) const {
  throw_invalid("Sequential", "module {} is {}, not {}", i, type_name(typeid(*items_[i].module)), type_name(wanted));
}

}  // namespace ag::nn
