#include "csrc/passes/noop_elimination.h"

#include <string>
#include <unordered_map>

namespace nimble {

namespace {

const void* storage_of(const at::Tensor& t) { return t.storage().unsafeGetStorageImpl(); }

// The index of the last op that writes each storage in place (schema alias annotations).
std::unordered_map<const void*, size_t> last_writes(const std::vector<RecordedOp>& ops) {
  std::unordered_map<const void*, size_t> last;
  for (size_t i = 0; i < ops.size(); ++i) {
    const auto& arguments = ops[i].handle.schema().arguments();
    for (size_t a = 0; a < ops[i].args.size() && a < arguments.size(); ++a) {
      const auto* alias = arguments[a].alias_info();
      if (alias == nullptr || !alias->isWrite()) continue;
      const c10::IValue& value = ops[i].args[a];
      if (value.isTensor() && value.toTensor().defined()) {
        last[storage_of(value.toTensor())] = i;
      } else if (value.isTensorList()) {
        for (const at::Tensor& t : value.toTensorVector()) {
          if (t.defined()) last[storage_of(t)] = i;
        }
      }
    }
  }
  return last;
}

bool same_layout(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.strides() == b.strides() &&
         a.scalar_type() == b.scalar_type() && a.device() == b.device() &&
         a.layout() == b.layout() && !a.is_conj() && !b.is_conj() && !a.is_neg() && !b.is_neg();
}

}  // namespace

std::vector<NoopOp> find_noop_ops(const std::vector<RecordedOp>& ops,
                                  const std::function<bool(const at::Tensor&)>& keep) {
  std::vector<NoopOp> found;
  const std::unordered_map<const void*, size_t> last_write = last_writes(ops);
  for (size_t i = 0; i < ops.size(); ++i) {
    const RecordedOp& op = ops[i];
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
    const auto written_after = [&](const at::Tensor& t) {
      const auto it = last_write.find(storage_of(t));
      return it != last_write.end() && it->second > i;
    };
    if (written_after(source) || written_after(result)) continue;
    found.push_back({static_cast<int>(i), result, source});
  }
  return found;
}

}  // namespace nimble
