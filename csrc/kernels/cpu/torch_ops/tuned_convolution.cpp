#include "csrc/kernels/cpu/torch_ops/tuned_convolution.h"

#include <sstream>
#include <stdexcept>

namespace nimble::kernels {

std::string TunedConvolution::to_string() const {
  std::string out = PrepackedConvolution::kernel_name(kernel);
  if (threads > 0) out += " threads=" + std::to_string(threads);
  const std::string words = parameters.to_string();
  if (!words.empty()) out += " " + words;
  return out;
}

TunedConvolution TunedConvolution::parse(const std::string& spec) {
  std::istringstream in(spec);
  std::string name;
  in >> name;
  TunedConvolution out;
  out.kernel = PrepackedConvolution::kernel_of_name(name);
  std::string rest;
  for (std::string word; in >> word;) {
    if (word.rfind("threads=", 0) == 0) {
      try {
        out.threads = std::stoll(word.substr(8));
      } catch (const std::exception&) {
        out.threads = -1;
      }
      if (out.threads < 0)
        throw std::invalid_argument("tuned convolution '" + spec + "': bad " + word);
      continue;
    }
    rest += word + " ";
  }
  out.parameters = nhwc::KernelParameters::parse(rest);
  const bool gemm = !(out.parameters.gemm == nhwc::GemmTiling{});
  const bool depthwise = !(out.parameters.depthwise == nhwc::DepthwiseBlocking{});
  if ((gemm && out.kernel != PrepackedConvolution::Kernel::kNimbleGemm) ||
      (depthwise && out.kernel != PrepackedConvolution::Kernel::kNimbleDepthwise))
    throw std::invalid_argument("tuned convolution '" + spec +
                                "': parameters of a kernel other than " + name);
  return out;
}

TunedConvolution TunedConvolution::of(const PrepackedConvolution& convolution) {
  TunedConvolution out;
  out.kernel = convolution.kernel();
  out.threads = convolution.threads();
  out.parameters = convolution.parameters();
  return out;
}

std::string TunedLinear::to_string() const {
  TunedConvolution spec;
  spec.kernel = PrepackedConvolution::kernel_of_name(PrepackedLinear::kernel_name(kernel));
  spec.threads = threads;
  spec.parameters = parameters;
  return spec.to_string();
}

TunedLinear TunedLinear::parse(const std::string& spec) {
  const TunedConvolution read = TunedConvolution::parse(spec);
  TunedLinear out;
  // The two share their kernels' names; a convolution's other kernels are refused here.
  out.kernel = PrepackedLinear::kernel_of_name(PrepackedConvolution::kernel_name(read.kernel));
  out.threads = read.threads;
  out.parameters = read.parameters;
  return out;
}

TunedLinear TunedLinear::of(const PrepackedLinear& linear) {
  TunedLinear out;
  out.kernel = linear.kernel();
  out.threads = linear.threads();
  out.parameters = linear.parameters();
  return out;
}

}  // namespace nimble::kernels
