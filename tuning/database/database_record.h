#pragma once
// One measurement as the database keeps it: which task (by signature) on which device, which
// config, and what the measurement gave.
#include <string>

#include "tuning/measure/measure_result.h"
#include "tuning/space/config.h"

namespace nimble::tuning {

struct DatabaseRecord {
  std::string run;
  std::string signature;
  std::string device;
  Config config;
  MeasureResult result;
  double recorded_at = 0;  // unix seconds
};

}  // namespace nimble::tuning
