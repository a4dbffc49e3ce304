#include "csrc/python/run_options.h"

namespace nimble::python {

using namespace nimble::tuning;

void RunOptions::apply(TunerOptions& t, SchedulerOptions& s) const {
  t.slot_seconds = slot_seconds;
  t.budget_trials = budget_trials;
  t.budget_seconds = budget_seconds;
  t.early_stop_trials = early_stop_trials;
  t.survey.stop_on_rate = survey_stop;
  t.survey.phi = phi;
  t.survey.goal_seconds = goal_ms * 1e-3;
  t.adaptive_evaluator = adaptive;
  t.search.cold_filter.enabled = cold_filter;
  t.search.finish_when_all_cold = finish_when_cold;
  t.search.complete_share = complete_share;
  t.search.batch_size = batch_size;
  t.repeat_cost_slot_share = repeat_cost_slot_share;
  t.search.retime_cut_short_rule = retime_cut_short_rule;
  t.search.transfer.by_destination = transfer_by_destination;
  t.search.complete_untried_only = complete_untried_only;
  if (c) s.dynatune.c = *c;
  s.dynatune.belief.mcmc.walkers = mcmc_walkers;
  s.dynatune.belief.mcmc.steps = mcmc_steps;
  s.dynatune.belief.mcmc.samples = mcmc_samples;
  s.dynatune.belief.warm_steps = mcmc_warm_steps;
}

RunOptions run_options(double slot_seconds, long budget_trials, double budget_seconds,
                       long early_stop_trials, std::optional<double> c, bool survey_stop,
                       double phi, double goal_ms, bool adaptive, bool cold_filter, int batch_size,
                       int mcmc_walkers, int mcmc_steps, int mcmc_samples) {
  RunOptions o;
  o.slot_seconds = slot_seconds;
  o.budget_trials = budget_trials;
  o.budget_seconds = budget_seconds;
  o.early_stop_trials = early_stop_trials;
  o.c = c;
  o.survey_stop = survey_stop;
  o.phi = phi;
  o.goal_ms = goal_ms;
  o.adaptive = adaptive;
  o.cold_filter = cold_filter;
  o.batch_size = batch_size;
  o.mcmc_walkers = mcmc_walkers;
  o.mcmc_steps = mcmc_steps;
  o.mcmc_samples = mcmc_samples;
  return o;
}

}  // namespace nimble::python
