#include "csrc/kernels/kernel_family.h"

#include "csrc/kernels/cpu/tuning_families/cpu_families.h"
#ifdef NIMBLE_WITH_CUDA
#include "csrc/kernels/cuda/cuda_families.h"
#endif

namespace nimble::kernels {

Families cpu_families() {
  return {aten_conv_family(),       im2col_gemm_family(),   depthwise_conv_family(),
          direct_conv_family(),     winograd_conv_family(), prepacked_family(),
          prepacked_linear_family()};
}

Families cuda_families([[maybe_unused]] const std::string& cubin_directory) {
#ifdef NIMBLE_WITH_CUDA
  const cuda::CubinCache cache(cubin_directory);
  return {cuda::cudnn_conv_family(), cuda::cublaslt_linear_family(),
          cuda::depthwise_conv_family(cache), cuda::pointwise_gemm_family(cache),
          cuda::direct_conv3x3_family(cache)};
#else
  return {};
#endif
}

std::string cubin_directory_for(const std::string& database) { return database + ".cubins"; }

Families all_families(const std::string& cubin_directory) {
  Families out = cpu_families();
  for (auto& f : cuda_families(cubin_directory)) out.push_back(std::move(f));
  return out;
}

}  // namespace nimble::kernels
