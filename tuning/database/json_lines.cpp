#include "tuning/database/json_lines.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <variant>
#include <vector>

namespace nimble::tuning {
namespace {

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// The subset of JSON the format uses: one object of strings, numbers, null and number arrays.
using Value = std::variant<std::nullptr_t, double, std::string, std::vector<double>>;

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  std::map<std::string, Value> object() {
    std::map<std::string, Value> out;
    expect('{');
    if (peek() == '}') {
      ++i_;
      return out;
    }
    for (;;) {
      std::string key = string();
      expect(':');
      out[key] = value();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect('}');
      return out;
    }
  }

 private:
  char peek() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
    if (i_ >= s_.size()) throw std::invalid_argument("unexpected end of JSON line");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) throw std::invalid_argument(std::string("expected '") + c + "' in JSON line");
    ++i_;
  }
  Value value() {
    const char c = peek();
    if (c == '"') return string();
    if (c == '[') return array();
    if (s_.compare(i_, 4, "null") == 0) {
      i_ += 4;
      return nullptr;
    }
    return num();
  }
  double num() {
    peek();
    size_t used = 0;
    const double v = std::stod(s_.substr(i_, 40), &used);
    i_ += used;
    return v;
  }
  std::vector<double> array() {
    std::vector<double> out;
    expect('[');
    if (peek() == ']') {
      ++i_;
      return out;
    }
    for (;;) {
      if (s_.compare(i_, 4, "null") == 0) {
        i_ += 4;
        out.push_back(std::nan(""));
      } else {
        out.push_back(num());
      }
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect(']');
      return out;
    }
  }
  std::string string() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (c == '\\' && i_ < s_.size()) {
        const char e = s_[i_++];
        switch (e) {
          case 'n':
            c = '\n';
            break;
          case 't':
            c = '\t';
            break;
          case 'r':
            c = '\r';
            break;
          case 'u': {
            c = static_cast<char>(std::stoi(s_.substr(i_, 4), nullptr, 16));
            i_ += 4;
            break;
          }
          default:
            c = e;
        }
      }
      out += c;
    }
    expect('"');
    return out;
  }
  const std::string& s_;
  size_t i_ = 0;
};

template <typename T>
const T& field(const std::map<std::string, Value>& object, const std::string& key) {
  const auto it = object.find(key);
  if (it == object.end()) throw std::invalid_argument("JSON line lacks \"" + key + "\"");
  if (const T* v = std::get_if<T>(&it->second)) return *v;
  throw std::invalid_argument("JSON line has a \"" + key + "\" of the wrong type");
}

double optional_number(const std::map<std::string, Value>& object, const std::string& key) {
  const auto it = object.find(key);
  if (it == object.end()) return 0;
  if (const double* v = std::get_if<double>(&it->second)) return *v;
  return 0;
}

}  // namespace

std::string to_json_line(const DatabaseRecord& r) {
  std::string out = "{\"run\":" + quote(r.run) + ",\"signature\":" + quote(r.signature) +
                    ",\"device\":" + quote(r.device) + ",\"config\":" + config_to_json(r.config) +
                    ",\"seconds\":[";
  for (size_t i = 0; i < r.result.seconds.size(); ++i)
    out += (i ? "," : "") + number(r.result.seconds[i]);
  out += "],\"error\":" + quote(to_string(r.result.error)) +
         ",\"message\":" + quote(r.result.message) +
         ",\"cost_seconds\":" + number(r.result.cost_seconds) +
         ",\"cut_short\":" + (r.result.cut_short ? "1" : "0") +
         ",\"recorded_at\":" + number(r.recorded_at) + "}";
  return out;
}

DatabaseRecord from_json_line(const std::string& line) {
  const auto object = Parser(line).object();
  DatabaseRecord r;
  r.run = field<std::string>(object, "run");
  r.signature = field<std::string>(object, "signature");
  r.device = field<std::string>(object, "device");
  for (const double v : field<std::vector<double>>(object, "config"))
    r.config.push_back(static_cast<int>(v));
  r.result.seconds = field<std::vector<double>>(object, "seconds");
  r.result.error = measure_error_from_string(field<std::string>(object, "error"));
  r.result.message = field<std::string>(object, "message");
  r.result.cost_seconds = optional_number(object, "cost_seconds");
  r.result.cut_short = optional_number(object, "cut_short") != 0;
  r.recorded_at = optional_number(object, "recorded_at");
  return r;
}

}  // namespace nimble::tuning
