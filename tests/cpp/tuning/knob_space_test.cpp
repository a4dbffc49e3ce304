#include "tuning/space/knob_space.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>

namespace nimble::tuning {
namespace {

KnobSpace example_space() {
  KnobSpace s;
  s.add_knob(Knob::integer_range("unroll", 0, 12, 4));
  s.add_knob(Knob::power_of_two_range("tile_x", 1, 128));
  s.add_knob(Knob::power_of_two_range("tile_y", 2, 64));
  s.add_knob(Knob::categorical("layout", {"nchw", "nhwc"}));
  s.add_product_at_most({"tile_x", "tile_y"}, 256);
  s.add_divides("tile_y", "tile_x");
  return s;
}

TEST(Knob, KindsListTheirValues) {
  const Knob r = Knob::integer_range("u", 0, 12, 4);
  EXPECT_EQ(r.size(), 4);
  EXPECT_EQ(r.value(3), 12);
  const Knob p = Knob::power_of_two_range("t", 2, 64);
  EXPECT_EQ(p.size(), 6);
  EXPECT_EQ(p.value(0), 2);
  EXPECT_EQ(p.value(5), 64);
  const Knob c = Knob::categorical("l", {"a", "b", "c"});
  EXPECT_EQ(c.label(1), "b");
  EXPECT_FALSE(c.ordered());
  EXPECT_THROW(Knob::power_of_two_range("bad", 3, 8), std::invalid_argument);
  EXPECT_THROW(Knob::integer_range("bad", 5, 1), std::invalid_argument);
}

TEST(KnobSpace, ConstraintsTieKnobsTogether) {
  const KnobSpace s = example_space();
  EXPECT_EQ(s.size(), 4.0 * 8 * 6 * 2);
  EXPECT_TRUE(s.valid({0, 3, 1, 0}));   // 8 x 4, 4 divides 8
  EXPECT_FALSE(s.valid({0, 7, 5, 0}));  // 128 x 64 > 256
  EXPECT_FALSE(s.valid({0, 1, 2, 0}));  // 8 does not divide 2
  EXPECT_FALSE(s.valid({0, 1, 2}));     // wrong arity
  EXPECT_FALSE(s.valid({0, 8, 0, 0}));  // index out of range
  // Reading the values of a config that does not fit is a caller's error, never a wild read.
  EXPECT_THROW(s.values({0, 1, 2}), std::invalid_argument);
  EXPECT_THROW(s.values({0, 8, 0, 0}), std::invalid_argument);
  EXPECT_EQ(s.describe({1, 3, 1, 1}), "unroll=4 tile_x=8 tile_y=4 layout=nhwc");
  EXPECT_EQ(s.constraint_descriptions().size(), 2u);
}

TEST(KnobSpace, RandomConfigsAndNeighborsAreValidProperty) {
  const KnobSpace s = example_space();
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::mt19937_64 rng(seed);
    Config c = s.random_config(rng);
    for (int step = 0; step < 50; ++step) {
      ASSERT_TRUE(s.valid(c));
      const Config n = s.neighbor(c, rng);
      ASSERT_TRUE(s.valid(n));
      int differing = 0;
      for (size_t k = 0; k < c.size(); ++k) differing += c[k] != n[k];
      ASSERT_LE(differing, 1);
      c = n;
    }
  }
}

TEST(KnobSpace, RandomConfigsCoverTheValidSpace) {
  KnobSpace s;
  s.add_knob(Knob::power_of_two_range("a", 1, 8));
  s.add_knob(Knob::power_of_two_range("b", 1, 8));
  s.add_product_at_most({"a", "b"}, 8);
  std::mt19937_64 rng(1);
  std::set<Config> seen;
  for (int i = 0; i < 2000; ++i) seen.insert(s.random_config(rng));
  EXPECT_EQ(seen.size(), 10u);  // pairs of powers of two with product <= 8
}

TEST(KnobSpace, UnsatisfiableSpaceThrows) {
  KnobSpace s;
  s.add_knob(Knob::integer_range("a", 1, 3));
  s.add_constraint("never", [](const std::vector<int64_t>&) { return false; });
  std::mt19937_64 rng(0);
  EXPECT_THROW(s.random_config(rng), std::runtime_error);
}

TEST(KnobSpace, AListedSpaceDrawsFromItsListHoweverLargeTheProduct) {
  // Ten knobs of ten values: 1e10 configs, of which three are valid (a recorded trace's); a
  // rejection sampler would almost never hit one.
  KnobSpace s;
  for (int k = 0; k < 10; ++k) s.add_knob(Knob::integer_range("k" + std::to_string(k), 0, 9));
  const std::vector<Config> listed = {Config(10, 0), Config(10, 9), {1, 2, 3, 4, 5, 6, 7, 8, 9, 0}};
  s.restrict_to("recorded", listed);
  s.add_constraint("not all nines", [](const std::vector<int64_t>& v) { return v[0] != 9; });
  std::mt19937_64 rng(2);
  std::set<Config> seen;
  for (int i = 0; i < 200; ++i) {
    const Config c = s.random_config(rng);
    ASSERT_TRUE(s.valid(c));
    seen.insert(c);
  }
  EXPECT_EQ(seen, (std::set<Config>{listed[0], listed[2]}));  // both, and never the rejected one
  EXPECT_FALSE(s.valid(Config(10, 1)));
  EXPECT_THROW(s.restrict_to("bad", {Config(10, 10)}), std::invalid_argument);
}

TEST(Config, JsonRoundTripProperty) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200; ++i) {
    Config c(std::uniform_int_distribution<int>(0, 8)(rng));
    for (int& v : c) v = std::uniform_int_distribution<int>(0, 100000)(rng);
    EXPECT_EQ(config_from_json(config_to_json(c)), c);
  }
  EXPECT_THROW(config_from_json("nope"), std::invalid_argument);
}

TEST(KnobSpace, FeaturesArePositionsInUnitRange) {
  const KnobSpace s = example_space();
  const auto f = s.features({3, 0, 5, 1});
  ASSERT_EQ(f.size(), 4u);
  EXPECT_FLOAT_EQ(f[0], 1.0f);
  EXPECT_FLOAT_EQ(f[1], 0.0f);
  EXPECT_FLOAT_EQ(f[2], 1.0f);
  EXPECT_FLOAT_EQ(f[3], 1.0f);
}

// Two kernel families sharing one space: each family's knobs matter only under it.
KnobSpace conditional_space() {
  KnobSpace s;
  s.add_knob(Knob::categorical("family", {"gemm", "direct", "library"}));
  s.add_knob(Knob::power_of_two_range("gemm.tile", 1, 64));                     // 7 values
  s.add_knob(Knob::integer_range("direct.unroll", 1, 4));                       // 4 values
  s.add_knob(Knob::categorical("direct.layout", {"nchw", "nhwc", "blocked"}));  // 3 values
  s.add_knob(Knob::integer_range("threads", 1, 2));                             // always active
  s.add_condition("gemm.tile", "family", {"gemm"});
  s.add_condition("direct.unroll", "family", {"direct"});
  s.add_condition("direct.layout", "family", {"direct"});
  return s;
}

TEST(KnobSpace, ConditionalKnobsCountOnlyUnderTheirParent) {
  const KnobSpace s = conditional_space();
  EXPECT_EQ(s.size(), (7.0 + 4 * 3 + 1) * 2);
  EXPECT_TRUE(s.valid({0, 3, 0, 0, 1}));
  EXPECT_FALSE(s.valid({0, 3, 1, 0, 1}));  // direct.unroll set under gemm
  EXPECT_TRUE(s.valid({2, 0, 0, 0, 0}));
  EXPECT_FALSE(s.valid({2, 1, 0, 0, 0}));
  EXPECT_EQ(s.describe({1, 0, 2, 1, 0}),
            "family=direct direct.unroll=3 direct.layout=nhwc threads=1");
  const auto f = s.features({0, 3, 0, 0, 1});
  EXPECT_EQ(f[2], -1.0F);
  EXPECT_EQ(f[3], -1.0F);
  KnobSpace bad = conditional_space();
  EXPECT_THROW(bad.add_condition("family", "threads", {"1"}), std::invalid_argument);
  EXPECT_THROW(bad.add_condition("threads", "family", {"winograd"}), std::invalid_argument);
}

TEST(KnobSpace, OneKnobNeighboursAreEveryValidConfigOneActiveKnobAway) {
  const KnobSpace s = conditional_space();
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    const Config c = s.random_config(rng);
    const std::vector<Config> near = s.one_knob_neighbors(c);
    const std::set<Config> unique(near.begin(), near.end());
    EXPECT_EQ(unique.size(), near.size());
    // Brute force: every valid config whose active knobs (under c's or its own parent choice)
    // differ from c's in exactly one, where a changed parent leaves its new children at 0.
    std::set<Config> expected;
    for (int i = 0; i < 20000; ++i) {
      const Config r = s.random_config(rng);
      int differing = 0;
      bool children_at_first = true;
      for (size_t k = 0; k < r.size(); ++k) {
        const bool on_c = s.active(c, static_cast<int>(k));
        const bool on_r = s.active(r, static_cast<int>(k));
        if (on_c && on_r && r[k] != c[k]) ++differing;
        if (!on_c && on_r && r[k] != 0) children_at_first = false;
      }
      if (differing == 1 && children_at_first) expected.insert(r);
    }
    EXPECT_EQ(unique, expected) << s.describe(c);
    for (const Config& n : near) EXPECT_TRUE(s.valid(n));
  }
}

TEST(KnobSpace, RandomConfigsAndNeighborsOfConditionalSpacesAreValidAndReachEverything) {
  const KnobSpace s = conditional_space();
  std::mt19937_64 rng(7);
  std::set<Config> seen;
  Config c = s.random_config(rng);
  for (int i = 0; i < 20000; ++i) {
    const Config r = s.random_config(rng);
    ASSERT_TRUE(s.valid(r)) << s.describe(r);
    seen.insert(r);
    const Config n = s.neighbor(c, rng);
    ASSERT_TRUE(s.valid(n)) << s.describe(n);
    seen.insert(n);
    c = n;
  }
  // Every config of the space turns up, and nothing else does.
  EXPECT_EQ(static_cast<double>(seen.size()), s.size());
}

}  // namespace
}  // namespace nimble::tuning
