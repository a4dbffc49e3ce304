#include "csrc/kernels/cpu/channels_last/isa.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace nimble::kernels::nhwc {

bool supports(Isa isa) {
  switch (isa) {
    case Isa::kPortable:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f");
  }
  return false;
}

namespace {

Isa supported_isa() {
  return supports(Isa::kAvx512) ? Isa::kAvx512 : supports(Isa::kAvx2) ? Isa::kAvx2 : Isa::kPortable;
}

Isa read_best_isa() {
  const Isa best = supported_isa();
  const char* cap = std::getenv("NIMBLE_CPU_ISA");
  if (cap == nullptr || *cap == '\0') return best;
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
    if (std::strcmp(cap, isa_name(isa)) == 0) return isa < best ? isa : best;
  }
  throw std::invalid_argument(
      std::string("NIMBLE_CPU_ISA: expected avx512, avx2 or portable, got '") + cap + "'");
}

}  // namespace

Isa best_isa() {
  static const Isa best = read_best_isa();
  return best;
}

bool isa_capped() { return best_isa() != supported_isa(); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kPortable:
      return "portable";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

}  // namespace nimble::kernels::nhwc
