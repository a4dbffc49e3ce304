#pragma once
// What the Python model looks like to a replay: the dictionaries of its module tree
// (parameters, buffers, submodules, hooks, attributes) and the global hook dictionaries,
// fingerprinted at prepare and compared before every call, in C++ with the GIL held and no
// Python code run, so that a change the program cannot follow is never replayed silently.
// An entry dictionary is compared entry by entry (key and value objects, and for tensors
// the TensorImpl under the Python object, which `torch.utils.swap_tensors` replaces): a
// parameter, buffer or submodule assigned, added or deleted, a hook added or removed. An
// attribute dictionary is compared by size: a method assigned on the instance
// (`m.forward = f`) or a parametrization's attributes appear there.
#include <ATen/core/Tensor.h>
#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <vector>

#include "csrc/runtime/replay.h"

namespace nimble::python {

class ModelWatch final : public PreReplayCheck {
 public:
  // `what` names the dictionary in messages ("parameters of layer1.0"); `prefix` is put before
  // its keys ("layer1.0."); `entries`: compare every entry, else only the size.
  void watch_dict(std::string what, std::string prefix, pybind11::dict dict, bool entries);
  // One item compared by identity (a module's `training` flag: `m.layer1.eval()`), read at
  // the position it had in the dictionary, so that the check costs no hash lookup.
  void watch_item(std::string what, pybind11::dict dict, pybind11::object key);
  // Reported by the caller (nimble/model_watch.py); the first change is the one named.
  void mark_changed(std::string what);
  const std::optional<std::string>& changed() const { return changed_; }
  size_t num_entries() const { return entries_.size(); }

  // Throws StaleModel (errors.h) naming the first change found.
  void check() override;

 private:
  struct Entry {
    pybind11::object key, value;              // held, so that no other object takes their address
    const c10::TensorImpl* tensor = nullptr;  // the value's, where it is a tensor
  };
  struct Dict {
    std::string what, prefix;
    pybind11::dict dict;
    Py_ssize_t size = 0;
    bool entries = false;
    size_t first = 0;  // its entries in entries_
  };
  struct Item {
    std::string what;
    pybind11::dict dict;
    pybind11::object key, value;
    Py_ssize_t pos = 0;  // where PyDict_Next finds it
  };
  bool unchanged(const Dict& d) const;
  static bool unchanged(Item& item);
  std::string describe_change(const Dict& d) const;

  std::vector<Dict> dicts_;
  std::vector<Entry> entries_;
  std::vector<Item> items_;
  std::optional<std::string> changed_;
};

void bind_model_watch(pybind11::module_& m);

}  // namespace nimble::python
