// The calling thread's settings (context.h), and the backend they choose.
#include "context.h"

#include "../kernels/table.h"

namespace ag {

detail::ThreadContext& detail::thread_context() {
  thread_local ThreadContext context;
  return context;
}

const backends::Backend& current_backend() {
  return detail::thread_context().kernels == detail::kNaiveKernels ? backends::naive_backend()
                                                                   : backends::cpu_backend();
}

}  // namespace ag
