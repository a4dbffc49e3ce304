#pragma once
// The allocator of nimble's packed weights (gemm_convolution.h, depthwise_convolution.h):
// std::allocator aligns to 16 bytes; the microkernels load whole vectors from a panel or a
// tap's channels, and a panel is a whole number of 64-byte lines, so the storage starts on
// a line. (Huge pages for large buffers, tried: resnet18's 45 MB on 2 MiB pages ran no faster,
// 2.33 against 2.37 ms with eager between calls, 1.90 against 1.89 back to back.) Torch-free.
#include <cstddef>
#include <new>

namespace nimble::kernels::nhwc {

template <class T>
struct PackedAllocator {
  using value_type = T;
  PackedAllocator() = default;
  template <class U>
  explicit PackedAllocator(const PackedAllocator<U>&) {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64}));
  }
  void deallocate(T* p, std::size_t) { ::operator delete (p, std::align_val_t{64}); }
  bool operator==(const PackedAllocator&) const { return true; }
  bool operator!=(const PackedAllocator&) const { return false; }
};

}  // namespace nimble::kernels::nhwc
