#pragma once
// The tuned-kernel slot of a program op: a kernel that replaces the op's ATen call. It takes
// the op's boxed arguments (schema order, as the dispatcher would) and leaves the op's
// returns on the stack, with the sizes, strides and dtype the ATen kernel gives, so that no
// other op of the program can tell which one ran.
#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace nimble {

class KernelOverride {
 public:
  explicit KernelOverride(std::vector<int> extra_slots = {})
      : extra_slots_(std::move(extra_slots)) {}
  virtual ~KernelOverride() = default;
  virtual void call(std::vector<c10::IValue>& stack) const = 0;
  // What runs instead of ATen, for reports: e.g. "depthwise tile_w=16 threads=2".
  virtual std::string describe() const = 0;
  // Values the kernel reads besides the op's arguments (a residual it adds), pushed after
  // them. The binder guarantees the program's dependencies make them ready by then.
  const std::vector<int>& extra_slots() const { return extra_slots_; }

 private:
  std::vector<int> extra_slots_;
};

}  // namespace nimble
