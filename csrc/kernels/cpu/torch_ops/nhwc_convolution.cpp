#include "csrc/kernels/cpu/torch_ops/nhwc_convolution.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "csrc/kernels/cpu/channels_last/channel_ops.h"
#include "csrc/kernels/cpu/torch_ops/empty_output.h"
#include "csrc/threads/intra_op_threads.h"

namespace nimble::kernels {
namespace {

// Below this many multiply-adds a convolution runs on the calling thread alone: waking the
// second thread of an OpenMP team and joining it costs more than it saves (measured on the
// project's 2-core AMD EPYC; see docs/cpu.md).
constexpr int64_t kParallelFrom = 200'000;
// A layout copy streams memory at a few ns a pixel: below this many floats, one thread.
constexpr int64_t kParallelCopyFrom = int64_t{1} << 16;

// `threads` 1 keeps the work on the calling thread (a tuned choice).
bool worth_forking(int64_t multiply_adds, int64_t threads) {
  return threads != 1 && multiply_adds >= kParallelFrom;
}

// Dense channels_last: as it is; dense NCHW float (a program's input) through nimble's
// transpose, 2-4x ATen's copy for few channels (3 channels at 64x64: 7 us in ATen); any
// other layout through ATen.
at::Tensor channels_last(const at::Tensor& t) {
  if (t.is_contiguous(at::MemoryFormat::ChannelsLast)) return t;
  if (!t.is_contiguous() || t.scalar_type() != at::kFloat || t.dim() != 4)
    return t.contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor y = empty_channels_last(t.sizes(), t);
  const int64_t channels = t.size(1), pixels = t.size(2) * t.size(3);
  const float* x_data = t.const_data_ptr<float>();
  float* y_data = y.mutable_data_ptr<float>();
  split_work(t.size(0) * pixels, t.numel() >= kParallelCopyFrom, [&](int64_t begin, int64_t end) {
    nhwc::to_channels_last(nhwc::best_isa(), x_data, y_data, channels, pixels, begin, end);
  });
  return y;
}

}  // namespace

bool channel_rows(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.dim() == 4 &&
         t.layout() == at::kStrided && t.stride(1) == 1 && t.stride(3) >= t.size(1) &&
         t.stride(2) == t.size(3) * t.stride(3) && t.stride(0) == t.size(2) * t.stride(2);
}

NhwcConvolution::NhwcConvolution(const at::Tensor& weight, const at::Tensor& bias,
                                 const nhwc::ConvolutionGeometry& geometry, Kind kind,
                                 nhwc::Isa isa, const nhwc::KernelParameters& parameters)
    : geometry_(geometry), parameters_(parameters) {
  const at::Tensor w = weight.contiguous();
  const at::Tensor b = bias.defined() ? bias.contiguous() : at::Tensor();
  const float* bias_data = b.defined() ? b.data_ptr<float>() : nullptr;
  if (kind == Kind::kDepthwise) {
    depthwise_ = std::make_unique<const nhwc::DepthwiseWeights>(w.data_ptr<float>(), bias_data,
                                                                geometry_, isa);
  } else if (kind == Kind::kWinograd) {
    winograd_ = std::make_unique<const nhwc::WinogradConvolution>(w.data_ptr<float>(), bias_data,
                                                                  geometry_, isa);
  } else {
    gemm_ = std::make_unique<const nhwc::GemmConvolution>(w.data_ptr<float>(), bias_data, geometry_,
                                                          isa, parameters_.gemm);
  }
}

at::Tensor NhwcConvolution::run(const at::Tensor& input, const std::optional<at::Tensor>& residual,
                                const Epilogue& epilogue, int64_t threads) const {
  const nhwc::ConvolutionGeometry& g = geometry_;
  TORCH_CHECK(input.dim() == 4 && input.size(0) == g.images && input.size(1) == g.in_channels &&
                  input.size(2) == g.height && input.size(3) == g.width &&
                  input.scalar_type() == at::kFloat,
              "nimble::convolution_prepacked: expected a float input of sizes [", g.images, ", ",
              g.in_channels, ", ", g.height, ", ", g.width, "] (as at prepare), got ",
              input.sizes(), " ", input.scalar_type());
  // A slice of a wider tensor's channels (a split's piece) is read where it lies by a 1x1
  // product; any other layout is copied to dense channels_last first.
  const bool strided_rows = gemm_ && gemm_->reads_rows_in_place() && channel_rows(input) &&
                            input.stride(3) != g.in_channels;
  const at::Tensor x = strided_rows ? input : channels_last(input);
  at::Tensor y =
      empty_channels_last({g.images, g.out_channels, g.out_height(), g.out_width()}, input);
  at::Tensor r;
  if (residual.has_value()) {
    TORCH_CHECK(residual->sizes() == y.sizes() && residual->scalar_type() == at::kFloat,
                "nimble::convolution_prepacked: expected a float residual of sizes ", y.sizes(),
                ", got ", residual->sizes(), " ", residual->scalar_type());
    r = channels_last(*residual);
  }
  run(x.data_ptr<float>(), y.data_ptr<float>(), r.defined() ? r.data_ptr<float>() : nullptr,
      epilogue, threads, strided_rows ? x.stride(3) : 0);
  return y;
}

void NhwcConvolution::run(const float* in, float* out, const float* res, const Epilogue& epilogue,
                          int64_t threads, int64_t input_pixel_stride) const {
  const nhwc::ConvolutionGeometry& g = geometry_;
  const int64_t multiply_adds =
      g.out_pixels() * g.out_channels * g.kernel_h * g.kernel_w * (g.in_channels / g.groups);
  if (depthwise_) {
    // Pieces of whole rows: one a row by the rule, else as many as the blocking asks.
    const int64_t rows = g.images * g.out_height();
    const nhwc::DepthwiseBlocking& blocking = parameters_.depthwise;
    const int64_t pieces = blocking.pieces > 0 ? std::min(blocking.pieces, rows) : rows;
    split_work(pieces, worth_forking(multiply_adds, threads), [&](int64_t begin, int64_t end) {
      nhwc::depthwise_rows(g, *depthwise_, in, out, res, epilogue, rows * begin / pieces,
                           rows * end / pieces, blocking);
    });
    return;
  }
  if (winograd_) {
    split_work(
        winograd_->pieces(), worth_forking(multiply_adds, threads),
        [&](int64_t begin, int64_t end) { winograd_->run(in, out, res, epilogue, begin, end); });
    return;
  }
  // Through share_work (a replay), a helper claims the tiles before its run next
  // (work_sharing.cpp), where any are left: its last claim asks for no weight beyond it, as
  // the tiles before are the caller's (asking for their column block made the helper's half
  // of resnet50's 1x1 1024 > 256 on 4x4 1.26x one call's time, against 1.10x; docs/cpu.md).
  using Claims = nhwc::GemmConvolution::Claims;
  split_work(gemm_->row_blocks() * gemm_->column_blocks(), worth_forking(multiply_adds, threads),
             [&](int64_t begin, int64_t end) {
               const Claims claims =
                   shared_work_left_before() ? Claims::kThenBefore : Claims::kAlone;
               gemm_->run_tiles(in, out, res, epilogue, begin, end, input_pixel_stride, claims);
             });
}

int64_t NhwcConvolution::packed_bytes() const {
  return depthwise_ ? depthwise_->bytes() : winograd_ ? winograd_->bytes() : gemm_->bytes();
}

std::string NhwcConvolution::describe() const {
  const nhwc::Isa isa = depthwise_  ? depthwise_->isa()
                        : winograd_ ? winograd_->isa()
                                    : gemm_->isa();
  const char* name = depthwise_  ? "nimble_depthwise"
                     : winograd_ ? "nimble_winograd"
                                 : "nimble_gemm";
  return std::string(name) + "(" + nhwc::isa_name(isa) + ")";
}

}  // namespace nimble::kernels
