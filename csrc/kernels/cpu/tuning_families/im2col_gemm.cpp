// Family "im2col_gemm": nimble's convolution as GEMM. The weight is kept as a [k, c*r*s]
// matrix (re-derived only when it changes); output pixels go in blocks of `tile`, each block's
// input patches unfolded into a column buffer small enough to stay in cache, then one
// GEMM (torch's BLAS) with the bias fused in. A pointwise convolution needs no unfolding:
// it is one GEMM per image.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "csrc/kernels/cpu/tuning_families/cpu_families.h"
#include "csrc/kernels/cpu/tuning_families/cpu_kernel_support.h"

namespace nimble::kernels {
namespace {

// Column `j` of row (ci, kr, ks) is the input under that weight tap for output pixel p0 + j.
void unfold(const float* x, float* col, const TunableOp& op, int64_t p0, int64_t count) {
  const int64_t rs = op.r * op.s;
  const int64_t ow = op.out_w();
  at::parallel_for(0, op.c * rs, 1, [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q) {
      const int64_t ci = q / rs, kr = (q % rs) / op.s, ks = q % op.s;
      const float* plane = x + ci * op.h * op.w;
      float* row = col + q * count;
      int64_t p = p0;
      while (p < p0 + count) {
        const int64_t oy = p / ow, ox0 = p % ow;
        const int64_t n = std::min(ow - ox0, p0 + count - p);
        const int64_t iy = oy * op.stride[0] - op.padding[0] + kr * op.dilation[0];
        float* dst = row + (p - p0);
        if (iy < 0 || iy >= op.h) {
          std::fill(dst, dst + n, 0.0F);
        } else {
          const float* src = plane + iy * op.w;
          for (int64_t j = 0; j < n; ++j) {
            const int64_t ix = (ox0 + j) * op.stride[1] - op.padding[1] + ks * op.dilation[1];
            dst[j] = ix >= 0 && ix < op.w ? src[ix] : 0.0F;
          }
        }
        p += n;
      }
    }
  });
}

class Im2colGemm : public TunedKernel {
 public:
  Im2colGemm(TunableOp op, int64_t tile, int64_t threads)
      : op_(std::move(op)), tile_(tile), threads_(threads) {}

  at::Tensor run(at::TensorList operands) const override {
    ThreadsScope threads(threads_);
    const at::Tensor x = operands[0].contiguous();
    const at::Tensor& w = weight_.get(operands[1], [&](const at::Tensor& t) {
      return t.contiguous().view({op_.k, op_.c * op_.r * op_.s});
    });
    const int64_t pixels = op_.out_h() * op_.out_w();
    at::Tensor out = at::empty({op_.n, op_.k, op_.out_h(), op_.out_w()}, x.options());
    const std::optional<at::Tensor> bias =
        op_.bias ? std::optional<at::Tensor>(operands[2].view({op_.k, 1})) : std::nullopt;
    const auto gemm = [&](at::Tensor dst, const at::Tensor& columns) {
      if (bias) {
        at::addmm_out(dst, *bias, w, columns);
      } else {
        at::mm_out(dst, w, columns);
      }
    };
    const int64_t tile = std::min(tile_, pixels);
    at::Tensor col;
    if (!op_.pointwise()) col = at::empty({op_.c * op_.r * op_.s, tile}, x.options());
    for (int64_t b = 0; b < op_.n; ++b) {
      at::Tensor image_out = out[b].view({op_.k, pixels});
      if (op_.pointwise()) {
        gemm(image_out, x[b].view({op_.c, pixels}));
        continue;
      }
      const float* image = x[b].data_ptr<float>();
      for (int64_t p0 = 0; p0 < pixels; p0 += tile) {
        const int64_t count = std::min(tile, pixels - p0);
        at::Tensor block = count == tile ? col : col.narrow(1, 0, count).contiguous();
        unfold(image, block.data_ptr<float>(), op_, p0, count);
        gemm(image_out.narrow(1, p0, count), block);
      }
    }
    return in_output_layout(op_, std::move(out));
  }

 private:
  TunableOp op_;
  int64_t tile_;
  int64_t threads_;
  DerivedTensor weight_;
};

class Im2colGemmFamily : public KernelFamily {
 public:
  std::string name() const override { return "im2col_gemm"; }
  bool supports(const TunableOp& op) const override {
    return op.device == c10::DeviceType::CPU && op.dtype == c10::ScalarType::Float &&
           op.groups == 1;
  }
  std::vector<tuning::Knob> knobs(const TunableOp& op) const override {
    // Pointwise convolutions unfold nothing: the tile would be a knob that does nothing.
    if (op.pointwise()) return {threads_knob()};
    int64_t most = 16;
    while (most < op.out_h() * op.out_w() && most < 4096) most *= 2;
    return {tuning::Knob::power_of_two_range("tile", 16, most), threads_knob()};
  }
  std::unique_ptr<TunedKernel> build(const TunableOp& op, const KnobValues& k) const override {
    const int64_t tile = op.pointwise() ? op.out_h() * op.out_w() : k.value("tile");
    return std::make_unique<Im2colGemm>(op, tile, k.value("threads"));
  }
};

}  // namespace

std::shared_ptr<const KernelFamily> im2col_gemm_family() {
  return std::make_shared<Im2colGemmFamily>();
}

}  // namespace nimble::kernels
