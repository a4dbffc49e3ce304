#pragma once
// What the Python model looks like to a replay, checked before every call in C++ with the
// GIL held and no Python code run, so that a change the program cannot follow is never
// replayed silently, at a cost of a few loads per module (docs/model-changes.md):
//  - assignments (a parameter, buffer or submodule set, added or replaced; load_state_dict
//    with assign=True; parametrizations and pruning) are reported by torch's global
//    registration hooks, which nimble/replay/model_watch.py forwards to `mark_changed`;
//  - a hook added anywhere takes the next RemovableHandle id: when that moved, the module
//    tree's hook dictionaries are searched for ids newer than prepare's;
//  - a deletion, a hook removed, an attribute assigned on a module (`m.forward = f`) changes
//    a dictionary's size;
//  - train/eval: the `training` flag of the root and of every module whose class reads it.
// When a parameter's storage moved (a conversion such as `m.double().float()` also replaces
// buffers behind the registration hooks' back), the replay asks for `check_all`: every
// entry of every dictionary compared by identity.
#include <ATen/core/Tensor.h>
#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <vector>

#include "csrc/runtime/replay.h"

namespace nimble::python {

// Hidden, as pybind11's own types are: it holds Python objects.
class __attribute__((visibility("hidden"))) ModelWatch final : public PreReplayCheck {
 public:
  // `what` names the dictionary in messages ("parameters of layer1.0"); `prefix` is put before
  // its keys ("layer1.0."); `hooks`: its keys are hook handle ids; `sized`: its size is
  // compared on every call (otherwise only by `check_all`).
  void watch_dict(std::string what, std::string prefix, pybind11::dict dict, bool hooks,
                  bool sized);
  // One item compared by identity on every call (a module's `training` flag), read at the
  // position it had in the dictionary, so that the check costs no hash lookup.
  void watch_item(std::string what, pybind11::dict dict, pybind11::object key);
  // torch.utils.hooks.RemovableHandle: every hook registered anywhere takes its next_id.
  void watch_hook_ids(pybind11::object handle_class);
  // Reported by the caller (nimble/replay/model_watch.py); the first change is the one named.
  void mark_changed(std::string what);
  const std::optional<std::string>& changed() const { return changed_; }

  // Both throw StaleModel (errors.h) naming the first change found.
  void check() override;
  void check_all() override;

 private:
  struct Entry {
    pybind11::object key, value;  // held, so that no other object takes their address
  };
  struct Dict {
    std::string what, prefix;
    pybind11::dict dict;
    Py_ssize_t size = 0;
    bool hooks = false;
    size_t first = 0;  // its entries in entries_
  };
  struct Item {
    std::string what;
    pybind11::dict dict;
    pybind11::object key, value;
    Py_ssize_t pos = 0;  // where PyDict_Next finds it
  };
  bool entries_unchanged(const Dict& d) const;
  std::string describe_change(const Dict& d) const;
  static bool unchanged(Item& item);
  long hook_id_now() const;
  void find_new_hooks();
  void raise_if_changed() const;

  std::vector<Dict> dicts_;
  std::vector<PyObject*> sized_;    // dictionaries compared by size on every call
  std::vector<Py_ssize_t> sizes_;   // their sizes at prepare
  std::vector<size_t> sized_dict_;  // their index in dicts_
  std::vector<Entry> entries_;
  std::vector<Item> items_;
  pybind11::object handle_class_;
  pybind11::object next_id_name_;
  long next_hook_id_ = 0;  // RemovableHandle.next_id when last seen
  std::optional<std::string> changed_;
};

void bind_model_watch(pybind11::module_& m);

}  // namespace nimble::python
