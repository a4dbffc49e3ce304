#pragma once
// Binds tuned kernels into a replay: for every tunable op, the best record of its signature in
// the tuning database is built, checked against ATen on random operands, and timed side by side
// with ATen's kernel now, on this machine; it is bound only if it is correct and faster. The
// replay then calls it directly (csrc/runtime/op_call.h).
#include <string>
#include <vector>

#include "csrc/kernels/kernel_measurer.h"
#include "csrc/runtime/replay.h"
#include "tuning/database/tuning_database.h"

namespace nimble::slot {

struct BindOptions {
  std::string device;       // records of this device key are used (program_tasks.h)
  bool any_device = false;  // else, with no record for `device`, the best of any device
  kernels::MeasureOptions measure;
  // Where CUDA families keep compiled kernels (kernels::cubin_directory_for the database).
  std::string cubin_directory;
  int rounds = 5;  // side-by-side timing rounds; medians are compared
  // Bound when ATen's median time is at least this many times the tuned kernel's; 0 binds
  // every correct kernel (to test a replay with them, say).
  double min_speedup = 1.0;
};

// What became of one op of the replay.
struct BoundOp {
  int op = -1;
  std::vector<int> absorbed;  // ops after it whose work its epilogue does (no-ops when bound)
  std::string task;           // short name
  std::string signature;
  std::string kernel;  // the record's config, described ("family=depthwise ...")
  std::string record_device;
  double aten_seconds = 0;   // per call, median of the side-by-side rounds
  double tuned_seconds = 0;  // 0 when nothing was timed
  bool bound = false;
  std::string reason;  // why not bound; what was used when the record is from another device
};

// Replaces the replay's kernels by the bound ones (ATen everywhere else).
std::vector<BoundOp> bind_tuned_kernels(Replay& replay, const tuning::TuningDatabase& database,
                                        const BindOptions& options);

}  // namespace nimble::slot
