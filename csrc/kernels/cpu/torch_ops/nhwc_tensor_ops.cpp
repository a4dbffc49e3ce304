#include "csrc/kernels/cpu/torch_ops/nhwc_tensor_ops.h"

#include <ATen/ATen.h>
#include <ATen/native/Pool.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <vector>

#include "csrc/kernels/aten_epilogue.h"
#include "csrc/kernels/cpu/channels_last/channel_ops.h"
#include "csrc/kernels/cpu/channels_last/epilogue.h"
#include "csrc/kernels/cpu/channels_last/pooling.h"
#include "csrc/kernels/cpu/torch_ops/empty_output.h"
#include "csrc/kernels/cpu/torch_ops/fused_epilogue.h"
#include "csrc/kernels/cpu/torch_ops/nhwc_convolution.h"
#include "csrc/threads/intra_op_threads.h"

namespace nimble::kernels {

namespace {

// These ops stream memory at a few ns a pixel: below this many floats a fork and join of
// the intra-op threads costs more than it saves.
constexpr int64_t kParallelFromElements = int64_t{1} << 16;

bool worth_forking(int64_t elements) { return elements >= kParallelFromElements; }

bool dense_channels_last(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.dim() == 4 &&
         t.layout() == at::kStrided && t.is_contiguous(at::MemoryFormat::ChannelsLast);
}

nhwc::PoolGeometry pool_geometry(const at::Tensor& x, at::IntArrayRef kernel,
                                 at::IntArrayRef stride, at::IntArrayRef padding,
                                 at::IntArrayRef dilation, bool ceil_mode) {
  const auto pair = [](at::IntArrayRef v, int64_t i, int64_t fallback) {
    return v.empty() ? fallback : v[v.size() == 1 ? 0 : i];
  };
  nhwc::PoolGeometry g;
  g.batch = x.size(0);
  g.channels = x.size(1);
  g.height = x.size(2);
  g.width = x.size(3);
  g.kernel_h = pair(kernel, 0, 1);
  g.kernel_w = pair(kernel, 1, 1);
  g.stride_h = pair(stride, 0, g.kernel_h);  // an empty stride means the kernel's size
  g.stride_w = pair(stride, 1, g.kernel_w);
  g.pad_h = pair(padding, 0, 0);
  g.pad_w = pair(padding, 1, 0);
  g.dilation_h = pair(dilation, 0, 1);
  g.dilation_w = pair(dilation, 1, 1);
  g.out_height = at::native::pooling_output_shape<int64_t>(g.height, g.kernel_h, g.pad_h,
                                                           g.stride_h, g.dilation_h, ceil_mode);
  g.out_width = at::native::pooling_output_shape<int64_t>(g.width, g.kernel_w, g.pad_w, g.stride_w,
                                                          g.dilation_w, ceil_mode);
  return g;
}

// The inputs as ChannelRows when each is (channel_rows) and all have the same images and
// pixels; else none.
std::optional<std::vector<nhwc::ChannelRows>> rows_of(at::TensorList inputs) {
  std::vector<nhwc::ChannelRows> rows;
  for (const at::Tensor& t : inputs) {
    if (!channel_rows(t) || t.size(0) != inputs[0].size(0) || t.size(2) != inputs[0].size(2) ||
        t.size(3) != inputs[0].size(3))
      return std::nullopt;
    rows.push_back({t.const_data_ptr<float>(), t.size(1), t.stride(3)});
  }
  if (rows.empty()) return std::nullopt;
  return rows;
}

int64_t channels_of(at::TensorList inputs) {
  int64_t total = 0;
  for (const at::Tensor& t : inputs) total += t.size(1);
  return total;
}

// A new channels_last tensor of the inputs' images and pixels and all their channels, its
// pixels [begin, end) filled by `fill(rows, count, y, begin, end)` (channels_last/channel_ops.h).
template <class Fill>
at::Tensor from_rows(at::TensorList inputs, const std::vector<nhwc::ChannelRows>& rows, Fill fill) {
  const at::Tensor& first = inputs[0];
  at::Tensor y = empty_channels_last(
      {first.size(0), channels_of(inputs), first.size(2), first.size(3)}, first);
  float* y_data = y.mutable_data_ptr<float>();
  const int64_t pixels = first.size(0) * first.size(2) * first.size(3);
  split_work(pixels, worth_forking(y.numel()), [&](int64_t begin, int64_t end) {
    fill(rows.data(), static_cast<int64_t>(rows.size()), y_data, begin, end);
  });
  return y;
}

void check_shuffle(at::TensorList inputs, int64_t groups) {
  TORCH_CHECK(!inputs.empty() && inputs[0].dim() == 4,
              "nimble::channel_shuffle: expected 4-d tensors, got ",
              inputs.empty() ? "none" : std::to_string(inputs[0].dim()) + "-d");
  TORCH_CHECK(groups > 0 && channels_of(inputs) % groups == 0,
              "nimble::channel_shuffle: expected groups dividing the ", channels_of(inputs),
              " channels, got ", groups);
}

c10::OperatorHandle nimble_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

}  // namespace

at::Tensor max_pool2d_nhwc(const at::Tensor& self, at::IntArrayRef kernel_size,
                           at::IntArrayRef stride, at::IntArrayRef padding,
                           at::IntArrayRef dilation, bool ceil_mode) {
  if (!dense_channels_last(self))
    return at::max_pool2d(self, kernel_size, stride, padding, dilation, ceil_mode);
  const nhwc::PoolGeometry g =
      pool_geometry(self, kernel_size, stride, padding, dilation, ceil_mode);
  at::Tensor y = empty_channels_last({g.batch, g.channels, g.out_height, g.out_width}, self);
  const float* x_data = self.const_data_ptr<float>();
  float* y_data = y.mutable_data_ptr<float>();
  split_work(g.rows(), worth_forking(y.numel() * g.kernel_h * g.kernel_w),
             [&](int64_t begin, int64_t end) {
               nhwc::max_pool(nhwc::best_isa(), x_data, y_data, g, begin, end);
             });
  return y;
}

at::Tensor avg_pool2d_nhwc(const at::Tensor& self, at::IntArrayRef kernel_size,
                           at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode,
                           bool count_include_pad, std::optional<int64_t> divisor_override) {
  if (!dense_channels_last(self) || divisor_override == 0)
    return at::avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                          divisor_override);
  const nhwc::PoolGeometry g = pool_geometry(self, kernel_size, stride, padding, {}, ceil_mode);
  at::Tensor y = empty_channels_last({g.batch, g.channels, g.out_height, g.out_width}, self);
  const float* x_data = self.const_data_ptr<float>();
  float* y_data = y.mutable_data_ptr<float>();
  split_work(g.rows(), worth_forking(y.numel() * g.kernel_h * g.kernel_w),
             [&](int64_t begin, int64_t end) {
               nhwc::avg_pool(x_data, y_data, g, count_include_pad, divisor_override.value_or(0),
                              begin, end);
             });
  return y;
}

at::Tensor batch_norm_nhwc(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                           const std::optional<at::Tensor>& bias, const at::Tensor& running_mean,
                           const at::Tensor& running_var, double eps, const std::string& activation,
                           double lo, double hi) {
  Epilogue epilogue = epilogue_of_name("nimble::batch_norm_nhwc", activation);
  epilogue.lo = lo;
  epilogue.hi = hi;
  const auto float_vector = [](const at::Tensor& t) {
    return t.scalar_type() == at::kFloat && t.dim() == 1 && t.is_contiguous();
  };
  const bool affine_ok = (!weight || float_vector(*weight)) && (!bias || float_vector(*bias));
  if (!dense_channels_last(input) || !affine_ok || !float_vector(running_mean) ||
      !float_vector(running_var)) {
    at::Tensor y = at::batch_norm(input, weight, bias, running_mean, running_var,
                                  /*training=*/false, /*momentum=*/0.0, eps,
                                  /*cudnn_enabled=*/false);
    activate_in_place(epilogue, y);
    return y;
  }
  // ATen's inference batch norm in its own order: alpha = weight / sqrt(var + eps),
  // beta = bias - mean * alpha, y = x * alpha + beta, in float. Computed on every call from
  // the tensors themselves, so a changed statistic or parameter is always seen.
  const int64_t channels = input.size(1);
  std::vector<float> alpha(channels), beta(channels);
  const float* mean = running_mean.const_data_ptr<float>();
  const float* var = running_var.const_data_ptr<float>();
  const float* w = weight ? weight->const_data_ptr<float>() : nullptr;
  const float* b = bias ? bias->const_data_ptr<float>() : nullptr;
  const float epsilon = static_cast<float>(eps);
  for (int64_t c = 0; c < channels; ++c) {
    const float invstd = 1.0F / std::sqrt(var[c] + epsilon);
    alpha[c] = invstd * (w ? w[c] : 1.0F);
    beta[c] = (b ? b[c] : 0.0F) - mean[c] * alpha[c];
  }
  at::Tensor y = empty_channels_last(input.sizes(), input);
  const float* x_data = input.const_data_ptr<float>();
  float* y_data = y.mutable_data_ptr<float>();
  const int64_t pixels = input.numel() / std::max<int64_t>(channels, 1);
  split_work(pixels, worth_forking(input.numel()), [&](int64_t begin, int64_t end) {
    nhwc::scale_shift(nhwc::best_isa(), x_data, y_data, alpha.data(), beta.data(), channels,
                      epilogue, begin, end);
  });
  return y;
}

at::Tensor cat_nhwc(at::TensorList inputs) {
  const std::optional<std::vector<nhwc::ChannelRows>> rows = rows_of(inputs);
  if (!rows) return at::cat(inputs, 1).contiguous(at::MemoryFormat::ChannelsLast);
  return from_rows(inputs, *rows, nhwc::concatenate_channels);
}

// view(n, groups, c / groups, h, w), transpose(1, 2), contiguous, view(n, c, h, w) of the
// inputs' concatenation along channels: ShuffleNet's channel_shuffle, contiguous as torch
// gives it.
at::Tensor channel_shuffle(at::TensorList inputs, int64_t groups) {
  check_shuffle(inputs, groups);
  const at::Tensor x = inputs.size() == 1 ? inputs[0] : at::cat(inputs, 1);
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  return x.reshape({n, groups, c / groups, h, w}).transpose(1, 2).contiguous().view({n, c, h, w});
}

at::Tensor channel_shuffle_nhwc(at::TensorList inputs, int64_t groups) {
  check_shuffle(inputs, groups);
  const std::optional<std::vector<nhwc::ChannelRows>> rows = rows_of(inputs);
  if (!rows) return channel_shuffle(inputs, groups).contiguous(at::MemoryFormat::ChannelsLast);
  return from_rows(
      inputs, *rows,
      [groups](const nhwc::ChannelRows* in, int64_t count, float* y, int64_t begin, int64_t end) {
        nhwc::shuffle_channels(in, count, groups, y, begin, end);
      });
}

at::Tensor mean_hw_nhwc(const at::Tensor& self, bool keepdim) {
  if (!dense_channels_last(self)) return at::mean(self, {2, 3}, keepdim);
  const int64_t images = self.size(0), channels = self.size(1);
  at::Tensor y = keepdim ? empty_output({images, channels, 1, 1}, self)
                         : empty_output({images, channels}, self);
  const float* x_data = self.const_data_ptr<float>();
  float* y_data = y.mutable_data_ptr<float>();
  const int64_t pixels = self.size(2) * self.size(3);
  split_work(nhwc::mean_units(images, channels), worth_forking(self.numel()),
             [&](int64_t begin, int64_t end) {
               nhwc::mean_over_pixels(nhwc::best_isa(), x_data, y_data, pixels, channels, begin,
                                      end);
             });
  return y;
}

at::Tensor scale_channels_nhwc(const at::Tensor& self, const at::Tensor& scale) {
  const bool per_channel = scale.device().is_cpu() && scale.scalar_type() == at::kFloat &&
                           scale.dim() == 4 && scale.is_contiguous() && scale.size(2) == 1 &&
                           scale.size(3) == 1 && scale.size(0) == self.size(0) &&
                           scale.size(1) == self.size(1);
  if (!dense_channels_last(self) || !per_channel)
    return at::mul(self, scale).contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor y = empty_channels_last(self.sizes(), self);
  const float* x_data = self.const_data_ptr<float>();
  const float* s_data = scale.const_data_ptr<float>();
  float* y_data = y.mutable_data_ptr<float>();
  const int64_t channels = self.size(1), pixels = self.size(2) * self.size(3);
  split_work(self.size(0) * pixels, worth_forking(self.numel()), [&](int64_t begin, int64_t end) {
    nhwc::scale_channels(nhwc::best_isa(), x_data, s_data, y_data, pixels, channels, begin, end);
  });
  return y;
}

c10::OperatorHandle max_pool2d_nhwc_op() { return nimble_op("nimble::max_pool2d_nhwc"); }
c10::OperatorHandle avg_pool2d_nhwc_op() { return nimble_op("nimble::avg_pool2d_nhwc"); }
c10::OperatorHandle batch_norm_nhwc_op() { return nimble_op("nimble::batch_norm_nhwc"); }
c10::OperatorHandle cat_nhwc_op() { return nimble_op("nimble::cat_nhwc"); }
c10::OperatorHandle channel_shuffle_op() { return nimble_op("nimble::channel_shuffle"); }
c10::OperatorHandle channel_shuffle_nhwc_op() { return nimble_op("nimble::channel_shuffle_nhwc"); }
c10::OperatorHandle mean_hw_nhwc_op() { return nimble_op("nimble::mean_hw_nhwc"); }
c10::OperatorHandle scale_channels_nhwc_op() { return nimble_op("nimble::scale_channels_nhwc"); }

TORCH_LIBRARY_FRAGMENT(nimble, m) {
  m.def(
      "max_pool2d_nhwc(Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, "
      "int[2] dilation, bool ceil_mode) -> Tensor");
  m.def(
      "avg_pool2d_nhwc(Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, "
      "bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor");
  m.def(
      "batch_norm_nhwc(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, "
      "Tensor running_var, float eps, str activation, float lo, float hi) -> Tensor");
  m.def("cat_nhwc(Tensor[] tensors) -> Tensor");
  m.def("channel_shuffle(Tensor[] tensors, int groups) -> Tensor");
  m.def("channel_shuffle_nhwc(Tensor[] tensors, int groups) -> Tensor");
  m.def("mean_hw_nhwc(Tensor self, bool keepdim) -> Tensor");
  m.def("scale_channels_nhwc(Tensor self, Tensor scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(nimble, CPU, m) {
  m.impl("max_pool2d_nhwc", TORCH_FN(max_pool2d_nhwc));
  m.impl("avg_pool2d_nhwc", TORCH_FN(avg_pool2d_nhwc));
  m.impl("batch_norm_nhwc", TORCH_FN(batch_norm_nhwc));
  m.impl("cat_nhwc", TORCH_FN(cat_nhwc));
  m.impl("channel_shuffle", TORCH_FN(channel_shuffle));
  m.impl("channel_shuffle_nhwc", TORCH_FN(channel_shuffle_nhwc));
  m.impl("mean_hw_nhwc", TORCH_FN(mean_hw_nhwc));
  m.impl("scale_channels_nhwc", TORCH_FN(scale_channels_nhwc));
}

}  // namespace nimble::kernels
