#include "csrc/slot/program_tasks.h"

#include <ATen/Parallel.h>
#ifdef NIMBLE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#include <map>
#include <sstream>

#include "csrc/kernels/cpu/channels_last/epilogue.h"
#include "csrc/kernels/cpu/cpu_features.h"

namespace nimble::slot {

std::string task_name(const kernels::TunableOp& op) {
  std::ostringstream out;
  if (op.kind == kernels::TunableOp::Kind::kLinear) {
    out << "linear " << op.c << ">" << op.k;
  } else {
    out << (op.depthwise()  ? "dw"
            : op.groups > 1 ? "gconv"
                            : "conv")
        << op.r << "x" << op.s << "/" << op.stride[0] << " " << op.c << ">" << op.k << " " << op.h
        << "x" << op.w;
  }
  if (op.n > 1) out << " n" << op.n;
  if (op.epilogue.residual) out << " +res";
  if (op.epilogue.activation == Activation::kRelu) out << " +relu";
  if (op.epilogue.activation == Activation::kClamp) out << " +clamp";
  return out.str();
}

std::vector<ProgramTask> program_tasks(const Program& program, const kernels::Families& families) {
  std::vector<ProgramTask> tasks;
  std::map<std::string, size_t> by_signature;
  for (int i = 0; i < static_cast<int>(program.ops.size()); ++i) {
    auto site = kernels::tunable_site(program, i);
    if (!site) continue;
    const std::string signature = site->op.signature();
    const auto found = by_signature.find(signature);
    if (found != by_signature.end()) {
      tasks[found->second].sites.push_back(std::move(*site));
      continue;
    }
    auto space = std::make_shared<const kernels::KernelSpace>(site->op, families);
    if (space->empty()) continue;
    by_signature[signature] = tasks.size();
    std::string name = task_name(site->op);
    tasks.push_back(ProgramTask{std::move(space), {std::move(*site)}, std::move(name)});
  }
  return tasks;
}

std::string device_key(c10::DeviceType device) {
#ifdef NIMBLE_WITH_CUDA
  if (device == c10::DeviceType::CUDA) {
    // A record is valid on the GPU model it was measured on (and what NVRTC compiled for).
    const cudaDeviceProp* p = at::cuda::getCurrentDeviceProperties();
    std::ostringstream out;
    out << "cuda " << p->name << " sm_" << p->major << p->minor;
    return out.str();
  }
#endif
  if (device != c10::DeviceType::CPU) return c10::DeviceTypeName(device, true);
  std::ostringstream out;
  const kernels::CpuFeatures& cpu = kernels::this_cpu();
  // The family and model numbers too: a VM's model name may be one string for several kinds
  // of CPU (a database tuned on a Cascade Lake is not for a Sapphire Rapids).
  out << "cpu " << cpu.model << " ";
  if (!cpu.family_model.empty()) out << "[" << cpu.family_model << "] ";
  out << kernels::vector_extension_name(cpu.vector_extension) << " " << cpu.cores << " cores x"
      << at::get_num_threads() << " threads";
  // nimble's kernels capped below what the CPU has (NIMBLE_CPU_ISA): their times are another
  // machine's.
  if (kernels::nhwc::isa_capped())
    out << " kernels " << kernels::nhwc::isa_name(kernels::nhwc::best_isa());
  return out.str();
}

tuning::Task task_over(const kernels::KernelSpace& space, std::string name, std::string signature,
                       size_t occurrences, std::shared_ptr<tuning::Measurer> measurer,
                       double baseline_seconds) {
  tuning::Task t;
  t.name = std::move(name);
  t.signature = std::move(signature);
  t.group = space.op().kind == kernels::TunableOp::Kind::kLinear ? "linear"
            : space.op().depthwise()                             ? "depthwise"
                                                                 : "conv";
  t.space = space.knobs();
  t.flops = space.op().flops();
  t.weight = static_cast<double>(occurrences);
  t.start = space.default_config();
  t.measurer = std::move(measurer);
  t.baseline_seconds = baseline_seconds;
  return t;
}

std::vector<tuning::Task> tuning_tasks(const std::vector<ProgramTask>& tasks,
                                       const kernels::MeasureOptions& options,
                                       const std::function<void(int)>& baseline) {
  std::vector<tuning::Task> out;
  const auto flusher = kernels::make_flusher(options);
  for (size_t i = 0; i < tasks.size(); ++i) {
    const ProgramTask& p = tasks[i];
    auto measurer = std::make_shared<kernels::KernelMeasurer>(p.space, options, flusher);
    const double seconds = measurer->baseline_seconds();
    out.push_back(task_over(*p.space, p.name, p.space->op().signature(), p.sites.size(),
                            std::move(measurer), seconds));
    if (baseline) baseline(static_cast<int>(i));
  }
  return out;
}

}  // namespace nimble::slot
