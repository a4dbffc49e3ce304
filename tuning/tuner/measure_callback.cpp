#include "tuning/tuner/measure_callback.h"

#include <chrono>

namespace nimble::tuning {

void update_cost_model(const MeasuredBatch& batch) {
  batch.search.record(batch.configs, batch.results);
}

MeasureCallback add_to_database(TuningDatabase& database, std::string run, std::string device) {
  return [&database, run = std::move(run), device = std::move(device)](const MeasuredBatch& batch) {
    const double stamp =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::vector<DatabaseRecord> rows;
    rows.reserve(batch.configs.size());
    for (size_t i = 0; i < batch.configs.size(); ++i)
      rows.push_back(
          {run, batch.task.signature, device, batch.configs[i], batch.results[i], stamp});
    database.append(rows);
  };
}

std::vector<MeasureCallback> default_measure_callbacks(TuningDatabase* database,
                                                       const std::string& run,
                                                       const std::string& device) {
  std::vector<MeasureCallback> callbacks{update_cost_model};
  if (database) callbacks.push_back(add_to_database(*database, run, device));
  return callbacks;
}

}  // namespace nimble::tuning
