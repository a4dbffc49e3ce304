#pragma once
// The result tensors of nimble's CPU kernels, made by the function that at::empty's CPU kernel
// calls, without the dispatcher: at::empty passed BackendSelect and the CPU kernel's wrappers
// (two key-set computations and table look-ups) on every op of a replay. The tensor is the
// same: its memory comes from the process's CPU allocator (in a replay, its private pool:
// runtime/cpu/replay_arena.h), its dispatch keys from the TensorImpl as at::empty's (inference
// mode included). What at::empty's kernel adds, a NaN fill of the memory under
// torch.use_deterministic_algorithms, is not needed: every kernel writes its whole result.
// Tensors of another device go through at::empty.
//
// One kernel's result is not made here: PrepackedConvolution's oneDNN path (kOneDnn), whose
// result mkldnn::_convolution_pointwise (torch 2.11) makes itself, by at::empty through the
// dispatcher, from the same allocator (so from the replay's pool alike). No entry to oneDNN
// that torch exports takes a destination for it: the op and its .binary overload take none;
// _convolution_pointwise_.binary writes into `other`, the residual, which is a value of the
// program (copying it into a new result first would add a pass over the output);
// aten::mkldnn_convolution.out is generated (native_functions.yaml's autogen): it makes its
// own result and copies it into `out`, and fuses no epilogue; and the at::native / ideep
// functions under them are not among torch's installed headers. Its at::empty costs a dispatch
// against oneDNN's 10-40 us a call (prepacked_convolution.cpp).
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
