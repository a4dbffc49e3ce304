#pragma once
// Compiles one kernel source with NVRTC for one GPU architecture, no device needed, and reads
// back what the compiled kernel uses (registers, shared memory, spills) from ptxas's report, to
// check against what the architecture allows a block.
#include <string>
#include <vector>

namespace nimble::kernels::cuda {

// A kernel to compile: the main source, the headers it includes (by the name it includes them
// by), the entry point and the compile options (defines; the architecture is added).
struct KernelSource {
  std::string name;  // for messages: "csrc/kernels/cuda/depthwise_conv_kernel.h"
  std::string text;
  std::vector<std::pair<std::string, std::string>> headers;  // include name, text
  std::string entry;
  std::vector<std::string> options;
};

struct KernelResources {
  int registers = -1;
  int shared_bytes = 0;  // static shared memory
  int stack_bytes = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
};

// What one block may use on a compute capability (sm): CUDA C Programming Guide, table
// "Technical Specifications per Compute Capability".
struct ArchLimits {
  int sm = 0;
  int max_threads_per_block = 1024;
  int registers_per_block = 65536;
  int registers_per_thread = 255;
  int static_shared_bytes = 48 * 1024;
};
ArchLimits arch_limits(int sm);  // throws for an architecture nimble does not compile for

// "" when `resources` fit a block of `threads` threads on `limits` without spilling, else why.
std::string resource_problem(const KernelResources& resources, int threads,
                             const ArchLimits& limits);

struct CompiledKernel {
  std::string cubin;  // bytes
  KernelResources resources;
};

// Throws std::runtime_error with NVRTC's log when the source does not compile.
CompiledKernel compile_with_nvrtc(const KernelSource& source, int sm);

// The resources ptxas reports for `entry` in its verbose log (-Xptxas -v).
KernelResources parse_ptxas_report(const std::string& log, const std::string& entry);

}  // namespace nimble::kernels::cuda
