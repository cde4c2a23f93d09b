// attograd: a from-scratch reverse-mode autograd, for learning how attention is computed,
// differentiated and trained. One include brings in the whole library:
//
//   #include <attograd/attograd.h>
//
//   ag::Tensor x = ag::randn({2, 3}).requires_grad_();
//   ag::Tensor loss = (x * x).sum();
//   loss.backward();          // x.grad() is now 2 * x
//
// GoogleTest helpers live in <attograd/testing.h>, included separately.
#pragma once

#include "autograd/debug/anomaly.h"
#include "autograd/debug/graphviz.h"
#include "autograd/debug/trace.h"
#include "autograd/dispatch.h"
#include "autograd/dtype.h"
#include "autograd/format.h"
#include "autograd/forward.h"
#include "autograd/function.h"
#include "autograd/functional.h"
#include "autograd/generator.h"
#include "autograd/grad.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/hooks.h"
#include "autograd/memory.h"
#include "autograd/node.h"
#include "autograd/tensor.h"
#include "data/dataset.h"
#include "distributed/data_parallel.h"
#include "distributed/dist.h"
#include "io/checkpoint.h"
#include "nn/attention.h"
#include "nn/gpt.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "nn/optim.h"
#include "nn/positional.h"
#include "nn/recurrent.h"
#include "nn/sequential.h"
#include "nn/transformer.h"
#include "ops/attention.h"
#include "ops/autocast.h"
#include "ops/binary.h"
#include "ops/elementwise.h"
#include "ops/indexing.h"
#include "ops/kernels.h"
#include "ops/masking.h"
#include "ops/matmul.h"
#include "ops/nn_ops.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/softmax.h"
#include "runtime/allocator.h"
#include "runtime/blas_setup.h"
#include "runtime/parallel.h"
#include "runtime/profile.h"
#include "text/data.h"
#include "text/generate.h"
