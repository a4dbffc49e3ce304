#include "csrc/runtime/input_aliasing.h"

#include <ATen/MemoryOverlap.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "csrc/errors.h"

namespace nimble {

namespace {

// The bytes a strided tensor can touch: [begin, end). Empty for tensors without elements
// or storage. Interleaved tensors (`x[:, 0]` and `x[:, 1]`) count as overlapping: telling
// them apart costs more than the rare call that passes them.
struct Extent {
  const char* begin = nullptr;
  const char* end = nullptr;
  bool overlaps(const Extent& other) const {
    return begin < end && other.begin < other.end && begin < other.end && other.begin < end;
  }
};

Extent extent_of(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage() || t.numel() == 0) return {};
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  const char* begin = static_cast<const char*>(t.const_data_ptr());
  return {begin, begin + (last + 1) * static_cast<int64_t>(t.itemsize())};
}

// Strides of dimensions of size 1 never matter.
bool same_layout(const at::Tensor& a, const at::Tensor& b) {
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (a.size(d) > 1 && a.stride(d) != b.stride(d)) return false;
  }
  return true;
}

bool same_view(const at::Tensor& a, const at::Tensor& b) {
  return a.const_data_ptr() == b.const_data_ptr() && a.sizes() == b.sizes() && same_layout(a, b);
}

[[noreturn]] void refuse(const std::string& what) {
  throw BadInput(what +
                 "; nimble prepared the model on separate tensors and cannot replay "
                 "this aliasing: pass separate tensors (e.g. .clone() one of them)");
}

}  // namespace

InputAliasing::InputAliasing(const Program& program) : uses_(program.inputs.size()) {
  // A slot written in place is one an op both reads and writes (`writes` also lists the
  // values an op produces, views included, which write nothing).
  std::set<const void*> written;
  for (size_t s = 0; s < program.slots.size(); ++s) {
    if (program.slots[s].mutated) written.insert(program.slots[s].storage);
  }
  std::map<const void*, size_t> input_of;
  for (size_t i = 0; i < program.inputs.size(); ++i) {
    input_of.emplace(program.slots[program.inputs[i]].storage, i);
  }
  // Inputs copied by an op whose copy is then written (`x.contiguous().add_(1)` on an
  // input that was not contiguous at prepare).
  std::set<const void*> copied_then_written;
  for (size_t o = 0; o < program.ops.size(); ++o) {
    const OpNode& node = program.ops[o];
    for (int slot : node.reads) {
      const auto input = input_of.find(program.slots[slot].storage);
      if (input != input_of.end()) uses_[input->second].last_use = static_cast<int>(o);
    }
    for (int slot : node.writes) {
      const auto input = input_of.find(program.slots[slot].storage);
      if (input == input_of.end() || !program.slots[slot].mutated ||
          std::find(node.reads.begin(), node.reads.end(), slot) == node.reads.end()) {
        continue;
      }
      InputUse& use = uses_[input->second];
      if (use.first_write < 0) use.first_write = static_cast<int>(o);
    }
    if (node.captured_name == "aten::clone" || node.captured_name == "aten::_to_copy") {
      for (int out : node.writes) {
        if (!written.count(program.slots[out].storage)) continue;
        for (int in : node.reads) copied_then_written.insert(program.slots[in].storage);
      }
    }
  }
  for (int out : program.outputs) {
    const auto input = input_of.find(program.slots[out].storage);
    if (input != input_of.end())
      uses_[input->second].last_use = static_cast<int>(program.ops.size());
  }
  // `mutated_inputs` comes from the same rule (a slot an op reads and writes), so every
  // one of them has its first write here.
  written_inputs_ = program.mutated_inputs;
  for (size_t i = 0; i < program.inputs.size(); ++i) {
    if (uses_[i].first_write >= 0 ||
        copied_then_written.count(program.slots[program.inputs[i]].storage)) {
      layout_bound_.push_back(static_cast<int>(i));
    }
  }
  for (size_t s = 0; s < program.slots.size(); ++s) {
    if (program.slots[s].role != SlotRole::kState) continue;
    states_.push_back(static_cast<int>(s));
    if (written.count(program.slots[s].storage)) written_states_.push_back(static_cast<int>(s));
  }
}

void InputAliasing::check(const Program& program, const ProgramState& state,
                          const std::vector<at::Tensor>& inputs) const {
  for (int i : layout_bound_) {
    const at::Tensor& prepared = state.values[program.inputs[i]].toTensor();
    if (!same_layout(inputs[i], prepared)) {
      std::ostringstream msg;
      msg << "input " << i << " has strides " << inputs[i].strides() << ", at prepare "
          << prepared.strides()
          << "; the model writes it (or a copy of it) in place, and eager's layout-dependent "
             "ops (contiguous(), reshape) may write the input on one layout and a copy on "
             "the other: pass the input with the layout it had at prepare (e.g. "
             ".contiguous()), or prepare with this one";
      throw BadInput(msg.str());
    }
  }
  for (int i : written_inputs_) {
    if (at::has_internal_overlap(inputs[i]) == at::MemOverlap::Yes) {
      refuse("input " + std::to_string(i) +
             " has elements that share memory (an expanded tensor?) and the model writes it");
    }
    const Extent mine = extent_of(inputs[i]);
    for (size_t j = 0; j < inputs.size(); ++j) {
      if (j == static_cast<size_t>(i) || !mine.overlaps(extent_of(inputs[j]))) continue;
      const InputUse& other = uses_[j];
      const int write = uses_[i].first_write;
      const bool harmless =
          other.first_write < 0 &&
          (other.last_use < write || (other.last_use == write && same_view(inputs[i], inputs[j])));
      if (!harmless) {
        refuse("inputs " + std::to_string(std::min<size_t>(i, j)) + " and " +
               std::to_string(std::max<size_t>(i, j)) +
               " share memory, and the model writes input " + std::to_string(i) +
               " before it is done with input " + std::to_string(j));
      }
    }
    for (int s : states_) {
      if (mine.overlaps(extent_of(state.values[s].toTensor()))) {
        refuse("input " + std::to_string(i) +
               " shares memory with a parameter or buffer, and the model writes the input");
      }
    }
  }
  for (int s : written_states_) {
    const Extent written = extent_of(state.values[s].toTensor());
    for (size_t j = 0; j < inputs.size(); ++j) {
      if (uses_[j].first_write < 0 && written.overlaps(extent_of(inputs[j]))) {
        refuse("input " + std::to_string(j) +
               " shares memory with a parameter or buffer, and the model writes that "
               "parameter or buffer");
      }
    }
  }
}

}  // namespace nimble
