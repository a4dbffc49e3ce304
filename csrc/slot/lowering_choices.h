#pragma once
// Tuned kernels for the CPU lowering: which of the lowering's own kernels (the "prepacked"
// family, kernels/cpu/tuning_families/prepacked_family.cpp, and for linear layers the
// "prepacked_linear" family) a tuning database found fastest for each convolution or linear
// layer shape. A lowered replay is tuned in context (context_measurer.h), its
// records keyed by lowered_signature; an unlowered one's records have ATen's convolutions
// (batch norm apart, no fused epilogue). Either is matched by shape alone (sizes, stride,
// padding, dilation, groups), never by the full signature. Linear layers have in-context
// records only.
#include <map>
#include <optional>
#include <string>

#include "csrc/kernels/cpu/channels_last/kernel_parameters.h"
#include "csrc/kernels/kernel_space.h"
#include "csrc/kernels/tunable_op.h"
#include "tuning/database/tuning_database.h"

namespace nimble::slot {

struct LoweringChoice {
  std::string kernel;       // PrepackedConvolution::kernel_name (PrepackedLinear's the same)
  int64_t threads = 0;      // intra-op threads (0: the caller's)
  double seconds = 0;       // the record's mean time per call
  bool in_context = false;  // timed in the lowered replay
  bool confirmed = false;   // re-timed side by side with the rule's (context_confirmation.h)
  std::string signature;
  kernels::nhwc::KernelParameters parameters;  // nimble's kernels' (the rule's where 0)
  // All three as the lowering takes them (TunedConvolution's spec, cpu_lowering.h), threads
  // left out where the record ran on every thread this process has.
  std::string spec;
  tuning::Config config;  // the record's configuration of lowered_space
  // The whole-replay verdict on this configuration for its shape (replay_confirmation.h):
  // 1 kept, -1 dropped, 0 none recorded.
  int in_replay = 0;
};

// "in=1x32x16x16 weight=32x1x3x3 stride=1,1 pad=1,1 dil=1,1 groups=32": what a choice is
// keyed by.
std::string convolution_shape_key(const kernels::TunableOp& op);

// The tunable op a record's signature (TunableOp::signature) describes; nullopt for a
// linear layer or a signature of another form.
std::optional<kernels::TunableOp> convolution_of_signature(const std::string& signature);

// What in-context tuning (context_measurer.h) records a lowered convolution by: its shape key
// and fused epilogue, "lowered in=1x32x16x16 weight=... groups=32 epilogue=relu".
std::string lowered_signature(const std::string& shape_key, const std::string& epilogue);
// The convolution (sizes and geometry; channels_last, no epilogue) of a lowered signature or a
// shape key; nullopt for another form.
std::optional<kernels::TunableOp> convolution_of_shape_key(const std::string& signature);
// A linear layer (TunableOp::Kind::kLinear: rows, in and out features, contiguous, no epilogue)
// of PrepackedLinear::shape_key or its lowered signature; nullopt for another form.
std::optional<kernels::TunableOp> linear_of_shape_key(const std::string& signature);
// Either of the two above.
std::optional<kernels::TunableOp> lowered_op_of_shape_key(const std::string& signature);
// The shape key of a convolution or linear layer.
std::string lowered_shape_key(const kernels::TunableOp& op);
// What in-context records' configs index: the "prepacked" family alone, or for a linear layer
// "prepacked_linear".
kernels::KernelSpace lowered_space(const kernels::TunableOp& op);

// Per shape key, the fastest successful "prepacked" or "prepacked_linear" record on `device` (any
// device's records, the fastest overall, with `any_device`). A record timed in the lowered replay
// (lowered_signature) beats any timed alone, whatever their times: they are not comparable;
// among those, one re-timed side by side with the rule's (context_confirmation.h, ranked by
// its median) beats the search's. Whole-replay verdicts (replay_confirmation.h) are not
// candidates: the latest for the chosen configuration is its `in_replay`.
std::map<std::string, LoweringChoice> lowering_choices(const tuning::TuningDatabase& database,
                                                       const std::string& device, bool any_device);

}  // namespace nimble::slot
