#include "tuning/space/config.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace nimble::tuning {

std::string config_to_json(const Config& config) { return nlohmann::json(config).dump(); }

Config config_from_json(const std::string& text) {
  const nlohmann::json array = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!array.is_array()) throw std::invalid_argument("config is not a JSON array: " + text);
  Config config;
  for (const nlohmann::json& v : array) {
    if (!v.is_number_integer()) throw std::invalid_argument("config holds a non-integer: " + text);
    config.push_back(v.get<int>());
  }
  return config;
}

}  // namespace nimble::tuning
