#pragma once
// Tuning tasks from a prepared program: its tunable ops grouped by signature (an op that occurs
// five times with the same shapes is one task of weight 5), each with the kernel space of every
// family that supports it and ATen's time as the baseline to beat, measured here, now.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "csrc/kernels/kernel_measurer.h"
#include "csrc/kernels/kernel_space.h"
#include "csrc/program/program.h"
#include "tuning/task/task.h"

namespace nimble::slot {

struct ProgramTask {
  std::shared_ptr<const kernels::KernelSpace> space;
  std::vector<kernels::TunableSite> sites;  // where the op occurs, in program order
  std::string name;                         // short, for progress lines: "dw3x3/1 32>32 32x32"
};

// A task's name in progress lines: "dw3x3/1 32>32 32x32 +relu".
std::string task_name(const kernels::TunableOp& op);

std::vector<ProgramTask> program_tasks(const Program& program, const kernels::Families& families);

// What a measurement is only valid on: the CPU model, its widest vector extension, its
// logical cores and torch's thread count, e.g. "cpu AMD EPYC avx512 2 cores x2 threads" (a
// GPU's name and compute capability once CUDA kernels come). A CPU model name alone does
// not tell an AVX-512 machine from an AVX2 one.
std::string device_key(c10::DeviceType device);

// The tuner's task over `space` for an op that occurs `occurrences` times, measured by
// `measurer`, the untuned kernel's time `baseline_seconds`.
tuning::Task task_over(const kernels::KernelSpace& space, std::string name, std::string signature,
                       size_t occurrences, std::shared_ptr<tuning::Measurer> measurer,
                       double baseline_seconds);

// The tuner's tasks, each measuring its op's candidates; `baseline` is called once per task
// with its index after ATen's time was measured (for progress).
std::vector<tuning::Task> tuning_tasks(const std::vector<ProgramTask>& tasks,
                                       const kernels::MeasureOptions& options,
                                       const std::function<void(int)>& baseline = {});

}  // namespace nimble::slot
