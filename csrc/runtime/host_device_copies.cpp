#include "csrc/runtime/host_device_copies.h"

#include <array>
#include <string>
#include <string_view>

#include "csrc/errors.h"

namespace nimble {

namespace {

// The ops through which torch moves bytes from one device to another (`.to()`, `.cpu()`,
// `.cuda()`, `copy_` and their out= forms). Other ops mixing devices take a CPU scalar as
// a number, read when the kernel launches, which a graph records like any constant.
constexpr std::array<std::string_view, 6> kCopyOps{"aten::_to_copy",
                                                   "aten::copy_",
                                                   "aten::copy",
                                                   "aten::_copy_from",
                                                   "aten::_copy_from_and_resize",
                                                   "aten::to"};

bool is_copy_op(const OpNode& op) {
  const std::string& name = op.handle.operator_name().name;
  for (std::string_view copy : kCopyOps)
    if (name == copy) return true;
  return false;
}

}  // namespace

bool copies_between_host_and_device(const Program& program, int index) {
  const OpNode& op = program.ops.at(static_cast<size_t>(index));
  if (!is_copy_op(op)) return false;
  bool host = false;
  bool device = false;
  for (const auto* slots : {&op.reads, &op.writes}) {
    for (int slot : *slots) {
      const SlotInfo& info = program.slots[slot];
      if (info.dtype == c10::ScalarType::Undefined) continue;
      (info.device.is_cpu() ? host : device) = true;
    }
  }
  return host && device;
}

void refuse_host_device_copies(const Program& program) {
  for (size_t i = 0; i < program.ops.size(); ++i) {
    if (!copies_between_host_and_device(program, static_cast<int>(i))) continue;
    throw UnsupportedOp(
        "op " + std::to_string(i) + " (" + program.ops[i].name +
        ") copies between host and device inside the program, which a CUDA graph cannot "
        "capture (the copy synchronizes with the host, or would replay the host's bytes of "
        "capture time). Move the copy out of the model: hand the model tensors already on "
        "the device, and move its results to the host after the call");
  }
}

}  // namespace nimble
