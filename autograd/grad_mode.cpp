#include "grad_mode.h"

#include "context.h"

namespace ag {

bool is_grad_enabled() { return detail::thread_context().grad_enabled; }
void set_grad_enabled(bool enabled) { detail::thread_context().grad_enabled = enabled; }

}  // namespace ag
