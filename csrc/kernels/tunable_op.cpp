#include "csrc/kernels/tunable_op.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <deque>
#include <sstream>

#include "csrc/kernels/aten_epilogue.h"

namespace nimble::kernels {
namespace {

struct TensorLayout {
  std::vector<int64_t> sizes, strides;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  c10::DeviceType device = c10::DeviceType::CPU;
};

// The layout a slot has on every replay: its capture-time layout.
std::optional<TensorLayout> layout_of_slot(const Program& program, int index) {
  const SlotInfo& slot = program.slots.at(index);
  if (slot.dtype == c10::ScalarType::Undefined) return std::nullopt;
  return TensorLayout{slot.sizes, slot.strides, slot.dtype, slot.device.type()};
}

// The layout an argument has on every replay: a slot's, or a constant's.
std::optional<TensorLayout> layout_of(const Program& program, const Arg& arg) {
  if (arg.kind == Arg::Kind::kSlot) return layout_of_slot(program, arg.slot);
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

bool constant_equals(const Arg& arg, double value) {
  return arg.kind == Arg::Kind::kConstant && arg.constant.isScalar() &&
         arg.constant.toScalar().toDouble() == value;
}

bool writes_storage(const Program& program, const OpNode& node, const void* storage) {
  for (int slot : node.writes)
    if (program.slots[slot].storage == storage) return true;
  return false;
}

// Whether the dependencies order op `from` before op `to` (a path of edges).
bool ordered(const Program& program, int from, int to) {
  if (from == to) return true;
  std::vector<std::vector<int>> next(program.ops.size());
  for (const auto& [a, b] : program.dependencies) next[a].push_back(b);
  std::vector<bool> seen(program.ops.size(), false);
  std::deque<int> queue{from};
  while (!queue.empty()) {
    const int op = queue.front();
    queue.pop_front();
    for (int n : next[op]) {
      if (n == to) return true;
      if (n < to && !seen[n]) {
        seen[n] = true;
        queue.push_back(n);
      }
    }
  }
  return false;
}

// The epilogue the pass stage found for the site's op (Program::epilogues), where the built
// program allows it: the op's result is the one slot it returns, or its `.out` buffer, and the
// residual is a transient slot whose writes before the op are ordered before it in any schedule
// (and none comes between the op and the add).
void take_epilogue(const Program& program, TunableSite& site) {
  const auto found =
      std::lower_bound(program.epilogues.begin(), program.epilogues.end(), site.index,
                       [](const OpEpilogue& e, int index) { return e.op < index; });
  if (found == program.epilogues.end() || found->op != site.index) return;
  const OpNode& op = program.ops[site.index];
  // An out variant's result is its buffer, which only in-place ops may take over: a functional
  // reader's result would be the buffer, alive past the buffer's planned lifetime, so a later
  // buffer sharing its storage could overwrite it.
  const bool into_buffer = site.op.out_variant;
  if (into_buffer && found->takes_over_result) return;
  if (into_buffer ? op.writes.size() != 1 : op.outputs.size() != 1) return;
  const int out = into_buffer ? op.writes[0] : op.outputs[0].slot;
  if (program.slots[out].storage == nullptr ||
      program.slots[out].role != (into_buffer ? SlotRole::kBuffer : SlotRole::kTransient))
    return;
  if (found->epilogue.residual) {
    const SlotInfo& residual = program.slots[found->residual_slot];
    if (residual.is_stable()) return;  // only one the replay fills in is handed to the kernel
    const int add = found->absorbed.front();
    for (int m = 0; m < add; ++m) {
      if (m == site.index || !writes_storage(program, program.ops[m], residual.storage)) continue;
      if (m > site.index || !ordered(program, m, site.index)) return;
    }
    site.residual_slot = found->residual_slot;
  }
  site.op.epilogue = found->epilogue;
  site.absorbed = found->absorbed;
}

}  // namespace

double TunableOp::flops() const {
  return 2.0 * static_cast<double>(n * k * out_h() * out_w()) * static_cast<double>(c / groups) *
         static_cast<double>(r * s);
}

std::string TunableOp::signature() const {
  std::ostringstream out;
  out << (kind == Kind::kConv2d ? "conv2d "
          : out_variant         ? "linear.out "
                                : "linear ")
      << c10::toString(dtype) << " " << c10::DeviceTypeName(device, true) << " in=" << n << "x" << c
      << "x" << h << "x" << w << "/" << join(input_strides) << " weight=" << k << "x" << c / groups
      << "x" << r << "x" << s << "/" << join(weight_strides) << " stride=" << stride[0] << ","
      << stride[1] << " pad=" << padding[0] << "," << padding[1] << " dil=" << dilation[0] << ","
      << dilation[1] << " groups=" << groups << (bias ? " bias" : "")
      << " out=" << join(out_strides);
  if (epilogue.residual) out << " +residual";
  if (epilogue.activation == Activation::kRelu) out << " +relu";
  if (epilogue.activation == Activation::kClamp)
    out << " +hardtanh(" << epilogue.lo << "," << epilogue.hi << ")";
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
  if (epilogue.residual)
    out.push_back(at::empty_strided(out_sizes, out_strides, options).normal_(0, 1, gen));
  for (at::Tensor& t : out) t = t.to(device);
  return out;
}

at::Tensor TunableOp::aten(at::TensorList operands) const {
  at::Tensor y;
  if (kind == Kind::kLinear) {
    const at::Tensor x = operands[0].as_strided({n, c}, {input_strides[0], input_strides[1]},
                                                operands[0].storage_offset());
    const at::Tensor weight = operands[1].as_strided({k, c}, {weight_strides[0], weight_strides[1]},
                                                     operands[1].storage_offset());
    y = at::addmm(operands[2], x, weight.t()).view({n, k, 1, 1});
  } else {
    const std::optional<at::Tensor> b =
        bias ? std::optional<at::Tensor>(operands[2]) : std::nullopt;
    y = at::convolution(operands[0], operands[1], b, stride, padding, dilation, false, {0, 0},
                        groups);
  }
  apply_in_place(epilogue, y, epilogue.residual ? &operands.back() : nullptr);
  return y;
}

at::Tensor TunableOp::empty_output() const {
  return at::empty_strided(out_sizes, out_strides, at::TensorOptions().dtype(dtype).device(device));
}

namespace {

// aten::addmm(bias [k], input [n, c], weight.t()) with beta = alpha = 1, functional or out.
std::optional<TunableSite> linear_site(const Program& program, int index) {
  const OpNode& node = program.ops.at(index);
  const bool out_variant = node.name == "aten::addmm.out";
  if (!(node.name == "aten::addmm" && node.args.size() == 5 && node.outputs.size() == 1) &&
      !(out_variant && node.args.size() == 6 && node.outputs.empty()))
    return std::nullopt;
  const auto& a = node.args;
  if (!constant_equals(a[3], 1) || !constant_equals(a[4], 1)) return std::nullopt;
  const auto bias = layout_of(program, a[0]);
  const auto input = layout_of(program, a[1]);
  const auto weight_t = layout_of(program, a[2]);
  const auto out =
      out_variant ? layout_of(program, a[5]) : layout_of_slot(program, node.outputs[0].slot);
  if (!bias || !input || !weight_t || !out) return std::nullopt;
  for (const TensorLayout* l : {&*bias, &*input, &*weight_t, &*out})
    if (l->dtype != c10::ScalarType::Float || l->device != input->device) return std::nullopt;
  if (input->sizes.size() != 2 || weight_t->sizes.size() != 2 || bias->sizes.size() != 1 ||
      out->sizes.size() != 2)
    return std::nullopt;
  TunableOp op;
  op.kind = TunableOp::Kind::kLinear;
  op.out_variant = out_variant;
  op.dtype = input->dtype;
  op.device = input->device;
  op.n = input->sizes[0];
  op.c = input->sizes[1];
  op.k = weight_t->sizes[1];
  op.h = op.w = op.r = op.s = 1;
  if (weight_t->sizes[0] != op.c || bias->sizes[0] != op.k ||
      out->sizes != std::vector<int64_t>{op.n, op.k})
    return std::nullopt;
  op.bias = true;
  op.input_strides = {input->strides[0], input->strides[1], 1, 1};
  op.weight_strides = {weight_t->strides[1], weight_t->strides[0], 1, 1};
  op.out_sizes = {op.n, op.k, 1, 1};
  op.out_strides = {out->strides[0], out->strides[1], 1, 1};
  TunableSite site;
  site.op = std::move(op);
  site.index = index;
  take_epilogue(program, site);
  return site;
}

}  // namespace

std::optional<TunableSite> tunable_site(const Program& program, int index) {
  const OpNode& node = program.ops.at(index);
  if (node.name == "aten::addmm" || node.name == "aten::addmm.out")
    return linear_site(program, index);
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
  TunableSite site;
  site.op = std::move(op);
  site.index = index;
  take_epilogue(program, site);
  return site;
}

at::Tensor view_sharing_version(const at::Tensor& base, at::IntArrayRef sizes,
                                at::IntArrayRef strides) {
  at::Tensor view = base.as_strided(sizes, strides, base.storage_offset());
  if (!base.is_inference())
    view.unsafeGetTensorImpl()->set_version_counter(base.unsafeGetTensorImpl()->version_counter());
  return view;
}

std::vector<at::Tensor> operands_from_stack(const TunableOp& op,
                                            const std::vector<c10::IValue>& stack) {
  if (op.kind == TunableOp::Kind::kLinear) {
    const at::Tensor& x = stack.at(1).toTensor();
    std::vector<at::Tensor> out{
        x.as_strided(at::IntArrayRef{op.n, op.c, 1, 1}, op.input_strides, x.storage_offset()),
        view_sharing_version(stack.at(2).toTensor(), at::IntArrayRef{op.k, op.c, 1, 1},
                             op.weight_strides),
        stack.at(0).toTensor()};
    // The residual comes after the op's own arguments: bias, x, weight.t(), beta, alpha and,
    // for .out, the buffer.
    if (op.epilogue.residual) {
      const at::Tensor& residual = stack.at(op.out_variant ? 6 : 5).toTensor();
      out.push_back(residual.as_strided(op.out_sizes, op.out_strides, residual.storage_offset()));
    }
    return out;
  }
  std::vector<at::Tensor> out{stack.at(0).toTensor(), stack.at(1).toTensor()};
  if (op.bias) out.push_back(stack.at(2).toTensor());
  if (op.epilogue.residual) out.push_back(stack.at(9).toTensor());
  return out;
}

void return_on_stack(const TunableOp& op, at::Tensor result, std::vector<c10::IValue>& stack) {
  if (op.kind == TunableOp::Kind::kLinear) {
    result = result.as_strided(at::IntArrayRef{op.n, op.k},
                               at::IntArrayRef{op.out_strides[0], op.out_strides[1]},
                               result.storage_offset());
    if (op.out_variant) {
      at::Tensor out = stack.at(5).toTensor();
      out.copy_(result);
      result = std::move(out);
    }
  }
  stack.clear();
  stack.emplace_back(std::move(result));
}

}  // namespace nimble::kernels
