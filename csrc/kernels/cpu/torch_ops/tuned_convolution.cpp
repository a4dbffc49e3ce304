#include "csrc/kernels/cpu/torch_ops/tuned_convolution.h"

#include <sstream>
#include <stdexcept>

namespace nimble::kernels {

std::string tuned_spec(const std::string& kernel, int64_t threads,
                       const nhwc::KernelParameters& parameters) {
  std::string out = kernel;
  if (threads > 0) out += " threads=" + std::to_string(threads);
  const std::string words = parameters.to_string();
  if (!words.empty()) out += " " + words;
  return out;
}

template <class Product>
std::string TunedChoice<Product>::to_string() const {
  return tuned_spec(Product::kernel_name(kernel), threads, parameters);
}

template <class Product>
TunedChoice<Product> TunedChoice<Product>::parse(const std::string& spec) {
  std::istringstream in(spec);
  std::string name;
  in >> name;
  TunedChoice out;
  out.kernel = Product::kernel_of_name(name);
  std::string rest;
  for (std::string word; in >> word;) {
    if (word.rfind("threads=", 0) == 0) {
      try {
        out.threads = std::stoll(word.substr(8));
      } catch (const std::exception&) {
        out.threads = -1;
      }
      if (out.threads < 0) throw std::invalid_argument("tuned spec '" + spec + "': bad " + word);
      continue;
    }
    rest += word + " ";
  }
  out.parameters = nhwc::KernelParameters::parse(rest);
  const bool gemm = !(out.parameters.gemm == nhwc::GemmTiling{});
  const bool depthwise = !(out.parameters.depthwise == nhwc::DepthwiseBlocking{});
  // Named as the convolution's kernels, whose names a linear layer's share.
  using Convolution = PrepackedConvolution::Kernel;
  if ((gemm && name != PrepackedConvolution::kernel_name(Convolution::kNimbleGemm)) ||
      (depthwise && name != PrepackedConvolution::kernel_name(Convolution::kNimbleDepthwise)))
    throw std::invalid_argument("tuned spec '" + spec + "': parameters of a kernel other than " +
                                name);
  return out;
}

template <class Product>
TunedChoice<Product> TunedChoice<Product>::of(const Product& product) {
  TunedChoice out;
  out.kernel = product.kernel();
  out.threads = product.threads();
  out.parameters = product.parameters();
  return out;
}

template struct TunedChoice<PrepackedConvolution>;
template struct TunedChoice<PrepackedLinear>;

}  // namespace nimble::kernels
