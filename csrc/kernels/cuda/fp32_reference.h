#pragma once
// Float32 math as written while a reference result is computed. Torch lets cuDNN compute
// float32 convolutions in TF32 by default (and cuBLAS matmuls when asked): a 10-bit
// mantissa, about 1e-3 relative. A tuned FP32 kernel checked at 1e-4 against such a
// reference would fail for being more exact than it. The flags are torch's process-wide
// settings: set for the scope, restored after it, even when the computation throws.
#include <ATen/Context.h>

namespace nimble::kernels::cuda {

class Fp32Reference {
 public:
  Fp32Reference()
      : cudnn_(at::globalContext().allowTF32CuDNN()),
        matmul_(at::globalContext().float32MatmulPrecision()) {
    at::globalContext().setAllowTF32CuDNN(false);
    at::globalContext().setFloat32MatmulPrecision("highest");
  }
  ~Fp32Reference() {
    at::globalContext().setAllowTF32CuDNN(cudnn_);
    at::globalContext().setFloat32MatmulPrecision(
        matmul_ == at::Float32MatmulPrecision::HIGHEST ? "highest"
        : matmul_ == at::Float32MatmulPrecision::HIGH  ? "high"
                                                       : "medium");
  }
  Fp32Reference(const Fp32Reference&) = delete;
  Fp32Reference& operator=(const Fp32Reference&) = delete;

 private:
  const bool cudnn_;
  const at::Float32MatmulPrecision matmul_;
};

}  // namespace nimble::kernels::cuda
