// dist.h over Boost.MPI and Open MPI. Only the raw-buffer forms of Boost.MPI's calls are used
// (float and double are MPI types), so nothing is serialised.
#include <boost/mpi/collectives.hpp>
#include <boost/mpi/communicator.hpp>
#include <boost/mpi/environment.hpp>
#include <boost/mpi/nonblocking.hpp>
#include <cstdlib>
#include <memory>
#include <fmt/ranges.h>
#include <limits>
#include <mpi.h>

#include "../autograd/dispatch.h"
#include "../runtime/error.h"
#include "agreement.h"
#include "dist.h"
#include "launch.h"

namespace ag::dist {

namespace mpi = boost::mpi;

namespace {

std::unique_ptr<mpi::environment> g_environment;
std::unique_ptr<mpi::communicator> g_world;
std::int64_t g_bytes_sent = 0;

const mpi::communicator& world() { return *g_world; }

// Tags keep the two phases of a reduction apart, and both apart from anything else.
constexpr int kScatterTag = 101, kGatherTag = 102, kTextTag = 103;

template <class T>
void sum_in_rank_order_typed(T* values, std::int64_t n) {
  const int size = world_size(), me = rank();
  auto lo = [&](int r) { return n * r / size; };
  const std::int64_t mine = lo(me + 1) - lo(me);
  if ((n + size - 1) / size > std::numeric_limits<int>::max())
    throw_invalid("dist::sum_in_rank_order", "{} elements over {} ranks: a part exceeds MPI's int count", n, size);
  // Phase 1: every rank sends rank j the part j owns, and receives the other ranks' copies of
  // its own part, one slot per rank.
  std::vector<T> slots(static_cast<std::size_t>(mine) * size);
  std::vector<mpi::request> requests;
  for (int r = 0; r < size; ++r) {
    if (r == me) continue;
    requests.push_back(world().irecv(r, kScatterTag, slots.data() + mine * r, static_cast<int>(mine)));
    requests.push_back(world().isend(r, kScatterTag, values + lo(r), static_cast<int>(lo(r + 1) - lo(r))));
    g_bytes_sent += (lo(r + 1) - lo(r)) * static_cast<std::int64_t>(sizeof(T));
  }
  mpi::wait_all(requests.begin(), requests.end());
  requests.clear();
  // The sum of its part, in rank order, exactly as x_0 + x_1 + ... left to right.
  T* part = values + lo(me);
  auto slot = [&](int r) { return r == me ? part : slots.data() + mine * r; };
  for (std::int64_t i = 0; i < mine; ++i) {
    T acc = slot(0)[i];
    for (int r = 1; r < size; ++r) acc += slot(r)[i];
    part[i] = acc;
  }
  // Phase 2: every rank sends its summed part to all, and receives theirs in place.
  for (int r = 0; r < size; ++r) {
    if (r == me) continue;
    requests.push_back(world().irecv(r, kGatherTag, values + lo(r), static_cast<int>(lo(r + 1) - lo(r))));
    requests.push_back(world().isend(r, kGatherTag, part, static_cast<int>(mine)));
    g_bytes_sent += mine * static_cast<std::int64_t>(sizeof(T));
  }
  mpi::wait_all(requests.begin(), requests.end());
}

// Rank 0 receives every rank's text, in rank order (its own first).
std::vector<std::string> gather_text(const std::string& text) {
  std::vector<std::uint64_t> lengths = all_gather(static_cast<std::uint64_t>(text.size()));
  std::vector<std::string> texts;
  if (rank() != 0) {
    world().send(0, kTextTag, text.data(), static_cast<int>(text.size()));
    return texts;
  }
  texts.push_back(text);
  for (int r = 1; r < world_size(); ++r) {
    std::string t(lengths[r], '\0');
    world().recv(r, kTextTag, t.data(), static_cast<int>(t.size()));
    texts.push_back(std::move(t));
  }
  return texts;
}

// Rank 0's text, on every rank.
std::string broadcast_text(std::string text) {
  std::uint64_t length = text.size();
  mpi::broadcast(world(), length, 0);
  text.resize(length);
  mpi::broadcast(world(), text.data(), static_cast<int>(length), 0);
  return text;
}

}  // namespace

bool built_with_mpi() { return true; }

Environment::Environment(int& argc, char**& argv) {
  if (launcher_world_size() <= 1 && !launched_by_mpi()) return;
  // Serialized: the thread that reduces gradients during backward (data_parallel.cpp) calls
  // MPI while the main thread computes, never both at once.
  // Open MPI waits for messages by polling. Each process here has two threads that take turns
  // (computing, and reducing gradients), so a wait that yields the core lets the other run:
  // measured on 2 cores, 2 processes, small GPT: 60-64 ms a step without, 46 ms with. A user's
  // own setting is kept.
  setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
  g_environment = std::make_unique<mpi::environment>(argc, argv, mpi::threading::serialized, true);
  g_world = std::make_unique<mpi::communicator>();
}

Environment::~Environment() {
  g_world.reset();
  g_environment.reset();  // MPI_Finalize
}

bool detail::background_communication() {
  return g_environment && mpi::environment::thread_level() >= mpi::threading::serialized;
}

int rank() { return g_world ? g_world->rank() : 0; }
int world_size() { return g_world ? g_world->size() : 1; }

void broadcast(const std::vector<Tensor>& tensors, int root) {
  if (world_size() == 1) return;
  // Shapes first: a rank whose model differs must fail here, not read garbage.
  std::string shapes;
  for (const Tensor& t : tensors) shapes += fmt::format("{} {}\n", dtype_name(t.dtype()), shape_str(t.shape()));
  check_same("the shapes of the tensors to broadcast", shapes);
  for (Tensor t : tensors) {  // a handle: the write goes to the caller's storage
    auto* bytes = static_cast<char*>(t.mutable_raw_data());
    std::int64_t n = t.numel() * static_cast<std::int64_t>(dtype_size(t.dtype()));
    for (std::int64_t done = 0; done < n;) {
      int piece = static_cast<int>(std::min<std::int64_t>(n - done, 1 << 30));
      mpi::broadcast(world(), bytes + done, piece, root);
      done += piece;
    }
  }
}

void sum_in_rank_order(void* values, std::int64_t n, DType dtype) {
  if (world_size() == 1 || n == 0) return;
  dispatch_floating(dtype, "dist::sum_in_rank_order",
                    [&](auto tag) { sum_in_rank_order_typed(static_cast<decltype(tag)*>(values), n); });
}

void sum_in_rank_order(std::vector<double>& values) {
  sum_in_rank_order(values.data(), static_cast<std::int64_t>(values.size()), kFloat64);
}

std::vector<double> all_gather(double value) {
  std::vector<double> all(world_size(), value);
  if (world_size() > 1) mpi::all_gather(world(), &value, 1, all.data());
  return all;
}

std::vector<std::uint64_t> all_gather(std::uint64_t value) {
  std::vector<std::uint64_t> all(world_size(), value);
  if (world_size() > 1) mpi::all_gather(world(), &value, 1, all.data());
  return all;
}

bool any(bool value) {
  if (world_size() == 1) return value;
  int mine = value ? 1 : 0, result = 0;
  mpi::all_reduce(world(), mine, result, mpi::maximum<int>());
  return result != 0;
}

void check_same(const std::string& what, const std::string& description) {
  if (world_size() == 1) return;
  std::vector<std::uint64_t> hashes = all_gather(detail::fnv1a(description.data(), description.size()));
  bool same = true;
  for (std::uint64_t h : hashes) same = same && h == hashes[0];
  if (same) return;
  // They differ: rank 0 finds where, and tells everyone.
  std::vector<std::string> texts = gather_text(description);
  std::string message;
  if (rank() == 0) message = detail::describe_difference(what, texts);
  throw Mismatch(broadcast_text(message));
}

void check_in_sync(const std::string& what, const std::vector<Tensor>& tensors) {
  if (world_size() == 1) return;
  std::vector<std::uint64_t> prints = all_gather(fingerprint(tensors));
  std::vector<int> differing;
  for (int r = 1; r < world_size(); ++r)
    if (prints[r] != prints[0]) differing.push_back(r);
  if (!differing.empty())
    throw Mismatch(fmt::format("{} differ between ranks: rank{} {} {} other values than rank 0 (fingerprint {:016x} "
                               "against {:016x})",
                               what, differing.size() > 1 ? "s" : "", fmt::join(differing, ", "),
                               differing.size() > 1 ? "have" : "has", prints[differing[0]], prints[0]));
}

std::int64_t bytes_sent() { return g_bytes_sent; }

void abort(int code) {
  if (world_size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace ag::dist
