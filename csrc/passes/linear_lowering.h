#pragma once
// The linear layers of a CPU inference trace that the CPU lowering (cpu_lowering.h) makes
// prepacked GEMM calls (kernels/cpu/torch_ops/prepacked_linear.h): `addmm(bias, x, W.t())` (beta
// and alpha 1) and `mm(x, W.t())`, which `nn.Linear` and `F.linear` record, and `x @ W` with W
// itself; W must be a 2-d float tensor the trace neither computes nor writes (a parameter,
// a buffer, a constant), the bias a 1-d one, and the shape one where a prepacked kernel is
// faster than ATen's (PrepackedLinear::choose). The add and activation after the product
// are fused (epilogue_fusion.h), also through the view that hands a 3-d input's result back.
// A layer whose shape a tuning database chose for (PrepackedLinear::shape_key) runs that
// kernel, thread count and tiling (a TunedLinear spec) in place of the rule's.
#include <optional>
#include <vector>

#include "csrc/kernels/cpu/torch_ops/prepacked_linear.h"
#include "csrc/passes/cpu_lowering.h"
#include "csrc/passes/fused_product.h"
#include "csrc/passes/trace_access.h"

namespace nimble {

struct FusedLinear : FusedProduct {
  at::Tensor source;        // the weight the product's right operand views
  bool transposed = false;  // the operand is source.t() (nn.Linear), not source
  at::Tensor bias;
  std::optional<kernels::PrepackedLinear::Kernel> kernel;
  int64_t threads = 0;  // a tuning database's (CpuLoweringCallbacks::tuned), else the caller's
  kernels::nhwc::KernelParameters parameters;
};

// The linear layer at `index`, with what follows it fused, if the pass can lower it.
std::optional<FusedLinear> lower_linear(const std::vector<RecordedOp>& ops, size_t index,
                                        const TraceAccess& access,
                                        const CpuLoweringCallbacks& callbacks,
                                        std::vector<bool>& taken);

// The `nimble::linear_prepacked` op that replaces it.
RecordedOp make_fused_linear_op(const FusedLinear& linear,
                                const std::shared_ptr<kernels::NonFiniteWeights>& non_finite);

}  // namespace nimble
