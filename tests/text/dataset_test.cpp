// Checks data/dataset.cpp: TensorDataset, the order DataLoader deals examples in, and its state.
#include <set>

#include "../test_util.h"

namespace ag {
namespace {

using test::throws_with;
using Ids = std::vector<std::int64_t>;

Ids ids(const Tensor& t) { return t.to_vector<std::int64_t>(); }

// A dataset whose example i is (i, 10 i + 0..2): the batches say which examples they hold.
data::TensorDataset<2> numbered(std::int64_t n) {
  Tensor x = arange(n);
  Tensor y = (arange(n, kFloat64).unsqueeze(1) * 10.0 + arange(3, kFloat64).unsqueeze(0));
  return data::TensorDataset(x, y);
}

TEST(TensorDataset, HoldsRowsAndPicksThemByIndex) {
  auto d = numbered(5);
  EXPECT_EQ(d.size(), 5);
  auto [x, y] = d.get(from_vector(Ids{4, 0, 4}, {3}));
  EXPECT_EQ(ids(x), (Ids{4, 0, 4}));
  EXPECT_EQ(y.shape(), (Shape{3, 3}));
  EXPECT_TRUE(test::all_close(y, {40, 41, 42, 0, 1, 2, 40, 41, 42}, 0));
  // Any dtype, one tensor or three.
  data::TensorDataset one(tensor({1, 0, 1}, {3}).to(kBool));
  EXPECT_EQ(one.get(from_vector(Ids{2}, {1}))[0].to_vector<bool>(), std::vector<bool>{true});
  data::TensorDataset three(zeros({4, 2}), arange(4), ones({4}));
  EXPECT_EQ(three.size(), 4);
}

TEST(TensorDataset, RefusesTensorsThatDisagreeOnTheExamples) {
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { data::TensorDataset(zeros({4, 2}), arange(5)); },
                                                 "TensorDataset: tensor 1 has 5 rows and tensor 0 has 4; every tensor "
                                                 "needs one row per example (shapes [4, 2], [5])"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { data::TensorDataset(zeros({4, 2}), tensor({1.0}, {})); },
                                                 "TensorDataset: tensor 1 is a scalar"));
  EXPECT_TRUE(
      throws_with<std::invalid_argument>([] { data::TensorDataset(Tensor(), arange(5)); }, "tensor 0 is undefined"));
  auto d = numbered(3);
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { d.get(from_vector(Ids{3}, {1})); }, "index 3"));
}

TEST(DataLoader, InOrderGivesConsecutiveBatchesAndAShortLastOne) {
  data::DataLoader loader(numbered(7), {.batch_size = 3});
  EXPECT_EQ(loader.size(), 3);
  std::vector<Ids> seen;
  for (auto [x, y] : loader) {
    seen.push_back(ids(x));
    EXPECT_EQ(y.size(0), x.size(0));
    EXPECT_EQ(y.to_vector<double>()[0], 10.0 * static_cast<double>(ids(x)[0]));  // y[0, 0] = 10 x[0]
  }
  EXPECT_EQ(seen, (std::vector<Ids>{{0, 1, 2}, {3, 4, 5}, {6}}));

  data::DataLoader dropping(numbered(7), {.batch_size = 3, .drop_last = true});
  EXPECT_EQ(dropping.size(), 2);
  seen.clear();
  for (auto [x, y] : dropping) seen.push_back(ids(x));
  EXPECT_EQ(seen, (std::vector<Ids>{{0, 1, 2}, {3, 4, 5}}));
}

// Every example once per epoch, in an order set by the seed alone.
TEST(DataLoader, ShuffledEpochsArePermutationsSetByTheSeed) {
  const std::int64_t n = 23;
  auto epoch_order = [](data::DataLoader<2>& loader) {
    Ids order;
    for (auto [x, y] : loader)
      for (std::int64_t i : ids(x)) order.push_back(i);
    return order;
  };
  data::DataLoader a(numbered(n), {.batch_size = 5, .shuffle = true, .seed = 3});
  data::DataLoader b(numbered(n), {.batch_size = 5, .shuffle = true, .seed = 3});
  data::DataLoader c(numbered(n), {.batch_size = 5, .shuffle = true, .seed = 4});
  std::vector<Ids> epochs;
  for (int e = 0; e < 3; ++e) {
    EXPECT_EQ(a.epoch(), e);
    Ids order = epoch_order(a);
    EXPECT_EQ(std::set<std::int64_t>(order.begin(), order.end()).size(), static_cast<std::size_t>(n));
    EXPECT_EQ(order.size(), static_cast<std::size_t>(n));
    EXPECT_EQ(order, epoch_order(b));
    EXPECT_NE(order, epoch_order(c));
    epochs.push_back(order);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  // The first epoch's order is randperm's with a generator of that seed (a documented identity).
  Generator gen(3);
  EXPECT_EQ(epochs[0], ids(randperm(n, gen)));
}

TEST(DataLoader, ALoopLeftEarlyIsContinuedByTheNextAndNextCrossesEpochs) {
  data::DataLoader loader(numbered(10), {.batch_size = 4});
  for (auto [x, y] : loader) {
    EXPECT_EQ(ids(x), (Ids{0, 1, 2, 3}));
    break;
  }
  EXPECT_EQ(loader.epoch(), 0);
  std::vector<Ids> rest;
  for (auto [x, y] : loader) rest.push_back(ids(x));
  EXPECT_EQ(rest, (std::vector<Ids>{{4, 5, 6, 7}, {8, 9}}));
  EXPECT_EQ(loader.epoch(), 1);
  EXPECT_EQ(ids(loader.next()[0]), (Ids{0, 1, 2, 3}));
  EXPECT_EQ(ids(loader.next()[0]), (Ids{4, 5, 6, 7}));
  EXPECT_EQ(ids(loader.next()[0]), (Ids{8, 9}));
  EXPECT_EQ(ids(loader.next()[0]), (Ids{0, 1, 2, 3}));
  EXPECT_EQ(loader.epoch(), 2);
}

// A loader restored from the state of another at any point gives exactly the batches the other
// goes on to give: at the start, mid-epoch, at an epoch's end, several epochs in.
TEST(DataLoader, StateRestoresTheExactPositionAnywhere) {
  for (bool drop_last : {false, true}) {
    data::LoaderOptions options{.batch_size = 4, .shuffle = true, .drop_last = drop_last, .seed = 11};
    for (int cut = 0; cut <= 10; ++cut) {
      data::DataLoader unbroken(numbered(14), options);
      for (int i = 0; i < cut; ++i) unbroken.next();
      std::string saved = unbroken.state();
      data::DataLoader resumed(numbered(14), {.batch_size = 4, .shuffle = true, .drop_last = drop_last, .seed = 999});
      resumed.set_state(saved);
      EXPECT_EQ(resumed.epoch(), unbroken.epoch()) << "cut " << cut;
      EXPECT_EQ(resumed.state(), saved);
      for (int i = 0; i < 8; ++i)
        ASSERT_EQ(ids(resumed.next()[0]), ids(unbroken.next()[0])) << "cut " << cut << ", batch " << i;
    }
  }
}

TEST(DataLoader, RefusesABadStateAndChangesNothing) {
  data::DataLoader loader(numbered(10), {.batch_size = 4, .shuffle = true, .seed = 1});
  loader.next();
  std::string good = loader.state();
  data::DataLoader other_batch(numbered(10), {.batch_size = 5, .shuffle = true});
  data::DataLoader other_size(numbered(11), {.batch_size = 4, .shuffle = true});
  data::DataLoader in_order(numbered(10), {.batch_size = 4});
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  struct Case {
    std::string state, message;
  };
  std::vector<Case> cases = {
      {"", "does not start with \"attograd-batch-order 1\""},
      {"attograd-batch-order 2" + good.substr(good.find(" examples")), "version 2 is not 1"},
      {replace("position 1", "position 4"), "position 4 is outside 0..3 batches"},
      {replace("position 1", "position -1"), "position -1 is outside"},
      {replace("epochs 1", "epochs -2"), "epochs -2 is negative"},
      {replace("epochs 1", "epochs 0"), "position 1 is outside 0..0 batches (epochs begun: 0)"},
      {replace("position 1", "position x"), "the field \"position\" is missing or not a whole number"},
      {replace("generator ", "generator 7 "), "the generator's state is refused"},
      {good.substr(0, good.find(" generator")), "the field \"generator\" is missing"},
  };
  for (const Case& c : cases) {
    EXPECT_TRUE(throws_with<std::invalid_argument>([&] { loader.set_state(c.state); }, c.message)) << c.state;
    EXPECT_EQ(loader.state(), good);
  }
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { other_batch.set_state(good); },
                                                 "a loader with batch_size 4, and this one has 5"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { other_size.set_state(good); },
                                                 "a loader with examples 10, and this one has 11"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { in_order.set_state(good); },
                                                 "a loader with shuffle 1, and this one has 0"));
}

TEST(DataLoader, RefusesOptionsThatMakeNoBatch) {
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { data::DataLoader(numbered(5), {.batch_size = 0}); },
                                                 "DataLoader: batch_size 0 is not positive"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] { data::DataLoader(numbered(5), {.batch_size = 8, .drop_last = true}); },
      "DataLoader: 5 examples make no batch of 8 with drop_last (an epoch would be empty)"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] { data::DataLoader(data::TensorDataset(zeros({0, 3})), {.batch_size = 2}); },
      "DataLoader: the dataset has no example"));
  // Without drop_last, a batch larger than the dataset is the whole dataset.
  data::DataLoader whole(numbered(5), {.batch_size = 8});
  EXPECT_EQ(ids(whole.next()[0]), (Ids{0, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace ag
