#pragma once
// The ops after a lowered product that the CPU lowering fuses into it (cpu_lowering.h): a
// residual add (alpha 1, same shape), then one activation (program/epilogue.h's, each one
// oneDNN runs as a post-op), each only where nothing else reads what it replaces.
#include <optional>
#include <vector>

#include "csrc/passes/cpu_lowering.h"
#include "csrc/passes/fused_product.h"
#include "csrc/passes/trace_access.h"

namespace nimble {

// The activation `op` computes (an epilogue without a residual), if it is one a kernel fuses.
std::optional<Epilogue> activation_of(const RecordedOp& op);

// Extends `product` with the residual add and the activation that follow it, marking the
// ops it takes in `taken`. With `through_views`, a view of the product's result that only
// reshapes it (a linear layer of a 3-d input hands back [batch, tokens, out]) may stand
// before them; the fused op then returns the view's sizes.
void fuse_epilogue(FusedProduct& product, const std::vector<RecordedOp>& ops,
                   const TraceAccess& access, const CpuLoweringCallbacks& callbacks,
                   std::vector<bool>& taken, bool through_views);

// Whether the values the fused op reads stay as they were between the product and the
// place of the fused op (the last op it replaces).
bool inputs_unchanged(const FusedProduct& product, const TraceAccess& access);

}  // namespace nimble
