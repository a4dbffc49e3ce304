// Family "cudnn": cuDNN's convolution algorithm for each CUDA convolution, the choice PyTorch
// makes once per shape by its own heuristic or benchmark (DLAS: the best algorithm changes per
// layer), here a knob the tuner measures: the algorithm, the math type (tensor cores, with or
// without converting float to TF32, or plain FMA) and the most workspace it may take. A config
// cuDNN refuses for the shape (NOT_SUPPORTED, a workspace over the limit) fails to build, and
// a math type that loses precision fails the check against ATen; neither can be bound.
// The workspace is taken from PyTorch's caching allocator on the op's stream at each call and
// released after it, as ATen's own cuDNN calls do: inside a CUDA graph it is the graph's
// memory, and every kernel on a stream reuses one block (a workspace per bound kernel,
// held for the replay's life, would add up to gigabytes on a large model).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cudnn/Handle.h>
#include <cudnn.h>

#include <array>
#include <stdexcept>
#include <string>

#include "csrc/kernels/cuda/cuda_families.h"
#include "csrc/kernels/cuda/library_workspace.h"
#include "csrc/kernels/cuda/nvrtc_family.h"

namespace nimble::kernels::cuda {
namespace {

void check(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuDNN ") + what + ": " + cudnnGetErrorString(status));
}

constexpr std::array<cudnnConvolutionFwdAlgo_t, 8> kAlgorithms{
    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
    CUDNN_CONVOLUTION_FWD_ALGO_GEMM,          CUDNN_CONVOLUTION_FWD_ALGO_DIRECT,
    CUDNN_CONVOLUTION_FWD_ALGO_FFT,           CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
    CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD,      CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED};
const std::vector<std::string> kAlgorithmNames{
    "implicit_gemm", "implicit_precomp_gemm", "gemm", "direct", "fft", "fft_tiling",
    "winograd",      "winograd_nonfused"};
constexpr std::array<cudnnMathType_t, 3> kMathTypes{CUDNN_FMA_MATH, CUDNN_DEFAULT_MATH,
                                                    CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION};
const std::vector<std::string> kMathNames{"fma", "default", "tensor_op_tf32"};
constexpr std::array<size_t, 4> kWorkspaceLimits{0, size_t{8} << 20, size_t{64} << 20,
                                                 size_t{512} << 20};
const std::vector<std::string> kWorkspaceNames{"none", "8MiB", "64MiB", "512MiB"};

// cuDNN's descriptors, destroyed with the kernel.
class Descriptors {
 public:
  explicit Descriptors(const TunableOp& op, cudnnMathType_t math) {
    check(cudnnCreateTensorDescriptor(&x_), "create x descriptor");
    check(cudnnCreateTensorDescriptor(&y_), "create y descriptor");
    check(cudnnCreateTensorDescriptor(&bias_), "create bias descriptor");
    check(cudnnCreateFilterDescriptor(&w_), "create filter descriptor");
    check(cudnnCreateConvolutionDescriptor(&conv_), "create convolution descriptor");
    const auto i = [](int64_t v) { return static_cast<int>(v); };
    check(cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(op.n), i(op.c),
                                     i(op.h), i(op.w)),
          "set x descriptor");
    check(cudnnSetTensor4dDescriptor(y_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(op.n), i(op.k),
                                     i(op.out_h()), i(op.out_w())),
          "set y descriptor");
    check(cudnnSetTensor4dDescriptor(bias_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, i(op.k), 1, 1),
          "set bias descriptor");
    check(cudnnSetFilter4dDescriptor(w_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, i(op.k),
                                     i(op.c / op.groups), i(op.r), i(op.s)),
          "set filter descriptor");
    check(cudnnSetConvolution2dDescriptor(
              conv_, i(op.padding[0]), i(op.padding[1]), i(op.stride[0]), i(op.stride[1]),
              i(op.dilation[0]), i(op.dilation[1]), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
          "set convolution descriptor");
    check(cudnnSetConvolutionGroupCount(conv_, i(op.groups)), "set group count");
    check(cudnnSetConvolutionMathType(conv_, math), "set math type");
  }
  ~Descriptors() {
    cudnnDestroyConvolutionDescriptor(conv_);
    cudnnDestroyFilterDescriptor(w_);
    cudnnDestroyTensorDescriptor(bias_);
    cudnnDestroyTensorDescriptor(y_);
    cudnnDestroyTensorDescriptor(x_);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr, bias_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
};

class CudnnConv : public TunedKernel {
 public:
  CudnnConv(TunableOp op, cudnnConvolutionFwdAlgo_t algorithm, cudnnMathType_t math,
            size_t workspace_limit)
      : op_(std::move(op)), algorithm_(algorithm), descriptors_(op_, math) {
    size_t bytes = 0;
    check(cudnnGetConvolutionForwardWorkspaceSize(at::native::getCudnnHandle(), descriptors_.x_,
                                                  descriptors_.w_, descriptors_.conv_,
                                                  descriptors_.y_, algorithm_, &bytes),
          "workspace size (the algorithm may not support this shape)");
    if (bytes > workspace_limit)
      throw std::invalid_argument("the algorithm needs " + std::to_string(bytes) +
                                  " bytes of workspace, over the limit of " +
                                  std::to_string(workspace_limit));
    workspace_bytes_ = bytes;
  }

  at::Tensor run(at::TensorList operands) const override {
    const cudnnHandle_t handle = at::native::getCudnnHandle();
    check(cudnnSetStream(handle, at::cuda::getCurrentCUDAStream()), "set stream");
    at::Tensor y = op_.empty_output();
    const at::Tensor workspace = cuda_workspace(workspace_bytes_);
    const float one = 1, zero = 0;
    check(cudnnConvolutionForward(handle, &one, descriptors_.x_, operands[0].data_ptr(),
                                  descriptors_.w_, operands[1].data_ptr(), descriptors_.conv_,
                                  algorithm_, workspace.data_ptr(), workspace_bytes_, &zero,
                                  descriptors_.y_, y.data_ptr()),
          "convolution forward");
    if (op_.bias)
      check(cudnnAddTensor(handle, &one, descriptors_.bias_, operands[2].data_ptr(), &one,
                           descriptors_.y_, y.data_ptr()),
            "add bias");
    return y;
  }

 private:
  TunableOp op_;
  cudnnConvolutionFwdAlgo_t algorithm_;
  Descriptors descriptors_;
  size_t workspace_bytes_ = 0;
};

class CudnnConvFamily : public KernelFamily {
 public:
  std::string name() const override { return "cudnn"; }
  bool supports(const TunableOp& op) const override {
    return op.device == c10::DeviceType::CUDA && op.kind == TunableOp::Kind::kConv2d &&
           dense_nchw_float(op);
  }
  std::vector<tuning::Knob> knobs(const TunableOp&) const override {
    return {tuning::Knob::categorical("algorithm", kAlgorithmNames),
            tuning::Knob::categorical("math", kMathNames),
            tuning::Knob::categorical("workspace", kWorkspaceNames)};
  }
  std::unique_ptr<TunedKernel> build(const TunableOp& op, const KnobValues& k) const override {
    return std::make_unique<CudnnConv>(op, kAlgorithms.at(k.value("algorithm")),
                                       kMathTypes.at(k.value("math")),
                                       kWorkspaceLimits.at(k.value("workspace")));
  }
};

}  // namespace

std::shared_ptr<const KernelFamily> cudnn_conv_family() {
  return std::make_shared<CudnnConvFamily>();
}

}  // namespace nimble::kernels::cuda
