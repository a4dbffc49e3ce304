#include "csrc/kernels/tunable_op.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <sstream>

namespace nimble::kernels {
namespace {

struct TensorLayout {
  std::vector<int64_t> sizes, strides;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  c10::DeviceType device = c10::DeviceType::CPU;
};

// The layout an argument has on every replay: a slot's capture-time layout, or a constant's.
std::optional<TensorLayout> layout_of(const Program& program, const Arg& arg) {
  if (arg.kind == Arg::Kind::kSlot) {
    const SlotInfo& slot = program.slots.at(arg.slot);
    if (slot.dtype == c10::ScalarType::Undefined) return std::nullopt;
    TensorLayout l{slot.sizes, slot.strides, slot.dtype, c10::DeviceType::CPU};
    const c10::IValue& value = program.values.at(arg.slot);
    if (value.isTensor() && value.toTensor().defined()) l.device = value.toTensor().device().type();
    return l;
  }
  if (arg.kind == Arg::Kind::kConstant && arg.constant.isTensor()) {
    const at::Tensor& t = arg.constant.toTensor();
    if (!t.defined()) return std::nullopt;
    return TensorLayout{t.sizes().vec(), t.strides().vec(), t.scalar_type(), t.device().type()};
  }
  return std::nullopt;
}

std::optional<std::array<int64_t, 2>> pair_of(const Arg& arg) {
  if (arg.kind != Arg::Kind::kConstant || !arg.constant.isIntList()) return std::nullopt;
  const auto v = arg.constant.toIntVector();
  if (v.size() == 1) return std::array<int64_t, 2>{v[0], v[0]};
  if (v.size() != 2) return std::nullopt;
  return std::array<int64_t, 2>{v[0], v[1]};
}

std::string join(const std::vector<int64_t>& v) {
  std::ostringstream out;
  for (size_t i = 0; i < v.size(); ++i) out << (i ? "," : "") << v[i];
  return out.str();
}

}  // namespace

double TunableOp::flops() const {
  return 2.0 * static_cast<double>(n * k * out_h() * out_w()) * static_cast<double>(c / groups) *
         static_cast<double>(r * s);
}

std::string TunableOp::signature() const {
  std::ostringstream out;
  out << "conv2d " << c10::toString(dtype) << " " << c10::DeviceTypeName(device, true)
      << " in=" << n << "x" << c << "x" << h << "x" << w << "/" << join(input_strides)
      << " weight=" << k << "x" << c / groups << "x" << r << "x" << s << "/" << join(weight_strides)
      << " stride=" << stride[0] << "," << stride[1] << " pad=" << padding[0] << "," << padding[1]
      << " dil=" << dilation[0] << "," << dilation[1] << " groups=" << groups
      << (bias ? " bias" : "") << " out=" << join(out_strides);
  return out.str();
}

std::vector<at::Tensor> TunableOp::random_operands(uint64_t seed) const {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  // Drawn on the CPU so that every device sees the same numbers for a seed.
  const auto options = at::TensorOptions().dtype(dtype);
  std::vector<at::Tensor> out;
  out.push_back(at::empty_strided({n, c, h, w}, input_strides, options).normal_(0, 1, gen));
  out.push_back(
      at::empty_strided({k, c / groups, r, s}, weight_strides, options).normal_(0, 0.2, gen));
  if (bias) out.push_back(at::empty({k}, options).normal_(0, 1, gen));
  for (at::Tensor& t : out) t = t.to(device);
  return out;
}

at::Tensor TunableOp::aten(at::TensorList operands) const {
  const std::optional<at::Tensor> b = bias ? std::optional<at::Tensor>(operands[2]) : std::nullopt;
  return at::convolution(operands[0], operands[1], b, stride, padding, dilation, false, {0, 0},
                         groups);
}

at::Tensor TunableOp::empty_output() const {
  return at::empty_strided(out_sizes, out_strides, at::TensorOptions().dtype(dtype).device(device));
}

std::optional<TunableOp> tunable_op(const Program& program, int index) {
  const OpNode& node = program.ops.at(index);
  if (node.name != "aten::convolution" || node.args.size() != 9 || node.outputs.size() != 1)
    return std::nullopt;
  const auto& a = node.args;
  const auto input = layout_of(program, a[0]);
  const auto weight = layout_of(program, a[1]);
  const auto stride = pair_of(a[3]);
  const auto padding = pair_of(a[4]);
  const auto dilation = pair_of(a[5]);
  if (!input || !weight || !stride || !padding || !dilation) return std::nullopt;
  if (a[6].kind != Arg::Kind::kConstant || !a[6].constant.isBool() || a[6].constant.toBool())
    return std::nullopt;  // transposed
  if (a[8].kind != Arg::Kind::kConstant || !a[8].constant.isInt()) return std::nullopt;
  if (input->sizes.size() != 4 || weight->sizes.size() != 4) return std::nullopt;
  if (input->dtype != c10::ScalarType::Float || weight->dtype != c10::ScalarType::Float)
    return std::nullopt;
  TunableOp op;
  op.dtype = input->dtype;
  op.device = input->device;
  op.n = input->sizes[0];
  op.c = input->sizes[1];
  op.h = input->sizes[2];
  op.w = input->sizes[3];
  op.k = weight->sizes[0];
  op.r = weight->sizes[2];
  op.s = weight->sizes[3];
  op.stride = *stride;
  op.padding = *padding;
  op.dilation = *dilation;
  op.groups = a[8].constant.toInt();
  op.input_strides = input->strides;
  op.weight_strides = weight->strides;
  if (a[2].kind == Arg::Kind::kSlot) {
    op.bias = true;
  } else if (a[2].kind == Arg::Kind::kConstant && a[2].constant.isTensor()) {
    op.bias = a[2].constant.toTensor().defined();
  }
  const SlotInfo& out = program.slots.at(node.outputs[0].slot);
  if (out.sizes.size() != 4) return std::nullopt;
  op.out_sizes = out.sizes;
  op.out_strides = out.strides;
  return op;
}

std::vector<at::Tensor> operands_from_stack(const TunableOp& op,
                                            const std::vector<c10::IValue>& stack) {
  std::vector<at::Tensor> out{stack.at(0).toTensor(), stack.at(1).toTensor()};
  if (op.bias) out.push_back(stack.at(2).toTensor());
  return out;
}

}  // namespace nimble::kernels
