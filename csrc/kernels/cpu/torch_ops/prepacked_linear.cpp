#include "csrc/kernels/cpu/torch_ops/prepacked_linear.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

#include <future>
#include <optional>
#include <sstream>

#include "csrc/kernels/aten_epilogue.h"
#include "csrc/kernels/cpu/torch_ops/empty_output.h"
#include "csrc/threads/intra_op_threads.h"

namespace nimble::kernels {

namespace {

c10::OperatorHandle find(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
}

// oneDNN on a tuned thread count, never more than the calling thread has (a CPU stream of a
// multi-stream replay owns a share of the cores); nimble_gemm takes its count as an argument.
class OneDnnThreads {
 public:
  explicit OneDnnThreads(int64_t threads) {
    if (threads > 0 && threads < keep_.saved()) keep_.set(static_cast<int>(threads));
  }

 private:
  KeepIntraOpThreads keep_;
};

}  // namespace

std::optional<PrepackedLinear::Kernel> PrepackedLinear::choose(int64_t rows, int64_t in_features,
                                                               int64_t out_features) {
  // nimble's product beat MKL's (on the weight transposed once) 1.7-1.9x on one-row layers
  // (1x512x1000, 1x1280x1000), oneDNN's prepacked matmul on 17x768x768, and ATen's addmm
  // from 1x64x64 up (one thread, AVX-512 and AVX2 code alike; docs/cpu.md). Without AVX2
  // only its portable code runs: oneDNN's AVX kernels earn back their ~10 us call from about
  // a million multiply-adds, and below that ATen's op stays.
  if (nhwc::best_isa() != nhwc::Isa::kPortable) return Kernel::kNimbleGemm;
  if (rows > 1 && rows * in_features * out_features >= 1'000'000) return Kernel::kOneDnn;
  return std::nullopt;
}

const char* PrepackedLinear::kernel_name(Kernel kernel) {
  return kernel == Kernel::kNimbleGemm ? "nimble_gemm" : "onednn_prepacked";
}

PrepackedLinear::Kernel PrepackedLinear::kernel_of_name(const std::string& name) {
  for (const Kernel k : {Kernel::kOneDnn, Kernel::kNimbleGemm})
    if (name == kernel_name(k)) return k;
  TORCH_CHECK(false,
              "nimble::PrepackedLinear: expected the kernel 'nimble_gemm' or 'onednn_prepacked', "
              "got '",
              name, "'");
}

std::string PrepackedLinear::shape_key(int64_t rows, int64_t in_features, int64_t out_features) {
  std::ostringstream out;
  out << "linear in=" << rows << "x" << in_features << " out=" << out_features;
  return out.str();
}

PrepackedLinear::PrepackedLinear(at::Tensor source, bool transposed, at::Tensor bias,
                                 Epilogue epilogue, int64_t rows, std::vector<int64_t> result_sizes,
                                 Kernel kernel, std::shared_ptr<NonFiniteWeights> non_finite,
                                 int64_t threads, nhwc::KernelParameters parameters)
    : source_(std::move(source)),
      bias_(std::move(bias)),
      transposed_(transposed),
      finite_weights_(std::move(non_finite)),
      epilogue_(epilogue),
      rows_(rows),
      kernel_(kernel),
      threads_(threads),
      parameters_(parameters),
      result_sizes_(std::move(result_sizes)),
      unary_(find("mkldnn::_linear_pointwise", "")),
      binary_(find("mkldnn::_linear_pointwise", "binary")),
      reorder_(find("mkldnn::_reorder_linear_weight", "")) {
  TORCH_CHECK(source_.dim() == 2 && (!bias_.defined() || bias_.dim() == 1),
              "nimble::linear_prepacked: expected a 2-d weight and a 1-d bias, got ",
              source_.sizes(), " and ", bias_.defined() ? bias_.sizes() : c10::IntArrayRef{});
  TORCH_CHECK(c10::multiply_integers(result_sizes_) == rows_ * source_.size(transposed_ ? 0 : 1),
              "nimble::linear_prepacked: result sizes ", c10::IntArrayRef(result_sizes_),
              " hold another number of elements than ", rows_, " rows of the product");
  pack();
}

c10::intrusive_ptr<PrepackedLinear> PrepackedLinear::make(at::Tensor source, bool transposed,
                                                          std::optional<at::Tensor> bias,
                                                          std::string activation, int64_t rows,
                                                          std::string kernel) {
  const Kernel chosen = kernel_of_name(kernel);
  const Epilogue epilogue = epilogue_of_name("nimble::PrepackedLinear", activation);
  const int64_t out = transposed ? source.size(0) : source.size(1);
  return c10::make_intrusive<PrepackedLinear>(
      std::move(source), transposed, bias.value_or(at::Tensor()), epilogue, rows,
      std::vector<int64_t>{rows, out}, chosen, std::make_shared<NonFiniteWeights>());
}

at::Tensor PrepackedLinear::weight() const { return transposed_ ? source_.t() : source_; }

void PrepackedLinear::pack() {
  at::NoGradGuard no_grad;
  version_ = SourceVersion::of(source_);
  bias_version_ = SourceVersion::of(bias_);
  finite_weights_.update(source_, bias_);
  if (kernel_ == Kernel::kNimbleGemm) {
    // The weight as a 1x1 convolution's [out, in, 1, 1]; the rows as one image row.
    const at::Tensor w = weight();
    const auto g = nhwc::ConvolutionGeometry::linear(rows_, w.size(0), w.size(1));
    nhwc_ = std::make_unique<const NhwcConvolution>(
        w.t().reshape({g.out_channels, g.in_channels, 1, 1}), bias_, g,
        NhwcConvolution::Kind::kGemm, nhwc::best_isa(), parameters_);
    return;
  }
  TORCH_CHECK(parameters_.is_rule(), "nimble::PrepackedLinear: onednn_prepacked takes no kernel ",
              "parameters, got ", parameters_.to_string());
  std::vector<c10::IValue> stack = {weight().t().contiguous(), rows_};  // oneDNN takes [out, in]
  reorder_.callBoxed(stack);
  packed_ = stack[0].toTensor();
}

void PrepackedLinear::pack_if_changed(bool has_residual) {
  TORCH_CHECK(!epilogue_.residual || has_residual,
              "nimble::linear_prepacked: the residual is missing");
  if (!version_.matches(source_) ||
      (kernel_ == Kernel::kNimbleGemm && !bias_version_.matches(bias_))) {
    // Packed on a thread of its own, not from a replay's private pool (as
    // PrepackedConvolution::run says).
    std::async(std::launch::async, [this] { pack(); }).get();
  }
}

at::Tensor PrepackedLinear::run(const at::Tensor& input, const std::optional<at::Tensor>& other) {
  pack_if_changed(other.has_value());
  if (kernel_ == Kernel::kOneDnn) {
    const OneDnnThreads threads(threads_);
    return run_onednn(input, other).view(result_sizes_);
  }
  // Made in the result's sizes (the same bytes as [rows, out]): no view of it to make.
  at::Tensor y = empty_output(result_sizes_, input);
  run_nimble(input, other, y);
  return y;
}

void PrepackedLinear::run_into(const at::Tensor& input, const std::optional<at::Tensor>& other,
                               at::Tensor& out) {
  pack_if_changed(other.has_value());
  TORCH_CHECK(out.is_contiguous() && out.sizes() == c10::IntArrayRef(result_sizes_),
              "nimble::linear_prepacked.out: expected a contiguous out of sizes ",
              c10::IntArrayRef(result_sizes_), ", got ", out.sizes(), " with strides ",
              out.strides());
  at::Tensor y = out.dim() == 2 ? out : out.view({input.size(0), -1});
  if (kernel_ == Kernel::kNimbleGemm) {
    run_nimble(input, other, y);
  } else {
    const OneDnnThreads threads(threads_);
    y.copy_(run_onednn(input, other));
  }
}

void PrepackedLinear::run_nimble(const at::Tensor& input, const std::optional<at::Tensor>& other,
                                 at::Tensor& y) const {
  TORCH_CHECK(input.dim() == 2 && input.size(0) == rows_ && input.size(1) == nhwc_->in_channels() &&
                  input.scalar_type() == at::kFloat,
              "nimble::linear_prepacked: expected a float input of sizes [", rows_, ", ",
              nhwc_->in_channels(), "] (as at prepare), got ", input.sizes(), " ",
              input.scalar_type());
  const at::Tensor x = input.contiguous();
  at::Tensor residual;
  if (epilogue_.residual) residual = other->reshape(y.sizes()).contiguous();
  nhwc_->run(x.data_ptr<float>(), y.data_ptr<float>(),
             residual.defined() ? residual.data_ptr<float>() : nullptr, epilogue_, threads_);
}

at::Tensor PrepackedLinear::run_onednn(const at::Tensor& input,
                                       const std::optional<at::Tensor>& other) const {
  const c10::IValue bias = bias_.defined() ? c10::IValue(bias_) : c10::IValue();
  std::vector<c10::IValue> stack;
  if (epilogue_.residual) {
    // oneDNN's binary linear takes no activation after the add: it runs after, in ATen.
    const int64_t out = transposed_ ? source_.size(0) : source_.size(1);
    stack = {input, other->reshape({input.size(0), out}), packed_, bias, std::string("add")};
    binary_.callBoxed(stack);
    at::Tensor y = stack[0].toTensor();
    activate_in_place(epilogue_, y);
    return y;
  }
  // oneDNN's activations turn NaN into a number: while a product of the program has a NaN or
  // an infinity in its weights (NonFiniteWeights) the activation runs in ATen.
  const bool fuse = finite_weights_.may_fuse_activation();
  stack = {input,
           packed_,
           bias,
           std::string(fuse ? activation_name(epilogue_.activation) : "none"),
           fuse ? onednn_scalars(epilogue_) : c10::List<std::optional<at::Scalar>>(),
           fuse ? onednn_algorithm(epilogue_) : std::nullopt};
  unary_.callBoxed(stack);
  at::Tensor y = stack[0].toTensor();
  if (!fuse) activate_in_place(epilogue_, y);
  return y;
}

int64_t PrepackedLinear::packed_bytes() const {
  if (nhwc_) return nhwc_->packed_bytes();
  return packed_.numel() * static_cast<int64_t>(packed_.element_size());
}

std::string PrepackedLinear::describe() const {
  const at::Tensor w = weight();
  std::ostringstream out;
  out << kernel_name(kernel_) << " rows=" << rows_ << " in=" << w.size(0) << " out=" << w.size(1)
      << " bias=" << (bias_.defined() ? "yes" : "no")
      << " epilogue=" << nimble::describe(epilogue_);
  if (threads_ > 0) out << " threads=" << threads_;
  if (!parameters_.is_rule()) out << " " << parameters_.to_string();
  return out.str();
}

std::string PrepackedLinear::key() const {
  const at::Tensor w = weight();
  return shape_key(rows_, w.size(0), w.size(1));
}

c10::intrusive_ptr<PrepackedLinear> PrepackedLinear::with_choice(
    Kernel kernel, int64_t threads, nhwc::KernelParameters parameters) const {
  return c10::make_intrusive<PrepackedLinear>(source_, transposed_, bias_, epilogue_, rows_,
                                              result_sizes_, kernel, finite_weights_.program(),
                                              threads, parameters);
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
