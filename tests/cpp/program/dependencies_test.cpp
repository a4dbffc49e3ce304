// dependency_edges: hand cases for each hazard, then random traces against a brute-force
// reference that decides for every pair of ops whether the second must follow the first.
#include "csrc/program/dependencies.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace nimble {
namespace {

using Edges = std::vector<std::pair<int, int>>;

StorageAccess reads(std::vector<int> storages) { return {std::move(storages), {}}; }
StorageAccess writes(std::vector<int> storages) { return {{}, std::move(storages)}; }
StorageAccess in_place(int storage) { return {{storage}, {storage}}; }

constexpr int A = 0;
constexpr int B = 1;

TEST(DependencyEdges, ReadAfterWrite) {
  EXPECT_EQ(dependency_edges({writes({A}), reads({A})}), (Edges{{0, 1}}));
}

TEST(DependencyEdges, WriteAfterRead) {
  EXPECT_EQ(dependency_edges({reads({A}), writes({A})}), (Edges{{0, 1}}));
}

TEST(DependencyEdges, WriteAfterWrite) {
  EXPECT_EQ(dependency_edges({writes({A}), writes({A})}), (Edges{{0, 1}}));
}

TEST(DependencyEdges, ReadersOfOneStorageAreNotOrderedAmongThemselves) {
  EXPECT_EQ(dependency_edges({writes({A}), reads({A}), reads({A})}), (Edges{{0, 1}, {0, 2}}));
  EXPECT_TRUE(dependency_edges({reads({A}), reads({A})}).empty());
}

TEST(DependencyEdges, EveryReaderSinceTheLastWritePrecedesTheNextWriter) {
  EXPECT_EQ(dependency_edges({writes({A}), reads({A}), reads({A}), writes({A}), reads({A})}),
            (Edges{{0, 1}, {0, 2}, {0, 3}, {1, 3}, {2, 3}, {3, 4}}));
}

TEST(DependencyEdges, DisjointStoragesAreIndependent) {
  EXPECT_EQ(dependency_edges({writes({A}), writes({B}), reads({A}), reads({B})}),
            (Edges{{0, 2}, {1, 3}}));
}

// relu_ after the op producing its input: readers after it follow it, not the producer.
TEST(DependencyEdges, InPlaceWriteBecomesTheLastWriter) {
  EXPECT_EQ(dependency_edges({writes({A}), in_place(A), reads({A})}), (Edges{{0, 1}, {1, 2}}));
}

// A view shares its base's storage id, so writing through it orders every reader of the
// base and of other views (the builder gives slots on one storage one id).
TEST(DependencyEdges, WritesThroughAViewOrderReadersOfTheBase) {
  const std::vector<StorageAccess> ops = {
      writes({A}),    // base = f(x)
      {{A}, {A}},     // view = base.transpose(0, 1): a result on the base's storage
      {{A}, {B}},     // y = g(base)
      in_place(A),    // view.mul_(2)
      {{A, B}, {B}},  // y.copy_(base)
  };
  EXPECT_EQ(dependency_edges(ops), (Edges{{0, 1}, {1, 2}, {1, 3}, {2, 3}, {2, 4}, {3, 4}}));
}

TEST(DependencyEdges, AnOpIsNeverItsOwnDependency) {
  // Reads and writes one storage twice, as `add_(x, x)` lists its argument twice.
  EXPECT_TRUE(dependency_edges({{{A, A}, {A, A}}}).empty());
  EXPECT_EQ(dependency_edges({{{A, A}, {A, A}}, reads({A})}), (Edges{{0, 1}}));
}

TEST(DependencyEdges, StorageIdsNeedNotBeDense) {
  EXPECT_EQ(dependency_edges({writes({-1}), writes({1000}), writes({-1})}), (Edges{{0, 2}}));
}

// ---- random traces against a brute-force reference ----

bool touch(const std::vector<int>& a, const std::vector<int>& b) {
  return std::any_of(a.begin(), a.end(),
                     [&](int s) { return std::find(b.begin(), b.end(), s) != b.end(); });
}

// i < j conflict when one writes a storage the other reads or writes.
bool conflict(const StorageAccess& first, const StorageAccess& second) {
  return touch(first.writes, second.reads) || touch(first.writes, second.writes) ||
         touch(first.reads, second.writes);
}

// after[i][j]: j must follow i, i.e. a chain of conflicting pairs leads from i to j.
std::vector<std::vector<bool>> must_follow(const std::vector<StorageAccess>& ops) {
  const size_t n = ops.size();
  std::vector<std::vector<bool>> after(n, std::vector<bool>(n, false));
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = j; i-- > 0;) {
      if (conflict(ops[i], ops[j])) {
        after[i][j] = true;
        for (size_t k = 0; k < i; ++k) after[k][j] = after[k][j] || after[k][i];
      }
    }
  }
  return after;
}

// reach[i][j]: a path of edges leads from i to j.
std::vector<std::vector<bool>> reachability(size_t n, const Edges& edges) {
  std::vector<std::vector<bool>> reach(n, std::vector<bool>(n, false));
  for (size_t j = 0; j < n; ++j) {
    for (const auto& [from, to] : edges) {
      if (static_cast<size_t>(to) != j) continue;
      reach[from][j] = true;
      for (size_t k = 0; k < static_cast<size_t>(from); ++k)
        reach[k][j] = reach[k][j] || reach[k][from];
    }
  }
  return reach;
}

std::vector<StorageAccess> random_trace(std::mt19937& rng) {
  const int num_ops = static_cast<int>(rng() % 24);
  const int num_storages = 1 + static_cast<int>(rng() % 6);
  std::vector<StorageAccess> ops(num_ops);
  for (StorageAccess& op : ops) {
    switch (rng() % 4) {
      case 0:  // produces a value from some inputs
        for (int r = static_cast<int>(rng() % 3); r > 0; --r)
          op.reads.push_back(static_cast<int>(rng() % num_storages));
        op.writes.push_back(static_cast<int>(rng() % num_storages));
        break;
      case 1:  // writes in place, maybe reading others
        op.reads.push_back(static_cast<int>(rng() % num_storages));
        op.writes.push_back(op.reads.back());
        if (rng() % 2) op.reads.push_back(static_cast<int>(rng() % num_storages));
        break;
      case 2:  // only reads (a reduction into a value the trace drops)
        for (int r = 1 + static_cast<int>(rng() % 3); r > 0; --r)
          op.reads.push_back(static_cast<int>(rng() % num_storages));
        break;
      case 3:  // anything, duplicates included
        for (int r = static_cast<int>(rng() % 4); r > 0; --r)
          op.reads.push_back(static_cast<int>(rng() % num_storages));
        for (int w = static_cast<int>(rng() % 3); w > 0; --w)
          op.writes.push_back(static_cast<int>(rng() % num_storages));
        break;
    }
  }
  return ops;
}

TEST(DependencyEdges, RandomTracesOrderExactlyTheOpsThatMustFollowEachOther) {
  std::mt19937 rng(20261123);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::vector<StorageAccess> ops = random_trace(rng);
    const Edges edges = dependency_edges(ops);
    ASSERT_TRUE(std::is_sorted(edges.begin(), edges.end())) << "trial " << trial;
    ASSERT_EQ(std::adjacent_find(edges.begin(), edges.end()), edges.end()) << "trial " << trial;
    for (const auto& [from, to] : edges) {
      ASSERT_TRUE(0 <= from && from < to && to < static_cast<int>(ops.size()))
          << "trial " << trial << ": edge " << from << " -> " << to;
      EXPECT_TRUE(conflict(ops[from], ops[to]))
          << "trial " << trial << ": edge " << from << " -> " << to << " orders independent ops";
    }
    const auto expected = must_follow(ops);
    const auto got = reachability(ops.size(), edges);
    for (size_t i = 0; i < ops.size(); ++i) {
      for (size_t j = i + 1; j < ops.size(); ++j) {
        EXPECT_EQ(got[i][j], expected[i][j])
            << "trial " << trial << ": ops " << i << " and " << j
            << (expected[i][j] ? " must be ordered" : " need no order");
      }
    }
  }
}

}  // namespace
}  // namespace nimble
