#include "tuning/space/knob_space.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <stdexcept>

namespace nimble::tuning {

void KnobSpace::add_constraint(std::string description, KnobConstraint constraint) {
  descriptions_.push_back(std::move(description));
  constraints_.push_back(std::move(constraint));
  if (listed_) listed_ = valid_listed(*listed_);
}

std::shared_ptr<const std::vector<Config>> KnobSpace::valid_listed(
    const std::vector<Config>& configs) const {
  auto valid = std::make_shared<std::vector<Config>>();
  for (const Config& config : configs)
    if (satisfies_constraints(config)) valid->push_back(config);
  return valid;
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

void KnobSpace::add_condition(const std::string& knob, const std::string& parent,
                              const std::vector<std::string>& labels) {
  const int k = knob_index(knob);
  const int p = knob_index(parent);
  if (p >= k || knobs_[p].kind() != KnobKind::kCategorical)
    throw std::invalid_argument("condition on knob '" + knob + "': parent '" + parent +
                                "' must be a categorical knob that comes before it");
  conditions_.resize(knobs_.size());
  if (conditions_[p].parent >= 0)
    throw std::invalid_argument("condition on knob '" + knob + "': parent '" + parent +
                                "' is conditioned itself");
  Condition c;
  c.parent = p;
  for (const auto& label : labels) {
    int found = -1;
    for (int i = 0; i < knobs_[p].size(); ++i)
      if (knobs_[p].label(i) == label) found = i;
    if (found < 0)
      throw std::invalid_argument("condition on knob '" + knob + "': '" + parent +
                                  "' has no choice '" + label + "'");
    c.parent_indices.push_back(found);
  }
  conditions_[k] = std::move(c);
}

bool KnobSpace::active(const Config& config, int knob) const {
  if (static_cast<size_t>(knob) >= conditions_.size() || conditions_[knob].parent < 0) return true;
  const Condition& c = conditions_[knob];
  return std::find(c.parent_indices.begin(), c.parent_indices.end(), config[c.parent]) !=
         c.parent_indices.end();
}

void KnobSpace::pin_inactive(Config& config) const {
  for (size_t k = 0; k < conditions_.size(); ++k)
    if (!active(config, static_cast<int>(k))) config[k] = 0;
}

double KnobSpace::size() const {
  // Sum over the parents' choices of the product of the knobs active under them.
  std::vector<int> parents;
  for (const auto& c : conditions_)
    if (c.parent >= 0 && std::find(parents.begin(), parents.end(), c.parent) == parents.end())
      parents.push_back(c.parent);
  Config config(knobs_.size(), 0);
  double total = 0;
  for (;;) {
    double n = 1;
    for (size_t k = 0; k < knobs_.size(); ++k) {
      const bool parent = std::find(parents.begin(), parents.end(), k) != parents.end();
      if (!parent && active(config, static_cast<int>(k))) n *= knobs_[k].size();
    }
    total += n;
    size_t i = 0;  // next combination of parent choices, odometer-style
    for (; i < parents.size(); ++i) {
      if (++config[parents[i]] < knobs_[parents[i]].size()) break;
      config[parents[i]] = 0;
    }
    if (i == parents.size()) return total;
  }
}

bool KnobSpace::valid(const Config& config) const {
  if (!in_range(config)) return false;
  for (size_t k = 0; k < conditions_.size(); ++k)
    if (config[k] != 0 && !active(config, static_cast<int>(k))) return false;
  return satisfies_constraints(config);
}

std::vector<int64_t> KnobSpace::values(const Config& config) const {
  if (!in_range(config)) {
    std::ostringstream why;
    why << "config " << config_to_json(config) << " does not fit this space: expected "
        << knobs_.size() << " knob indices, each in [0, size) of its knob (sizes";
    for (const Knob& k : knobs_) why << " " << k.size();
    why << ")";
    throw std::invalid_argument(why.str());
  }
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

void KnobSpace::restrict_to(std::string description, const std::vector<Config>& configs) {
  std::vector<Config> listed;
  std::set<std::vector<int64_t>> allowed;
  for (Config config : configs) {
    pin_inactive(config);
    if (!in_range(config)) throw std::invalid_argument(description + ": a config out of range");
    allowed.insert(values(config));
    listed.push_back(std::move(config));
  }
  listed_.reset();
  add_constraint(std::move(description),
                 [allowed = std::move(allowed)](const std::vector<int64_t>& values) {
                   return allowed.count(values) > 0;
                 });
  listed_ = valid_listed(listed);
}

Config KnobSpace::random_config(std::mt19937_64& rng) const {
  if (listed_) {
    if (listed_->empty())
      throw std::runtime_error("knob space has no config satisfying its constraints");
    return (*listed_)[std::uniform_int_distribution<size_t>(0, listed_->size() - 1)(rng)];
  }
  Config config(knobs_.size());
  // Constraints usually reject a modest share; 10000 tries is far beyond what valid spaces need.
  for (int attempt = 0; attempt < 10000; ++attempt) {
    for (size_t i = 0; i < knobs_.size(); ++i)
      config[i] = std::uniform_int_distribution<int>(0, knobs_[i].size() - 1)(rng);
    pin_inactive(config);
    if (satisfies_constraints(config)) return config;
  }
  throw std::runtime_error("knob space has no config satisfying its constraints");
}

Config KnobSpace::neighbor(const Config& config, std::mt19937_64& rng) const {
  for (int attempt = 0; attempt < 64; ++attempt) {
    Config next = config;
    const int k = std::uniform_int_distribution<int>(0, static_cast<int>(knobs_.size()) - 1)(rng);
    const Knob& knob = knobs_[k];
    if (knob.size() < 2 || !active(config, k)) continue;
    if (knob.ordered() && std::bernoulli_distribution(0.7)(rng)) {
      // Mostly small steps, so annealing can follow a smooth landscape...
      const int step = std::bernoulli_distribution(0.5)(rng) ? 1 : -1;
      next[k] = std::clamp(config[k] + step, 0, knob.size() - 1);
    } else {
      // ...and sometimes a jump, so it can leave a basin.
      next[k] = std::uniform_int_distribution<int>(0, knob.size() - 1)(rng);
    }
    for (size_t j = 0; j < conditions_.size(); ++j) {
      const int i = static_cast<int>(j);
      if (!active(next, i)) {
        next[j] = 0;
      } else if (!active(config, i)) {
        next[j] = std::uniform_int_distribution<int>(0, knobs_[j].size() - 1)(rng);
      }
    }
    if (next != config && satisfies_constraints(next)) return next;
  }
  return config;
}

std::vector<Config> KnobSpace::one_knob_neighbors(const Config& config) const {
  std::vector<Config> out;
  for (size_t k = 0; k < knobs_.size() && k < config.size(); ++k) {
    if (!active(config, static_cast<int>(k))) continue;
    for (int v = 0; v < knobs_[k].size(); ++v) {
      if (v == config[k]) continue;
      Config next = config;
      next[k] = v;
      pin_inactive(next);
      if (valid(next)) out.push_back(std::move(next));
    }
  }
  return out;
}

std::vector<float> KnobSpace::features(const Config& config) const {
  std::vector<float> f(config.size());
  for (size_t i = 0; i < config.size(); ++i)
    f[i] = active(config, static_cast<int>(i)) ? static_cast<float>(knobs_[i].feature(config[i]))
                                               : -1.0F;
  return f;
}

std::string KnobSpace::describe(const Config& config) const {
  std::ostringstream out;
  bool first = true;
  for (size_t i = 0; i < config.size() && i < knobs_.size(); ++i) {
    if (!active(config, static_cast<int>(i))) continue;
    out << (first ? "" : " ") << knobs_[i].name() << "=" << knobs_[i].label(config[i]);
    first = false;
  }
  return out.str();
}

}  // namespace nimble::tuning
