#pragma once
// A kernel family whose kernels are one portable body (portable.h) compiled by NVRTC per
// config, described by an NvrtcSpec (below) whose members its file defines. The knob space
// holds only launchable configs (a rule of the space), so the tuner never proposes one that
// could not run; the compile check (tests/cpp/kernels/cuda_compile_test.cpp) compiles every one
// of them and checks what ptxas reports against the limits.
#include <ATen/ATen.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "csrc/kernels/cuda/cubin_cache.h"
#include "csrc/kernels/cuda/host_grid.h"
#include "csrc/kernels/cuda/kernel_sources.h"
#include "csrc/kernels/cuda/loaded_kernel.h"
#include "csrc/kernels/kernel_family.h"

namespace nimble::kernels::cuda {

// Data of a kernel's operands; null for those the op does not have.
struct OperandPointers {
  const float* x = nullptr;
  const float* weight = nullptr;
  const float* bias = nullptr;
  const float* residual = nullptr;
  float* y = nullptr;
};

// The body's activation code for the op's epilogue (portable.h).
int activation_code(const Epilogue& epilogue);

// Whether input, weight and output are dense NCHW (what the bodies index) and float.
bool dense_nchw_float(const TunableOp& op);

// The pointers of `operands` (TunableOp's order) and `y` for a kernel.
OperandPointers operand_pointers(const TunableOp& op, at::TensorList operands, at::Tensor& y);

// What a family is, beside its body (found from the body's Knobs): each member is defined,
// as an explicit specialisation, in the family's file.
template <class KnobsType>
struct NvrtcSpec {
  using Knobs = KnobsType;
  using Kernel = typename nimble_cuda::BodyOf<Knobs>::type;
  using Args = typename Kernel::Args;
  static const char* const kName;                   // the family's name
  static const char* const kEntry;                  // the body's __global__ function
  static const char* const kSource;                 // the body's header, as embedded
  static bool supports_shape(const TunableOp& op);  // the device aside
  static std::vector<tuning::Knob> tuned_knobs();
  static std::vector<int> op_fields(const TunableOp& op);  // the Knobs fields the op decides
  static bool launchable(const Knobs& k);                  // within every GPU's per-block limits
  static nimble_cuda::GridSize grid(const TunableOp& op, const Knobs& k);
  static Args args(const TunableOp& op, const OperandPointers& p);
};

// A body's Knobs is a struct of ints: the fields the op decides (geometry, epilogue), then the
// tuned knobs in tuned_knobs() order. As a list, they become NVRTC's -DNIMBLE_KNOBS.
template <class Knobs>
std::vector<int> knob_fields(const Knobs& k) {
  static_assert(std::is_trivially_copyable_v<Knobs> && sizeof(Knobs) % sizeof(int) == 0);
  std::vector<int> fields(sizeof(Knobs) / sizeof(int));
  std::memcpy(fields.data(), &k, sizeof(Knobs));
  return fields;
}

template <class Spec>
typename Spec::Knobs knobs_for(const TunableOp& op, const std::vector<int64_t>& tuned) {
  using Knobs = typename Spec::Knobs;
  std::vector<int> fields = Spec::op_fields(op);
  for (const int64_t v : tuned) fields.push_back(static_cast<int>(v));
  if (fields.size() * sizeof(int) != sizeof(Knobs))
    throw std::invalid_argument(std::string(Spec::kName) + ": " + std::to_string(fields.size()) +
                                " knob fields given, the body has " +
                                std::to_string(sizeof(Knobs) / sizeof(int)));
  Knobs k;
  std::memcpy(&k, fields.data(), sizeof(Knobs));
  return k;
}

// The fields every body's Args has: the operands' data and hardtanh's bounds.
template <class Args>
Args operand_args(const TunableOp& op, const OperandPointers& p) {
  Args a{};
  a.x = p.x;
  a.weight = p.weight;
  a.bias = p.bias;
  a.residual = p.residual;
  a.y = p.y;
  a.lo = static_cast<float>(op.epilogue.lo);
  a.hi = static_cast<float>(op.epilogue.hi);
  return a;
}

// Whether a grid is within CUDA's limits (x below 2^31, y and z at most 65535).
inline bool grid_fits(const nimble_cuda::GridSize& g) {
  return g.x >= 1 && g.y >= 1 && g.z >= 1 && g.y <= 65535 && g.z <= 65535;
}

// What NVRTC compiles for one config of `Spec`: its body with the knobs as defines.
template <class Spec>
KernelSource kernel_source(const typename Spec::Knobs& k) {
  KernelSource s;
  s.name = Spec::kSource;
  s.text = embedded_source(Spec::kSource);
  s.headers = {{"csrc/kernels/cuda/portable.h", embedded_source("csrc/kernels/cuda/portable.h")}};
  s.entry = Spec::kEntry;
  std::string list;
  for (const int f : knob_fields(k)) list += (list.empty() ? "" : ",") + std::to_string(f);
  s.options = {"-DNIMBLE_KNOBS=" + list, "-DNIMBLE_THREADS=" + std::to_string(k.threads),
               "-DNIMBLE_UNROLL_FACTOR=" + std::to_string(k.unroll),
               "-DNIMBLE_MAX_ACC=" + std::to_string(k.per_thread())};
  return s;
}

// Every value vector of the family's tuned knobs (their cartesian product) that can launch
// for `op`: what the op's space holds of the family.
template <class Spec>
std::vector<std::vector<int64_t>> launchable_configs(const TunableOp& op) {
  const std::vector<tuning::Knob> knobs = Spec::tuned_knobs();
  std::vector<std::vector<int64_t>> out;
  std::vector<int> index(knobs.size(), 0);
  while (true) {
    std::vector<int64_t> values;
    for (size_t i = 0; i < knobs.size(); ++i) values.push_back(knobs[i].value(index[i]));
    const typename Spec::Knobs k = knobs_for<Spec>(op, values);
    if (Spec::launchable(k) && grid_fits(Spec::grid(op, k))) out.push_back(values);
    size_t i = 0;
    while (i < knobs.size() && ++index[i] == knobs[i].size()) index[i++] = 0;
    if (i == knobs.size()) return out;
  }
}

template <class Spec>
class NvrtcKernel : public TunedKernel {
 public:
  NvrtcKernel(TunableOp op, typename Spec::Knobs knobs, const CompiledKernel& compiled)
      : op_(std::move(op)), knobs_(knobs), kernel_(compiled.cubin, Spec::kEntry) {}
  at::Tensor run(at::TensorList operands) const override {
    at::Tensor y = op_.empty_output();
    const typename Spec::Args args = Spec::args(op_, operand_pointers(op_, operands, y));
    kernel_.launch(Spec::grid(op_, knobs_), knobs_.threads, &args);
    return y;
  }

 private:
  TunableOp op_;
  typename Spec::Knobs knobs_;
  LoadedKernel kernel_;
};

template <class Spec>
class NvrtcFamily : public KernelFamily {
 public:
  explicit NvrtcFamily(CubinCache cache) : cache_(std::move(cache)) {}
  std::string name() const override { return Spec::kName; }
  bool fuses_epilogue() const override { return true; }
  bool supports(const TunableOp& op) const override {
    return op.device == c10::DeviceType::CUDA && Spec::supports_shape(op) &&
           !launchable_configs<Spec>(op).empty();
  }
  std::vector<tuning::Knob> knobs(const TunableOp&) const override { return Spec::tuned_knobs(); }
  std::vector<KnobRule> rules(const TunableOp& op) const override {
    return {
        {"launchable on every GPU nimble compiles for", [op](const std::vector<int64_t>& tuned) {
           const typename Spec::Knobs k = knobs_for<Spec>(op, tuned);
           return Spec::launchable(k) && grid_fits(Spec::grid(op, k));
         }}};
  }
  std::unique_ptr<TunedKernel> build(const TunableOp& op, const KnobValues& values) const override {
    std::vector<int64_t> tuned;
    for (const tuning::Knob& knob : Spec::tuned_knobs()) tuned.push_back(values.value(knob.name()));
    const typename Spec::Knobs k = knobs_for<Spec>(op, tuned);
    if (!Spec::launchable(k) || !grid_fits(Spec::grid(op, k)))
      throw std::invalid_argument(std::string(Spec::kName) + ": config cannot launch");
    const int sm = current_sm();
    const CompiledKernel compiled = cache_.compile(kernel_source<Spec>(k), sm);
    const std::string problem = resource_problem(compiled.resources, k.threads, arch_limits(sm));
    if (!problem.empty())
      throw std::runtime_error(std::string(Spec::kName) + " on sm_" + std::to_string(sm) + ": " +
                               problem);
    return std::make_unique<NvrtcKernel<Spec>>(op, k, compiled);
  }

 private:
  CubinCache cache_;
};

}  // namespace nimble::kernels::cuda
