#include "tuning/scheduler/scheduler_factory.h"

#include <stdexcept>

#include "tuning/scheduler/flop_linear_scheduler.h"
#include "tuning/scheduler/random_scheduler.h"
#include "tuning/scheduler/round_robin_scheduler.h"
#include "tuning/scheduler/sequential_scheduler.h"

namespace nimble::tuning {

std::vector<std::string> scheduler_names() {
  return {"sequential", "round-robin", "random", "flop-linear", "gradient", "dynatune"};
}

std::unique_ptr<TaskScheduler> make_scheduler(const std::string& name,
                                              const SchedulerOptions& options) {
  if (name == "sequential")
    return std::make_unique<SequentialScheduler>(options.sequential_trials_per_task);
  if (name == "round-robin") return std::make_unique<RoundRobinScheduler>();
  if (name == "random") return std::make_unique<RandomScheduler>(options.seed);
  if (name == "flop-linear") return std::make_unique<FlopLinearScheduler>();
  if (name == "gradient" || name == "ansor")
    return std::make_unique<GradientScheduler>(options.gradient, options.seed);
  if (name == "dynatune")
    return std::make_unique<DynaTuneScheduler>(options.dynatune, options.seed);
  std::string known;
  for (const auto& n : scheduler_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown scheduler '" + name + "' (known: " + known + ")");
}

}  // namespace nimble::tuning
