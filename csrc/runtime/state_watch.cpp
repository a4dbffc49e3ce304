#include "csrc/runtime/state_watch.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "csrc/errors.h"
#include "csrc/runtime/tensor_description.h"

namespace nimble {

StateWatch::StateWatch(const Program& program, const ProgramState& state) {
  std::unordered_map<const c10::StorageImpl*, size_t> by_storage;
  for (size_t s = 0; s < program.slots.size(); ++s) {
    if (program.slots[s].role != SlotRole::kState) continue;
    const at::Tensor& t = state.values[s].toTensor();
    WatchedState w;
    w.written = program.slots[s].mutated;
    w.name = "a parameter or buffer (" + describe(t) + ")";
    w.tensor = t.unsafeGetTensorImpl();
    w.storage = t.unsafeGetTensorImpl()->unsafe_storage();
    w.data = w.storage.data();
    w.dtype = t.scalar_type();
    w.offset = t.storage_offset();
    w.sizes = t.sizes().vec();
    w.strides = t.strides().vec();
    by_storage.emplace(w.storage.unsafeGetStorageImpl(), watched_.size());
    keys_.emplace_back(w);
    watched_.push_back(std::move(w));
  }
  for (size_t s = 0; s < program.slots.size(); ++s) {
    if (program.slots[s].role != SlotRole::kView) continue;
    const at::Tensor& view = state.values[s].toTensor();
    if (!view.has_storage()) continue;
    const auto base = by_storage.find(view.storage().unsafeGetStorageImpl());
    if (base != by_storage.end()) watched_[base->second].views.push_back(static_cast<int>(s));
  }
}

void StateWatch::set_names(const std::vector<std::pair<at::Tensor, std::string>>& names) {
  std::unordered_map<const c10::TensorImpl*, const std::string*> by_tensor;
  for (const auto& [tensor, name] : names) by_tensor.emplace(tensor.unsafeGetTensorImpl(), &name);
  for (WatchedState& w : watched_) {
    const auto found = by_tensor.find(w.tensor);
    if (found != by_tensor.end()) w.name = *found->second;
  }
}

StateWatch::StateKey::StateKey(const WatchedState& w)
    : tensor(w.tensor),
      storage(w.storage.unsafeGetStorageImpl()),
      data(w.data),
      dtype(c10::scalarTypeToTypeMeta(w.dtype)) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  const auto fits = [&](int64_t v) { return v >= 0 && v <= kMax; };
  if (w.sizes.size() > static_cast<size_t>(kDims) || !fits(w.offset) ||
      !std::all_of(w.sizes.begin(), w.sizes.end(), fits) ||
      !std::all_of(w.strides.begin(), w.strides.end(), fits)) {
    return;
  }
  offset = static_cast<int32_t>(w.offset);
  dim = static_cast<int16_t>(w.sizes.size());
  std::copy(w.sizes.begin(), w.sizes.end(), sizes_strides.begin());
  std::copy(w.strides.begin(), w.strides.end(), sizes_strides.begin() + kDims);
}

bool StateWatch::StateKey::unchanged(bool compare_data) const {
  const c10::TensorImpl& t = *tensor;
  const c10::StorageImpl* now = t.unsafe_storage().unsafeGetStorageImpl();
  if (dim < 0 || now != storage || t.storage_offset() != offset || t.dtype() != dtype) {
    return false;
  }
  if (compare_data && now != nullptr && now->data() != data) return false;
  const c10::IntArrayRef sizes = t.sizes();
  if (static_cast<int>(sizes.size()) != dim) return false;
  const c10::IntArrayRef strides = t.strides();
  for (int d = 0; d < dim; ++d) {
    if (sizes[d] != sizes_strides[d] || strides[d] != sizes_strides[kDims + d]) return false;
  }
  return true;
}

bool StateWatch::follow(ProgramState& state, bool compare_data, PreReplayCheck* pre_check) {
  bool moved = false;
  // The loads chase pointers into TensorImpls all over the heap: fetch a few ahead.
  constexpr size_t kAhead = 4;
  const size_t n = keys_.size();
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) {
      const char* ahead = reinterpret_cast<const char*>(keys_[i + kAhead].tensor);
      __builtin_prefetch(ahead);
      __builtin_prefetch(ahead + 64);
      __builtin_prefetch(ahead + 128);
    }
    if (keys_[i].unchanged(compare_data)) continue;
    const WatchedState& w = watched_[i];
    const c10::TensorImpl& t = *w.tensor;
    const c10::StorageImpl* storage = t.unsafe_storage().unsafeGetStorageImpl();
    const bool same_storage = storage == w.storage.unsafeGetStorageImpl() &&
                              (storage == nullptr || storage->data() == w.data);
    if (same_storage && t.storage_offset() == w.offset && t.sizes().equals(w.sizes) &&
        t.strides().equals(w.strides) && t.dtype() == w.dtype) {
      continue;
    }
    if (t.dtype() != w.dtype || !t.sizes().equals(w.sizes) || !t.strides().equals(w.strides) ||
        t.storage_offset() != w.offset || t.device() != w.storage.device()) {
      throw StaleModel(w.name + " changed since prepare: it was " +
                       describe_layout(w.dtype, w.storage.device(), w.sizes, w.strides, w.offset) +
                       ", it is " +
                       describe_layout(c10::typeMetaToScalarType(t.dtype()), t.device(), t.sizes(),
                                       t.strides(), t.storage_offset()) +
                       " now; the program reads it with the old layout");
    }
    // The conversion that moved it may have replaced buffers too: the caller looks first.
    if (!moved && pre_check) pre_check->check_all();
    follow_moved_storage(i, state);
    moved = true;
  }
  return moved;
}

void StateWatch::follow_moved_storage(size_t index, ProgramState& state) {
  WatchedState& w = watched_[index];
  const c10::Storage& now = w.tensor->unsafe_storage();
  // Two parameters that share a storage now but did not at prepare: the dependencies
  // between the ops that write one and read the other were never made.
  for (const WatchedState& other : watched_) {
    if (&other == &w || other.storage.unsafeGetStorageImpl() != now.unsafeGetStorageImpl())
      continue;
    if (w.written || other.written) {
      throw StaleModel(w.name + " shares its storage with " + other.name +
                       " since prepare, and the program writes one of them");
    }
  }
  for (int view : w.views) {
    state.values[view].toTensor().unsafeGetTensorImpl()->set_storage_keep_dtype(now);
  }
  w.storage = now;
  w.data = now.data();
  keys_[index] = StateKey(w);
}

}  // namespace nimble
