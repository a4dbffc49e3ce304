#pragma once
// The shape of one 2-d convolution over channels-last (NHWC) activations, as nimble's own CPU
// kernels (depthwise_convolution.h, gemm_convolution.h) take it. Torch-free.
#include <cstdint>

namespace nimble::kernels::nhwc {

// One side of a 2-d convolution's output, as torch computes it: `in` input pixels, `pad` on
// each edge, a kernel of `kernel` taps `dilation` apart, moved `stride` at a time. Every
// output size of a convolution in csrc/ comes from here.
constexpr int64_t convolution_output_side(int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                                          int64_t dilation) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

struct ConvolutionGeometry {
  int64_t images = 1;
  int64_t height = 0, width = 0;  // input pixels
  int64_t in_channels = 0, out_channels = 0;
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;

  int64_t out_height() const {
    return convolution_output_side(height, kernel_h, stride_h, pad_h, dilation_h);
  }
  int64_t out_width() const {
    return convolution_output_side(width, kernel_w, stride_w, pad_w, dilation_w);
  }
  // Output rows (one row: one output pixel's channels) over all images.
  int64_t out_pixels() const { return images * out_height() * out_width(); }

  // A linear layer of `rows` rows, `in` > `out` features, as the 1x1 convolution nimble's GEMM
  // runs it: the rows as one image row of pixels.
  static ConvolutionGeometry linear(int64_t rows, int64_t in, int64_t out) {
    ConvolutionGeometry g;
    g.height = 1;
    g.width = rows;
    g.in_channels = in;
    g.out_channels = out;
    return g;
  }
};

}  // namespace nimble::kernels::nhwc
