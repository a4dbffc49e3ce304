#include "tuning/search/move_memory.h"

#include <algorithm>
#include <cmath>

namespace nimble::tuning {
namespace {

// A failed move is remembered as this much slower than the rule: cold whatever the threshold,
// without letting one failure outweigh the medians of moves that ran.
constexpr double kFailedLogRatio = 2.772588722239781;  // log(16)

// The moves from `start` to `config`: one key per knob active in `config` that differs. Knobs
// that the change of a parent made inactive are pinned and are no move of their own.
std::vector<std::string> moves(const KnobSpace& space, const Config& start, const Config& config) {
  std::vector<std::string> out;
  const std::vector<Knob>& knobs = space.knobs();
  for (size_t k = 0; k < knobs.size() && k < config.size() && k < start.size(); ++k) {
    if (config[k] == start[k] || !space.active(config, static_cast<int>(k))) continue;
    out.push_back(knobs[k].name() + ":" + knobs[k].label(start[k]) + ">" +
                  knobs[k].label(config[k]));
  }
  return out;
}

}  // namespace

void MoveMemory::remember(size_t task, const KnobSpace& space, const Config& start,
                          const Config& config, double ratio, bool failed, double stake) {
  if (!options_.enabled) return;
  const std::vector<std::string> keys = moves(space, start, config);
  if (keys.size() != 1 || (!failed && !(ratio > 0 && std::isfinite(ratio)))) return;
  std::vector<Evidence>& evidence = moves_[keys.front()];
  const double log_ratio = failed ? kFailedLogRatio : std::log(ratio);
  // One vote a task: a re-measured move (a resumed run) replaces the task's earlier one.
  const auto same = std::find_if(evidence.begin(), evidence.end(),
                                 [&](const Evidence& e) { return e.task == task; });
  if (same != evidence.end())
    *same = {task, log_ratio, stake};
  else
    evidence.push_back({task, log_ratio, stake});
}

bool MoveMemory::settled_for(size_t task, const KnobSpace& space, const Config& start,
                             const Config& config, double stake, double factor) const {
  bool cold_on_one_as_large = false;
  for (const std::string& key : moves(space, start, config)) {
    const auto it = moves_.find(key);
    if (it == moves_.end()) continue;
    for (const Evidence& e : it->second) {
      if (e.task == task) continue;
      if (e.log_ratio < std::log(factor)) return false;  // warm somewhere: still a bet
      if (e.stake >= stake) cold_on_one_as_large = true;
    }
  }
  return cold_on_one_as_large;
}

std::vector<double> MoveMemory::evidence(const std::string& key, size_t task) const {
  std::vector<double> v;
  if (const auto it = moves_.find(key); it != moves_.end())
    for (const Evidence& e : it->second)
      if (e.task != task) v.push_back(e.log_ratio);
  if (static_cast<int>(v.size()) >= options_.min_tasks || !options_.by_destination) return v;
  // "knob:from>to": every "knob:*>to" (the exact key among them).
  const std::string knob = key.substr(0, key.find(':') + 1);
  const std::string to = key.substr(key.rfind('>'));
  v.clear();
  for (const auto& [k, tasks] : moves_)
    if (k.size() > knob.size() + to.size() && k.compare(0, knob.size(), knob) == 0 &&
        k.compare(k.size() - to.size(), to.size(), to) == 0)
      for (const Evidence& e : tasks)
        if (e.task != task) v.push_back(e.log_ratio);
  return v;
}

std::optional<double> MoveMemory::median_log_ratio(const std::string& key, size_t task) const {
  std::vector<double> v = evidence(key, task);
  if (v.empty() || static_cast<int>(v.size()) < options_.min_tasks) return std::nullopt;
  const size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(m), v.end());
  if (v.size() % 2) return v[m];
  const double upper = v[m];
  return 0.5 * (upper + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(m)));
}

std::optional<double> MoveMemory::predicted_ratio(size_t task, const KnobSpace& space,
                                                  const Config& start, const Config& config) const {
  if (!options_.enabled || moves_.empty()) return std::nullopt;
  double log_ratio = 0;
  bool known = false;
  for (const std::string& key : moves(space, start, config)) {
    if (const auto m = median_log_ratio(key, task)) {
      log_ratio += *m;
      known = true;
    }
  }
  return known ? std::optional<double>(std::exp(log_ratio)) : std::nullopt;
}

std::optional<Config> MoveMemory::combined_best(size_t task, const KnobSpace& space,
                                                const Config& start) const {
  if (!options_.enabled || moves_.empty()) return std::nullopt;
  Config out = start;
  bool moved = false;
  for (size_t k = 0; k < space.knobs().size() && k < start.size(); ++k) {
    if (!space.active(start, static_cast<int>(k))) continue;
    double best = 0;  // log ratio of the knob's best value so far: the rule's own
    int best_value = start[k];
    for (int v = 0; v < space.knobs()[k].size(); ++v) {
      if (v == start[k]) continue;
      Config step = start;
      step[k] = v;
      const std::vector<std::string> keys = moves(space, start, step);
      if (keys.size() != 1) continue;
      const auto m = median_log_ratio(keys.front(), task);
      if (m && *m < best) {
        best = *m;
        best_value = v;
      }
    }
    if (best_value == start[k]) continue;
    // Knob by knob, keeping each move only where the combination stays valid (a move that
    // changes a parent knob may not go with its old children's moves).
    Config next = out;
    next[k] = best_value;
    if (space.valid(next)) {
      out = std::move(next);
      moved = true;
    }
  }
  if (!moved) return std::nullopt;
  return out;
}

}  // namespace nimble::tuning
