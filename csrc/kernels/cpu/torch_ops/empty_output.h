#pragma once
// The result tensors of nimble's CPU kernels, made by the function that at::empty's CPU kernel
// calls, without the dispatcher: at::empty passed BackendSelect and the CPU kernel's wrappers
// (two key-set computations and table look-ups) on every op of a replay. The tensor is the
// same: its memory comes from the process's CPU allocator (in a replay, its private pool:
// runtime/cpu/replay_arena.h), its dispatch keys from the TensorImpl as at::empty's (inference
// mode included). What at::empty's kernel adds, a NaN fill of the memory under
// torch.use_deterministic_algorithms, is not needed: every kernel writes its whole result.
// Tensors of another device go through at::empty.
#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty.h>

namespace nimble::kernels {

inline at::Tensor empty_output(at::IntArrayRef sizes, const at::Tensor& like,
                               at::MemoryFormat format = at::MemoryFormat::Contiguous) {
  if (!like.device().is_cpu()) return at::empty(sizes, like.options().memory_format(format));
  return at::Tensor(at::detail::empty_cpu(sizes, like.scalar_type(), /*pin_memory=*/false, format));
}

inline at::Tensor empty_channels_last(at::IntArrayRef sizes, const at::Tensor& like) {
  return empty_output(sizes, like, at::MemoryFormat::ChannelsLast);
}

}  // namespace nimble::kernels
