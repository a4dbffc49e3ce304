#include "csrc/kernels/cpu/prepacked_convolution.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/library.h>

#include <sstream>

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

}  // namespace

std::string ConvolutionEpilogue::describe() const {
  std::string out = add_residual ? "add" : "";
  if (activation != "none") out += (out.empty() ? "" : "+") + activation;
  return out.empty() ? "none" : out;
}

PrepackedConvolution::PrepackedConvolution(at::Tensor weight, at::Tensor bias,
                                           std::vector<at::Tensor> sources,
                                           ConvolutionGeometry geometry,
                                           ConvolutionEpilogue epilogue,
                                           std::vector<int64_t> input_sizes,
                                           std::vector<int64_t> out_strides)
    : weight_(std::move(weight)),
      bias_(std::move(bias)),
      sources_(std::move(sources)),
      geometry_(std::move(geometry)),
      epilogue_(std::move(epilogue)),
      input_sizes_(std::move(input_sizes)),
      out_strides_(std::move(out_strides)),
      unary_(mkldnn_op("mkldnn::_convolution_pointwise", "")),
      binary_(mkldnn_op("mkldnn::_convolution_pointwise", "binary")),
      reorder_(mkldnn_op("mkldnn::_reorder_convolution_weight", "")) {
  pack();
}

void PrepackedConvolution::pack() {
  at::NoGradGuard no_grad;
  std::vector<c10::IValue> stack = {weight_,          geometry_.padding,
                                    geometry_.stride, geometry_.dilation,
                                    geometry_.groups, c10::IValue(input_sizes_)};
  reorder_.callBoxed(stack);
  packed_ = stack[0].toTensor();
  versions_ = versions_of(sources_);
}

at::Tensor PrepackedConvolution::run(const at::Tensor& input,
                                     const std::optional<at::Tensor>& other) {
  if (versions_of(sources_) != versions_) pack();
  c10::List<std::optional<at::Scalar>> scalars;
  for (const auto& s : epilogue_.scalars) scalars.push_back(s);
  // Both overloads: (input, [other,] weight, bias, padding, stride, dilation, groups, ...).
  std::vector<c10::IValue> stack = {input};
  if (epilogue_.add_residual) {
    TORCH_CHECK(other.has_value(), "nimble::convolution_prepacked: the residual is missing");
    stack.push_back(*other);
  }
  stack.insert(stack.end(),
               {packed_, bias_.defined() ? c10::IValue(bias_) : c10::IValue(), geometry_.padding,
                geometry_.stride, geometry_.dilation, geometry_.groups});
  if (epilogue_.add_residual) {
    const std::optional<std::string> unary =
        epilogue_.activation == "none" ? std::nullopt : std::optional(epilogue_.activation);
    stack.insert(stack.end(),
                 {std::string("add"), c10::IValue(), unary, scalars, epilogue_.algorithm});
    binary_.callBoxed(stack);
  } else {
    stack.insert(stack.end(), {epilogue_.activation, scalars, epilogue_.algorithm});
    unary_.callBoxed(stack);
  }
  at::Tensor y = stack[0].toTensor();
  if (out_strides_.empty() || y.strides() == c10::IntArrayRef(out_strides_)) return y;
  return at::empty_strided(y.sizes(), out_strides_, y.options()).copy_(y);
}

int64_t PrepackedConvolution::packed_bytes() const {
  return packed_.numel() * static_cast<int64_t>(packed_.element_size());
}

std::string PrepackedConvolution::describe() const {
  std::ostringstream out;
  out << "onednn_prepacked weight=" << join(weight_.sizes().vec())
      << " stride=" << join(geometry_.stride) << " groups=" << geometry_.groups
      << " epilogue=" << epilogue_.describe();
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

int64_t prepacked_weight_bytes(const Program& program) {
  const c10::ClassTypePtr type =
      c10::getCustomClassType<c10::intrusive_ptr<PrepackedConvolution>>();
  int64_t bytes = 0;
  for (const OpNode& op : program.ops) {
    for (const Arg& arg : op.args) {
      if (arg.kind == Arg::Kind::kConstant && arg.constant.isCustomClass() &&
          arg.constant.type() == type)
        bytes += arg.constant.toCustomClass<PrepackedConvolution>()->packed_bytes();
    }
  }
  return bytes;
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
