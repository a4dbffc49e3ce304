#pragma once
// One tunable parameter of a kernel template and the finite list of values it may take.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace nimble::tuning {

enum class KnobKind { kIntegerRange, kPowerOfTwoRange, kCategorical };

class Knob {
 public:
  static Knob integer_range(std::string name, int64_t lo, int64_t hi, int64_t step = 1);
  static Knob power_of_two_range(std::string name, int64_t lo, int64_t hi);
  static Knob categorical(std::string name, std::vector<std::string> choices);

  const std::string& name() const { return name_; }
  // The same knob under another name (e.g. prefixed by the kernel family it belongs to).
  Knob renamed(std::string name) const {
    Knob k = *this;
    k.name_ = std::move(name);
    return k;
  }
  KnobKind kind() const { return kind_; }
  int size() const { return static_cast<int>(values_.size()); }
  // Numeric value of the index-th choice (a categorical knob's value is its index).
  int64_t value(int index) const { return values_.at(index); }
  std::string label(int index) const;
  // Ordered knobs (ranges) have meaningful neighbours; categorical ones do not.
  bool ordered() const { return kind_ != KnobKind::kCategorical; }
  // Cost-model feature in [0, 1]: position in the range (log scale for powers of two).
  double feature(int index) const;

 private:
  Knob(std::string name, KnobKind kind, std::vector<int64_t> values,
       std::vector<std::string> labels);
  std::string name_;
  KnobKind kind_;
  std::vector<int64_t> values_;
  std::vector<std::string> labels_;
};

}  // namespace nimble::tuning
