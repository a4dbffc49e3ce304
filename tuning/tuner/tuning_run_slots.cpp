// A run's slots and the batches they have in flight: submitting a batch for a slot (or a
// new slot the scheduler chooses), taking back the next completed one, closing a slot.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "tuning/tuner/tuning_run.h"

namespace nimble::tuning {

std::optional<size_t> TuningRun::closable_slot() const {
  for (size_t s = 0; s < open_slots_.size(); ++s)
    if (open_slots_[s].in_flight == 0 && !wants_more(open_slots_[s])) return s;
  return std::nullopt;
}

size_t TuningRun::close_slot(size_t s) {
  const size_t k = open_slots_[s].task;
  ++report_.slots;
  ++slots_[k];
  last_slot_trials_[k] = open_slots_[s].trials;
  seconds_per_slot_[k].push_back(task_seconds(tasks_[k], *tuners_[k]));
  open_slots_.erase(open_slots_.begin() + static_cast<std::ptrdiff_t>(s));
  return k;
}

bool TuningRun::may_submit(MeasurePool& pool) {
  return !stopped() && !waiting_for_results_ &&
         static_cast<int>(in_flight_.size()) < pool.capacity();
}

void TuningRun::submit(TaskScheduler& scheduler, MeasurePool& pool) {
  Slot* slot = nullptr;
  for (Slot& s : open_slots_)
    if (!slot && s.in_flight == 0 && wants_more(s)) slot = &s;
  if (!slot) {
    if (budget_committed()) {
      stop("budget");
      return;
    }
    std::optional<size_t> task = choose(scheduler, /*skip_busy=*/true);
    if (!task && !in_flight_.empty()) task = choose(scheduler, /*skip_busy=*/false);
    if (!task) {
      if (in_flight_.empty()) stop("all-tasks-finished");
      waiting_for_results_ = true;
      return;
    }
    for (Slot& s : open_slots_)
      if (!slot && s.task == *task && wants_more(s)) slot = &s;
    if (!slot) {
      slot = &open_slots_.emplace_back(Slot{*task, next_slot_id_++});
      slot->ends_when_flat = scheduler.slot_ends_when_flat(*task, refreshed_view());
      slot->one_batch = scheduler.one_batch_slots();
    }
  }
  const size_t k = slot->task;
  const double before = now_;
  std::vector<Config> batch = propose(k);
  slot->used += now_ - before;  // search time, when charged
  if (batch.empty()) {
    slot->no_more = true;
    if (tuners_[k]->has_pending()) {
      // Wait for results before asking again; a slot that got no batch is not a slot.
      waiting_for_results_ = true;
      if (slot->trials == 0 && slot->in_flight == 0)
        open_slots_.erase(open_slots_.begin() + (slot - open_slots_.data()));
    } else {
      finished_[k] = true;
    }
    return;
  }
  // A search left with only cold candidates ends its slot with this batch: the rest of the slot
  // would measure more of what the filter expects cold; the scheduler chooses again.
  if (tuners_[k]->only_cold_left() || slot->one_batch) slot->no_more = true;
  MeasureRequest request;
  request.ticket = next_ticket_++;
  request.task = k;
  request.configs = batch;
  request.repeats = repeat_settings(k);
  in_flight_trials_ += static_cast<long>(batch.size());
  ++slot->in_flight;
  ++task_in_flight_[k];
  in_flight_.emplace(request.ticket, InFlight{k, slot->id, std::move(batch)});
  pool.submit(std::move(request));
}

void TuningRun::take(MeasurePool& pool, const std::vector<MeasureCallback>& callbacks) {
  MeasuredRequest done = pool.take();
  const auto it = in_flight_.find(done.ticket);
  if (it == in_flight_.end())
    throw std::logic_error("measure pool returned an unknown ticket " +
                           std::to_string(done.ticket));
  const InFlight batch = std::move(it->second);
  in_flight_.erase(it);
  waiting_for_results_ = false;
  const size_t k = batch.task;
  const auto n = static_cast<long>(batch.configs.size());
  in_flight_trials_ -= n;
  --task_in_flight_[k];
  const std::vector<MeasureResult> results = account(std::move(done), batch.configs.size());
  tuners_[k]->settle(batch.configs);
  const double best_before = tuners_[k]->best_seconds();  // infinite until a config succeeds
  for (const MeasureCallback& callback : callbacks)
    callback({tasks_[k], *tuners_[k], batch.configs, results});
  const bool improved = tuners_[k]->best_seconds() < best_before;
  report_.trials += n;
  report_.curve.push_back({now_, report_.trials, model_seconds()});
  if (is_done(k)) finished_[k] = true;
  for (Slot& slot : open_slots_) {
    if (slot.id != batch.slot) continue;
    --slot.in_flight;
    if (slot.ends_when_flat && !improved) slot.no_more = true;
    slot.trials += n;
    for (const MeasureResult& r : results) slot.used += r.cost_seconds;
  }
}

std::vector<Config> TuningRun::propose(size_t k) {
  int count = options_.search.batch_size;
  if (options_.budget_trials > 0)
    count = static_cast<int>(
        std::min<long>(count, options_.budget_trials - report_.trials - in_flight_trials_));
  const auto start = Clock::now();
  // The task's stake matters only to stake-aware completion: no pass over the tasks without it.
  if (options_.search.complete_share > 0) {
    const double model = model_seconds();
    if (model > 0)
      tuners_[k]->set_stake_share(tasks_[k].weight * task_seconds(tasks_[k], *tuners_[k]) / model);
  }
  std::vector<Config> batch = tuners_[k]->propose(count);
  const double seconds = since(start);
  report_.search_wall_seconds += seconds;
  if (options_.charge_search_time) now_ += seconds;
  return batch;
}

std::vector<MeasureResult> TuningRun::account(MeasuredRequest done, size_t configs) {
  std::vector<MeasureResult> results = std::move(done.results);
  if (results.size() != configs) {
    results.assign(configs, MeasureResult{});
    for (auto& r : results) {
      r.error = MeasureError::kRuntime;
      r.message = "measurer failed for the whole batch";
      r.cost_seconds = done.wall_seconds / static_cast<double>(configs);
    }
  }
  for (const auto& r : results) {
    now_ += r.cost_seconds;
    report_.repeats += static_cast<long>(r.seconds.size());
    report_.cut_short += r.cut_short ? 1 : 0;
    report_.stalled_samples += r.stalled_samples;
  }
  return results;
}

bool TuningRun::wants_more(const Slot& slot) const {
  return !slot.no_more && !finished_[slot.task] && !budget_committed() &&
         slot.used < options_.slot_seconds;
}

}  // namespace nimble::tuning
