#pragma once
// What a value derived from a parameter (a folded batch norm, a prepacked weight) was
// computed from: the source's version counter and the storage its data lives in. An
// in-place write moves the counter; `.data = ...`, `set_` or a memory-format conversion
// keep the tensor object but swap its storage, which the counter alone may not show. The
// storage is held, so that no other storage can take its address meanwhile.
#include <ATen/core/Tensor.h>

#include <vector>

namespace nimble {

class SourceVersion {
 public:
  SourceVersion() = default;  // no source (an undefined optional tensor)
  static SourceVersion of(const at::Tensor& t) {
    SourceVersion v;
    if (!t.defined()) return v;
    // Inference tensors keep no version counter; their data cannot change under a replay.
    v.version_ = t.is_inference() ? 0 : t._version();
    if (t.has_storage()) {
      v.storage_ = t.storage();
      v.data_ = v.storage_.data();
    }
    return v;
  }
  // Whether `t` is still as it was when this was taken (the check a replay makes on every
  // call, without taking a new SourceVersion).
  bool matches(const at::Tensor& t) const {
    if (!t.defined()) return version_ == -1;
    const int64_t version = t.is_inference() ? 0 : t._version();
    const c10::StorageImpl* storage =
        t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr;
    return version == version_ && storage == storage_.unsafeGetStorageImpl() &&
           (storage == nullptr || storage->data() == data_);
  }

 private:
  int64_t version_ = -1;
  c10::Storage storage_;
  const void* data_ = nullptr;  // a resize may move the data of the same storage
};

// The versions of `sources`, in order.
inline std::vector<SourceVersion> versions_of(const std::vector<at::Tensor>& sources) {
  std::vector<SourceVersion> out;
  out.reserve(sources.size());
  for (const at::Tensor& t : sources) out.push_back(SourceVersion::of(t));
  return out;
}

// Whether every one of `sources` is still as `versions` (versions_of them, earlier) recorded
// it: the check a replay makes on every call, so it allocates nothing and moves no storage's
// reference count (versions_of's copies did both, for every source of every op, every call).
inline bool unchanged(const std::vector<SourceVersion>& versions,
                      const std::vector<at::Tensor>& sources) {
  if (versions.size() != sources.size()) return false;
  for (size_t i = 0; i < sources.size(); ++i)
    if (!versions[i].matches(sources[i])) return false;
  return true;
}

}  // namespace nimble
