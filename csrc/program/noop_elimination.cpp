#include "program/noop_elimination.h"

#include <set>
#include <string>

namespace nimble {

namespace {

const void* storage_of(const at::Tensor& t) { return t.storage().unsafeGetStorageImpl(); }

// Storages each op writes in place, from the schema's alias annotations.
std::vector<std::vector<const void*>> written_storages(const std::vector<TracedOp>& ops) {
  std::vector<std::vector<const void*>> written(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const auto& arguments = ops[i].handle.schema().arguments();
    for (size_t a = 0; a < ops[i].args.size() && a < arguments.size(); ++a) {
      const auto* alias = arguments[a].alias_info();
      if (alias == nullptr || !alias->isWrite()) continue;
      const c10::IValue& value = ops[i].args[a];
      if (value.isTensor() && value.toTensor().defined()) {
        written[i].push_back(storage_of(value.toTensor()));
      } else if (value.isTensorList()) {
        for (const at::Tensor& t : value.toTensorVector()) {
          if (t.defined()) written[i].push_back(storage_of(t));
        }
      }
    }
  }
  return written;
}

bool same_layout(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.strides() == b.strides() &&
         a.scalar_type() == b.scalar_type() && a.device() == b.device() &&
         a.layout() == b.layout() && !a.is_conj() && !b.is_conj() && !a.is_neg() && !b.is_neg();
}

}  // namespace

std::vector<NoopOp> find_noop_ops(const std::vector<TracedOp>& ops,
                                  const std::function<bool(const at::Tensor&)>& keep) {
  std::vector<NoopOp> found;
  std::vector<std::vector<const void*>> written;  // computed on the first candidate
  for (size_t i = 0; i < ops.size(); ++i) {
    const TracedOp& op = ops[i];
    const std::string& name = op.handle.operator_name().name;
    if (name != "aten::clone" && name != "aten::_to_copy" && name != "aten::alias" &&
        name != "aten::detach") {
      continue;
    }
    if (op.args.empty() || !op.args[0].isTensor() || op.returns.size() != 1 ||
        !op.returns[0].isTensor()) {
      continue;
    }
    const at::Tensor& source = op.args[0].toTensor();
    const at::Tensor& result = op.returns[0].toTensor();
    if (!source.defined() || !result.defined() || !same_layout(source, result) || keep(result)) {
      continue;
    }
    // Also for aliases: an in-place metadata change (`as_strided_`) is a write, and must
    // not move from the alias to its source.
    if (written.empty()) written = written_storages(ops);
    const std::set<const void*> ends = {storage_of(source), storage_of(result)};
    bool written_later = false;
    for (size_t j = i + 1; j < ops.size() && !written_later; ++j) {
      for (const void* s : written[j]) written_later = written_later || ends.count(s) > 0;
    }
    if (written_later) continue;
    found.push_back({static_cast<int>(i), result, source});
  }
  return found;
}

}  // namespace nimble
