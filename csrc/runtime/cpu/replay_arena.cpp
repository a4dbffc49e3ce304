#include "csrc/runtime/cpu/replay_arena.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "csrc/program/memory_plan.h"
#include "csrc/runtime/cpu/spin_lock.h"

namespace nimble {

class ArenaPool {
 public:
  struct Request {
    int op = 0;
    int rank = 0;  // among the op's allocations
    int64_t bytes = 0;
    int64_t first = 0;  // clock ticks
    int64_t last = -1;  // -1: not freed during the replay
  };
  struct Planned {
    int64_t bytes = 0;
    int64_t offset = -1;  // -1: not served from the block
  };

  c10::DataPtr allocate(size_t bytes);
  // Frees `ptr` if it came from this pool; false if it did not.
  bool free(void* ptr);
  bool idle() const { return live.empty() && recorded.empty(); }
  // Whether `ptr` points into the block.
  bool in_block(const void* ptr) const {
    return block && ptr >= block.get() && ptr < base() + block_bytes;
  }

  // The replay thread takes it at each allocation and free; other threads seldom
  // (runtime/cpu/spin_lock.h).
  mutable SpinLock spin;
  bool serving = false;   // planned; otherwise recording
  bool orphaned = false;  // its ReplayArena is gone, memory it handed out is not
  // Written by the replay thread only, between its own allocations.
  int op = -1;  // op in flight, -1 between ops
  int rank = 0;

  // Recording.
  int64_t clock = 0;
  std::vector<Request> requests;
  std::vector<int64_t> op_first, op_last;  // clock ticks per op, -1: not run
  // Allocations made while recording and not freed yet: their request, or -1 once the
  // recording is over.
  std::unordered_map<void*, int> recorded;

  // Serving.
  c10::DataPtr block;
  int64_t block_bytes = 0;
  std::vector<std::vector<Planned>> planned;  // per op, by rank
  // Memory handed out and not yet freed: (offset, end). A few entries at a time, with
  // capacity for every planned request reserved up front: no allocation while serving.
  std::vector<std::pair<int64_t, int64_t>> live;
  int recorded_requests = 0;
  int planned_requests = 0;
  int served = 0;
  int fallbacks = 0;

 private:
  char* base() const { return static_cast<char*>(block.get()); }
  bool overlaps_live(int64_t offset, int64_t bytes) const;
};

namespace {

// The process-wide part: torch has one CPU allocator. Pools register here so that a bare
// pointer (oneDNN frees its scratch memory through `raw_deleter()`) finds its pool.
struct Registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<ArenaPool>> pools;
  c10::Allocator* fallback = nullptr;  // the CPU allocator before the router
};

Registry& registry() {
  static Registry instance;
  return instance;
}

// The pool the calling thread's replay allocates from, if any.
thread_local ArenaPool* active_pool = nullptr;

void free_routed(void* ptr) {
  // Most frees inside a replay are of its own pool's memory, on its own thread: that pool
  // is live (its arena runs the replay, so it cannot be orphaned), and the registry is
  // not needed.
  if (ArenaPool* pool = active_pool; pool != nullptr) {
    std::lock_guard<SpinLock> lock(pool->spin);
    if (pool->free(ptr)) return;
  }
  Registry& r = registry();
  std::shared_ptr<ArenaPool> finished;  // destroyed after the locks are released
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    for (auto it = r.pools.begin(); it != r.pools.end(); ++it) {
      std::unique_lock<SpinLock> pool_lock((*it)->spin);
      if (!(*it)->free(ptr)) continue;
      if ((*it)->orphaned && (*it)->idle()) {
        pool_lock.unlock();
        finished = std::move(*it);
        r.pools.erase(it);
      }
      return;
    }
  }
  r.fallback->raw_deleter()(ptr);
}

class Router final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) override {
    if (ArenaPool* pool = active_pool; pool != nullptr && bytes > 0) {
      c10::DataPtr served = pool->allocate(bytes);
      if (served) return served;
    }
    return registry().fallback->allocate(bytes);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_routed; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

// Installs the router once. Should another allocator outrank it, pools record nothing
// and only the buffers are planned.
void install_router() {
  static Router router;
  static std::once_flag once;
  std::call_once(once, [] {
    registry().fallback = c10::GetCPUAllocator();
    c10::SetCPUAllocator(&router, /*priority=*/1);
  });
}

c10::DataPtr pool_data_ptr(void* ptr) {
  // The context is the pointer itself, as `Allocator::raw_allocate` requires.
  return c10::DataPtr(ptr, ptr, &free_routed, c10::Device(c10::kCPU));
}

}  // namespace

bool ArenaPool::overlaps_live(int64_t offset, int64_t bytes) const {
  return std::any_of(live.begin(), live.end(), [&](const std::pair<int64_t, int64_t>& held) {
    return held.first < offset + bytes && held.second > offset;
  });
}

c10::DataPtr ArenaPool::allocate(size_t bytes) {
  std::lock_guard<SpinLock> lock(spin);
  if (op < 0) return {};
  const int k = rank++;
  const auto n = static_cast<int64_t>(bytes);
  if (!serving) {
    void* ptr = registry().fallback->raw_allocate(bytes);
    requests.push_back({op, k, n, clock++, -1});
    recorded[ptr] = static_cast<int>(requests.size()) - 1;
    return pool_data_ptr(ptr);
  }
  if (op < static_cast<int>(planned.size()) && k < static_cast<int>(planned[op].size())) {
    const Planned& slot = planned[op][k];
    if (slot.bytes == n && slot.offset < 0) return {};  // as recorded: never planned
    if (slot.bytes == n && !overlaps_live(slot.offset, n)) {
      live.emplace_back(slot.offset, slot.offset + n);
      ++served;
      return pool_data_ptr(base() + slot.offset);
    }
  }
  ++fallbacks;  // unlike the recording, or its bytes still held
  return {};
}

bool ArenaPool::free(void* ptr) {
  if (in_block(ptr)) {
    const int64_t offset = static_cast<char*>(ptr) - base();
    const auto held = std::find_if(live.begin(), live.end(),
                                   [&](const auto& entry) { return entry.first == offset; });
    if (held != live.end()) {
      *held = live.back();
      live.pop_back();
    }
    return true;
  }
  const auto it = recorded.find(ptr);
  if (it == recorded.end()) return false;
  if (it->second >= 0) requests[it->second].last = clock++;
  recorded.erase(it);
  registry().fallback->raw_deallocate(ptr);
  return true;
}

ReplayArena::ReplayArena(const Program& program, ProgramState& state)
    : program_(program), state_(state), pool_(std::make_shared<ArenaPool>()) {
  install_router();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.pools.push_back(pool_);
}

ReplayArena::~ReplayArena() {
  restore_buffers();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::unique_lock<SpinLock> pool_lock(pool_->spin);
  if (!pool_->idle()) {
    pool_->orphaned = true;  // the last free unregisters it
    return;
  }
  pool_lock.unlock();
  r.pools.erase(std::find(r.pools.begin(), r.pools.end(), pool_));
}

ReplayArena::Scope::Scope(ReplayArena& arena) : previous_(active_pool) {
  ArenaPool& pool = *arena.pool_;
  {
    std::lock_guard<SpinLock> lock(pool.spin);
    pool.served = pool.fallbacks = 0;
    pool.op = -1;
  }
  active_pool = &pool;
}

ReplayArena::Scope::~Scope() { active_pool = previous_; }

bool ReplayArena::recording() const { return !pool_->serving; }

void ReplayArena::op_begins(int op) {
  ArenaPool& pool = *pool_;
  if (!pool.serving) {
    std::lock_guard<SpinLock> lock(pool.spin);
    if (op >= static_cast<int>(pool.op_first.size())) {
      pool.op_first.resize(op + 1, -1);
      pool.op_last.resize(op + 1, -1);
    }
    pool.op_first[op] = pool.clock++;
  }
  pool.op = op;
  pool.rank = 0;
}

void ReplayArena::op_ends() {
  ArenaPool& pool = *pool_;
  if (!pool.serving) {
    std::lock_guard<SpinLock> lock(pool.spin);
    pool.op_last[pool.op] = pool.clock++;
  }
  pool.op = -1;
}

void ReplayArena::discard_recording() {
  ArenaPool& pool = *pool_;
  std::lock_guard<SpinLock> lock(pool.spin);
  pool.requests.clear();
  for (auto& [ptr, request] : pool.recorded) request = -1;
  std::fill(pool.op_first.begin(), pool.op_first.end(), -1);
  std::fill(pool.op_last.begin(), pool.op_last.end(), -1);
}

void ReplayArena::plan() {
  ArenaPool& pool = *pool_;
  struct MovedGroup {
    std::vector<int> slots;
    int64_t bytes = 0;
    size_t item = 0;
  };
  std::vector<MovedGroup> groups;
  {
    std::lock_guard<SpinLock> lock(pool.spin);
    std::vector<Lifetime> items;
    std::vector<int> item_request;
    for (size_t i = 0; i < pool.requests.size(); ++i) {
      const ArenaPool::Request& request = pool.requests[i];
      if (request.last < 0) continue;  // still held: an output, a cache
      items.push_back({request.bytes, request.first, request.last});
      item_request.push_back(static_cast<int>(i));
    }
    for (BufferGroup& g : buffer_groups(program_, state_.values)) {
      if (!g.plannable || g.device != c10::kCPU || g.producer < 0) continue;
      int64_t first = INT64_MAX;
      int64_t last = -1;
      for (int op : g.users) {
        if (op >= static_cast<int>(pool.op_first.size()) || pool.op_first[op] < 0) {
          last = -1;  // not run in the recording
          break;
        }
        first = std::min(first, pool.op_first[op]);
        last = std::max(last, pool.op_last[op]);
      }
      if (last < 0 || first == INT64_MAX) continue;
      groups.push_back({std::move(g.slots), g.bytes, items.size()});
      items.push_back({g.bytes, first, last});
    }
    const OffsetPlan offsets = plan_offsets(items);
    pool.recorded_requests = static_cast<int>(pool.requests.size());
    pool.planned_requests = static_cast<int>(item_request.size());
    pool.live.reserve(item_request.size());
    if (offsets.total_bytes > 0) {
      pool.block = registry().fallback->allocate(offsets.total_bytes);
      pool.block_bytes = offsets.total_bytes;
    }
    pool.planned.assign(pool.op_first.size(), {});
    for (const ArenaPool::Request& request : pool.requests) {
      auto& op = pool.planned[request.op];
      if (static_cast<int>(op.size()) <= request.rank) op.resize(request.rank + 1);
      op[request.rank].bytes = request.bytes;
    }
    for (size_t i = 0; i < item_request.size(); ++i) {
      const ArenaPool::Request& request = pool.requests[item_request[i]];
      pool.planned[request.op][request.rank].offset = offsets.offsets[i];
    }
    for (MovedGroup& g : groups) g.item = static_cast<size_t>(offsets.offsets[g.item]);
    for (auto& [ptr, request] : pool.recorded) request = -1;
    pool.requests.clear();
    pool.serving = true;
  }
  // The buffers' new storages: windows on the block, each keeping the pool alive.
  for (const MovedGroup& g : groups) {
    auto keep = std::make_unique<std::shared_ptr<ArenaPool>>(pool_);
    c10::DataPtr window(
        static_cast<char*>(pool.block.get()) + g.item, keep.release(),
        [](void* ctx) {
          std::unique_ptr<std::shared_ptr<ArenaPool>>(
              static_cast<std::shared_ptr<ArenaPool>*>(ctx));
        },
        c10::Device(c10::kCPU));
    const c10::Storage storage(c10::Storage::use_byte_size_t(), g.bytes, std::move(window),
                               /*allocator=*/nullptr, /*resizable=*/false);
    for (int slot : g.slots) {
      state_.values[slot].toTensor().unsafeGetTensorImpl()->set_storage_keep_dtype(storage);
      moved_slots_.push_back(slot);
    }
  }
}

void ReplayArena::restore_buffers() {
  if (moved_slots_.empty()) return;
  // One storage of its own per group of slots that shared a window, then the build's
  // sharing (valid for any schedule) again.
  std::unordered_map<const c10::StorageImpl*, c10::Storage> fresh;
  for (int slot : moved_slots_) {
    c10::TensorImpl* impl = state_.values[slot].toTensor().unsafeGetTensorImpl();
    const c10::Storage& old = impl->storage();
    auto it = fresh.find(old.unsafeGetStorageImpl());
    if (it == fresh.end()) {
      const int64_t bytes = static_cast<int64_t>(old.nbytes());
      it = fresh
               .emplace(old.unsafeGetStorageImpl(),
                        at::empty({bytes}, at::TensorOptions().dtype(at::kByte)).storage())
               .first;
    }
    impl->set_storage_keep_dtype(it->second);
  }
  moved_slots_.clear();
  plan_buffer_memory(program_, state_.values, true);
}

bool ReplayArena::owns(const void* ptr) const {
  std::lock_guard<SpinLock> lock(pool_->spin);
  return pool_->in_block(ptr);
}

ReplayArena::Stats ReplayArena::stats() const {
  const ArenaPool& pool = *pool_;
  std::lock_guard<SpinLock> lock(pool.spin);
  Stats s;
  s.planned = pool.serving;
  s.block_bytes = pool.block_bytes;
  s.requests = pool.recorded_requests;
  s.planned_requests = pool.planned_requests;
  s.served_last = pool.served;
  s.fallbacks_last = pool.fallbacks;
  std::unordered_map<const c10::StorageImpl*, int> seen;
  for (int slot : moved_slots_) {
    seen.emplace(state_.values[slot].toTensor().storage().unsafeGetStorageImpl(), 0);
  }
  s.buffers_moved = static_cast<int>(seen.size());
  return s;
}

}  // namespace nimble
