// The pool behind parallel_for (parallel.h). Workers wait for a new job by spinning briefly and
// then sleeping on the job counter, so back-to-back loops in a training step hand over work in
// well under a microsecond, and an idle process uses no CPU.
#include "parallel.h"

#include <fmt/format.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "blas_setup.h"
#include "profile.h"

namespace ag {

namespace {

thread_local bool tls_in_region = false;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// How long a worker keeps spinning for the next job before it sleeps.
constexpr auto kSpin = std::chrono::microseconds(500);

// A job is cut into `chunks` pieces that any thread may claim, the caller included: a worker
// that wakes late finds its piece already done by the caller rather than making it wait.
// Claims go through one 64-bit ticket, [generation:32 | chunks:16 | next:16], so a claim can
// only succeed for the job the ticket describes and never for one that has already finished.
class Pool {
 public:
  // The system may refuse threads (a process limit, too little address space for their
  // stacks). The pool then runs with those it got, the caller's thread included, and says so
  // once: a hang or a crash would lose the run, fewer threads only slow it.
  explicit Pool(int threads) {
    try {
      for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
    } catch (const std::system_error& e) {
      fmt::print(stderr, "attograd: could start only {} of the {} threads asked for ({}); running on {}\n",
                 workers_.size() + 1, threads, e.what(), workers_.size() + 1);
    }
    threads_ = static_cast<int>(workers_.size()) + 1;
  }

  ~Pool() {
    stopping_.store(true, std::memory_order_relaxed);
    post();
    for (auto& w : workers_) w.join();
  }

  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  int threads() const { return threads_; }

  // False if another user thread is already running a job here: the caller then runs serially.
  bool try_run(std::int64_t n, int chunks, detail::ChunkFn call, void* body) {
    if (chunks > threads_ || chunks > 0xffff || busy_.test_and_set(std::memory_order_acquire)) return false;
    n_ = n;
    chunks_ = chunks;
    call_ = call;
    body_ = body;
    error_ = nullptr;
    done_.store(0, std::memory_order_relaxed);
    std::uint64_t generation = (ticket_.load(std::memory_order_relaxed) >> 32) + 1;
    ticket_.store(generation << 32 | std::uint64_t(chunks) << 16, std::memory_order_release);
    {
      profile::Scope scope(profile::Family::Pool);
      post();
    }
    claim_and_run();
    profile::Scope scope(profile::Family::Pool);  // until the other threads' chunks are done
    for (int spins = 0; done_.load(std::memory_order_acquire) != chunks; ++spins)
      if (spins < 4096)
        cpu_relax();
      else
        std::this_thread::yield();
    std::exception_ptr error = error_;
    busy_.clear(std::memory_order_release);
    if (error) std::rethrow_exception(error);
    return true;
  }

 private:
  // Tells the workers there is something new; only a worker that has gone to sleep costs a call
  // into the kernel to wake.
  void post() {
    wake_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(sleep_mutex_);
      sleep_cv_.notify_all();
    }
  }

  void sleep_until_changed(std::uint32_t seen) {
    std::unique_lock<std::mutex> lock(sleep_mutex_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    sleep_cv_.wait(lock, [&] { return wake_.load(std::memory_order_seq_cst) != seen; });
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }

  // Claims pieces of the current job until none is left, running each.
  void claim_and_run() {
    std::uint64_t t = ticket_.load(std::memory_order_acquire);
    for (;;) {
      std::uint64_t next = t & 0xffff, chunks = (t >> 16) & 0xffff;
      if (next >= chunks) return;
      if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
      int i = static_cast<int>(next);
      tls_in_region = true;
      try {
        call_(body_, n_ * i / chunks_, n_ * (i + 1) / chunks_);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
      tls_in_region = false;
      done_.fetch_add(1, std::memory_order_release);
      t = ticket_.load(std::memory_order_acquire);
    }
  }

  void work() {
    std::uint32_t seen = 0;  // the pool's starting value, even if a job was posted before this thread ran
    for (;;) {
      auto start = std::chrono::steady_clock::now();
      for (int spins = 0; wake_.load(std::memory_order_acquire) == seen; ++spins) {
        cpu_relax();
        if ((spins & 255) == 255 && std::chrono::steady_clock::now() - start > kSpin) sleep_until_changed(seen);
      }
      seen = wake_.load(std::memory_order_acquire);
      if (stopping_.load(std::memory_order_relaxed)) return;
      claim_and_run();
    }
  }

  int threads_ = 1;
  std::vector<std::thread> workers_;
  std::atomic<std::uint32_t> wake_{0};  // bumped for every job
  std::atomic<int> sleepers_{0};        // workers that stopped spinning and wait on sleep_cv_
  std::mutex sleep_mutex_;
  std::condition_variable sleep_cv_;
  std::atomic<std::uint64_t> ticket_{0};
  std::atomic<int> done_{0};
  std::atomic<bool> stopping_{false};
  std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
  // The current job, written before the ticket is published and read by whoever claims from it.
  std::int64_t n_ = 0;
  int chunks_ = 0;
  detail::ChunkFn call_ = nullptr;
  void* body_ = nullptr;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

int default_threads() {
  if (const char* env = std::getenv("AG_NUM_THREADS")) {
    char* end = nullptr;
    long v = std::strtol(env, &end, 10);
    if (end == env || *end != '\0' || v < 1 || v > 1024)
      throw std::invalid_argument("AG_NUM_THREADS: expected a whole number from 1 to 1024, got \"" + std::string(env) +
                                  "\"");
    return static_cast<int>(v);
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::mutex pool_mutex;
std::atomic<Pool*> pool_ptr{nullptr};
std::atomic<int> pool_threads{0};

// The pool lives until the process ends; sleeping workers do not keep it from exiting.
Pool& pool() {
  Pool* p = pool_ptr.load(std::memory_order_acquire);
  if (p) return *p;
  std::lock_guard<std::mutex> lock(pool_mutex);
  p = pool_ptr.load(std::memory_order_relaxed);
  if (!p) {
    setup_blas();  // BLAS on one thread: its calls are split across this pool instead
    p = new Pool(default_threads());
    pool_threads.store(p->threads(), std::memory_order_relaxed);
    pool_ptr.store(p, std::memory_order_release);
  }
  return *p;
}

}  // namespace

int get_num_threads() {
  int n = pool_threads.load(std::memory_order_relaxed);
  return n ? n : pool().threads();
}

void set_num_threads(int n) {
  if (n < 1) throw std::invalid_argument("set_num_threads: need at least 1 thread, got " + std::to_string(n));
  if (tls_in_region) throw std::logic_error("set_num_threads: called from inside a parallel_for");
  pool();  // the first pool also sets BLAS to one thread
  std::lock_guard<std::mutex> lock(pool_mutex);
  Pool* old = pool_ptr.load(std::memory_order_relaxed);
  if (old->threads() == n) return;
  auto* fresh = new Pool(n);
  pool_ptr.store(fresh, std::memory_order_release);
  pool_threads.store(fresh->threads(), std::memory_order_relaxed);
  delete old;
}

bool in_parallel_region() { return tls_in_region; }

namespace detail {

void run_chunks(std::int64_t n, int chunks, ChunkFn call, void* body) {
  if (!pool().try_run(n, chunks, call, body)) call(body, 0, n);
}

}  // namespace detail

}  // namespace ag
