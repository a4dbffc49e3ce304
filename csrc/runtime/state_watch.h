#pragma once
// The parameters and buffers a replay uses in place, compared on every call with what its
// program was built for. One whose storage moved with its layout unchanged (`p.data = t`,
// `p.set_(s)`) is followed: the views of it the program computed at prepare are re-pointed,
// and the replay rebuilds its executor. One whose shape, strides, offset, dtype or device
// changed, or that now shares a storage with another where the program writes one of them,
// is refused with StaleModel naming it. The comparison is the cost every call pays, so it
// reads one cache line per tensor where it can (`StateKey`).
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "csrc/program/program.h"
#include "csrc/program/program_state.h"

namespace nimble {

// A check the caller of a replay makes before every call, with what only the caller can
// see (python/model_watch.h: the Python model's structure and hooks). Throws StaleModel.
class PreReplayCheck {
 public:
  virtual ~PreReplayCheck() = default;
  // The cheap check, before every call (the caller runs it).
  virtual void check() = 0;
  // Everything, when a parameter's storage moved (the replay runs it, from any thread):
  // the conversion that moved it may have replaced other tensors.
  virtual void check_all() = 0;
};

class StateWatch {
 public:
  // Watches every state slot of `program` as `state` holds it now, with the view slots
  // computed at prepare on its storage.
  StateWatch(const Program& program, const ProgramState& state);

  // Names for messages ("fc.weight"), by tensor.
  void set_names(const std::vector<std::pair<at::Tensor, std::string>>& names);

  // Follows moved storages (re-pointing the views in `state`) or throws StaleModel, before
  // the first moved one after `pre_check->check_all()` (none: no caller check). With
  // `compare_data`, a storage whose data moved under the same storage object counts as
  // moved too (for an executor that recorded data addresses). Returns whether any moved:
  // an executor holding the old addresses must be built anew.
  bool follow(ProgramState& state, bool compare_data, PreReplayCheck* pre_check);

 private:
  // A parameter or buffer as the program reads it now.
  struct WatchedState {
    bool written = false;  // the program writes it
    std::string name;
    const c10::TensorImpl* tensor = nullptr;  // kept alive by the state's values
    c10::Storage storage;                     // held, so that no other can take its address
    const void* data = nullptr;
    c10::ScalarType dtype = c10::ScalarType::Undefined;
    int64_t offset = 0;
    std::vector<int64_t> sizes, strides;
    std::vector<int> views;  // view slots computed at prepare that read its storage
  };
  // What every call compares of one, kept apart and together: one cache line per tensor
  // here (sizes and strides as 32-bit numbers where they fit), its TensorImpl's there.
  struct alignas(64) StateKey {
    static constexpr int kDims = 4;  // more dims, or larger numbers: compared by WatchedState
    explicit StateKey(const WatchedState& w);
    bool unchanged(bool compare_data) const;
    const c10::TensorImpl* tensor = nullptr;
    const c10::StorageImpl* storage = nullptr;
    const void* data = nullptr;
    int32_t offset = 0;
    caffe2::TypeMeta dtype;
    int16_t dim = -1;  // -1: compared by WatchedState
    std::array<int32_t, 2 * kDims> sizes_strides{};
  };
  static_assert(sizeof(StateKey) == 64, "one cache line per tensor");

  void follow_moved_storage(size_t index, ProgramState& state);

  std::vector<StateKey> keys_;  // one per watched_
  std::vector<WatchedState> watched_;
};

}  // namespace nimble
