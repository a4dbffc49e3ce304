#pragma once
// The C++ half of prepare's options: what the stages after the capture read (the passes, the
// program, the memory plan, the streams and the executor; csrc/pipeline/replay_pipeline.h).
// Python's `PrepareOptions` (nimble/replay/prepare_options.py) makes one; it is bound to
// Python once, as `nimble._C.BuildOptions`, its fields read and written by name
// (csrc/python/bind_runtime.cpp).
#include <cstdint>
#include <map>
#include <set>
#include <string>

namespace nimble {

// What a tuning database chose for each convolution and linear layer shape
// (PrepackedConvolution::shape_key, PrepackedLinear::shape_key;
// slot/lowering_choices.h): the kernel, threads and kernel parameters as a TunedConvolution
// spec ("nimble_gemm threads=1 gemm.tile_rows=4", kernels/cpu/torch_ops/tuned_convolution.h).
// A thread count found best for a layer timed alone can make whole replays slower (docs/cpu.md):
// the caller keeps a choice only where the replay runs it faster (replay/lowered_tuning.py).
using TunedConvolutions = std::map<std::string, std::string>;

struct BuildOptions {
  // Rewrite functional ops to their `.out` overload into preallocated buffers.
  bool use_out_variants = true;
  // Only ops whose results are at most this many bytes get `.out` buffers (0: any size).
  // Buffers stay allocated between replays; larger results are better allocated and
  // freed as eager does, which keeps the replay's peak memory at eager's.
  int64_t out_variant_max_bytes = 0;
  // Compute views of stable tensors once, at prepare.
  bool precompute_views = true;
  // Fold eval-mode batch norms into the convolutions before them.
  bool fold_batchnorm = false;
  // CPU inference: lower convolutions to prepacked oneDNN calls with fused post-ops
  // (passes/cpu_lowering.h), folding batch norms into them first.
  bool lower_for_cpu = false;
  // Let `.out` buffers whose lifetimes cannot overlap share storage.
  bool plan_memory = true;
  // Drop copies and aliases readers cannot tell from their input (noop_elimination.h).
  bool drop_noop_ops = true;
  // With lower_for_cpu: kernels a tuning database chose, by convolution shape.
  TunedConvolutions tuned_convolutions;
  // Trace positions (RecordedOp::trace_position) of ops the CPU lowering and batch-norm
  // folding leave as ATen's: the parts prepare found the lowering breaks
  // (nimble/replay/lowering_fallback.py).
  std::set<int> keep_aten_ops;

  // How the executor is made (runtime/executor.h's ExecutorOptions, which the replay keeps
  // and changes later): physical streams (0: the backend's default), the cores to plan for
  // (0: the machine's), and, for tests, a CPU program run with a CUDA graph's semantics.
  int streams = 1;
  int cores = 0;
  bool graph_twin = false;
};

}  // namespace nimble
