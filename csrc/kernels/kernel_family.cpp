#include "csrc/kernels/kernel_family.h"

#include "csrc/kernels/cpu/cpu_families.h"

namespace nimble::kernels {

Families cpu_families() {
  return {aten_conv_family(), im2col_gemm_family(), depthwise_conv_family(), direct_conv_family(),
          winograd_conv_family()};
}

Families all_families() { return cpu_families(); }

}  // namespace nimble::kernels
