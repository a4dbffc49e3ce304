#pragma once
// The search space of a task: knobs plus constraints that tie knobs together.
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tuning/space/config.h"
#include "tuning/space/knob.h"

namespace nimble::tuning {

// A constraint sees the numeric knob values (in knob order) of a candidate.
using KnobConstraint = std::function<bool(const std::vector<int64_t>& values)>;

class KnobSpace {
 public:
  KnobSpace() = default;
  explicit KnobSpace(std::vector<Knob> knobs) : knobs_(std::move(knobs)) {}

  void add_knob(Knob knob) { knobs_.push_back(std::move(knob)); }
  void add_constraint(std::string description, KnobConstraint constraint);
  // Common constraints, named so that their description says what they check.
  void add_product_at_most(const std::vector<std::string>& knob_names, int64_t limit);
  void add_divides(const std::string& divisor_knob, const std::string& dividend_knob);

  const std::vector<Knob>& knobs() const { return knobs_; }
  int knob_index(const std::string& name) const;
  // Number of configs before constraints; saturates at 2^63 for giant spaces.
  double size() const;

  std::vector<int64_t> values(const Config& config) const;
  bool in_range(const Config& config) const;
  bool satisfies_constraints(const Config& config) const;
  bool valid(const Config& config) const {
    return in_range(config) && satisfies_constraints(config);
  }
  // Uniform over the valid configs (rejection sampling); throws when none found.
  Config random_config(std::mt19937_64& rng) const;
  // A valid config that differs from `config` in one knob (a step for ordered knobs).
  Config neighbor(const Config& config, std::mt19937_64& rng) const;
  std::vector<float> features(const Config& config) const;
  std::string describe(const Config& config) const;
  const std::vector<std::string>& constraint_descriptions() const { return descriptions_; }

 private:
  std::vector<Knob> knobs_;
  std::vector<KnobConstraint> constraints_;
  std::vector<std::string> descriptions_;
};

}  // namespace nimble::tuning
