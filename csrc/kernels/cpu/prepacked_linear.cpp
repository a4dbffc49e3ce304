#include "csrc/kernels/cpu/prepacked_linear.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/library.h>

#include <future>
#include <optional>
#include <sstream>

#include "csrc/kernels/cpu/cpu_features.h"

namespace nimble::kernels {

namespace {

c10::OperatorHandle find(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
}

}  // namespace

std::optional<PrepackedLinear::Kernel> PrepackedLinear::choose(int64_t rows, int64_t in_features,
                                                               int64_t out_features) {
  // Measured in replays of chains of linear layers, against ATen's addmm on the weight's
  // transposed view (oneDNN and MKL limited to AVX2 for the AVX2 rule; docs/cpu.md).
  // oneDNN's call costs about 10 us more than BLAS's whatever the size (1x64x64: 11.7 us
  // against 1.7); its AVX-512 kernels earn that back from about a million multiply-adds
  // (32x128x256: 1.06x ATen, 8x512x512: 1.9x, 17x768x768: 2.2x, 197x768x768: 2.1x) but
  // not on one row (1x2048x1000: as fast as the product); its AVX2 ones only on large
  // products (17x768x768: 1.05x, 197x768x768: 1.11x; 8x512x512: 0.90x). The product on
  // the weight transposed once pays where the weight is large and the rows few (4x512x512:
  // 2.0x, 1x768x1000: 1.4x, 8x512x512: 1.2x); on small weights it is ATen's own kernel
  // plus a call (0.93-0.99x at 64x64 to 256x256 weights), so they keep ATen's op.
  const int64_t multiply_adds = rows * in_features * out_features;
  const bool avx512 = this_cpu().vector_extension == VectorExtension::kAvx512;
  if (avx512 ? rows > 1 && multiply_adds >= 1'000'000 : multiply_adds >= 8'000'000)
    return Kernel::kOneDnn;
  if (in_features * out_features >= 128 * 1024) return Kernel::kGemm;
  return std::nullopt;
}

const char* PrepackedLinear::kernel_name(Kernel kernel) {
  return kernel == Kernel::kGemm ? "gemm" : "onednn_prepacked";
}

PrepackedLinear::PrepackedLinear(at::Tensor source, bool transposed, at::Tensor bias,
                                 FusedEpilogue epilogue, int64_t rows,
                                 std::vector<int64_t> result_sizes, Kernel kernel,
                                 std::shared_ptr<NonFiniteWeights> non_finite)
    : source_(std::move(source)),
      bias_(std::move(bias)),
      transposed_(transposed),
      finite_weights_(std::move(non_finite)),
      epilogue_(std::move(epilogue)),
      rows_(rows),
      kernel_(kernel),
      result_sizes_(std::move(result_sizes)),
      unary_(find("mkldnn::_linear_pointwise", "")),
      binary_(find("mkldnn::_linear_pointwise", "binary")),
      reorder_(find("mkldnn::_reorder_linear_weight", "")) {
  TORCH_CHECK(source_.dim() == 2 && (!bias_.defined() || bias_.dim() == 1),
              "nimble::linear_prepacked: expected a 2-d weight and a 1-d bias, got ",
              source_.sizes(), " and ", bias_.defined() ? bias_.sizes() : c10::IntArrayRef{});
  pack();
}

c10::intrusive_ptr<PrepackedLinear> PrepackedLinear::make(at::Tensor source, bool transposed,
                                                          std::optional<at::Tensor> bias,
                                                          std::string activation, int64_t rows,
                                                          std::string kernel) {
  TORCH_CHECK(kernel == "gemm" || kernel == "onednn_prepacked",
              "nimble::PrepackedLinear: expected the kernel 'gemm' or 'onednn_prepacked', got '",
              kernel, "'");
  FusedEpilogue epilogue;
  epilogue.activation = std::move(activation);
  if (epilogue.activation == "gelu") epilogue.algorithm = "none";
  const int64_t out = transposed ? source.size(0) : source.size(1);
  return c10::make_intrusive<PrepackedLinear>(
      std::move(source), transposed, bias.value_or(at::Tensor()), std::move(epilogue), rows,
      std::vector<int64_t>{rows, out}, kernel == "gemm" ? Kernel::kGemm : Kernel::kOneDnn,
      std::make_shared<NonFiniteWeights>());
}

at::Tensor PrepackedLinear::weight() const { return transposed_ ? source_.t() : source_; }

void PrepackedLinear::pack() {
  at::NoGradGuard no_grad;
  version_ = SourceVersion::of(source_);
  finite_weights_.update(source_, bias_);
  if (kernel_ == Kernel::kGemm) {
    packed_ = weight().contiguous();  // [in, out] rows: BLAS reads it without transposing
    return;
  }
  std::vector<c10::IValue> stack = {weight().t().contiguous(), rows_};  // oneDNN takes [out, in]
  reorder_.callBoxed(stack);
  packed_ = stack[0].toTensor();
}

void PrepackedLinear::pack_if_changed(bool has_residual) {
  TORCH_CHECK(!epilogue_.add_residual || has_residual,
              "nimble::linear_prepacked: the residual is missing");
  if (!version_.matches(source_)) {
    // Packed on a thread of its own, not from a replay's private pool (as
    // PrepackedConvolution::run says).
    std::async(std::launch::async, [this] { pack(); }).get();
  }
}

at::Tensor PrepackedLinear::run(const at::Tensor& input, const std::optional<at::Tensor>& other) {
  pack_if_changed(other.has_value());
  const at::Tensor y =
      kernel_ == Kernel::kGemm ? run_gemm(input, other, std::nullopt) : run_onednn(input, other);
  return y.view(result_sizes_);
}

void PrepackedLinear::run_into(const at::Tensor& input, const std::optional<at::Tensor>& other,
                               at::Tensor& out) {
  pack_if_changed(other.has_value());
  TORCH_CHECK(out.is_contiguous() && out.sizes() == c10::IntArrayRef(result_sizes_),
              "nimble::linear_prepacked.out: expected a contiguous out of sizes ",
              c10::IntArrayRef(result_sizes_), ", got ", out.sizes(), " with strides ",
              out.strides());
  at::Tensor y = out.dim() == 2 ? out : out.view({input.size(0), -1});
  if (kernel_ == Kernel::kGemm) {
    run_gemm(input, other, y);
  } else {
    y.copy_(run_onednn(input, other));
  }
}

at::Tensor PrepackedLinear::run_gemm(const at::Tensor& input,
                                     const std::optional<at::Tensor>& other,
                                     std::optional<at::Tensor> into) const {
  at::Tensor y = into ? *into : at::empty({input.size(0), packed_.size(1)}, input.options());
  if (bias_.defined()) {
    at::addmm_out(y, bias_, input, packed_);
  } else {
    at::mm_out(y, input, packed_);
  }
  if (epilogue_.add_residual) y.add_(other->reshape(y.sizes()));
  epilogue_.activate_in_place(y);
  return y;
}

at::Tensor PrepackedLinear::run_onednn(const at::Tensor& input,
                                       const std::optional<at::Tensor>& other) const {
  const c10::IValue bias = bias_.defined() ? c10::IValue(bias_) : c10::IValue();
  std::vector<c10::IValue> stack;
  if (epilogue_.add_residual) {
    // oneDNN's binary linear takes no activation after the add: it runs after, in ATen.
    const int64_t out = transposed_ ? source_.size(0) : source_.size(1);
    stack = {input, other->reshape({input.size(0), out}), packed_, bias, std::string("add")};
    binary_.callBoxed(stack);
    at::Tensor y = stack[0].toTensor();
    epilogue_.activate_in_place(y);
    return y;
  }
  // oneDNN's activations turn NaN into a number: while a product of the program has a NaN or
  // an infinity in its weights (NonFiniteWeights) the activation runs in ATen.
  const bool fuse = finite_weights_.may_fuse_activation();
  stack = {input,
           packed_,
           bias,
           fuse ? epilogue_.activation : std::string("none"),
           fuse ? epilogue_.scalar_list() : c10::List<std::optional<at::Scalar>>(),
           fuse ? epilogue_.algorithm : std::nullopt};
  unary_.callBoxed(stack);
  at::Tensor y = stack[0].toTensor();
  if (!fuse) epilogue_.activate_in_place(y);
  return y;
}

int64_t PrepackedLinear::packed_bytes() const {
  return packed_.numel() * static_cast<int64_t>(packed_.element_size());
}

std::string PrepackedLinear::describe() const {
  const at::Tensor w = weight();
  std::ostringstream out;
  out << kernel_name(kernel_) << " rows=" << rows_ << " in=" << w.size(0) << " out=" << w.size(1)
      << " bias=" << (bias_.defined() ? "yes" : "no") << " epilogue=" << epilogue_.describe();
  return out.str();
}

namespace {

at::Tensor linear_prepacked(const at::Tensor& input, const std::optional<at::Tensor>& other,
                            const c10::intrusive_ptr<PrepackedLinear>& packed) {
  return packed->run(input, other);
}

at::Tensor& linear_prepacked_out(const at::Tensor& input, const std::optional<at::Tensor>& other,
                                 const c10::intrusive_ptr<PrepackedLinear>& packed,
                                 at::Tensor& out) {
  packed->run_into(input, other, out);
  return out;
}

}  // namespace

c10::OperatorHandle linear_prepacked_op() {
  return c10::Dispatcher::singleton().findSchemaOrThrow("nimble::linear_prepacked", "");
}

TORCH_LIBRARY_FRAGMENT(nimble, m) {
  m.class_<PrepackedLinear>("PrepackedLinear")
      .def_static("make", &PrepackedLinear::make)
      .def("describe", &PrepackedLinear::describe)
      .def("packed_bytes", &PrepackedLinear::packed_bytes);
  m.def(
      "linear_prepacked(Tensor input, Tensor? other, "
      "__torch__.torch.classes.nimble.PrepackedLinear packed) -> Tensor");
  m.def(
      "linear_prepacked.out(Tensor input, Tensor? other, "
      "__torch__.torch.classes.nimble.PrepackedLinear packed, *, Tensor(a!) out) -> Tensor(a!)");
}

TORCH_LIBRARY_IMPL(nimble, CPU, m) {
  m.impl("linear_prepacked", TORCH_FN(linear_prepacked));
  m.impl("linear_prepacked.out", TORCH_FN(linear_prepacked_out));
}

}  // namespace nimble::kernels
