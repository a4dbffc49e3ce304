#include "tuning/tuner/model_tuner.h"

#include <optional>
#include <utility>

#include "tuning/tuner/tuning_run.h"

namespace nimble::tuning {

ModelTuner::ModelTuner(std::vector<Task> tasks, TunerOptions options, TuningDatabase* database)
    : ModelTuner(std::move(tasks), options, database,
                 default_measure_callbacks(database, options.run, options.device)) {}

ModelTuner::ModelTuner(std::vector<Task> tasks, TunerOptions options, TuningDatabase* database,
                       std::vector<MeasureCallback> callbacks)
    : tasks_(std::move(tasks)),
      options_(std::move(options)),
      database_(database),
      measure_callbacks_(std::move(callbacks)) {}

TuningReport ModelTuner::run(TaskScheduler& scheduler, const ProgressCallback& progress,
                             MeasurePool* pool) {
  InlineMeasurePool in_process(tasks_);
  MeasurePool& measure = pool ? *pool : in_process;
  TuningRun run(tasks_, options_, scheduler.name());
  if (database_ && options_.resume) run.resume_from(*database_);
  run.start();
  for (;;) {
    if (const std::optional<size_t> slot = run.closable_slot()) {
      const size_t task = run.close_slot(*slot);
      run.observe(scheduler, task);
      if (progress) progress(run.progress_event(task, scheduler));
      run.end_epoch_if_complete(task);
    } else if (run.may_submit(measure)) {
      run.submit(scheduler, measure);
    } else if (run.in_flight()) {
      run.take(measure, measure_callbacks_);
    } else {
      run.stop("no-workers");  // kept only when nothing else stopped it: the pool has no worker
      break;
    }
  }
  return run.finish();
}

}  // namespace nimble::tuning
