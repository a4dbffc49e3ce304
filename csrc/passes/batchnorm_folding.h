#pragma once
// Inference pass: a convolution whose only reader is an eval-mode batch norm becomes one
// convolution with folded weights (program/folded_batchnorm.h), which the program keeps
// and a replay refreshes when their sources change.
#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "csrc/program/folded_batchnorm.h"
#include "csrc/program/recorded_op.h"

namespace nimble {

// Rewrites `ops` in place and returns the folds. `redirect(bn_output, conv_output)` tells
// the caller that readers of the batch norm's output now read the convolution's.
// `is_output(t)`: whether the caller receives `t` (a program output is read outside the
// trace, so a convolution whose result is one keeps it unfolded). `keeps(op)`: whether a
// convolution or batch norm stays as recorded.
std::vector<FoldedBatchNorm> fold_batchnorm(
    std::vector<RecordedOp>& ops,
    const std::function<void(const at::Tensor&, const at::Tensor&)>& redirect,
    const std::function<bool(const at::Tensor&)>& is_output,
    const std::function<bool(const RecordedOp&)>& keeps);

}  // namespace nimble
