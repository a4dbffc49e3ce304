#pragma once
// What this machine's CPU is, read at run time (not what the build machine had): its model,
// the widest vector extension it has and its logical core count. Kernel choices and the
// tuning database's device key depend on them: machines of one project may differ in their
// vector units from one session to the next (AVX-512 on some, AVX2 on others).
#include <string>

namespace nimble::kernels {

enum class VectorExtension { kNone, kAvx, kAvx2, kAvx512 };

struct CpuFeatures {
  std::string model;  // /proc/cpuinfo's model name, e.g. "AMD EPYC 9R14"
  // /proc/cpuinfo's "cpu family" and "model" numbers ("6/167"; "" where absent). A VM's model
  // name may be generic ("Intel(R) Xeon(R) Processor" on a Cascade Lake and on a Sapphire
  // Rapids host alike), the numbers are not: the tuning database's device key carries both.
  std::string family_model;
  VectorExtension vector_extension = VectorExtension::kNone;
  int cores = 1;  // logical cores the process may see
};

// Read once, on first use.
const CpuFeatures& this_cpu();

// "avx512", "avx2", "avx" or "sse".
const char* vector_extension_name(VectorExtension extension);

}  // namespace nimble::kernels
