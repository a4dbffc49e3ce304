#include "csrc/slot/lowering_choices.h"

#include <ATen/Parallel.h>

#include <regex>
#include <sstream>

#include "csrc/kernels/cpu/torch_ops/tuned_convolution.h"
#include "csrc/kernels/cpu/tuning_families/cpu_families.h"
#include "csrc/kernels/kernel_family.h"
#include "csrc/kernels/kernel_space.h"

namespace nimble::slot {
namespace {

std::vector<int64_t> numbers(const std::string& list) {
  std::vector<int64_t> out;
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

}  // namespace

std::string convolution_shape_key(const kernels::TunableOp& op) {
  std::ostringstream out;
  out << "in=" << op.n << "x" << op.c << "x" << op.h << "x" << op.w << " weight=" << op.k << "x"
      << op.c / op.groups << "x" << op.r << "x" << op.s << " stride=" << op.stride[0] << ","
      << op.stride[1] << " pad=" << op.padding[0] << "," << op.padding[1]
      << " dil=" << op.dilation[0] << "," << op.dilation[1] << " groups=" << op.groups;
  return out.str();
}

std::optional<kernels::TunableOp> convolution_of_signature(const std::string& signature) {
  // TunableOp::signature's form for a float convolution on the CPU.
  static const std::regex form(
      R"(conv2d Float cpu in=(\d+)x(\d+)x(\d+)x(\d+)/([\d,]+) weight=(\d+)x(\d+)x(\d+)x(\d+)/([\d,]+) )"
      R"(stride=(\d+),(\d+) pad=(\d+),(\d+) dil=(\d+),(\d+) groups=(\d+)( bias)? out=([\d,]+))"
      R"(( \+residual)?(?: \+relu| \+hardtanh\(([-+\d.e]+),([-+\d.e]+)\))?)");
  std::smatch m;
  if (!std::regex_match(signature, m, form)) return std::nullopt;
  const auto at = [&](int i) { return std::stoll(m[i].str()); };
  kernels::TunableOp op;
  op.n = at(1);
  op.c = at(2);
  op.h = at(3);
  op.w = at(4);
  op.input_strides = numbers(m[5]);
  op.k = at(6);
  op.r = at(8);
  op.s = at(9);
  op.weight_strides = numbers(m[10]);
  op.stride = {at(11), at(12)};
  op.padding = {at(13), at(14)};
  op.dilation = {at(15), at(16)};
  op.groups = at(17);
  op.bias = m[18].matched;
  op.out_strides = numbers(m[19]);
  const auto out_size = [&](int64_t in, int64_t kernel, int d) {
    return (in + 2 * op.padding[d] - op.dilation[d] * (kernel - 1) - 1) / op.stride[d] + 1;
  };
  op.out_sizes = {op.n, op.k, out_size(op.h, op.r, 0), out_size(op.w, op.s, 1)};
  op.epilogue.residual = m[20].matched;
  if (signature.find(" +relu") != std::string::npos) {
    op.epilogue.activation = kernels::Activation::kRelu;
  } else if (m[21].matched) {
    op.epilogue.activation = kernels::Activation::kClamp;
    op.epilogue.lo = std::stod(m[21].str());
    op.epilogue.hi = std::stod(m[22].str());
  }
  if (op.signature() != signature) return std::nullopt;  // a form this parser misread
  return op;
}

std::map<std::string, LoweringChoice> lowering_choices(const tuning::TuningDatabase& database,
                                                       const std::string& device, bool any_device) {
  std::map<std::string, LoweringChoice> out;
  const kernels::Families families = kernels::cpu_families();
  const std::vector<std::string> devices =
      any_device ? database.devices() : std::vector<std::string>{device};
  for (const std::string& on : devices) {
    for (const std::string& signature : database.signatures(on)) {
      const std::optional<kernels::TunableOp> op = convolution_of_signature(signature);
      if (!op) continue;
      const kernels::KernelSpace space(*op, families);
      const std::string key = convolution_shape_key(*op);
      for (const tuning::DatabaseRecord& record : database.records(signature, on)) {
        // A record of an older space (other knobs) is not this space's config.
        if (!record.result.ok() || space.empty() || !space.knobs().valid(record.config)) continue;
        const kernels::KernelFamily& family = space.family(record.config);
        if (family.name() != "prepacked") continue;
        const double seconds = record.result.mean_seconds();
        const auto found = out.find(key);
        if (found != out.end() && found->second.seconds <= seconds) continue;
        const kernels::KnobValues knobs(space.knobs(), record.config, "prepacked.");
        LoweringChoice choice{knobs.label("kernel"),
                              knobs.value("threads"),
                              seconds,
                              signature,
                              kernels::prepacked_parameters(*op, knobs),
                              ""};
        kernels::TunedConvolution tuned;
        tuned.kernel = kernels::PrepackedConvolution::kernel_of_name(choice.kernel);
        tuned.threads = choice.threads < at::get_num_threads() ? choice.threads : 0;
        tuned.parameters = choice.parameters;
        choice.spec = tuned.to_string();
        out[key] = std::move(choice);
      }
    }
  }
  return out;
}

}  // namespace nimble::slot
