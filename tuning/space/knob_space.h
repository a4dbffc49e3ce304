#pragma once
// The search space of a task: knobs plus constraints that tie knobs together, and
// conditions that make a knob matter only for some choices of a categorical knob (a kernel
// family's own knobs, say). An inactive knob is pinned to its first value, so that configs
// differing only in knobs that do not matter are one config.
#include <functional>
#include <memory>
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
  // Only these configs are valid (a recorded trace's): random_config draws from the list, since
  // rejection sampling over the whole product of the knobs rarely hits a short list.
  void restrict_to(std::string description, const std::vector<Config>& configs);

  // `knob` is active only while the categorical knob `parent` takes one of `labels`. The
  // parent must come before the knob and be unconditioned itself.
  void add_condition(const std::string& knob, const std::string& parent,
                     const std::vector<std::string>& labels);
  bool active(const Config& config, int knob) const;

  const std::vector<Knob>& knobs() const { return knobs_; }
  int knob_index(const std::string& name) const;
  // Number of configs before constraints (counting inactive knobs once); saturates at 2^63
  // for giant spaces.
  double size() const;

  std::vector<int64_t> values(const Config& config) const;
  bool in_range(const Config& config) const;
  bool satisfies_constraints(const Config& config) const;
  // In range, inactive knobs at their first value, constraints met.
  bool valid(const Config& config) const;
  // Uniform over the valid configs (rejection sampling, or a draw from restrict_to's list);
  // throws when none found.
  Config random_config(std::mt19937_64& rng) const;
  // A valid config that differs from `config` in one active knob (a step for ordered knobs);
  // knobs that a changed parent activates take random values.
  Config neighbor(const Config& config, std::mt19937_64& rng) const;
  // Every valid config that differs from `config` in one active knob, that knob through all its
  // other values; knobs a changed parent activates take their first value. Knob order, then
  // value order.
  std::vector<Config> one_knob_neighbors(const Config& config) const;
  // Inactive knobs have feature -1.
  std::vector<float> features(const Config& config) const;
  // "name=label ..." over the active knobs.
  std::string describe(const Config& config) const;
  const std::vector<std::string>& constraint_descriptions() const { return descriptions_; }

 private:
  struct Condition {
    int parent = -1;
    std::vector<int> parent_indices;  // choices of the parent under which the knob is active
  };
  // Sets every inactive knob to its first value, parents first.
  void pin_inactive(Config& config) const;

  std::vector<Knob> knobs_;
  std::vector<Condition> conditions_;  // per knob; parent -1: always active
  std::vector<KnobConstraint> constraints_;
  std::vector<std::string> descriptions_;
  // Those of `configs` that meet every constraint.
  std::shared_ptr<const std::vector<Config>> valid_listed(const std::vector<Config>& configs) const;

  // restrict_to's configs that meet every constraint, in its order (refiltered by a constraint
  // added later), so that a draw needs no scan; shared, since a space is copied per task and
  // per run.
  std::shared_ptr<const std::vector<Config>> listed_;
};

}  // namespace nimble::tuning
