#pragma once
// The CPU kernel families, one a file in this folder.
#include <memory>
#include <vector>

#include "csrc/kernels/cpu/channels_last/kernel_parameters.h"
#include "csrc/kernels/kernel_family.h"
#include "csrc/kernels/kernel_space.h"

namespace nimble::kernels {

std::shared_ptr<const KernelFamily> aten_conv_family();         // aten_conv.cpp
std::shared_ptr<const KernelFamily> im2col_gemm_family();       // im2col_gemm.cpp
std::shared_ptr<const KernelFamily> depthwise_conv_family();    // depthwise_conv.cpp
std::shared_ptr<const KernelFamily> direct_conv_family();       // direct_conv.cpp
std::shared_ptr<const KernelFamily> winograd_conv_family();     // winograd_conv.cpp
std::shared_ptr<const KernelFamily> prepacked_family();         // prepacked_family.cpp
std::shared_ptr<const KernelFamily> prepacked_linear_family();  // prepacked_linear_family.cpp
// nimble_gemm's tiling knobs for an op of the prepacked families (the 1x1 product of a linear
// layer too), "rule" or 0 first.
std::vector<tuning::Knob> gemm_parameter_knobs(const TunableOp& op);
// The parameters of nimble's kernels a config of the prepacked family sets (its own knobs, by
// `k`), the rule's where its knobs are 0.
nhwc::KernelParameters prepacked_parameters(const TunableOp& op, const KnobValues& k);
// Whether `config` of a lowered op's space (the "prepacked" or "prepacked_linear" family) runs
// what the space's default (the rule's configuration) runs: the same config, or the same
// kernel and threads with nimble's GEMM tiling resolved to the same tiles (a knob value the
// rule takes anyway: gemm.tile_rows=6 where the rule's register tile has 6 rows, or
// gemm.loop_order=columns where the rule's weight is beyond L2). Such a config is the rule's
// kernel under another name: its "gain" over the rule is the noise of two timings of one
// kernel. False for every other config, and where the space has no default.
bool runs_as_rule(const KernelSpace& space, const tuning::Config& config);

}  // namespace nimble::kernels
