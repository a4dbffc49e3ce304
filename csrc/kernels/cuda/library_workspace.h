#pragma once
// The scratch memory a cuDNN or cuBLASLt call needs, taken from PyTorch's caching allocator on
// the current stream for one call and released when the call is enqueued, as ATen's own calls
// do: the allocator hands the block to the next call on the stream only after this one in
// stream order, and inside a CUDA graph capture the block is the graph's memory.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstddef>

namespace nimble::kernels::cuda {

inline at::Tensor cuda_workspace(size_t bytes) {
  return at::empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))},
                   at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
}

}  // namespace nimble::kernels::cuda
