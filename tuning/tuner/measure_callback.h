#pragma once
// What becomes of a measured batch. The tuner hands every batch, failures included, to its
// measure callbacks in the order the batches were measured; feeding the search's cost model
// and writing the database are two such callbacks, so neither is tied into the tuning loop.
#include <functional>
#include <string>
#include <vector>

#include "tuning/database/tuning_database.h"
#include "tuning/search/task_tuner.h"
#include "tuning/task/task.h"

namespace nimble::tuning {

// One batch of one task as it came back from the measurer: one result per config, in order.
// A failed candidate carries its error in its result; a batch whose measurer threw arrives
// with a runtime error for every config.
struct MeasuredBatch {
  const Task& task;
  TaskTuner& search;  // the task's search, which proposed the batch
  const std::vector<Config>& configs;
  const std::vector<MeasureResult>& results;
};

using MeasureCallback = std::function<void(const MeasuredBatch&)>;

// Feeds the batch back to the task's search: its bests, its cold filter and its cost model
// (retrained on every batch) learn from it.
void update_cost_model(const MeasuredBatch& batch);

// Appends the batch to `database` in one transaction, so that a killed run loses at most the
// batch in flight. `database` must outlive the callback.
MeasureCallback add_to_database(TuningDatabase& database, std::string run, std::string device);

// What a tuner runs on every batch unless told otherwise: the cost-model update, then, when
// there is a database, the database write.
std::vector<MeasureCallback> default_measure_callbacks(TuningDatabase* database,
                                                       const std::string& run,
                                                       const std::string& device);

}  // namespace nimble::tuning
