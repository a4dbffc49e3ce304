#pragma once
// nimble's own channels-last convolution kernels (channels_last/: depthwise, the indirect
// product for the rest, and Winograd for 3x3 layers of stride 1) called on ATen tensors: the
// lowered convolution (prepacked_convolution.h) runs one of these where the rule there picks it.
// Packs the weight once for the geometry seen at capture, takes an NHWC input (converting any other
// layout), returns a new channels-last result with the residual add and the activation applied as
// it is stored (NaN kept, as in eager), and splits the work over the calling thread's intra-op
// threads when it is large enough to pay for the fork.
#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>

#include "csrc/kernels/cpu/channels_last/depthwise_convolution.h"
#include "csrc/kernels/cpu/channels_last/gemm_convolution.h"
#include "csrc/kernels/cpu/channels_last/winograd_convolution.h"
#include "csrc/program/epilogue.h"

namespace nimble::kernels {

// Whether `t` is a float CPU tensor whose pixels hold their channels side by side, as
// nimble's channels-last kernels read them: dense channels_last, or a slice of the channels of
// a wider one (a split's piece), its pixels t.stride(3) floats apart.
bool channel_rows(const at::Tensor& t);

class NhwcConvolution {
 public:
  // kDepthwise: groups == C == K; kWinograd: WinogradConvolution::applies(); kGemm: any.
  enum class Kind { kDepthwise, kGemm, kWinograd };
  // `weight` [K, C / groups, KH, KW] and `bias` [K] (undefined: none), as the convolution
  // reads them; `geometry` with the input's sizes at capture; `parameters` the kernel's tiling
  // or blocking (kernel_parameters.h; the rule's by default; Winograd has none).
  NhwcConvolution(const at::Tensor& weight, const at::Tensor& bias,
                  const nhwc::ConvolutionGeometry& geometry, Kind kind,
                  nhwc::Isa isa = nhwc::best_isa(), const nhwc::KernelParameters& parameters = {});
  // `threads` 1 keeps the work on the calling thread (a tuned choice); 0 lets it split over
  // the calling thread's intra-op threads when it is large enough.
  at::Tensor run(const at::Tensor& input, const std::optional<at::Tensor>& residual,
                 const Epilogue& epilogue, int64_t threads = 0) const;
  // The same on raw NHWC arrays of the geometry's sizes (a linear layer: [rows, in] into
  // [rows, out], as a 1x1 convolution over one image row of `rows` pixels); a 1x1 product's
  // input pixels may be `input_pixel_stride` floats apart (0: in_channels).
  void run(const float* input, float* output, const float* residual, const Epilogue& epilogue,
           int64_t threads = 0, int64_t input_pixel_stride = 0) const;
  int64_t in_channels() const { return geometry_.in_channels; }
  int64_t out_channels() const { return geometry_.out_channels; }
  int64_t packed_bytes() const;
  // The parameters as given (0: the rule's).
  const nhwc::KernelParameters& parameters() const { return parameters_; }
  std::string describe() const;  // "nimble_depthwise", "nimble_gemm" or "nimble_winograd"(isa)

 private:
  nhwc::ConvolutionGeometry geometry_;
  nhwc::KernelParameters parameters_;
  std::unique_ptr<const nhwc::DepthwiseWeights> depthwise_;
  std::unique_ptr<const nhwc::GemmConvolution> gemm_;
  std::unique_ptr<const nhwc::WinogradConvolution> winograd_;
};

}  // namespace nimble::kernels
