#include "csrc/program/memory_plan.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>

#include <algorithm>
#include <unordered_map>

#include "csrc/scheduling/transitive_reduction.h"

namespace nimble {

std::vector<BufferGroup> buffer_groups(const Program& program,
                                       const std::vector<c10::IValue>& values) {
  std::unordered_map<const void*, BufferGroup> groups;
  for (size_t s = 0; s < program.slots.size(); ++s) {
    const SlotInfo& info = program.slots[s];
    if (!info.storage) continue;
    BufferGroup& g = groups[info.storage];
    if (info.role == SlotRole::kBuffer || info.role == SlotRole::kView) {
      g.slots.push_back(static_cast<int>(s));
      // The bytes its tensors reach, not its storage's size: once planned, a storage may
      // be shared with larger buffers.
      const at::Tensor& t = values[s].toTensor();
      g.bytes = std::max<int64_t>(
          g.bytes, static_cast<int64_t>(at::detail::computeStorageNbytes(
                       t.sizes(), t.strides(), t.dtype().itemsize(), t.storage_offset())));
      if (info.role == SlotRole::kBuffer) {
        g.device = t.device();
        g.has_buffer = true;
      }
    } else if (info.role != SlotRole::kTransient) {
      g.plannable = false;  // shares memory with an input, parameter or constant
    }
  }
  // Outputs must survive the whole replay.
  for (int slot : program.outputs) groups[program.slots[slot].storage].plannable = false;
  for (size_t i = 0; i < program.ops.size(); ++i) {
    const OpNode& op = program.ops[i];
    for (int slot : op.writes) {
      BufferGroup& g = groups[program.slots[slot].storage];
      if (g.producer < 0) g.producer = static_cast<int>(i);
      g.users.push_back(static_cast<int>(i));
    }
    for (int slot : op.reads)
      groups[program.slots[slot].storage].users.push_back(static_cast<int>(i));
  }
  std::vector<BufferGroup> out;
  for (auto& [storage, g] : groups) {
    // Views of parameters, inputs and constants are no buffers.
    if (!g.has_buffer || g.bytes == 0) continue;
    std::sort(g.users.begin(), g.users.end());
    g.users.erase(std::unique(g.users.begin(), g.users.end()), g.users.end());
    out.push_back(std::move(g));
  }
  std::sort(out.begin(), out.end(), [](const BufferGroup& a, const BufferGroup& b) {
    return a.producer != b.producer ? a.producer < b.producer : a.slots.front() < b.slots.front();
  });
  return out;
}

namespace {

// Places items in `order`, each at the lowest offset free during its lifetime.
OffsetPlan place_in_order(const std::vector<Lifetime>& items, const std::vector<int>& order,
                          int64_t alignment) {
  const auto align = [&](int64_t bytes) { return (bytes + alignment - 1) / alignment * alignment; };
  OffsetPlan plan;
  plan.offsets.assign(items.size(), 0);
  std::vector<int> placed;
  std::vector<std::pair<int64_t, int64_t>> taken;  // [begin, end) of placed, overlapping items
  for (int i : order) {
    const Lifetime& item = items[i];
    taken.clear();
    for (int j : placed) {
      if (items[j].first <= item.last && item.first <= items[j].last) {
        taken.emplace_back(plan.offsets[j], plan.offsets[j] + align(items[j].bytes));
      }
    }
    std::sort(taken.begin(), taken.end());
    int64_t offset = 0;
    for (const auto& [begin, end] : taken) {
      if (begin - offset >= align(item.bytes)) break;
      offset = std::max(offset, end);
    }
    plan.offsets[i] = offset;
    plan.total_bytes = std::max(plan.total_bytes, offset + align(item.bytes));
    placed.push_back(i);
  }
  return plan;
}

}  // namespace

OffsetPlan plan_offsets(const std::vector<Lifetime>& items, int64_t alignment) {
  // Two orders, the smaller block wins: largest first (big items fix the layout), and
  // first allocated first (what a replay's own allocation order gives).
  std::vector<int> by_size(items.size());
  for (size_t i = 0; i < by_size.size(); ++i) by_size[i] = static_cast<int>(i);
  std::vector<int> by_start = by_size;
  std::stable_sort(by_size.begin(), by_size.end(), [&](int a, int b) {
    return items[a].bytes != items[b].bytes ? items[a].bytes > items[b].bytes
                                            : items[a].first < items[b].first;
  });
  std::stable_sort(by_start.begin(), by_start.end(),
                   [&](int a, int b) { return items[a].first < items[b].first; });
  OffsetPlan best = place_in_order(items, by_size, alignment);
  OffsetPlan other = place_in_order(items, by_start, alignment);
  return other.total_bytes < best.total_bytes ? other : best;
}

MemoryPlan plan_buffer_memory(const Program& program, std::vector<c10::IValue>& values,
                              bool share) {
  MemoryPlan plan;
  std::vector<BufferGroup> groups = buffer_groups(program, values);
  std::vector<BufferGroup*> order;
  for (BufferGroup& g : groups) {
    ++plan.buffers;
    plan.buffer_bytes_before += g.bytes;
    if (share && g.plannable && g.producer >= 0) order.push_back(&g);
  }

  scheduling::Dag dag;
  dag.num_nodes = static_cast<int>(program.ops.size());
  dag.edges = program.dependencies;
  const scheduling::Reachability reach(dag);
  auto dead_before = [&](const BufferGroup& a, int op) {
    return std::all_of(a.users.begin(), a.users.end(), [&](int u) { return reach.reaches(u, op); });
  };

  // Greedy: each group joins the first storage (same device) whose groups are all dead
  // before it is first written, preferring the closest capacity; else it opens a new one.
  struct Shared {
    int64_t bytes = 0;
    c10::Device device = c10::kCPU;
    std::vector<BufferGroup*> members;
  };
  std::vector<Shared> shared;
  for (BufferGroup* g : order) {
    Shared* best = nullptr;
    for (Shared& s : shared) {
      if (s.device != g->device) continue;
      const bool free = std::all_of(s.members.begin(), s.members.end(), [&](const BufferGroup* m) {
        return dead_before(*m, g->producer);
      });
      if (!free) continue;
      const auto waste = [&](const Shared& x) { return std::abs(x.bytes - g->bytes); };
      if (!best || waste(s) < waste(*best)) best = &s;
    }
    if (!best) {
      shared.push_back(Shared{0, g->device, {}});
      best = &shared.back();
    }
    best->bytes = std::max(best->bytes, g->bytes);
    best->members.push_back(g);
  }

  plan.storages = static_cast<int>(shared.size());
  plan.buffer_bytes_after = plan.buffer_bytes_before;
  for (const Shared& s : shared) {
    if (s.members.size() < 2) continue;
    const c10::Storage storage =
        at::empty({s.bytes}, at::TensorOptions().dtype(at::kByte).device(s.device)).storage();
    for (const BufferGroup* g : s.members) {
      plan.buffer_bytes_after -= g->bytes;
      for (int slot : g->slots) {
        values[slot].toTensor().unsafeGetTensorImpl()->set_storage_keep_dtype(storage);
      }
    }
    plan.buffer_bytes_after += s.bytes;
  }
  plan.storages += plan.buffers - static_cast<int>(order.size());
  return plan;
}

}  // namespace nimble
