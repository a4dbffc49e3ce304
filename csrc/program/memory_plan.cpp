#include "program/memory_plan.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "scheduling/transitive_reduction.h"

namespace nimble {

namespace {

// A buffer and the views computed from it: everything on one capture-time storage.
struct Group {
  int producer = -1;       // first op that writes it
  std::vector<int> users;  // every op that reads or writes it
  std::vector<int> slots;  // stable slots whose tensors live on it
  int64_t bytes = 0;
  c10::Device device = c10::kCPU;
  bool plannable = true;
};

}  // namespace

MemoryPlan plan_buffer_memory(Program& program, bool share) {
  MemoryPlan plan;
  std::unordered_map<const void*, Group> groups;
  for (size_t s = 0; s < program.slots.size(); ++s) {
    const SlotInfo& info = program.slots[s];
    if (!info.storage) continue;
    Group& g = groups[info.storage];
    if (info.role == SlotRole::kBuffer || info.role == SlotRole::kView) {
      g.slots.push_back(static_cast<int>(s));
      if (info.role == SlotRole::kBuffer) {
        const at::Tensor& t = program.values[s].toTensor();
        g.bytes = std::max<int64_t>(g.bytes, t.storage().nbytes());
        g.device = t.device();
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
      Group& g = groups[program.slots[slot].storage];
      if (g.producer < 0) g.producer = static_cast<int>(i);
      g.users.push_back(static_cast<int>(i));
    }
    for (int slot : op.reads)
      groups[program.slots[slot].storage].users.push_back(static_cast<int>(i));
  }

  std::vector<Group*> order;
  for (auto& [storage, g] : groups) {
    if (g.bytes == 0 || g.slots.empty()) continue;
    ++plan.buffers;
    plan.buffer_bytes_before += g.bytes;
    if (share && g.plannable && g.producer >= 0) order.push_back(&g);
  }
  std::sort(order.begin(), order.end(),
            [](const Group* a, const Group* b) { return a->producer < b->producer; });

  scheduling::Dag dag;
  dag.num_nodes = static_cast<int>(program.ops.size());
  dag.edges = program.dependencies;
  const scheduling::Reachability reach(dag);
  auto dead_before = [&](const Group& a, int op) {
    return std::all_of(a.users.begin(), a.users.end(), [&](int u) { return reach.reaches(u, op); });
  };

  // Greedy: each group joins the first storage (same device) whose groups are all dead
  // before it is first written, preferring the closest capacity; else it opens a new one.
  struct Shared {
    int64_t bytes = 0;
    c10::Device device = c10::kCPU;
    std::vector<Group*> members;
  };
  std::vector<Shared> shared;
  for (Group* g : order) {
    Shared* best = nullptr;
    for (Shared& s : shared) {
      if (s.device != g->device) continue;
      const bool free = std::all_of(s.members.begin(), s.members.end(),
                                    [&](const Group* m) { return dead_before(*m, g->producer); });
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
    for (const Group* g : s.members) {
      plan.buffer_bytes_after -= g->bytes;
      for (int slot : g->slots) {
        program.values[slot].toTensor().unsafeGetTensorImpl()->set_storage_keep_dtype(storage);
      }
    }
    plan.buffer_bytes_after += s.bytes;
  }
  plan.storages += plan.buffers - static_cast<int>(order.size());
  return plan;
}

}  // namespace nimble
