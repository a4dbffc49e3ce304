#pragma once
// Runs a CUDA kernel body (portable.h) over its whole grid on the CPU, phase by phase: every
// thread of a block finishes a phase before any thread starts the next, which is what the
// barriers between phases guarantee on a GPU. Shared memory is one buffer per block, registers
// one set per thread. Slow and exact: it checks a body's arithmetic and indexing, not its speed.
#include <algorithm>
#include <limits>
#include <vector>

#include "csrc/kernels/cuda/portable.h"

namespace nimble_cuda {

struct GridSize {
  int x = 1, y = 1, z = 1;
};

template <class Kernel>
void run_grid_on_host(const typename Kernel::Knobs& k, const typename Kernel::Args& a,
                      const GridSize& grid) {
  std::vector<float> shared(std::max(1, k.shared_floats()));
  std::vector<typename Kernel::Registers> regs(k.threads);
  for (int z = 0; z < grid.z; ++z) {
    for (int y = 0; y < grid.y; ++y) {
      for (int x = 0; x < grid.x; ++x) {
        // What a block finds in shared memory before it writes there: NaN, so that a read of
        // something its staging phase did not write shows in the result.
        std::fill(shared.begin(), shared.end(), std::numeric_limits<float>::quiet_NaN());
        const auto thread = [&](int i) { return Thread{x, y, z, i}; };
        for (int i = 0; i < k.threads; ++i) Kernel::begin(k, a, thread(i), regs[i]);
        const int steps = Kernel::steps(k, a);
        for (int step = 0; step < steps; ++step) {
          if (k.staged) {
            for (int i = 0; i < k.threads; ++i) Kernel::stage(k, a, thread(i), step, shared.data());
          }
          for (int i = 0; i < k.threads; ++i)
            Kernel::compute(k, a, thread(i), step, shared.data(), regs[i]);
        }
        for (int i = 0; i < k.threads; ++i) Kernel::finish(k, a, thread(i), regs[i]);
      }
    }
  }
}

}  // namespace nimble_cuda
