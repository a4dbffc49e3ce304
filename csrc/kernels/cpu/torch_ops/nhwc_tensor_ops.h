#pragma once
// nimble's channels-last kernels for the ops between convolutions (channels_last/pooling.h,
// channels_last/channel_ops.h), registered as `nimble::` ops the lowered program calls where the
// layout plan left their inputs channels_last (passes/channels_last_ops.h):
//
//   max_pool2d_nhwc(self, kernel_size, stride, padding, dilation, ceil_mode)
//   avg_pool2d_nhwc(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
//                   divisor_override)
//   batch_norm_nhwc(input, weight?, bias?, running_mean, running_var, eps, activation, lo, hi)
//   cat_nhwc(tensors)  (along channels)
//   channel_shuffle_nhwc(tensors, groups)  (channel_shuffle's, channels_last)
//   mean_hw_nhwc(self, keepdim)  (over the pixels: mean(self, [2, 3], keepdim))
//   scale_channels_nhwc(self, scale)  (self * scale, scale of sizes [n, c, 1, 1]: the
//                                      channel-wise product of squeeze-excitation)
//
// Each returns a new channels_last tensor equal to its ATen op's (batch_norm_nhwc: the
// inference batch norm, then `activation` as activation_name (program/epilogue.h) names it, with
// `lo`, `hi` its bounds or slope). An input that is not dense channels_last float (a layout the
// plan did not foresee; scale_channels_nhwc: a scale that is not dense float [n, c, 1, 1]) runs
// ATen's op instead, so the result is right whatever comes. (cat_nhwc
// and channel_shuffle_nhwc take inputs that are slices of a wider tensor's channels too.)
//
// One op of any layout: channel_shuffle(tensors, groups), ShuffleNet's shuffle of the
// tensors' concatenation along channels (view(n, groups, c / groups, h, w), transpose(1, 2),
// contiguous, view(n, c, h, w)), contiguous as torch gives it; passes/channel_shuffle_fusion.h
// makes it from those ops.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

namespace nimble::kernels {

c10::OperatorHandle max_pool2d_nhwc_op();
c10::OperatorHandle avg_pool2d_nhwc_op();
c10::OperatorHandle batch_norm_nhwc_op();
c10::OperatorHandle cat_nhwc_op();
c10::OperatorHandle channel_shuffle_op();
c10::OperatorHandle channel_shuffle_nhwc_op();
c10::OperatorHandle mean_hw_nhwc_op();
c10::OperatorHandle scale_channels_nhwc_op();

// The ops' kernels themselves, for callers that skip the dispatcher (the CPU replay's direct
// calls, runtime/cpu/direct_calls.h).
namespace direct {
at::Tensor max_pool2d_nhwc(const at::Tensor& self, at::IntArrayRef kernel_size,
                           at::IntArrayRef stride, at::IntArrayRef padding,
                           at::IntArrayRef dilation, bool ceil_mode);
at::Tensor cat_nhwc(at::TensorList inputs);
at::Tensor channel_shuffle(at::TensorList inputs, int64_t groups);
at::Tensor channel_shuffle_nhwc(at::TensorList inputs, int64_t groups);
at::Tensor mean_hw_nhwc(const at::Tensor& self, bool keepdim);
}  // namespace direct

}  // namespace nimble::kernels
