#include "tuning/database/json_lines.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace nimble::tuning {
namespace {

// ordered_json keeps the fields in the order they are written, so a line reads as the format's
// example in json_lines.h does.
using Json = nlohmann::ordered_json;

// Non-finite numbers are written as null (JSON has no NaN); null reads back as NaN.
Json number(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

const Json& field(const Json& object, const char* key, Json::value_t type) {
  const auto it = object.find(key);
  if (it == object.end())
    throw std::invalid_argument(std::string("JSON line lacks \"") + key + "\"");
  const bool number_ok = type == Json::value_t::number_float && it->is_number();
  if (it->type() != type && !number_ok)
    throw std::invalid_argument(std::string("JSON line has a \"") + key + "\" of the wrong type");
  return *it;
}

// Fields that lines written before they existed lack: 0 when absent, null or not a number.
double optional_number(const Json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end()) return 0;
  if (it->is_boolean()) return it->get<bool>() ? 1 : 0;
  return it->is_number() ? it->get<double>() : 0;
}

std::vector<double> numbers(const Json& array, const char* key) {
  std::vector<double> out;
  for (const Json& v : array) {
    if (v.is_null())
      out.push_back(std::numeric_limits<double>::quiet_NaN());
    else if (v.is_number())
      out.push_back(v.get<double>());
    else
      throw std::invalid_argument(std::string("JSON line has a non-number in \"") + key + "\"");
  }
  return out;
}

}  // namespace

std::string to_json_line(const DatabaseRecord& r) {
  Json seconds = Json::array();
  for (const double s : r.result.seconds) seconds.push_back(number(s));
  const Json line = {{"run", r.run},
                     {"signature", r.signature},
                     {"device", r.device},
                     {"config", r.config},
                     {"seconds", std::move(seconds)},
                     {"error", to_string(r.result.error)},
                     {"message", r.result.message},
                     {"cost_seconds", number(r.result.cost_seconds)},
                     {"cut_short", r.result.cut_short},
                     {"recorded_at", number(r.recorded_at)}};
  // replace: a message holding invalid UTF-8 (a compiler's output) is written, not refused.
  return line.dump(-1, ' ', false, Json::error_handler_t::replace);
}

DatabaseRecord from_json_line(const std::string& line) {
  Json object;
  try {
    object = Json::parse(line);
  } catch (const Json::parse_error& e) {
    throw std::invalid_argument(std::string("not a JSON line: ") + e.what());
  }
  if (!object.is_object()) throw std::invalid_argument("JSON line is not an object");
  using T = Json::value_t;
  DatabaseRecord r;
  r.run = field(object, "run", T::string).get<std::string>();
  r.signature = field(object, "signature", T::string).get<std::string>();
  r.device = field(object, "device", T::string).get<std::string>();
  r.config = config_from_json(field(object, "config", T::array).dump());
  r.result.seconds = numbers(field(object, "seconds", T::array), "seconds");
  r.result.error = measure_error_from_string(field(object, "error", T::string).get<std::string>());
  r.result.message = field(object, "message", T::string).get<std::string>();
  r.result.cost_seconds = optional_number(object, "cost_seconds");
  r.result.cut_short = optional_number(object, "cut_short") != 0;
  r.recorded_at = optional_number(object, "recorded_at");
  return r;
}

}  // namespace nimble::tuning
