#pragma once
// Options shared by nimble._C.tuning's simulate(), compare() and tune(), from their keyword
// arguments, applied to the tuner's and the scheduler's options.
#include <cstdint>
#include <limits>
#include <optional>

#include "tuning/scheduler/scheduler_factory.h"
#include "tuning/tuner/model_tuner.h"

namespace nimble::python {

// Options shared by simulate(), compare() and tune(), from keyword arguments.
struct RunOptions {
  double slot_seconds = 20;
  long budget_trials = 0;
  double budget_seconds = std::numeric_limits<double>::infinity();
  long early_stop_trials = 200;
  std::optional<double> c;
  bool survey_stop = false;
  double phi = -0.25;
  double goal_ms = 0;
  bool adaptive = true;
  bool cold_filter = true;
  bool finish_when_cold = false;
  double complete_share = 0.1;          // stake-aware neighbour completion (SearchOptions), 0: off
  double repeat_cost_slot_share = 1.0;  // TunerOptions: a candidate's repeats, at most this x slot
  bool retime_cut_short_rule = true;    // SearchOptions: a cut-short rule is timed again
  bool transfer_by_destination = true;  // TransferOptions::by_destination
  bool complete_untried_only = true;    // SearchOptions::complete_untried_only
  int batch_size = 8;
  int mcmc_walkers = 10;
  int mcmc_steps = 500;
  int mcmc_samples = 200;
  int mcmc_warm_steps = 40;  // a refit from the task's previous walkers; 0: every fit cold
  uint64_t seed = 0;

  void apply(tuning::TunerOptions& t, tuning::SchedulerOptions& s) const;
};

RunOptions run_options(double slot_seconds, long budget_trials, double budget_seconds,
                       long early_stop_trials, std::optional<double> c, bool survey_stop,
                       double phi, double goal_ms, bool adaptive, bool cold_filter, int batch_size,
                       int mcmc_walkers, int mcmc_steps, int mcmc_samples);

}  // namespace nimble::python
