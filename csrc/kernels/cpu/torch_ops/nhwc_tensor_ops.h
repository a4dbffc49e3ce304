#pragma once
// nimble's channels-last kernels for the ops between convolutions (channels_last/pooling.h,
// channels_last/channel_ops.h), registered as `nimble::` ops of the same names and arguments,
// which the lowered program calls where the layout plan left their inputs channels_last
// (passes/channels_last_ops.h). The CPU replay calls some of them without the dispatcher
// (runtime/cpu/direct_calls.h).
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

#include <optional>
#include <string>

namespace nimble::kernels {

c10::OperatorHandle max_pool2d_nhwc_op();
c10::OperatorHandle avg_pool2d_nhwc_op();
c10::OperatorHandle batch_norm_nhwc_op();
c10::OperatorHandle cat_nhwc_op();
c10::OperatorHandle channel_shuffle_op();
c10::OperatorHandle channel_shuffle_nhwc_op();
c10::OperatorHandle mean_hw_nhwc_op();
c10::OperatorHandle scale_channels_nhwc_op();

at::Tensor max_pool2d_nhwc(const at::Tensor& self, at::IntArrayRef kernel_size,
                           at::IntArrayRef stride, at::IntArrayRef padding,
                           at::IntArrayRef dilation, bool ceil_mode);
at::Tensor avg_pool2d_nhwc(const at::Tensor& self, at::IntArrayRef kernel_size,
                           at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode,
                           bool count_include_pad, std::optional<int64_t> divisor_override);
at::Tensor batch_norm_nhwc(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                           const std::optional<at::Tensor>& bias, const at::Tensor& running_mean,
                           const at::Tensor& running_var, double eps, const std::string& activation,
                           double lo, double hi);
// Along channels.
at::Tensor cat_nhwc(at::TensorList tensors);
at::Tensor channel_shuffle(at::TensorList tensors, int64_t groups);
// channel_shuffle's, channels_last.
at::Tensor channel_shuffle_nhwc(at::TensorList tensors, int64_t groups);
// Over the pixels: mean(self, [2, 3], keepdim).
at::Tensor mean_hw_nhwc(const at::Tensor& self, bool keepdim);
// self * scale, scale of sizes [n, c, 1, 1]: the channel-wise product of squeeze-excitation.
at::Tensor scale_channels_nhwc(const at::Tensor& self, const at::Tensor& scale);

}  // namespace nimble::kernels
