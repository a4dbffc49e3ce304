#pragma once
// The exchange format of the database: one JSON object per measurement and line, e.g.
// {"run":"r","signature":"conv..","device":"cpu","config":[1,0],"seconds":[1e-4],
//  "error":"none","message":"","cost_seconds":0.5,"recorded_at":1.7e9}
#include <string>

#include "tuning/database/database_record.h"

namespace nimble::tuning {

std::string to_json_line(const DatabaseRecord& record);
// Throws std::invalid_argument naming what is wrong with the line.
DatabaseRecord from_json_line(const std::string& line);

}  // namespace nimble::tuning
