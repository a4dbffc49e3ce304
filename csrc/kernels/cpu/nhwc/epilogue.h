#pragma once
// What follows a convolution or product inside nimble's own channels-last kernels
// (depthwise.h, pointwise.h): a residual add, then one activation, applied to a run of
// results right after the kernel stored them (they are still in L1). Torch-free: the
// kernels work on raw float arrays; prepacked_convolution.cpp maps ATen's op names here.
#include <cstdint>

namespace nimble::kernels::nhwc {

enum class Activation : int8_t {
  kNone,
  kRelu,
  kClamp,      // hardtanh / relu6: min(max(x, lo), hi)
  kLeakyRelu,  // x >= 0 ? x : lo * x
  kHardswish,
  kHardsigmoid,
  kSilu,
  kSigmoid,
  kTanh,
  kGeluErf,
  kGeluTanh,
};

struct Epilogue {
  Activation activation = Activation::kNone;
  float lo = 0.0F, hi = 0.0F;  // kClamp's bounds; kLeakyRelu's slope is lo
};

// y[i] = activation(y[i] + residual[i]) for i < n; residual null: no add. NaN stays NaN
// (as in eager PyTorch), whatever the activation.
void finish(float* y, const float* residual, int64_t n, const Epilogue& epilogue);

// y[p, c] = activation(x[p, c] * scale[c] + shift[c]) for pixels [begin, end) of x and y
// [pixels, channels], dense and not overlapping: an inference batch norm and the activation
// after it (kernels/cpu/nhwc_tensor_ops.h).
void scale_shift(const float* x, float* y, const float* scale, const float* shift,
                 int64_t channels, const Epilogue& epilogue, int64_t begin, int64_t end);

// Which vector code a kernel object runs: the best this CPU has (read at run time, not what
// the build machine had), or a narrower one that tests and measurements ask for.
enum class Isa : int8_t { kPortable, kAvx2, kAvx512 };  // kAvx2 means AVX2 with FMA
// The best this CPU supports, capped by the environment variable NIMBLE_CPU_ISA ("avx2",
// "portable") when it is set: to run and measure the AVX2 code, and the rules that choose
// for an AVX2 machine, on an AVX-512 one. Read once, on first use; an unknown value throws.
Isa best_isa();
bool isa_capped();              // whether NIMBLE_CPU_ISA keeps best_isa() below what the CPU has
bool supports(Isa isa);         // whether this CPU can run `isa`
const char* isa_name(Isa isa);  // "portable", "avx2", "avx512"

}  // namespace nimble::kernels::nhwc
