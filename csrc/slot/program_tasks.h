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

std::vector<ProgramTask> program_tasks(const Program& program, const kernels::Families& families);

// What a measurement is only valid on: the CPU model and torch's thread count, e.g.
// "cpu AMD EPYC 9R14 x2 threads" (a GPU's name and compute capability once CUDA kernels come).
std::string device_key(c10::DeviceType device);

// The tuner's tasks, each measuring its op's candidates; `baseline` is called once per task
// with its index after ATen's time was measured (for progress).
std::vector<tuning::Task> tuning_tasks(const std::vector<ProgramTask>& tasks,
                                       const kernels::MeasureOptions& options,
                                       const std::function<void(int)>& baseline = {});

}  // namespace nimble::slot
