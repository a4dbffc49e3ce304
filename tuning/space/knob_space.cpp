#include "tuning/space/knob_space.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace nimble::tuning {

void KnobSpace::add_constraint(std::string description, KnobConstraint constraint) {
  descriptions_.push_back(std::move(description));
  constraints_.push_back(std::move(constraint));
}

int KnobSpace::knob_index(const std::string& name) const {
  for (size_t i = 0; i < knobs_.size(); ++i)
    if (knobs_[i].name() == name) return static_cast<int>(i);
  throw std::invalid_argument("no knob named '" + name + "'");
}

void KnobSpace::add_product_at_most(const std::vector<std::string>& knob_names, int64_t limit) {
  std::vector<int> indices;
  std::string description;
  for (const auto& name : knob_names) {
    indices.push_back(knob_index(name));
    description += (description.empty() ? "" : "*") + name;
  }
  add_constraint(description + " <= " + std::to_string(limit),
                 [indices, limit](const std::vector<int64_t>& v) {
                   int64_t product = 1;
                   for (const int i : indices) product *= v[i];
                   return product <= limit;
                 });
}

void KnobSpace::add_divides(const std::string& divisor_knob, const std::string& dividend_knob) {
  const int a = knob_index(divisor_knob);
  const int b = knob_index(dividend_knob);
  add_constraint(divisor_knob + " divides " + dividend_knob,
                 [a, b](const std::vector<int64_t>& v) { return v[a] != 0 && v[b] % v[a] == 0; });
}

double KnobSpace::size() const {
  double n = 1;
  for (const auto& k : knobs_) n *= k.size();
  return n;
}

std::vector<int64_t> KnobSpace::values(const Config& config) const {
  std::vector<int64_t> v(config.size());
  for (size_t i = 0; i < config.size(); ++i) v[i] = knobs_[i].value(config[i]);
  return v;
}

bool KnobSpace::in_range(const Config& config) const {
  if (config.size() != knobs_.size()) return false;
  for (size_t i = 0; i < config.size(); ++i)
    if (config[i] < 0 || config[i] >= knobs_[i].size()) return false;
  return true;
}

bool KnobSpace::satisfies_constraints(const Config& config) const {
  if (constraints_.empty()) return true;
  const auto v = values(config);
  for (const auto& c : constraints_)
    if (!c(v)) return false;
  return true;
}

Config KnobSpace::random_config(std::mt19937_64& rng) const {
  Config config(knobs_.size());
  // Constraints usually reject a modest share; 10000 tries is far beyond what valid spaces need.
  for (int attempt = 0; attempt < 10000; ++attempt) {
    for (size_t i = 0; i < knobs_.size(); ++i)
      config[i] = std::uniform_int_distribution<int>(0, knobs_[i].size() - 1)(rng);
    if (satisfies_constraints(config)) return config;
  }
  throw std::runtime_error("knob space has no config satisfying its constraints");
}

Config KnobSpace::neighbor(const Config& config, std::mt19937_64& rng) const {
  for (int attempt = 0; attempt < 64; ++attempt) {
    Config next = config;
    const int k = std::uniform_int_distribution<int>(0, static_cast<int>(knobs_.size()) - 1)(rng);
    const Knob& knob = knobs_[k];
    if (knob.size() < 2) continue;
    if (knob.ordered() && std::bernoulli_distribution(0.7)(rng)) {
      // Mostly small steps, so annealing can follow a smooth landscape...
      const int step = std::bernoulli_distribution(0.5)(rng) ? 1 : -1;
      next[k] = std::clamp(config[k] + step, 0, knob.size() - 1);
    } else {
      // ...and sometimes a jump, so it can leave a basin.
      next[k] = std::uniform_int_distribution<int>(0, knob.size() - 1)(rng);
    }
    if (next != config && satisfies_constraints(next)) return next;
  }
  return config;
}

std::vector<float> KnobSpace::features(const Config& config) const {
  std::vector<float> f(config.size());
  for (size_t i = 0; i < config.size(); ++i)
    f[i] = static_cast<float>(knobs_[i].feature(config[i]));
  return f;
}

std::string KnobSpace::describe(const Config& config) const {
  std::ostringstream out;
  for (size_t i = 0; i < config.size() && i < knobs_.size(); ++i)
    out << (i ? " " : "") << knobs_[i].name() << "=" << knobs_[i].label(config[i]);
  return out.str();
}

}  // namespace nimble::tuning
