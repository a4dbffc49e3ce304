#pragma once
// Compiled kernels kept on disk, keyed by what decides the code: the source text (with its
// headers), the compile options and the GPU architecture. Tuning compiles hundreds of configs;
// a second run, a bind after a tune, or a worker that measures a config again loads the cubin
// instead of running NVRTC (~0.1 s a kernel). The directory sits beside the tuning database
// (cubin_directory_for, kernel_family.h).
#include <string>

#include "csrc/kernels/cuda/nvrtc_compiler.h"

namespace nimble::kernels::cuda {

class CubinCache {
 public:
  // An empty directory: compile every time, keep nothing.
  explicit CubinCache(std::string directory) : directory_(std::move(directory)) {}
  // The cached kernel when there is one, else NVRTC's, stored for next time (written to a
  // temporary file, then renamed: processes sharing the directory never read half a file).
  CompiledKernel compile(const KernelSource& source, int sm) const;
  // 16 hex digits: FNV-1a over the source, its headers, the options and the architecture.
  static std::string key(const KernelSource& source, int sm);
  const std::string& directory() const { return directory_; }

 private:
  std::string directory_;
};

}  // namespace nimble::kernels::cuda
