// Autocast's state and its cache of parameters rounded to bf16 (autocast.h, autocast_internal.h).
#include "autocast.h"

#include <atomic>
#include <map>
#include <stdexcept>

#include "../autograd/context.h"
#include "../kernels/bf16/bf16.h"
#include "../kernels/products.h"
#include "autocast_internal.h"
#include "route.h"

namespace ag {

namespace {

thread_local int t_guards = 0;  // guards alive on this thread

// One parameter's bf16 copy, valid while its storage lives and has not been written since.
struct Cached {
  std::weak_ptr<Storage> storage;
  std::uint64_t version;
  std::shared_ptr<const bf16::Buffer> copy;
};
thread_local std::map<const TensorImpl*, Cached> t_cache;
std::atomic<std::int64_t> g_casts{0};

std::shared_ptr<const bf16::Buffer> convert(const Tensor& t) {
  return std::make_shared<const bf16::Buffer>(bf16::convert(t.const_data_ptr<float>(), t.numel()));
}

// What the cache below treats as a parameter: a leaf that requires grad.
bool is_parameter(const Tensor& t) { return t.is_leaf() && t.requires_grad(); }

// The bf16 copy of a float32 matrix as stored. A parameter's copy is made once per version and
// shared (autocast.h); any other tensor is converted on the spot.
std::shared_ptr<const bf16::Buffer> bf16_copy(const Tensor& t) {
  if (!is_parameter(t)) return convert(t);
  const TensorImpl* key = t.impl().get();
  auto it = t_cache.find(key);
  if (it != t_cache.end() && !it->second.storage.expired() && it->second.storage.lock() == t.impl()->storage &&
      it->second.version == t.version())
    return it->second.copy;
  if (t_cache.size() >= 1024)  // parameters that no longer exist leave their entries behind
    std::erase_if(t_cache, [](const auto& entry) { return entry.second.storage.expired(); });
  ++g_casts;
  auto copy = convert(t);
  t_cache[key] = Cached{t.impl()->storage, t.version(), copy};
  return copy;
}

}  // namespace

// The kernels' own finding (kernels/bf16/bf16.h), in the type a user's header can name.
const Bf16Support& bf16_support() {
  static const Bf16Support s = [] {
    const bf16::Support& found = bf16::support();
    return Bf16Support{found.available, found.unit, found.reason};
  }();
  return s;
}

float bf16_round(float f) { return bf16::round(f); }

bool is_autocast_enabled() { return detail::thread_context().autocast; }

void set_autocast_enabled(bool enabled) {
  if (enabled && !bf16::support().available)
    throw std::runtime_error("autocast: bf16 matrix products are unavailable: " + bf16::support().reason);
  detail::thread_context().autocast = enabled;
  if (!enabled && t_guards == 0) clear_autocast_cache();  // a whole run's autocast ends
}

void clear_autocast_cache() { t_cache.clear(); }

AutocastGuard::AutocastGuard(bool enabled) : previous_(detail::thread_context().autocast) {
  set_autocast_enabled(enabled);
  ++t_guards;
}

AutocastGuard::~AutocastGuard() {
  detail::thread_context().autocast = previous_;
  if (--t_guards == 0) clear_autocast_cache();
}

namespace detail {

bool autocasts(const Tensor& t) { return thread_context().autocast && t.dtype() == kFloat32; }

std::shared_ptr<const bf16::Buffer> keep_rounded(Products& products, const Tensor& t) {
  if (!products.in_bf16() || t.dtype() != kFloat32 || t.numel() == 0) return nullptr;
  const float* base = t.const_data_ptr<float>();
  if (auto kept = products.copy_of(base, t.numel())) return kept;
  auto copy = bf16_copy(t);
  products.keep(base, t.numel(), copy, is_parameter(t));
  return copy;
}

std::int64_t autocast_casts() { return g_casts.load(); }

}  // namespace detail

}  // namespace ag
