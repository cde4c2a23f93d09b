// softmax and log_softmax over one dim.
//
// A row whose entries are all -inf (every position masked) has no distribution to normalise.
// attograd's decision: softmax gives all zeros there, and zero gradient, instead of the NaN
// that 0/0 would give (docs/attention.md, "Fully masked rows"). log_softmax gives -inf there,
// and zero gradient.
#pragma once

#include "../autograd/tensor.h"

namespace ag {

Tensor softmax(const Tensor& x, std::int64_t dim);
Tensor log_softmax(const Tensor& x, std::int64_t dim);

}  // namespace ag
