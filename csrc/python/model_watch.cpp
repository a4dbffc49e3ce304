#include "csrc/python/model_watch.h"

#include <torch/csrc/autograd/python_variable.h>

#include "csrc/errors.h"

namespace py = pybind11;

namespace nimble::python {

namespace {

const c10::TensorImpl* tensor_of(PyObject* value) {
  return THPVariable_Check(value) ? THPVariable_Unpack(value).unsafeGetTensorImpl() : nullptr;
}

std::string key_text(PyObject* key) { return py::str(key).cast<std::string>(); }

}  // namespace

void ModelWatch::watch_dict(std::string what, std::string prefix, py::dict dict, bool entries) {
  Dict d{std::move(what),         std::move(prefix), dict,
         PyDict_Size(dict.ptr()), entries,           entries_.size()};
  if (entries) {
    PyObject* key = nullptr;
    PyObject* value = nullptr;
    Py_ssize_t pos = 0;
    while (PyDict_Next(dict.ptr(), &pos, &key, &value)) {
      entries_.push_back({py::reinterpret_borrow<py::object>(key),
                          py::reinterpret_borrow<py::object>(value), tensor_of(value)});
    }
  }
  dicts_.push_back(std::move(d));
}

namespace {

// Where PyDict_Next finds `key` in `dict` (-1: not there).
Py_ssize_t position_of(PyObject* dict, PyObject* key) {
  PyObject* k = nullptr;
  PyObject* v = nullptr;
  Py_ssize_t pos = 0;
  Py_ssize_t before = 0;
  while (PyDict_Next(dict, &pos, &k, &v)) {
    if (k == key) return before;
    before = pos;
  }
  return -1;
}

}  // namespace

void ModelWatch::watch_item(std::string what, py::dict dict, py::object key) {
  PyObject* value = PyDict_GetItem(dict.ptr(), key.ptr());
  if (value == nullptr) throw std::invalid_argument("watch_item: " + what + " is not there");
  const Py_ssize_t pos = position_of(dict.ptr(), key.ptr());
  items_.push_back({std::move(what), dict, key, py::reinterpret_borrow<py::object>(value), pos});
}

bool ModelWatch::unchanged(Item& item) {
  PyObject* k = nullptr;
  PyObject* v = nullptr;
  Py_ssize_t pos = item.pos;
  if (pos >= 0 && PyDict_Next(item.dict.ptr(), &pos, &k, &v) && k == item.key.ptr())
    return v == item.value.ptr();
  // The dictionary was rebuilt (attributes added or deleted): find the item again.
  if (PyDict_GetItem(item.dict.ptr(), item.key.ptr()) != item.value.ptr()) return false;
  item.pos = position_of(item.dict.ptr(), item.key.ptr());
  return true;
}

void ModelWatch::mark_changed(std::string what) {
  if (!changed_) changed_ = std::move(what);
}

bool ModelWatch::unchanged(const Dict& d) const {
  if (PyDict_GET_SIZE(d.dict.ptr()) != d.size) return false;
  if (!d.entries) return true;
  PyObject* key = nullptr;
  PyObject* value = nullptr;
  Py_ssize_t pos = 0;
  const Entry* e = entries_.data() + d.first;
  while (PyDict_Next(d.dict.ptr(), &pos, &key, &value)) {
    if (key != e->key.ptr() || value != e->value.ptr()) return false;
    if (e->tensor != nullptr && THPVariable_Unpack(value).unsafeGetTensorImpl() != e->tensor)
      return false;
    ++e;
  }
  return true;
}

std::string ModelWatch::describe_change(const Dict& d) const {
  if (!d.entries) return d.what + " changed";
  const py::dict now = d.dict;
  const Entry* first = entries_.data() + d.first;
  const Entry* last = first + d.size;
  for (const Entry* e = first; e != last; ++e) {
    PyObject* value = PyDict_GetItem(now.ptr(), e->key.ptr());
    const std::string name = d.prefix + key_text(e->key.ptr());
    if (value == nullptr) return name + " removed";
    if (value != e->value.ptr()) return name + " replaced";
    if (e->tensor != nullptr && tensor_of(value) != e->tensor)
      return name + " swapped for another tensor (torch.utils.swap_tensors)";
  }
  for (const auto& [key, value] : now) {
    bool known = false;
    for (const Entry* e = first; e != last && !known; ++e) known = e->key.ptr() == key.ptr();
    if (!known) return d.prefix + key_text(key.ptr()) + " added";
  }
  return d.what + " reordered";
}

void ModelWatch::check() {
  if (!changed_) {
    for (const Dict& d : dicts_) {
      if (!unchanged(d)) {
        mark_changed(describe_change(d));
        break;
      }
    }
  }
  if (!changed_) {
    for (Item& item : items_) {
      if (!unchanged(item)) {
        mark_changed(item.what + " changed");
        break;
      }
    }
  }
  if (changed_) throw StaleModel("the model changed since prepare: " + *changed_);
}

void bind_model_watch(py::module_& m) {
  py::class_<ModelWatch, std::shared_ptr<ModelWatch>>(m, "ModelWatch")
      .def(py::init<>())
      .def("watch_dict", &ModelWatch::watch_dict, py::arg("what"), py::arg("prefix"),
           py::arg("dict"), py::arg("entries"))
      .def("watch_item", &ModelWatch::watch_item, py::arg("what"), py::arg("dict"), py::arg("key"))
      .def("mark_changed", &ModelWatch::mark_changed)
      .def_property_readonly("changed", &ModelWatch::changed)
      .def_property_readonly("num_entries", &ModelWatch::num_entries)
      .def("check", &ModelWatch::check);
}

}  // namespace nimble::python
