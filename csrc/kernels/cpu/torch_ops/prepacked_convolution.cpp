#include "csrc/kernels/cpu/torch_ops/prepacked_convolution.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <future>
#include <sstream>

#include "csrc/kernels/aten_epilogue.h"
#include "csrc/threads/intra_op_threads.h"

namespace nimble::kernels {

namespace {

c10::OperatorHandle mkldnn_op(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
}

std::string join(const std::vector<int64_t>& values, const char* separator = ",") {
  std::ostringstream out;
  for (size_t i = 0; i < values.size(); ++i) out << (i ? separator : "") << values[i];
  return out.str();
}

int64_t output_side(c10::IntArrayRef input, c10::IntArrayRef weight, const ConvolutionGeometry& g,
                    size_t d) {
  return nhwc::convolution_output_side(input[2 + d], weight[2 + d], g.stride[d], g.padding[d],
                                       g.dilation[d]);
}

int64_t output_pixels(c10::IntArrayRef input, c10::IntArrayRef weight,
                      const ConvolutionGeometry& g) {
  return output_side(input, weight, g, 0) * output_side(input, weight, g, 1);
}

// Whether a layer's output map has an odd side and batch x its 2x2 tiles are fewer than 32.
bool odd_map_of_few_tiles(c10::IntArrayRef input, c10::IntArrayRef weight,
                          const ConvolutionGeometry& g) {
  const int64_t height = output_side(input, weight, g, 0), width = output_side(input, weight, g, 1);
  return (height % 2 != 0 || width % 2 != 0) &&
         input[0] * ((height + 1) / 2) * ((width + 1) / 2) < 32;
}

// NIMBLE_WINOGRAD: unset (or "auto") the rule below decides; "1" picks nimble_winograd wherever
// it applies, "0" nowhere (to time whole models each way). Read once, on first use; another
// value throws.
enum class WinogradAsked { kRule, kEverywhere, kNowhere };
WinogradAsked winograd_asked() {
  static const WinogradAsked asked = [] {
    const char* value = std::getenv("NIMBLE_WINOGRAD");
    if (value == nullptr || *value == '\0' || std::strcmp(value, "auto") == 0)
      return WinogradAsked::kRule;
    if (std::strcmp(value, "0") == 0) return WinogradAsked::kNowhere;
    TORCH_CHECK(std::strcmp(value, "1") == 0, "NIMBLE_WINOGRAD: expected 0, 1 or auto, got '",
                value, "'");
    return WinogradAsked::kEverywhere;
  }();
  return asked;
}

}  // namespace

bool PrepackedConvolution::winograd_applies(c10::IntArrayRef weight_sizes,
                                            const ConvolutionGeometry& g) {
  const auto ones = [](const std::vector<int64_t>& v) {
    return v.size() == 2 && v[0] == 1 && v[1] == 1;
  };
  return weight_sizes.size() == 4 && weight_sizes[2] == 3 && weight_sizes[3] == 3 &&
         g.groups == 1 && ones(g.stride) && ones(g.dilation) && g.padding.size() == 2;
}

PrepackedConvolution::Kernel PrepackedConvolution::choose(c10::IntArrayRef weight_sizes,
                                                          const ConvolutionGeometry& geometry,
                                                          c10::IntArrayRef input_sizes) {
  // Measured per layer against oneDNN on a prepacked weight (and MKL's product for pointwise
  // layers), one thread, batch 1, shapes of mobilenet_v2, resnet18/50, googlenet,
  // inception_v3 and regnet (docs/cpu.md): nimble's kernels were 1.04x-11x faster on every
  // dense and depthwise layer with AVX-512 and with AVX2 code alike (oneDNN's fixed cost per
  // call is 10-40 us), slower only on CPUs without AVX2, where only their portable code runs,
  // and where a group has few output channels (4 or 8) and the layer much work: resnext50's
  // 3x3 layers of 4 and 8 channels a group, 14 M multiply-adds, 0.81x-0.83x with two threads.
  // With little work, oneDNN's fixed cost wins again: regnet_y_400mf's layers of 8 channels a
  // group at 64x64 pixels (0.1-1.5 M) take 52-60 us a call through oneDNN, 18-30 us here
  // (AVX2 code alike), and the threshold between holds for both: at 2.9 M, 1.3x-1.5x with
  // AVX-512, 0.91x-1.17x with AVX2.
  if (nhwc::best_isa() == nhwc::Isa::kPortable || weight_sizes.size() != 4 ||
      input_sizes.size() != 4)
    return Kernel::kOneDnn;
  const int64_t groups = geometry.groups;
  const bool depthwise = groups > 1 && weight_sizes[1] == 1 && groups == input_sizes[1] &&
                         weight_sizes[0] == input_sizes[1];
  if (depthwise) return Kernel::kNimbleDepthwise;
  // nimble_winograd (F(2x2, 3x3): 2.25x fewer multiply-adds, plus transforms) against
  // nimble_gemm per 3x3 stride-1 layer, two threads, AVX-512, alternating calls
  // (docs/cpu.md, "Winograd"): 1.3x-2.0x from 32 input channels on maps of 7x7 to 112x112 at
  // batch 1 and 8, 1.05x-1.2x on 4x4 to 16x16 maps at batch 1; slower with few input
  // channels (3 or 16: 0.63x-0.97x, the transforms are most of the work) and on a 2x2 map
  // at batch 1 (0.75x: 16/9 of the weight bytes read for one tile). Those numbers were taken
  // with the weights in cache; in a model whose weights do not fit the last-level cache
  // (resnet18's 47 MB) a layer of few tiles streams its weight from memory, and there the
  // transformed weight's 16/9 bytes cost more than the multiply-adds saved: on the Xeon, one
  // thread, caches flushed, 256 > 256 channels on a 4x4 map 0.81x (4 tiles), 128 > 128 on
  // 8x8 1.0x (16 tiles), 512 > 512 on 7x7 1.25x. Hence at least 32 output pixels. And not on
  // an odd map of fewer than 32 tiles (batch x 2x2 tiles): there the tiles past the map's edge
  // take a quarter of the products too (a 7x7 map is 16 tiles of 64 outputs for 49). In the
  // replay on the Sapphire Rapids VM, one thread, nimble_gemm was 1.2x faster on resnet50 224's
  // 512 > 512 on 7x7 and 1.3x-1.75x on googlenet 224's four 7x7 layers, where on even maps of
  // 16 tiles (8x8: resnet18 and resnet50 at 64) Winograd was 1.0x-1.4x faster (docs/cpu.md).
  const WinogradAsked winograd = winograd_asked();
  if (winograd != WinogradAsked::kNowhere && winograd_applies(weight_sizes, geometry) &&
      (winograd == WinogradAsked::kEverywhere ||
       (input_sizes[1] >= 32 &&
        input_sizes[0] * output_pixels(input_sizes, weight_sizes, geometry) >= 32 &&
        !odd_map_of_few_tiles(input_sizes, weight_sizes, geometry))))
    return Kernel::kNimbleWinograd;
  if (groups == 1 || weight_sizes[0] / groups > 8) return Kernel::kNimbleGemm;
  if (geometry.padding.size() != 2 || geometry.stride.size() != 2 || geometry.dilation.size() != 2)
    return Kernel::kOneDnn;
  constexpr int64_t kNarrowGroupsOneDnnFromMacs = 3'000'000;
  const int64_t macs = input_sizes[0] * output_pixels(input_sizes, weight_sizes, geometry) *
                       weight_sizes[0] * weight_sizes[1] * weight_sizes[2] * weight_sizes[3];
  return macs < kNarrowGroupsOneDnnFromMacs ? Kernel::kNimbleGemm : Kernel::kOneDnn;
}

const char* PrepackedConvolution::kernel_name(Kernel kernel) {
  switch (kernel) {
    case Kernel::kOneDnn:
      return "onednn_prepacked";
    case Kernel::kNimbleDepthwise:
      return "nimble_depthwise";
    case Kernel::kNimbleGemm:
      return "nimble_gemm";
    case Kernel::kNimbleWinograd:
      return "nimble_winograd";
  }
  return "?";
}

PrepackedConvolution::PrepackedConvolution(
    at::Tensor weight, at::Tensor bias, std::vector<at::Tensor> sources,
    ConvolutionGeometry geometry, Epilogue epilogue, const at::Tensor& input,
    std::vector<int64_t> out_strides, std::shared_ptr<NonFiniteWeights> non_finite,
    std::optional<Kernel> kernel, int64_t threads, nhwc::KernelParameters parameters)
    : weight_(std::move(weight)),
      bias_(std::move(bias)),
      sources_(std::move(sources)),
      geometry_(std::move(geometry)),
      epilogue_(epilogue),
      kernel_(kernel.value_or(choose(weight_.sizes(), geometry_, input.sizes()))),
      threads_(threads),
      parameters_(parameters),
      input_sizes_(input.sizes().vec()),
      ambiguous_layout_(output_pixels(input.sizes(), weight_.sizes(), geometry_) == 1 ||
                        weight_.size(0) == 1),
      finite_weights_(std::move(non_finite)),
      out_strides_(std::move(out_strides)),
      unary_(mkldnn_op("mkldnn::_convolution_pointwise", "")),
      binary_(mkldnn_op("mkldnn::_convolution_pointwise", "binary")),
      reorder_(mkldnn_op("mkldnn::_reorder_convolution_weight", "")) {
  pack();
}

PrepackedConvolution::Kernel PrepackedConvolution::kernel_of_name(const std::string& name) {
  for (Kernel k :
       {Kernel::kOneDnn, Kernel::kNimbleDepthwise, Kernel::kNimbleGemm, Kernel::kNimbleWinograd})
    if (name == kernel_name(k)) return k;
  TORCH_CHECK(false,
              "nimble::PrepackedConvolution: expected the kernel 'onednn_prepacked', "
              "'nimble_depthwise', 'nimble_gemm' or 'nimble_winograd', got '",
              name, "'");
}

std::string PrepackedConvolution::shape_key(c10::IntArrayRef input_sizes,
                                            c10::IntArrayRef weight_sizes,
                                            const ConvolutionGeometry& g) {
  std::ostringstream out;
  out << "in=" << join(input_sizes.vec(), "x") << " weight=" << join(weight_sizes.vec(), "x")
      << " stride=" << join(g.stride) << " pad=" << join(g.padding) << " dil=" << join(g.dilation)
      << " groups=" << g.groups;
  return out.str();
}

c10::intrusive_ptr<PrepackedConvolution> PrepackedConvolution::make(
    at::Tensor weight, std::optional<at::Tensor> bias, std::vector<int64_t> stride,
    std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups,
    std::string activation, bool add_residual, const at::Tensor& input, std::string kernel) {
  const Kernel chosen = kernel_of_name(kernel);
  Epilogue epilogue = epilogue_of_name("nimble::PrepackedConvolution", activation);
  epilogue.residual = add_residual;
  ConvolutionGeometry geometry{std::move(padding), std::move(stride), std::move(dilation), groups};
  return c10::make_intrusive<PrepackedConvolution>(std::move(weight), bias.value_or(at::Tensor()),
                                                   std::vector<at::Tensor>{}, std::move(geometry),
                                                   epilogue, input, std::vector<int64_t>{},
                                                   std::make_shared<NonFiniteWeights>(), chosen);
}

nhwc::ConvolutionGeometry PrepackedConvolution::nhwc_geometry() const {
  nhwc::ConvolutionGeometry g;
  g.images = input_sizes_[0];
  g.in_channels = input_sizes_[1];
  g.height = input_sizes_[2];
  g.width = input_sizes_[3];
  g.out_channels = weight_.size(0);
  g.kernel_h = weight_.size(2);
  g.kernel_w = weight_.size(3);
  g.stride_h = geometry_.stride[0];
  g.stride_w = geometry_.stride[1];
  g.pad_h = geometry_.padding[0];
  g.pad_w = geometry_.padding[1];
  g.dilation_h = geometry_.dilation[0];
  g.dilation_w = geometry_.dilation[1];
  g.groups = geometry_.groups;
  return g;
}

void PrepackedConvolution::pack() {
  at::NoGradGuard no_grad;
  versions_ = versions_of(sources_);
  finite_weights_.update(weight_, bias_);
  if (nimble_kernel()) {
    TORCH_CHECK(kernel_ != Kernel::kNimbleWinograd || winograd_applies(weight_.sizes(), geometry_),
                "nimble::PrepackedConvolution: nimble_winograd computes 3x3 convolutions of "
                "stride 1, dilation 1 and one group only, not weight ",
                weight_.sizes(), " ", key());
    const NhwcConvolution::Kind kind =
        kernel_ == Kernel::kNimbleDepthwise  ? NhwcConvolution::Kind::kDepthwise
        : kernel_ == Kernel::kNimbleWinograd ? NhwcConvolution::Kind::kWinograd
                                             : NhwcConvolution::Kind::kGemm;
    nhwc_ = std::make_unique<const NhwcConvolution>(weight_, bias_, nhwc_geometry(), kind,
                                                    nhwc::best_isa(), parameters_);
    return;
  }
  std::vector<c10::IValue> stack = {weight_,          geometry_.padding,
                                    geometry_.stride, geometry_.dilation,
                                    geometry_.groups, c10::IValue(input_sizes_)};
  reorder_.callBoxed(stack);
  packed_ = stack[0].toTensor();
}

at::Tensor PrepackedConvolution::run(const at::Tensor& input,
                                     const std::optional<at::Tensor>& other) {
  if (!unchanged(versions_, sources_)) {
    // The packed weight outlives this replay: packed on a thread of its own, it is not
    // allocated from the replay's private pool (runtime/cpu/replay_arena.h), whose plan
    // would hand its bytes to a later replay's intermediates.
    std::async(std::launch::async, [this] { pack(); }).get();
  }
  TORCH_CHECK(!epilogue_.residual || other.has_value(),
              "nimble::convolution_prepacked: the residual is missing");
  // A tuned thread count, never more than the calling thread has (a CPU stream of a
  // multi-stream replay owns a share of the cores).
  std::optional<KeepIntraOpThreads> keep;
  if (threads_ > 0 && !nimble_kernel()) {
    keep.emplace();
    if (threads_ < keep->saved()) keep->set(static_cast<int>(threads_));
  }
  at::Tensor y =
      nimble_kernel() ? nhwc_->run(input, other, epilogue_, threads_) : run_onednn(input, other);
  if (out_strides_.empty() || y.strides() == c10::IntArrayRef(out_strides_)) return y;
  return at::empty_strided(y.sizes(), out_strides_, y.options()).copy_(y);
}

at::Tensor PrepackedConvolution::run_onednn(const at::Tensor& input,
                                            const std::optional<at::Tensor>& other) {
  // oneDNN (torch 2.11) cannot make the residual's memory for a binary post-op when the
  // result has one pixel or one channel, and takes no activation but relu after a binary post-op:
  // what it cannot fuse runs after it, in ATen; so does the activation while a product of the
  // program has non-finite weights (NonFiniteWeights, fused_epilogue.h).
  const bool fuse_add = epilogue_.residual && !ambiguous_layout_;
  const bool fuse_activation =
      finite_weights_.may_fuse_activation() &&
      (!epilogue_.residual || (fuse_add && (epilogue_.activation == Activation::kRelu ||
                                            epilogue_.activation == Activation::kNone)));
  const c10::List<std::optional<at::Scalar>> scalars =
      fuse_activation ? onednn_scalars(epilogue_) : c10::List<std::optional<at::Scalar>>();
  const std::string activation = fuse_activation ? activation_name(epilogue_.activation) : "none";
  const std::optional<std::string> algorithm =
      fuse_activation ? onednn_algorithm(epilogue_) : std::nullopt;
  // Both overloads: (input, [other,] weight, bias, padding, stride, dilation, groups, ...).
  std::vector<c10::IValue> stack = {input};
  if (fuse_add) stack.push_back(*other);
  stack.insert(stack.end(),
               {packed_, bias_.defined() ? c10::IValue(bias_) : c10::IValue(), geometry_.padding,
                geometry_.stride, geometry_.dilation, geometry_.groups});
  if (fuse_add) {
    const std::optional<std::string> unary =
        activation == "none" ? std::nullopt : std::optional(activation);
    stack.insert(stack.end(), {std::string("add"), c10::IValue(), unary, scalars, algorithm});
    binary_.callBoxed(stack);
  } else {
    stack.insert(stack.end(), {activation, scalars, algorithm});
    unary_.callBoxed(stack);
  }
  at::Tensor y = stack[0].toTensor();
  if (epilogue_.residual && !fuse_add) y.add_(*other);
  if (!fuse_activation) activate_in_place(epilogue_, y);
  return y;
}

int64_t PrepackedConvolution::packed_bytes() const {
  if (nhwc_) return nhwc_->packed_bytes();
  return packed_.numel() * static_cast<int64_t>(packed_.element_size());
}

c10::intrusive_ptr<PrepackedConvolution> PrepackedConvolution::with_choice(
    Kernel kernel, int64_t threads, nhwc::KernelParameters parameters) const {
  // Only the input's sizes are read.
  const at::Tensor input = at::empty(input_sizes_, weight_.options().device(c10::kMeta));
  return c10::make_intrusive<PrepackedConvolution>(weight_, bias_, sources_, geometry_, epilogue_,
                                                   input, out_strides_, finite_weights_.program(),
                                                   kernel, threads, parameters);
}

std::string PrepackedConvolution::key() const {
  return shape_key(input_sizes_, weight_.sizes(), geometry_);
}

std::string PrepackedConvolution::describe() const {
  std::ostringstream out;
  out << (nhwc_ ? nhwc_->describe() : kernel_name(kernel_))
      << " weight=" << join(weight_.sizes().vec()) << " stride=" << join(geometry_.stride)
      << " groups=" << geometry_.groups << " epilogue=" << nimble::describe(epilogue_);
  if (threads_ > 0) out << " threads=" << threads_;
  if (nhwc_ && !parameters_.is_rule()) out << " " << parameters_.to_string();
  return out.str();
}

namespace {

at::Tensor convolution_prepacked(const at::Tensor& input, const std::optional<at::Tensor>& other,
                                 const c10::intrusive_ptr<PrepackedConvolution>& packed) {
  return packed->run(input, other);
}

}  // namespace

c10::OperatorHandle convolution_prepacked_op() {
  return c10::Dispatcher::singleton().findSchemaOrThrow("nimble::convolution_prepacked", "");
}

TORCH_LIBRARY(nimble, m) {
  m.class_<PrepackedConvolution>("PrepackedConvolution")
      .def_static("make", &PrepackedConvolution::make)
      .def("describe", &PrepackedConvolution::describe)
      .def("packed_bytes", &PrepackedConvolution::packed_bytes);
  m.def(
      "convolution_prepacked(Tensor input, Tensor? other, "
      "__torch__.torch.classes.nimble.PrepackedConvolution packed) -> Tensor");
}

TORCH_LIBRARY_IMPL(nimble, CPU, m) {
  m.impl("convolution_prepacked", TORCH_FN(convolution_prepacked));
}

}  // namespace nimble::kernels
