#include "csrc/kernels/cpu/tuning_families/prepacked_family_base.h"

#include <algorithm>
#include <vector>

#include "csrc/kernels/cpu/channels_last/gemm_convolution.h"
#include "csrc/kernels/cpu/tuning_families/cpu_families.h"
#include "csrc/kernels/cpu/tuning_families/cpu_kernel_support.h"

namespace nimble::kernels {

bool PrepackedFamilyBase::supports(const TunableOp& op) const {
  return op.device == c10::DeviceType::CPU && op.kind == kind_ &&
         op.dtype == c10::ScalarType::Float;
}

std::vector<tuning::Knob> PrepackedFamilyBase::knobs(const TunableOp& op) const {
  std::vector<tuning::Knob> out = {tuning::Knob::categorical("kernel", kernel_names(op)),
                                   threads_knob()};
  for (tuning::Knob& knob : parameter_knobs(op)) out.push_back(std::move(knob));
  return out;
}

std::vector<KnobRule> PrepackedFamilyBase::rules(const TunableOp& op) const {
  const std::vector<std::string> names = kernel_names(op);
  std::vector<KnobRule> out;
  for (size_t index = 0; index < names.size(); ++index) {
    if (!takes_no_parameters(names[index])) continue;
    const auto kernel = static_cast<int64_t>(index);
    out.push_back(
        {names[index] + " takes no kernel parameters", [kernel](const std::vector<int64_t>& v) {
           return v[0] != kernel ||
                  std::all_of(v.begin() + 2, v.end(), [](int64_t x) { return x == 0; });
         }});
  }
  return out;
}

std::vector<int> PrepackedFamilyBase::default_choices(const TunableOp& op) const {
  const std::optional<std::string> rule = rule_kernel(op);
  if (!rule) return {};
  const std::vector<std::string> names = kernel_names(op);
  const auto found = std::find(names.begin(), names.end(), *rule);
  if (found == names.end()) return {};
  std::vector<int> out(knobs(op).size(), 0);
  out[0] = static_cast<int>(found - names.begin());
  out[1] = threads_knob().size() - 1;
  return out;
}

namespace {

// The tiling nimble's GEMM resolves `tiling` to on the op's product (gemm_convolution.h; a
// linear layer as a 1x1 convolution over one row of `n` pixels), packed from zeros: the
// tiling depends on the shapes only.
nhwc::GemmTiling resolved_tiling(const TunableOp& op, const nhwc::GemmTiling& tiling) {
  nhwc::ConvolutionGeometry g = nhwc::ConvolutionGeometry::linear(op.n, op.c, op.k);
  if (op.kind != TunableOp::Kind::kLinear) {
    g.images = op.n;
    g.height = op.h;
    g.width = op.w;
    g.in_channels = op.c;
    g.out_channels = op.k;
    g.kernel_h = op.r;
    g.kernel_w = op.s;
    g.stride_h = op.stride[0];
    g.stride_w = op.stride[1];
    g.pad_h = op.padding[0];
    g.pad_w = op.padding[1];
    g.dilation_h = op.dilation[0];
    g.dilation_w = op.dilation[1];
    g.groups = op.groups;
  }
  const std::vector<float> zeros(
      static_cast<size_t>(g.out_channels * (g.in_channels / g.groups) * g.kernel_h * g.kernel_w));
  return nhwc::GemmConvolution(zeros.data(), nullptr, g, nhwc::best_isa(), tiling).tiling();
}

}  // namespace

bool runs_as_rule(const KernelSpace& space, const tuning::Config& config) {
  const tuning::Config rule = space.default_config();
  if (rule.empty() || config.empty()) return false;
  if (config == rule) return true;
  if (!space.knobs().valid(config)) return false;
  const KernelFamily& family = space.family(config);
  if (family.name() != space.family(rule).name() ||
      dynamic_cast<const PrepackedFamilyBase*>(&family) == nullptr)
    return false;
  const TunableOp& op = space.op();
  const std::string prefix = family.name() + ".";
  const KnobValues mine(space.knobs(), config, prefix), rules(space.knobs(), rule, prefix);
  if (mine.label("kernel") != rules.label("kernel") ||
      mine.value("threads") != rules.value("threads") || mine.label("kernel") != "nimble_gemm" ||
      op.depthwise())
    return false;  // other kernels have no parameters: their configs differ in what runs
  const nhwc::GemmTiling a = prepacked_parameters(op, mine).gemm;
  const nhwc::GemmTiling b = prepacked_parameters(op, rules).gemm;
  // tiling() gives a full-width block's register tile; a narrow last panel (output channels
  // not a whole number of 2-vector panels) has tiles of its own that a tile_rows cap may
  // change, so a different cap counts only where no panel is narrow on either ISA.
  if (a.tile_rows != b.tile_rows && (op.groups != 1 || op.k % 32 != 0)) return false;
  return resolved_tiling(op, a) == resolved_tiling(op, b);
}

}  // namespace nimble::kernels
