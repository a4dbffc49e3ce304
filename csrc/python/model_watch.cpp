#include "csrc/python/model_watch.h"

#include "csrc/errors.h"

namespace py = pybind11;

namespace nimble::python {

namespace {

std::string key_text(PyObject* key) { return py::str(key).cast<std::string>(); }

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

void ModelWatch::watch_dict(std::string what, std::string prefix, py::dict dict, bool hooks,
                            bool sized) {
  const Py_ssize_t size = PyDict_Size(dict.ptr());
  if (sized) {
    sized_.push_back(dict.ptr());
    sizes_.push_back(size);
    sized_dict_.push_back(dicts_.size());
  }
  const size_t first = entries_.size();
  PyObject* key = nullptr;
  PyObject* value = nullptr;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict.ptr(), &pos, &key, &value)) {
    entries_.push_back(
        {py::reinterpret_borrow<py::object>(key), py::reinterpret_borrow<py::object>(value)});
  }
  dicts_.push_back({std::move(what), std::move(prefix), std::move(dict), size, hooks, first});
}

void ModelWatch::watch_item(std::string what, py::dict dict, py::object key) {
  PyObject* value = PyDict_GetItem(dict.ptr(), key.ptr());
  if (value == nullptr) throw std::invalid_argument("watch_item: " + what + " is not there");
  const Py_ssize_t pos = position_of(dict.ptr(), key.ptr());
  items_.push_back({std::move(what), std::move(dict), std::move(key),
                    py::reinterpret_borrow<py::object>(value), pos});
}

void ModelWatch::watch_hook_ids(py::object handle_class) {
  handle_class_ = std::move(handle_class);
  next_id_name_ = py::str("next_id");
  next_hook_id_ = hook_id_now();
}

void ModelWatch::mark_changed(std::string what) {
  if (!changed_) changed_ = std::move(what);
}

long ModelWatch::hook_id_now() const {
  PyObject* id = PyObject_GetAttr(handle_class_.ptr(), next_id_name_.ptr());
  if (id == nullptr) throw py::error_already_set();
  const long now = PyLong_AsLong(id);
  Py_DECREF(id);
  return now;
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

void ModelWatch::find_new_hooks() {
  // Hooks registered since prepare have ids from next_hook_id_ on: one of those in a
  // watched dictionary is a hook the trace never saw.
  for (const Dict& d : dicts_) {
    if (!d.hooks) continue;
    PyObject* key = nullptr;
    PyObject* value = nullptr;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d.dict.ptr(), &pos, &key, &value)) {
      if (PyLong_Check(key) && PyLong_AsLong(key) >= next_hook_id_) {
        mark_changed(d.prefix + key_text(key) + " added");
        return;
      }
    }
  }
  next_hook_id_ = hook_id_now();
}

bool ModelWatch::entries_unchanged(const Dict& d) const {
  if (PyDict_GET_SIZE(d.dict.ptr()) != d.size) return false;
  PyObject* key = nullptr;
  PyObject* value = nullptr;
  Py_ssize_t pos = 0;
  const Entry* e = entries_.data() + d.first;
  while (PyDict_Next(d.dict.ptr(), &pos, &key, &value)) {
    if (key != e->key.ptr() || value != e->value.ptr()) return false;
    ++e;
  }
  return true;
}

std::string ModelWatch::describe_change(const Dict& d) const {
  const Entry* first = entries_.data() + d.first;
  const Entry* last = first + d.size;
  for (const Entry* e = first; e != last; ++e) {
    PyObject* value = PyDict_GetItem(d.dict.ptr(), e->key.ptr());
    const std::string name = d.prefix + key_text(e->key.ptr());
    if (value == nullptr) return name + " removed";
    if (value != e->value.ptr()) return name + " replaced";
  }
  for (const auto& [key, value] : d.dict) {
    bool known = false;
    for (const Entry* e = first; e != last && !known; ++e) known = e->key.ptr() == key.ptr();
    if (!known) return d.prefix + key_text(key.ptr()) + " added";
  }
  return d.what + " reordered";
}

void ModelWatch::raise_if_changed() const {
  if (changed_) throw StaleModel("the model changed since prepare: " + *changed_);
}

void ModelWatch::check() {
  raise_if_changed();
  for (size_t i = 0; i < sized_.size(); ++i) {
    if (PyDict_GET_SIZE(sized_[i]) != sizes_[i]) {
      mark_changed(describe_change(dicts_[sized_dict_[i]]));
      raise_if_changed();
    }
  }
  for (Item& item : items_) {
    if (!unchanged(item)) {
      mark_changed(item.what + " changed");
      raise_if_changed();
    }
  }
  if (handle_class_ && hook_id_now() != next_hook_id_) find_new_hooks();
  raise_if_changed();
}

void ModelWatch::check_all() {
  py::gil_scoped_acquire gil;  // a replay asks from its C++ side, without the GIL
  check();
  for (const Dict& d : dicts_) {
    if (!entries_unchanged(d)) {
      mark_changed(describe_change(d));
      break;
    }
  }
  raise_if_changed();
}

void bind_model_watch(py::module_& m) {
  py::class_<ModelWatch, std::shared_ptr<ModelWatch>>(m, "ModelWatch")
      .def(py::init<>())
      .def("watch_dict", &ModelWatch::watch_dict, py::arg("what"), py::arg("prefix"),
           py::arg("dict"), py::arg("hooks"), py::arg("sized"))
      .def("watch_item", &ModelWatch::watch_item, py::arg("what"), py::arg("dict"), py::arg("key"))
      .def("watch_hook_ids", &ModelWatch::watch_hook_ids)
      .def("mark_changed", &ModelWatch::mark_changed)
      .def_property_readonly("changed", &ModelWatch::changed)
      .def("check", &ModelWatch::check)
      .def("check_all", &ModelWatch::check_all);
}

}  // namespace nimble::python
