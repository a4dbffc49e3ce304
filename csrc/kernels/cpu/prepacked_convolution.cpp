#include "csrc/kernels/cpu/prepacked_convolution.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/library.h>

#include <algorithm>
#include <future>
#include <sstream>

#include "csrc/kernels/cpu/cpu_features.h"

namespace nimble::kernels {

namespace {

c10::OperatorHandle mkldnn_op(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
}

std::string join(const std::vector<int64_t>& values) {
  std::ostringstream out;
  for (size_t i = 0; i < values.size(); ++i) out << (i ? "," : "") << values[i];
  return out.str();
}

int64_t output_pixels(c10::IntArrayRef input, c10::IntArrayRef weight,
                      const ConvolutionGeometry& g) {
  int64_t pixels = 1;
  for (size_t d = 0; d < 2; ++d) {
    pixels *=
        (input[2 + d] + 2 * g.padding[d] - g.dilation[d] * (weight[2 + d] - 1) - 1) / g.stride[d] +
        1;
  }
  return pixels;
}

}  // namespace

PrepackedConvolution::Kernel PrepackedConvolution::choose(c10::IntArrayRef weight_sizes,
                                                          const ConvolutionGeometry& geometry,
                                                          c10::IntArrayRef input_sizes) {
  const auto all = [](const std::vector<int64_t>& values, int64_t v) {
    return std::all_of(values.begin(), values.end(), [&](int64_t x) { return x == v; });
  };
  const bool pointwise = weight_sizes.size() == 4 && weight_sizes[2] == 1 && weight_sizes[3] == 1 &&
                         geometry.groups == 1 && all(geometry.stride, 1) &&
                         all(geometry.padding, 0) && all(geometry.dilation, 1);
  if (!pointwise || input_sizes.size() != 4) return Kernel::kOneDnn;
  const int64_t weights = weight_sizes[0] * weight_sizes[1];
  const int64_t multiply_adds = weights * input_sizes[0] * input_sizes[2] * input_sizes[3];
  // Measured on pointwise layers of mobilenet_v2, resnet50 and googlenet at batch 1, one
  // thread (oneDNN and MKL limited to AVX2 for the AVX2 row): the product wins up to about
  // 160 Ki weights while the arithmetic is small; oneDNN's AVX-512 kernels take over
  // sooner than its AVX2 ones (256x512 weights on 4x4 pixels: product 1.19x slower than
  // oneDNN with AVX-512, 0.84x with AVX2).
  const int64_t most_multiply_adds =
      this_cpu().vector_extension == VectorExtension::kAvx512 ? 1'000'000 : 2'200'000;
  return weights <= 160 * 1024 && multiply_adds <= most_multiply_adds ? Kernel::kGemm
                                                                      : Kernel::kOneDnn;
}

PrepackedConvolution::PrepackedConvolution(at::Tensor weight, at::Tensor bias,
                                           std::vector<at::Tensor> sources,
                                           ConvolutionGeometry geometry, FusedEpilogue epilogue,
                                           const at::Tensor& input,
                                           std::vector<int64_t> out_strides,
                                           std::shared_ptr<NonFiniteWeights> non_finite)
    : weight_(std::move(weight)),
      bias_(std::move(bias)),
      sources_(std::move(sources)),
      geometry_(std::move(geometry)),
      epilogue_(std::move(epilogue)),
      kernel_(choose(weight_.sizes(), geometry_, input.sizes())),
      input_sizes_(input.sizes().vec()),
      single_pixel_(output_pixels(input.sizes(), weight_.sizes(), geometry_) == 1),
      finite_weights_(std::move(non_finite)),
      out_strides_(std::move(out_strides)),
      unary_(mkldnn_op("mkldnn::_convolution_pointwise", "")),
      binary_(mkldnn_op("mkldnn::_convolution_pointwise", "binary")),
      reorder_(mkldnn_op("mkldnn::_reorder_convolution_weight", "")) {
  pack();
}

void PrepackedConvolution::pack() {
  at::NoGradGuard no_grad;
  versions_ = versions_of(sources_);
  finite_weights_.update(weight_, bias_);
  if (kernel_ == Kernel::kGemm) {
    packed_ = weight_.reshape({weight_.size(0), weight_.size(1)}).t().contiguous();  // [C, K]
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
  if (versions_of(sources_) != versions_) {
    // The packed weight outlives this replay: packed on a thread of its own, it is not
    // allocated from the replay's private pool (runtime/cpu/replay_arena.h), whose plan
    // would hand its bytes to a later replay's intermediates.
    std::async(std::launch::async, [this] { pack(); }).get();
  }
  TORCH_CHECK(!epilogue_.add_residual || other.has_value(),
              "nimble::convolution_prepacked: the residual is missing");
  at::Tensor y = kernel_ == Kernel::kGemm ? run_gemm(input, other) : run_onednn(input, other);
  if (out_strides_.empty() || y.strides() == c10::IntArrayRef(out_strides_)) return y;
  return at::empty_strided(y.sizes(), out_strides_, y.options()).copy_(y);
}

at::Tensor PrepackedConvolution::run_gemm(const at::Tensor& input,
                                          const std::optional<at::Tensor>& other) const {
  const int64_t n = input.size(0), c = input.size(1), h = input.size(2), w = input.size(3);
  // The activation as a [pixels, C] matrix: a view of a channels_last input, or of a
  // contiguous one of batch 1 read transposed (BLAS takes either). The [pixels, K] product
  // is then the channels_last result. (K x C times C x pixels, the NCHW way round, is 5x
  // slower in MKL where there are few pixels.)
  at::Tensor x;
  if (input.is_contiguous(at::MemoryFormat::ChannelsLast)) {
    x = input.permute({0, 2, 3, 1}).reshape({-1, c});
  } else if (n == 1) {
    x = input.contiguous().view({c, h * w}).t();
  } else {
    x = input.permute({0, 2, 3, 1}).reshape({-1, c});
  }
  const at::Tensor product = bias_.defined() ? at::addmm(bias_, x, packed_) : at::mm(x, packed_);
  at::Tensor y = product.view({n, h, w, packed_.size(1)}).permute({0, 3, 1, 2});
  if (epilogue_.add_residual) y.add_(*other);
  epilogue_.activate_in_place(y);
  return y;
}

at::Tensor PrepackedConvolution::run_onednn(const at::Tensor& input,
                                            const std::optional<at::Tensor>& other) {
  // oneDNN (torch 2.11) cannot make the residual's memory for a binary post-op when the
  // result has one pixel, and takes no activation but relu after a binary post-op: what
  // it cannot fuse runs after it, in ATen; so does the activation while a product of the
  // program has non-finite weights (NonFiniteWeights, fused_epilogue.h).
  const bool fuse_add = epilogue_.add_residual && !single_pixel_;
  const bool fuse_activation =
      finite_weights_.may_fuse_activation() &&
      (!epilogue_.add_residual ||
       (fuse_add && (epilogue_.activation == "relu" || epilogue_.activation == "none")));
  const c10::List<std::optional<at::Scalar>> scalars =
      fuse_activation ? epilogue_.scalar_list() : c10::List<std::optional<at::Scalar>>();
  const std::string activation = fuse_activation ? epilogue_.activation : "none";
  const std::optional<std::string> algorithm = fuse_activation ? epilogue_.algorithm : std::nullopt;
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
  if (epilogue_.add_residual && !fuse_add) y.add_(*other);
  if (!fuse_activation) epilogue_.activate_in_place(y);
  return y;
}

int64_t PrepackedConvolution::packed_bytes() const {
  return packed_.numel() * static_cast<int64_t>(packed_.element_size());
}

std::string PrepackedConvolution::describe() const {
  std::ostringstream out;
  out << (kernel_ == Kernel::kGemm ? "gemm_1x1" : "onednn_prepacked")
      << " weight=" << join(weight_.sizes().vec()) << " stride=" << join(geometry_.stride)
      << " groups=" << geometry_.groups << " epilogue=" << epilogue_.describe();
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
