#include "csrc/slot/lowering_choices.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include "csrc/kernels/cpu/channels_last/convolution_geometry.h"
#include "csrc/kernels/cpu/torch_ops/tuned_convolution.h"
#include "csrc/kernels/cpu/tuning_families/cpu_families.h"
#include "csrc/kernels/kernel_family.h"
#include "csrc/kernels/kernel_space.h"
#include "csrc/slot/context_confirmation.h"
#include "csrc/slot/replay_confirmation.h"
#include "tuning/measure/measure_result.h"

namespace nimble::slot {
namespace {

std::vector<int64_t> numbers(const std::string& list) {
  std::vector<int64_t> out;
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

// A convolution's sizes and geometry from a match of its signature or shape key: the input's
// four sizes from group `in` on, the weight's k from `weight` (then c / groups, r, s), and
// stride, padding, dilation (two each) and groups from `geometry` on.
kernels::TunableOp convolution_of_match(const std::smatch& m, int in, int weight, int geometry) {
  const auto at = [&](int i) { return std::stoll(m[i].str()); };
  kernels::TunableOp op;
  op.n = at(in);
  op.c = at(in + 1);
  op.h = at(in + 2);
  op.w = at(in + 3);
  op.k = at(weight);
  op.r = at(weight + 2);
  op.s = at(weight + 3);
  op.stride = {at(geometry), at(geometry + 1)};
  op.padding = {at(geometry + 2), at(geometry + 3)};
  op.dilation = {at(geometry + 4), at(geometry + 5)};
  op.groups = at(geometry + 6);
  const auto out_size = [&](int64_t size, int64_t kernel, int d) {
    return kernels::nhwc::convolution_output_side(size, kernel, op.stride[d], op.padding[d],
                                                  op.dilation[d]);
  };
  op.out_sizes = {op.n, op.k, out_size(op.h, op.r, 0), out_size(op.w, op.s, 1)};
  return op;
}

// Per shape key, the re-timed configuration (context_confirmation.h) to bind: the one that
// beat the rule's most over the shape's re-timed signatures (one a fused epilogue: resnet's
// 3x3 layers come "+relu" and "+add+relu", one shape key for both), by the mean over those
// signatures of log(its median / the rule's median in the same signature), where a signature
// that did not re-time it counts as the rule's (0); the rule's configuration where none beat
// it. Ranking re-timed records by their medians across signatures instead compared one task's
// rounds with another's: a winner of the "+relu" task, faster than the "+add+relu" task's rule
// by the epilogue's cost alone, went to every layer of the shape.
std::map<std::string, tuning::Config> confirmed_picks(const tuning::TuningDatabase& database,
                                                      const std::vector<std::string>& devices) {
  struct Retimed {
    double rule = 0;                           // the rule's median
    std::map<tuning::Config, double> medians;  // every re-timed configuration's
    std::set<tuning::Config> winners;          // those that beat the rule there
  };
  std::map<std::string, std::vector<Retimed>> by_key;  // per shape key, per signature
  std::map<std::string, tuning::Config> rules;
  for (const std::string& on : devices) {
    for (const std::string& signature : database.signatures(on)) {
      if (signature.rfind("lowered ", 0) != 0) continue;
      const std::optional<kernels::TunableOp> op = lowered_op_of_shape_key(signature);
      if (!op) continue;
      const kernels::KernelSpace space = lowered_space(*op);
      if (space.empty()) continue;
      const tuning::Config rule = space.default_config();
      Retimed retimed;
      for (const tuning::DatabaseRecord& record : database.records(signature, on)) {
        if ((record.run != kConfirmedRun && record.run != kRefutedRun) || !record.result.ok() ||
            !space.knobs().valid(record.config))
          continue;
        const double median = tuning::median_seconds(record.result.seconds);
        if (record.config == rule) {
          retimed.rule = median;
        } else {
          retimed.medians[record.config] = median;
          if (record.run == kConfirmedRun) retimed.winners.insert(record.config);
        }
      }
      if (retimed.rule <= 0) continue;
      const std::string key = lowered_shape_key(*op);
      rules[key] = rule;
      by_key[key].push_back(std::move(retimed));
    }
  }
  std::map<std::string, tuning::Config> out;
  for (const auto& [key, signatures] : by_key) {
    tuning::Config best = rules[key];
    double best_score = 0;
    for (const Retimed& r : signatures) {
      for (const tuning::Config& winner : r.winners) {
        double score = 0;
        for (const Retimed& other : signatures) {
          const auto found = other.medians.find(winner);
          if (found != other.medians.end() && found->second > 0)
            score += std::log(found->second / other.rule);
        }
        score /= static_cast<double>(signatures.size());
        if (score < best_score) {
          best_score = score;
          best = winner;
        }
      }
    }
    out[key] = best;
  }
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

std::string lowered_signature(const std::string& shape_key, const std::string& epilogue) {
  return "lowered " + shape_key + " epilogue=" + epilogue;
}

std::optional<kernels::TunableOp> convolution_of_shape_key(const std::string& signature) {
  static const std::regex form(
      R"((?:lowered )?in=(\d+)x(\d+)x(\d+)x(\d+) weight=(\d+)x(\d+)x(\d+)x(\d+) )"
      R"(stride=(\d+),(\d+) pad=(\d+),(\d+) dil=(\d+),(\d+) groups=(\d+)(?: epilogue=.*)?)");
  std::smatch m;
  if (!std::regex_match(signature, m, form)) return std::nullopt;
  kernels::TunableOp op = convolution_of_match(m, 1, 5, 9);
  if (op.groups <= 0 || op.c % op.groups != 0 || std::stoll(m[6].str()) != op.c / op.groups)
    return std::nullopt;
  const int64_t hw = op.out_sizes[2] * op.out_sizes[3];
  op.out_strides = {hw * op.k, 1, op.out_sizes[3] * op.k, op.k};  // channels_last
  op.input_strides = {op.h * op.w * op.c, 1, op.w * op.c, op.c};
  return op;
}

std::optional<kernels::TunableOp> linear_of_shape_key(const std::string& signature) {
  static const std::regex form(R"((?:lowered )?linear in=(\d+)x(\d+) out=(\d+)(?: epilogue=.*)?)");
  std::smatch m;
  if (!std::regex_match(signature, m, form)) return std::nullopt;
  kernels::TunableOp op;
  op.kind = kernels::TunableOp::Kind::kLinear;
  op.n = std::stoll(m[1].str());
  op.c = std::stoll(m[2].str());
  op.k = std::stoll(m[3].str());
  if (op.n <= 0 || op.c <= 0 || op.k <= 0) return std::nullopt;
  op.h = op.w = op.r = op.s = 1;
  op.bias = true;
  op.input_strides = {op.c, 1, 1, 1};
  op.weight_strides = {op.c, 1, 1, 1};  // [k, c]: the weight nn.Linear holds
  op.out_sizes = {op.n, op.k, 1, 1};
  op.out_strides = {op.k, 1, 1, 1};
  return op;
}

std::optional<kernels::TunableOp> lowered_op_of_shape_key(const std::string& signature) {
  std::optional<kernels::TunableOp> op = linear_of_shape_key(signature);
  return op ? op : convolution_of_shape_key(signature);
}

std::string lowered_shape_key(const kernels::TunableOp& op) {
  return op.kind == kernels::TunableOp::Kind::kLinear
             ? kernels::PrepackedLinear::shape_key(op.n, op.c, op.k)
             : convolution_shape_key(op);
}

kernels::KernelSpace lowered_space(const kernels::TunableOp& op) {
  return kernels::KernelSpace(
      op, {op.kind == kernels::TunableOp::Kind::kLinear ? kernels::prepacked_linear_family()
                                                        : kernels::prepacked_family()});
}

std::optional<kernels::TunableOp> convolution_of_signature(const std::string& signature) {
  // TunableOp::signature's form for a float convolution on the CPU.
  static const std::regex form(
      R"(conv2d Float cpu in=(\d+)x(\d+)x(\d+)x(\d+)/([\d,]+) weight=(\d+)x(\d+)x(\d+)x(\d+)/([\d,]+) )"
      R"(stride=(\d+),(\d+) pad=(\d+),(\d+) dil=(\d+),(\d+) groups=(\d+)( bias)? out=([\d,]+))"
      R"(( \+residual)?(?: \+relu| \+hardtanh\(([-+\d.e]+),([-+\d.e]+)\))?)");
  std::smatch m;
  if (!std::regex_match(signature, m, form)) return std::nullopt;
  kernels::TunableOp op = convolution_of_match(m, 1, 6, 11);
  op.input_strides = numbers(m[5]);
  op.weight_strides = numbers(m[10]);
  op.bias = m[18].matched;
  op.out_strides = numbers(m[19]);
  op.epilogue.residual = m[20].matched;
  if (signature.find(" +relu") != std::string::npos) {
    op.epilogue.activation = Activation::kRelu;
  } else if (m[21].matched) {
    op.epilogue.activation = Activation::kClamp;
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
  const std::map<std::string, tuning::Config> picks = confirmed_picks(database, devices);
  struct Verdict {
    tuning::Config config;
    bool kept = false;
    double recorded_at = 0;
  };
  std::map<std::string, Verdict> verdicts;  // per shape key, the latest
  for (const std::string& on : devices) {
    for (const std::string& signature : database.signatures(on)) {
      const bool in_context = signature.rfind("lowered ", 0) == 0;
      const std::optional<kernels::TunableOp> op =
          in_context ? lowered_op_of_shape_key(signature) : convolution_of_signature(signature);
      if (!op) continue;
      const kernels::KernelSpace space =
          in_context ? lowered_space(*op) : kernels::KernelSpace(*op, families);
      const std::string key = lowered_shape_key(*op);
      for (const tuning::DatabaseRecord& record : database.records(signature, on)) {
        if (record.run == kKeptInReplayRun || record.run == kDroppedInReplayRun) {
          const auto found = verdicts.find(key);
          if (in_context &&
              (found == verdicts.end() || found->second.recorded_at <= record.recorded_at))
            verdicts[key] = {record.config, record.run == kKeptInReplayRun, record.recorded_at};
          continue;
        }
        // A record of an older space (other knobs) is not this space's config.
        if (!record.result.ok() || space.empty() || !space.knobs().valid(record.config)) continue;
        const kernels::KernelFamily& family = space.family(record.config);
        if (family.name() != "prepacked" && family.name() != "prepacked_linear") continue;
        // A record re-timed side by side with the rule's (context_confirmation.h) beats the
        // search's, whose fastest is the luckiest of hundreds of short timings; its median
        // holds against the rounds a busy machine slowed.
        const bool confirmed = in_context && record.run == kConfirmedRun;
        // Of the re-timed records, only the shape's pick (confirmed_picks) is bound.
        if (confirmed) {
          const auto pick = picks.find(key);
          if (pick != picks.end() && pick->second != record.config) continue;
        }
        const double seconds = confirmed ? tuning::median_seconds(record.result.seconds)
                                         : record.result.mean_seconds();
        const auto found = out.find(key);
        if (found != out.end() &&
            std::make_tuple(!found->second.in_context, !found->second.confirmed,
                            found->second.seconds) <=
                std::make_tuple(!in_context, !confirmed, seconds))
          continue;
        // A config that runs the rule's very kernel (runs_as_rule: gemm.tile_rows=6 where the
        // rule's tile has 6 rows) is the rule's: nothing to bind or to judge in the replay.
        const tuning::Config config = in_context && kernels::runs_as_rule(space, record.config)
                                          ? space.default_config()
                                          : record.config;
        const kernels::KnobValues knobs(space.knobs(), config, family.name() + ".");
        LoweringChoice choice{knobs.label("kernel"),
                              knobs.value("threads"),
                              seconds,
                              in_context,
                              confirmed,
                              signature,
                              kernels::prepacked_parameters(*op, knobs),
                              "",
                              config};
        choice.spec = kernels::tuned_spec(
            choice.kernel, choice.threads < at::get_num_threads() ? choice.threads : 0,
            choice.parameters);
        out[key] = std::move(choice);
      }
    }
  }
  for (auto& [key, choice] : out) {
    const auto verdict = verdicts.find(key);
    if (choice.in_context && verdict != verdicts.end() && verdict->second.config == choice.config)
      choice.in_replay = verdict->second.kept ? 1 : -1;
  }
  return out;
}

}  // namespace nimble::slot
