#include "csrc/runtime/state_snapshot.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/core/LegacyTypeDispatch.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "csrc/program/undeclared_writes.h"

namespace nimble {

namespace {

bool outlives_a_replay(SlotRole role) {
  // Buffers, views and transients hold values a replay makes anew.
  return role == SlotRole::kInput || role == SlotRole::kState || role == SlotRole::kConstant;
}

const void* storage_of(const c10::IValue& value) {
  if (!value.isTensor() || !value.toTensor().defined() || !value.toTensor().has_storage())
    return nullptr;
  return value.toTensor().storage().unsafeGetStorageImpl();
}

// The storages some op writes: its declared writes, and its undeclared ones.
std::unordered_set<const void*> written_storages(const Program& program,
                                                 const ProgramState& state) {
  std::unordered_set<const void*> written;
  for (const OpNode& op : program.ops) {
    for (int slot : op.writes) written.insert(program.slots[slot].storage);
    const auto undeclared = undeclared_writes().find(op.handle.operator_name().name);
    if (undeclared == undeclared_writes().end()) continue;
    for (size_t a : undeclared->second) {
      if (a >= op.args.size()) continue;
      const Arg& arg = op.args[a];
      written.insert(arg.kind == Arg::Kind::kSlot ? storage_of(state.values[arg.slot])
                                                  : storage_of(arg.constant));
    }
  }
  written.erase(nullptr);
  return written;
}

at::Tensor generator_state(at::Generator generator) {
  const std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

}  // namespace

std::vector<at::Generator> explicit_generators(const Program& program) {
  std::vector<at::Generator> found;
  for (const OpNode& op : program.ops) {
    for (const Arg& arg : op.args) {
      if (arg.kind != Arg::Kind::kConstant || !arg.constant.isGenerator()) continue;
      const at::Generator generator = arg.constant.toGenerator();
      if (std::find(found.begin(), found.end(), generator) == found.end())
        found.push_back(generator);
    }
  }
  return found;
}

StateSnapshot::StateSnapshot(const Program& program, const ProgramState& state) {
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  const std::unordered_set<const void*> written = written_storages(program, state);
  std::unordered_set<const c10::StorageImpl*> copied;
  for (size_t s = 0; s < program.slots.size(); ++s) {
    if (!outlives_a_replay(program.slots[s].role)) continue;
    const at::Tensor& live = state.values[s].toTensor();
    if (!live.defined() || !live.has_storage() || live.storage().nbytes() == 0) continue;
    if (!written.count(live.storage().unsafeGetStorageImpl())) continue;
    // One copy per storage, of all its bytes: a write through any view is undone.
    if (!copied.insert(live.storage().unsafeGetStorageImpl()).second) continue;
    const auto bytes = static_cast<int64_t>(live.storage().nbytes());
    at::Tensor whole = at::empty({0}, live.options().dtype(at::kByte));
    whole.set_(live.storage(), 0, {bytes}, {1});
    tensors_.emplace_back(whole, whole.clone());
  }
  std::vector<c10::Device> devices = {c10::Device(c10::DeviceType::CPU)};
  const c10::Device device = program_device(program);
  if (!device.is_cpu()) devices.push_back(device);
  std::vector<at::Generator> generators;
  for (const c10::Device& d : devices)
    generators.push_back(at::globalContext().defaultGenerator(d));
  for (const at::Generator& generator : explicit_generators(program)) {
    if (std::find(generators.begin(), generators.end(), generator) == generators.end())
      generators.push_back(generator);
  }
  for (const at::Generator& generator : generators)
    generators_.emplace_back(generator, generator_state(generator));
}

void StateSnapshot::restore() {
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  for (const auto& [live, copy] : tensors_) live.copy_(copy);
  for (auto& [generator, saved] : generators_) {
    const std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(saved);
  }
}

}  // namespace nimble
