// Family "cublaslt": cuBLASLt's algorithm for each CUDA linear layer. cuBLASLt ranks the
// algorithms it has for a matrix product by its heuristic; PyTorch takes the first. Here the
// rank is a knob (with the workspace the algorithm may take), so the tuner measures the others
// too. The bias is added by cuBLASLt's epilogue; a heuristic that offers fewer algorithms than
// the index fails to build. The workspace comes from the caching allocator on the op's stream
// at each call, as in cudnn_conv.cpp.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <cublasLt.h>

#include <array>
#include <stdexcept>
#include <string>

#include "csrc/kernels/cuda/cuda_families.h"
#include "csrc/kernels/cuda/library_workspace.h"
#include "csrc/kernels/cuda/nvrtc_family.h"

namespace nimble::kernels::cuda {
namespace {

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLASLt ") + what + ": status " +
                             std::to_string(static_cast<int>(status)));
}

constexpr int kHeuristics = 8;
constexpr std::array<size_t, 3> kWorkspaceLimits{0, size_t{4} << 20, size_t{32} << 20};
const std::vector<std::string> kWorkspaceNames{"none", "4MiB", "32MiB"};

// y[n, k] = x[n, c] weight[k, c]^T + bias, in cuBLASLt's column-major terms
// y^T [k x n] = op_T(weight as [c x k]) [k x c] x^T [c x n], bias per row of y^T.
class MatmulDescriptors {
 public:
  explicit MatmulDescriptors(const TunableOp& op) {
    check(cublasLtMatmulDescCreate(&matmul_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "create matmul");
    const cublasOperation_t transpose = CUBLAS_OP_T;
    check(cublasLtMatmulDescSetAttribute(matmul_, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                         sizeof(transpose)),
          "set transa");
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    check(cublasLtMatmulDescSetAttribute(matmul_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                         sizeof(epilogue)),
          "set epilogue");
    const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
    check(cublasLtMatrixLayoutCreate(&a_, CUDA_R_32F, u(op.c), u(op.k), op.c), "layout a");
    check(cublasLtMatrixLayoutCreate(&b_, CUDA_R_32F, u(op.c), u(op.n), op.c), "layout b");
    check(cublasLtMatrixLayoutCreate(&d_, CUDA_R_32F, u(op.k), u(op.n), op.k), "layout d");
  }
  ~MatmulDescriptors() {
    cublasLtMatrixLayoutDestroy(d_);
    cublasLtMatrixLayoutDestroy(b_);
    cublasLtMatrixLayoutDestroy(a_);
    cublasLtMatmulDescDestroy(matmul_);
  }
  MatmulDescriptors(const MatmulDescriptors&) = delete;
  MatmulDescriptors& operator=(const MatmulDescriptors&) = delete;
  void set_bias(const void* bias) const {
    check(cublasLtMatmulDescSetAttribute(matmul_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                         sizeof(bias)),
          "set bias pointer");
  }

  cublasLtMatmulDesc_t matmul_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
};

class CublasLtLinear : public TunedKernel {
 public:
  CublasLtLinear(TunableOp op, int heuristic, size_t workspace_limit)
      : op_(std::move(op)), descriptors_(op_) {
    cublasLtMatmulPreference_t preference = nullptr;
    check(cublasLtMatmulPreferenceCreate(&preference), "create preference");
    std::array<cublasLtMatmulHeuristicResult_t, kHeuristics> results{};
    int returned = 0;
    const cublasStatus_t set =
        cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace_limit, sizeof(workspace_limit));
    const cublasStatus_t found = cublasLtMatmulAlgoGetHeuristic(
        at::cuda::getCurrentCUDABlasLtHandle(), descriptors_.matmul_, descriptors_.a_,
        descriptors_.b_, descriptors_.d_, descriptors_.d_, preference, kHeuristics, results.data(),
        &returned);
    cublasLtMatmulPreferenceDestroy(preference);
    check(set, "set workspace limit");
    check(found, "heuristic");
    if (heuristic >= returned)
      throw std::invalid_argument("cuBLASLt offers " + std::to_string(returned) +
                                  " algorithms for this product, not " +
                                  std::to_string(heuristic + 1));
    algorithm_ = results[heuristic].algo;
    workspace_bytes_ = results[heuristic].workspaceSize;
  }

  at::Tensor run(at::TensorList operands) const override {
    at::Tensor y = op_.empty_output();
    const at::Tensor workspace = cuda_workspace(workspace_bytes_);
    descriptors_.set_bias(operands[2].data_ptr());
    const float one = 1, zero = 0;
    check(cublasLtMatmul(at::cuda::getCurrentCUDABlasLtHandle(), descriptors_.matmul_, &one,
                         operands[1].data_ptr(), descriptors_.a_, operands[0].data_ptr(),
                         descriptors_.b_, &zero, y.data_ptr(), descriptors_.d_, y.data_ptr(),
                         descriptors_.d_, &algorithm_, workspace.data_ptr(), workspace_bytes_,
                         at::cuda::getCurrentCUDAStream()),
          "matmul");
    return y;
  }

 private:
  TunableOp op_;
  MatmulDescriptors descriptors_;
  cublasLtMatmulAlgo_t algorithm_{};
  size_t workspace_bytes_ = 0;
};

class CublasLtLinearFamily : public KernelFamily {
 public:
  std::string name() const override { return "cublaslt"; }
  bool supports(const TunableOp& op) const override {
    return op.device == c10::DeviceType::CUDA && op.kind == TunableOp::Kind::kLinear &&
           dense_nchw_float(op);
  }
  std::vector<tuning::Knob> knobs(const TunableOp&) const override {
    return {tuning::Knob::integer_range("heuristic", 0, kHeuristics - 1),
            tuning::Knob::categorical("workspace", kWorkspaceNames)};
  }
  std::unique_ptr<TunedKernel> build(const TunableOp& op, const KnobValues& k) const override {
    return std::make_unique<CublasLtLinear>(op, static_cast<int>(k.value("heuristic")),
                                            kWorkspaceLimits.at(k.value("workspace")));
  }
};

}  // namespace

std::shared_ptr<const KernelFamily> cublaslt_linear_family() {
  return std::make_shared<CublasLtLinearFamily>();
}

}  // namespace nimble::kernels::cuda
