#pragma once
// Who reads and writes each storage of a recorded trace, and which op made each tensor: what
// the CPU inference passes (cpu_lowering.h, cpu_layout_plan.h) and the slot's epilogue pass
// (slot_epilogues.h) decide from.
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <vector>

#include "csrc/program/recorded_op.h"
#include "csrc/program/trace_pass_results.h"

namespace nimble {

inline const void* storage_of(const at::Tensor& t) {
  return t.defined() && t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr;
}

// Same storage, offset, sizes and strides: the same values (autograd and in-place ops may
// hand back another tensor object for them).
inline bool same_values(const at::Tensor& a, const at::Tensor& b) {
  return storage_of(a) == storage_of(b) && a.storage_offset() == b.storage_offset() &&
         a.sizes() == b.sizes() && a.strides() == b.strides();
}

template <typename F>
inline void for_each_tensor_arg(const RecordedOp& op, F&& f) {
  const auto& arguments = op.handle.schema().arguments();
  for (size_t a = 0; a < op.args.size(); ++a) {
    const bool written = arguments[a].alias_info() && arguments[a].alias_info()->isWrite();
    const c10::IValue& value = op.args[a];
    if (value.isTensor()) f(value.toTensor(), written);
    if (value.isList()) {
      for (const c10::IValue& item : value.toListRef())
        if (item.isTensor()) f(item.toTensor(), written);
    }
  }
}

// Who reads and writes each storage, and who made each tensor, over the whole trace.
struct TraceAccess {
  std::unordered_map<const void*, std::vector<size_t>> readers, writers;  // ascending
  std::unordered_map<const c10::TensorImpl*, size_t> producer;

  explicit TraceAccess(const std::vector<RecordedOp>& ops) : TraceAccess(ops, {}) {}
  // Over the ops a replay runs: the no-ops the program leaves out (`dropped`,
  // noop_elimination.h) access nothing, and their results' storages count as their sources',
  // as readers of a dropped op's result read its source.
  TraceAccess(const std::vector<RecordedOp>& ops, const std::vector<NoopOp>& dropped) {
    std::vector<bool> skip(ops.size(), false);
    for (const NoopOp& noop : dropped) {
      skip[noop.op] = true;
      if (storage_of(noop.result) != storage_of(noop.source))
        source_of_.emplace(storage_of(noop.result), storage_in_replay(noop.source));
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      if (skip[i]) continue;
      for_each_tensor_arg(ops[i], [&](const at::Tensor& t, bool written) {
        if (!storage_of(t)) return;
        auto& read = readers[storage_in_replay(t)];
        if (read.empty() || read.back() != i) read.push_back(i);
        auto& write = writers[storage_in_replay(t)];
        if (written && (write.empty() || write.back() != i)) write.push_back(i);
      });
      for (const c10::IValue& ret : ops[i].returns)
        if (ret.isTensor()) producer.emplace(ret.toTensor().unsafeGetTensorImpl(), i);
    }
  }
  // The first op after `after` that reads `t`'s storage, if any.
  std::optional<size_t> next_reader(const at::Tensor& t, size_t after) const {
    auto it = readers.find(storage_in_replay(t));
    if (it == readers.end()) return std::nullopt;
    auto next = std::upper_bound(it->second.begin(), it->second.end(), after);
    if (next == it->second.end()) return std::nullopt;
    return *next;
  }
  bool read_after(const at::Tensor& t, size_t after) const {
    auto it = readers.find(storage_in_replay(t));
    return it != readers.end() && it->second.back() > after;
  }
  // Whether op `reader` is the only one that reads `t`'s storage.
  bool read_only_by(const at::Tensor& t, size_t reader) const {
    auto it = readers.find(storage_in_replay(t));
    return it != readers.end() && it->second == std::vector<size_t>{reader};
  }
  // Whether an op in (from, to] other than those in `except` writes `t`'s storage.
  bool written_between(const at::Tensor& t, size_t from, size_t to,
                       const std::vector<size_t>& except) const {
    auto it = writers.find(storage_in_replay(t));
    if (it == writers.end()) return false;
    return std::any_of(it->second.begin(), it->second.end(), [&](size_t w) {
      return w > from && w <= to && std::find(except.begin(), except.end(), w) == except.end();
    });
  }

  // The storage `t`'s values are on in a replay: its own, or a dropped op's source's.
  const void* storage_in_replay(const at::Tensor& t) const {
    auto it = source_of_.find(storage_of(t));
    return it == source_of_.end() ? storage_of(t) : it->second;
  }
  // same_values, in a replay.
  bool same_in_replay(const at::Tensor& a, const at::Tensor& b) const {
    return storage_in_replay(a) == storage_in_replay(b) &&
           a.storage_offset() == b.storage_offset() && a.sizes() == b.sizes() &&
           a.strides() == b.strides();
  }

 private:
  std::unordered_map<const void*, const void*> source_of_;
};

}  // namespace nimble
