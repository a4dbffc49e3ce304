#include "tuning/space/knob.h"

#include <stdexcept>
#include <utility>

namespace nimble::tuning {

Knob::Knob(std::string name, KnobKind kind, std::vector<int64_t> values,
           std::vector<std::string> labels)
    : name_(std::move(name)), kind_(kind), values_(std::move(values)), labels_(std::move(labels)) {
  if (values_.empty()) throw std::invalid_argument("knob '" + name_ + "' has no values");
}

Knob Knob::integer_range(std::string name, int64_t lo, int64_t hi, int64_t step) {
  if (step <= 0 || hi < lo) throw std::invalid_argument("bad integer range for knob " + name);
  std::vector<int64_t> values;
  for (int64_t v = lo; v <= hi; v += step) values.push_back(v);
  return Knob(std::move(name), KnobKind::kIntegerRange, std::move(values), {});
}

Knob Knob::power_of_two_range(std::string name, int64_t lo, int64_t hi) {
  if (lo <= 0 || hi < lo || (lo & (lo - 1)) != 0)
    throw std::invalid_argument("bad power-of-two range for knob " + name);
  std::vector<int64_t> values;
  for (int64_t v = lo; v <= hi; v *= 2) values.push_back(v);
  return Knob(std::move(name), KnobKind::kPowerOfTwoRange, std::move(values), {});
}

Knob Knob::categorical(std::string name, std::vector<std::string> choices) {
  std::vector<int64_t> values;
  for (size_t i = 0; i < choices.size(); ++i) values.push_back(static_cast<int64_t>(i));
  return Knob(std::move(name), KnobKind::kCategorical, std::move(values), std::move(choices));
}

std::string Knob::label(int index) const {
  if (kind_ == KnobKind::kCategorical) return labels_.at(index);
  return std::to_string(values_.at(index));
}

double Knob::feature(int index) const {
  // Index position is linear in the value for integer ranges and in log2 for powers of two.
  return size() > 1 ? static_cast<double>(index) / (size() - 1) : 0.0;
}

}  // namespace nimble::tuning
