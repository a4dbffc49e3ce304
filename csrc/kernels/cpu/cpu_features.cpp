#include "csrc/kernels/cpu/cpu_features.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>
#include <unordered_set>

namespace nimble::kernels {
namespace {

std::string value_of(const std::string& line) {
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return "";
  const size_t start = line.find_first_not_of(" \t", colon + 1);
  return start == std::string::npos ? "" : line.substr(start);
}

CpuFeatures read_cpu_features() {
  CpuFeatures cpu;
  cpu.model = "unknown CPU";
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  bool have_model = false, have_flags = false;
  std::string family, model_number;
  while (std::getline(cpuinfo, line) && !(have_model && have_flags)) {
    if (!have_model && line.rfind("model name", 0) == 0) {
      cpu.model = value_of(line);
      have_model = true;
    } else if (family.empty() && line.rfind("cpu family", 0) == 0) {
      family = value_of(line);
    } else if (model_number.empty() && line.rfind("model", 0) == 0 &&
               line.find_first_not_of(" \t", 5) == line.find(':')) {
      model_number = value_of(line);  // "model\t\t: 167", not "model name"
    } else if (!have_flags && line.rfind("flags", 0) == 0) {
      std::istringstream words(value_of(line));
      std::unordered_set<std::string> flags;
      for (std::string flag; words >> flag;) flags.insert(flag);
      cpu.vector_extension = flags.count("avx512f") ? VectorExtension::kAvx512
                             : flags.count("avx2")  ? VectorExtension::kAvx2
                             : flags.count("avx")   ? VectorExtension::kAvx
                                                    : VectorExtension::kNone;
      have_flags = true;
    }
  }
  if (!family.empty() && !model_number.empty()) cpu.family_model = family + "/" + model_number;
  cpu.cores = std::max(1u, std::thread::hardware_concurrency());
  return cpu;
}

}  // namespace

const CpuFeatures& this_cpu() {
  static const CpuFeatures cpu = read_cpu_features();
  return cpu;
}

const char* vector_extension_name(VectorExtension extension) {
  switch (extension) {
    case VectorExtension::kAvx512:
      return "avx512";
    case VectorExtension::kAvx2:
      return "avx2";
    case VectorExtension::kAvx:
      return "avx";
    case VectorExtension::kNone:
      return "sse";
  }
  return "?";
}

}  // namespace nimble::kernels
