#pragma once
// A linear layer lowered for CPU inference (passes/linear_lowering.h makes them): the
// matrix product of a trace (`addmm(bias, x, W.t())`, `mm(x, W.t())`, or `x @ W` with a
// constant W) with its weight packed once and the residual add and activation that
// followed it fused. Two kernels, by a rule on the shape (`choose`), which also says where
// neither is faster than ATen's own op, which then stays:
// - onednn_prepacked: oneDNN's matmul (`mkldnn::_linear_pointwise`) with the weight
//   reordered into the blocked layout oneDNN prefers for this many rows, the add and the
//   activation as post-ops.
// - nimble_gemm: nimble's own product (nhwc_convolution.h: the input's rows as the pixels
//   of a 1x1 convolution) on the weight packed once into column panels, the add and the
//   activation applied as results are stored, written straight into the replay's buffer.
//   oneDNN's fixed cost per call (primitive lookup, reorders) exceeds the whole product on
//   small layers; this one has none to speak of. Its tiling (kernel_parameters.h) and the
//   intra-op threads either kernel runs on are what a tuning database chose for the shape
//   (tuning_families/prepacked_linear_family.cpp), the rule's by default.
// The packed weight is derived state: packed again, before the call that would read it,
// whenever the weight (or, for nimble_gemm, which packs it too, the bias) changed since
// (source_version.h).
//
// A program calls it through `nimble::linear_prepacked(input, other, packed)`; `input` is
// the product's [rows, in] operand, `other` the residual (None without one); the result
// has the sizes of the last op it replaces (a view of the [rows, out] product). Its
// `.out` overload, which the program builder picks where it plans a buffer, lets
// nimble_gemm write the buffer itself, so views of the result are computed once at prepare.
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

class PrepackedLinear : public torch::CustomClassHolder {
 public:
  enum class Kernel { kOneDnn, kNimbleGemm };
  // The kernel for a product of [rows, in] by [in, out], by a rule measured per vector
  // extension of the CPU this runs on (cpu_features.h); none where ATen's op is as fast.
  static std::optional<Kernel> choose(int64_t rows, int64_t in_features, int64_t out_features);
  // The kernel of that name (kernel_name); throws naming the names there are.
  static Kernel kernel_of_name(const std::string& name);
  // What tuned choices are keyed by, "linear in=17x768 out=3072" (rows x in features).
  static std::string shape_key(int64_t rows, int64_t in_features, int64_t out_features);

  // The product's right operand as the trace read it, [in, out], is `source` or
  // `source.t()` (`transposed`), where `source` is the parameter watched for changes.
  // `bias` is [out] or undefined. `rows` is the product's row count at capture;
  // `result_sizes` the sizes the result is handed back in.
  // `non_finite` is shared by the program's prepacked products.
  PrepackedLinear(at::Tensor source, bool transposed, at::Tensor bias, Epilogue epilogue,
                  int64_t rows, std::vector<int64_t> result_sizes, Kernel kernel,
                  std::shared_ptr<NonFiniteWeights> non_finite, int64_t threads = 0,
                  nhwc::KernelParameters parameters = {});
  // The same from Python, with the kernel by name ("onednn_prepacked" or "nimble_gemm") and the
  // activation without scalars: what the kernels' benchmark and tests build.
  static c10::intrusive_ptr<PrepackedLinear> make(at::Tensor source, bool transposed,
                                                  std::optional<at::Tensor> bias,
                                                  std::string activation, int64_t rows,
                                                  std::string kernel);

  at::Tensor run(const at::Tensor& input, const std::optional<at::Tensor>& other);
  // The same into `out` (contiguous, of the result's sizes).
  void run_into(const at::Tensor& input, const std::optional<at::Tensor>& other, at::Tensor& out);
  int64_t packed_bytes() const;
  std::string describe() const;
  static const char* kernel_name(Kernel kernel);
  std::string key() const;  // this layer's shape_key
  // What runs: the kernel, the intra-op threads (0: the caller's) and nimble_gemm's tiling.
  Kernel kernel() const { return kernel_; }
  int64_t threads() const { return threads_; }
  const nhwc::KernelParameters& parameters() const { return parameters_; }
  const Epilogue& epilogue() const { return epilogue_; }
  // The same layer (weight, bias, epilogue, sizes) on another kernel, thread count and
  // parameters: a tuning candidate put in this one's place in its replay
  // (slot/context_measurer.h).
  c10::intrusive_ptr<PrepackedLinear> with_choice(Kernel kernel, int64_t threads,
                                                  nhwc::KernelParameters parameters) const;

 private:
  void pack_if_changed(bool has_residual);
  void pack();
  at::Tensor weight() const;  // [in, out], a view of the source
  at::Tensor run_onednn(const at::Tensor& input, const std::optional<at::Tensor>& other) const;
  // Into `y` ([rows, out], contiguous).
  void run_nimble(const at::Tensor& input, const std::optional<at::Tensor>& other,
                  at::Tensor& y) const;

  at::Tensor source_, bias_;
  bool transposed_;
  // Of the source, and of the bias (which nimble_gemm packs beside the weight), when packed.
  SourceVersion version_, bias_version_;
  FiniteWeights finite_weights_;
  Epilogue epilogue_;
  int64_t rows_;
  Kernel kernel_;
  int64_t threads_;  // intra-op threads a tuning run chose (0: the caller's)
  nhwc::KernelParameters parameters_;
  std::vector<int64_t> result_sizes_;
  at::Tensor packed_;                            // oneDNN's
  std::unique_ptr<const NhwcConvolution> nhwc_;  // nimble_gemm's
  c10::OperatorHandle unary_, binary_, reorder_;
};

// The handle of `nimble::linear_prepacked` (registered with this file).
c10::OperatorHandle linear_prepacked_op();

}  // namespace nimble::kernels
