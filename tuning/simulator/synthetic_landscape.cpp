#include "tuning/simulator/synthetic_landscape.h"

#include <cmath>
#include <random>

namespace nimble::tuning {
namespace {
// Knob order of every synthetic space.
enum : int { kTileX, kTileY, kTileK, kThreads, kUnroll, kVectorize, kKnobs };
}  // namespace

SyntheticLandscape::SyntheticLandscape(LandscapeSpec spec, double peak_gflops)
    : spec_(std::move(spec)), peak_gflops_(peak_gflops) {
  space_.add_knob(Knob::power_of_two_range("tile_x", 1, 256));
  space_.add_knob(Knob::power_of_two_range("tile_y", 1, 256));
  space_.add_knob(Knob::power_of_two_range("tile_k", 1, 64));
  space_.add_knob(Knob::integer_range("threads", 1, 8));
  space_.add_knob(Knob::categorical("unroll", {"0", "4", "16", "64"}));
  space_.add_knob(Knob::categorical("vectorize", {"none", "inner", "outer"}));
  space_.add_product_at_most({"tile_x", "tile_y"}, 4096);

  std::mt19937_64 rng(spec_.seed * 0x9E3779B97F4A7C15ULL + 12345);
  std::uniform_real_distribution<double> u(0, 1);
  for (int k = kTileX; k <= kThreads; ++k) {
    const int size = space_.knobs()[k].size();
    optimum_position_.push_back(std::uniform_int_distribution<int>(0, size - 1)(rng));
    width_.push_back(1.0 + 2.0 * u(rng));
    floor_.push_back(0.08 + 0.25 * u(rng));
  }
  for (int k = kUnroll; k <= kVectorize; ++k) {
    const int size = space_.knobs()[k].size();
    std::vector<double> factors(size);
    const int best = std::uniform_int_distribution<int>(0, size - 1)(rng);
    for (int i = 0; i < size; ++i) factors[i] = i == best ? 1.0 : 0.35 + 0.5 * u(rng);
    choice_factor_.push_back(factors);
  }
  // The jump region pairs choices that are not the individually best ones: a search that has
  // settled on the best choices finds it only by exploring.
  jump_unroll_ = std::uniform_int_distribution<int>(0, 3)(rng);
  jump_vectorize_ = std::uniform_int_distribution<int>(0, 2)(rng);

  // The true optimum, by enumerating the space (about 50k configs).
  max_efficiency_ = 0;
  Config c(kKnobs, 0);
  for (c[0] = 0; c[0] < 9; ++c[0])
    for (c[1] = 0; c[1] < 9; ++c[1])
      for (c[2] = 0; c[2] < 7; ++c[2])
        for (c[3] = 0; c[3] < 8; ++c[3])
          for (c[4] = 0; c[4] < 4; ++c[4])
            for (c[5] = 0; c[5] < 3; ++c[5]) {
              if (!space_.valid(c) || !runs(c)) continue;
              max_efficiency_ = std::max(max_efficiency_, efficiency(c));
            }
  optimum_seconds_ = spec_.flops / (peak_gflops_ * spec_.ceiling_fraction * 1e9);
}

uint64_t SyntheticLandscape::hash(const Config& config, uint64_t salt) const {
  uint64_t h = spec_.seed * 0xBF58476D1CE4E5B9ULL + salt;
  for (const int v : config) {
    h ^= static_cast<uint64_t>(v) + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    h *= 0x94D049BB133111EBULL;
  }
  return h ^ (h >> 31);
}

bool SyntheticLandscape::runs(const Config& c) const {
  const auto v = space_.values(c);
  if (v[kTileX] * v[kTileY] * v[kTileK] > (1 << 15)) return false;  // tile too big to run
  const double u = static_cast<double>(hash(c, 1) >> 11) / 9007199254740992.0;
  return u >= spec_.compile_failure_rate;
}

double SyntheticLandscape::efficiency(const Config& c) const {
  double e = 1;
  for (int k = kTileX; k <= kThreads; ++k) {
    const double d = (c[k] - optimum_position_[k]) / width_[k];
    e *= floor_[k] + (1 - floor_[k]) * std::exp(-d * d);
  }
  e *= choice_factor_[0][c[kUnroll]] * choice_factor_[1][c[kVectorize]];
  // Big x and k tiles together spill the cache.
  if (c[kTileX] + c[kTileK] > 10) e *= 0.5;
  // The jump: a narrow region (one unroll/vectorize pair near the best x tile) runs faster than
  // anything outside it (jump_factor 1 means the task has none).
  if (c[kUnroll] == jump_unroll_ && c[kVectorize] == jump_vectorize_ &&
      std::abs(c[kTileX] - optimum_position_[0]) <= 2)
    e *= spec_.jump_factor / (choice_factor_[0][c[kUnroll]] * choice_factor_[1][c[kVectorize]]);
  // Ruggedness: neighbouring configs differ by a few percent for no visible reason.
  const double u = static_cast<double>(hash(c, 2) >> 11) / 9007199254740992.0;
  return e * (1 - 0.12 * u);
}

LandscapeTruth SyntheticLandscape::evaluate(const Config& c) const {
  LandscapeTruth t;
  const auto v = space_.values(c);
  if (v[kTileX] * v[kTileY] * v[kTileK] > (1 << 15)) {
    t.error = MeasureError::kRuntime;
    return t;
  }
  if (!runs(c)) {
    t.error = MeasureError::kCompile;
    return t;
  }
  const double gflops = peak_gflops_ * spec_.ceiling_fraction * efficiency(c) / max_efficiency_;
  t.seconds = spec_.flops / (gflops * 1e9);
  if (t.seconds > timeout_seconds()) t.error = MeasureError::kTimeout;
  return t;
}

}  // namespace nimble::tuning
