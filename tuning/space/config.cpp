#include "tuning/space/config.h"

#include <sstream>
#include <stdexcept>

namespace nimble::tuning {

std::string config_to_json(const Config& config) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < config.size(); ++i) out << (i ? "," : "") << config[i];
  out << ']';
  return out.str();
}

Config config_from_json(const std::string& text) {
  Config config;
  size_t i = text.find('[');
  if (i == std::string::npos) throw std::invalid_argument("config is not a JSON array: " + text);
  ++i;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == ',')) ++i;
    if (i < text.size() && text[i] == ']') return config;
    size_t used = 0;
    config.push_back(std::stoi(text.substr(i), &used));
    i += used;
  }
  throw std::invalid_argument("unterminated config array: " + text);
}

}  // namespace nimble::tuning
