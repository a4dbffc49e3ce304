#pragma once
// A 2-d convolution lowered for CPU inference (passes/cpu_lowering.h makes them), with its
// weight packed once and the residual add and activation that followed it in the model
// fused. Four kernels, by a rule on the shape and the CPU (`choose`):
// - nimble_depthwise, nimble_gemm: nimble's own channels-last kernels (nhwc_convolution.h):
//   a depthwise convolution vectorized over channels, and an indirect matrix product for
//   dense and grouped ones, the epilogue applied as results are stored.
// - nimble_winograd: nimble's Winograd F(2x2, 3x3) for dense 3x3 layers of stride 1
//   (channels_last/winograd_convolution.h). The rule does not pick it yet (choose() says
//   where it would); a tuned replay may, per layer. No primitive lookup,
//   no reorders, one thread where the work is too small to split: the fixed cost per call is
//   a few microseconds, where oneDNN's is 10-30.
// - onednn_prepacked: oneDNN's convolution (`mkldnn::_convolution_pointwise`) with the weight
//   reordered into the blocked layout oneDNN prefers and the add and activation as post-ops.
//   Its result is channels_last.
// All give channels_last results.
// The packed weight is derived state: it is packed again, before the call that would read
// it, whenever one of its sources (the convolution's weight, or the parameters and buffers
// of a folded batch norm) changed since (source_version.h).
//
// A program calls it through the op `nimble::convolution_prepacked(input, other, packed)`,
// whose third argument is this object; `other` is the residual (None without one).
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/custom_class.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "csrc/kernels/cpu/torch_ops/fused_epilogue.h"
#include "csrc/kernels/cpu/torch_ops/nhwc_convolution.h"
#include "csrc/program/source_version.h"

namespace nimble::kernels {

struct ConvolutionGeometry {
  std::vector<int64_t> padding, stride, dilation;
  int64_t groups = 1;
};

class PrepackedConvolution : public torch::CustomClassHolder {
 public:
  enum class Kernel { kOneDnn, kNimbleDepthwise, kNimbleGemm, kNimbleWinograd };
  // The kernel for this weight and input, by a rule measured per vector extension of the
  // CPU this runs on (cpu_features.h; the measurements are in docs/cpu.md).
  static Kernel choose(c10::IntArrayRef weight_sizes, const ConvolutionGeometry& geometry,
                       c10::IntArrayRef input_sizes);
  static const char* kernel_name(Kernel kernel);
  // Whether nimble_winograd computes this convolution: 3x3, stride 1, dilation 1, one group.
  static bool winograd_applies(c10::IntArrayRef weight_sizes, const ConvolutionGeometry& geometry);
  // The kernel of that name; throws naming the names there are.
  static Kernel kernel_of_name(const std::string& name);
  // What tuned kernel choices are keyed by: the convolution's sizes and geometry,
  // "in=1x32x16x16 weight=32x1x3x3 stride=1,1 pad=1,1 dil=1,1 groups=32".
  static std::string shape_key(c10::IntArrayRef input_sizes, c10::IntArrayRef weight_sizes,
                               const ConvolutionGeometry& geometry);

  // `weight` and `bias` are what the convolution reads (a folded batch norm's tensors when
  // one was folded); `sources` are the tensors they derive from, watched for changes.
  // `input` is the activation at capture (the kernel and oneDNN's weight layout are picked
  // for its shape); `out_strides` the layout the result must have (empty: channels_last,
  // the kernels' own). `non_finite` is shared by the program's prepacked products.
  PrepackedConvolution(at::Tensor weight, at::Tensor bias, std::vector<at::Tensor> sources,
                       ConvolutionGeometry geometry, Epilogue epilogue, const at::Tensor& input,
                       std::vector<int64_t> out_strides,
                       std::shared_ptr<NonFiniteWeights> non_finite,
                       std::optional<Kernel> kernel = std::nullopt, int64_t threads = 0,
                       nhwc::KernelParameters parameters = {});
  // The same from Python, with the kernel by name (kernel_name) and the activation without
  // scalars (hardtanh: relu6's bounds): what the kernels' tests and measurements build.
  static c10::intrusive_ptr<PrepackedConvolution> make(
      at::Tensor weight, std::optional<at::Tensor> bias, std::vector<int64_t> stride,
      std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups,
      std::string activation, bool add_residual, const at::Tensor& input, std::string kernel);

  at::Tensor run(const at::Tensor& input, const std::optional<at::Tensor>& other);
  // Bytes of the packed weight (its logical size: oneDNN may pad blocks beyond it).
  int64_t packed_bytes() const;
  std::string describe() const;
  // This convolution's shape_key.
  std::string key() const;
  // What runs (tuned_convolution.h names them together): the kernel, the intra-op threads (0:
  // the caller's) and nimble's kernel parameters (the rule's where 0).
  Kernel kernel() const { return kernel_; }
  const Epilogue& epilogue() const { return epilogue_; }
  // The same convolution (weight and its sources, geometry, epilogue, layouts) on another
  // kernel, thread count and parameters: a tuning candidate put in this one's place in its
  // replay (slot/context_measurer.h). Throws where that kernel cannot run it.
  c10::intrusive_ptr<PrepackedConvolution> with_choice(Kernel kernel, int64_t threads,
                                                       nhwc::KernelParameters parameters) const;
  int64_t threads() const { return threads_; }
  const nhwc::KernelParameters& parameters() const { return parameters_; }

 private:
  void pack();
  nhwc::ConvolutionGeometry nhwc_geometry() const;
  at::Tensor run_onednn(const at::Tensor& input, const std::optional<at::Tensor>& other);
  bool nimble_kernel() const { return kernel_ != Kernel::kOneDnn; }

  at::Tensor weight_, bias_;
  std::vector<at::Tensor> sources_;
  std::vector<SourceVersion> versions_;
  ConvolutionGeometry geometry_;
  Epilogue epilogue_;
  Kernel kernel_;
  int64_t threads_;  // intra-op threads a tuning run chose (0: the caller's)
  nhwc::KernelParameters parameters_;
  std::vector<int64_t> input_sizes_;
  // The result has one pixel or one channel: NCHW and channels_last strides describe it
  // alike, and oneDNN cannot make the residual's memory for a binary post-op.
  bool ambiguous_layout_;
  FiniteWeights finite_weights_;
  std::vector<int64_t> out_strides_;
  at::Tensor packed_;
  std::unique_ptr<const NhwcConvolution> nhwc_;  // the nimble kernels' packed weight
  c10::OperatorHandle unary_, binary_, reorder_;
};

// The handle of `nimble::convolution_prepacked` (registered with this file).
c10::OperatorHandle convolution_prepacked_op();

}  // namespace nimble::kernels
