// Every launchable config of every NVRTC kernel family compiles for sm_80 and sm_90 here, with
// no GPU, and what ptxas reports it uses fits the architecture's per-block limits without
// spilling: the families' spaces exclude what could not launch by construction, and this test
// is what shows the construction right. Compiled kernels are cached on disk by source,
// options and architecture.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "csrc/kernels/cuda/cuda_families.h"
#include "csrc/kernels/kernel_space.h"
#include "tests/cpp/kernels/cuda_host_check.h"

namespace nimble::kernels::cuda {
namespace {

// The op each family's space is compiled for: the heaviest epilogue (bias, residual, silu:
// the most registers), a shape typical of MobileNetV2 / ResNet.
TunableOp representative(int64_t c, int64_t k, int64_t groups, int64_t r, int64_t stride) {
  TunableOp op = square_conv(c, k, groups, r, stride);
  op.epilogue.residual = true;
  return op;
}

// NIMBLE_CUDA_COMPILE_SAMPLE=<n>: compile n configs a family (spread over its space) while
// iterating; CI compiles all of them.
size_t sample_size(size_t all) {
  const char* n = std::getenv("NIMBLE_CUDA_COMPILE_SAMPLE");
  return n != nullptr ? std::min<size_t>(all, std::strtoul(n, nullptr, 10)) : all;
}

template <class Spec>
void compile_every_config(const TunableOp& op, int least) {
  const auto configs = launchable_configs<Spec>(op);
  ASSERT_GE(static_cast<int>(configs.size()), least) << Spec::kName << "'s space shrank";
  struct Job {
    int sm;
    typename Spec::Knobs knobs;
    std::string options, error;
    CompiledKernel compiled;
  };
  std::vector<Job> jobs;
  const size_t count = sample_size(configs.size());
  for (const int sm : {80, 90}) {
    for (size_t i = 0; i < count; ++i) {
      typename Spec::Knobs k = knobs_for<Spec>(op, configs[i * configs.size() / count]);
      k.activation = nimble_cuda::kActSilu;
      jobs.push_back({sm, k, "", "", {}});
    }
  }
  // NVRTC programs compile independently: one a core.
  const auto start = std::chrono::steady_clock::now();
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t) {
    workers.emplace_back([&] {
      for (size_t i = next++; i < jobs.size(); i = next++) {
        Job& job = jobs[i];
        const KernelSource source = kernel_source<Spec>(job.knobs);
        for (const auto& o : source.options) job.options += o + " ";
        try {
          job.compiled = compile_with_nvrtc(source, job.sm);
        } catch (const std::exception& e) {
          job.error = e.what();
        }
      }
    });
  }
  for (std::thread& w : workers) w.join();
  for (const Job& job : jobs) {
    const std::string where =
        std::string(Spec::kName) + " sm_" + std::to_string(job.sm) + " " + job.options;
    ASSERT_EQ(job.error, "") << where;
    EXPECT_EQ(resource_problem(job.compiled.resources, job.knobs.threads, arch_limits(job.sm)), "")
        << where;
    // What ptxas reports is what the body asks for: its staging buffer, or nothing (the
    // unused one-float placeholder is dropped) when it stages nothing.
    EXPECT_EQ(job.compiled.resources.shared_bytes, 4 * job.knobs.shared_floats()) << where;
    EXPECT_GT(job.compiled.resources.registers, 0) << where;
    EXPECT_FALSE(job.compiled.cubin.empty()) << where;
  }
  int most_registers = 0, most_stack = 0;
  for (const Job& job : jobs) {
    most_registers = std::max(most_registers, job.compiled.resources.registers);
    most_stack = std::max(most_stack, job.compiled.resources.stack_bytes);
  }
  std::cout << Spec::kName << ": " << count << " of " << configs.size()
            << " configs x 2 architectures, at most " << most_registers << " registers and "
            << most_stack << " bytes of stack a thread, compiled in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
            << " s\n";
}

TEST(CudaKernelsCompile, EveryDepthwiseConfigFitsSm80AndSm90) {
  compile_every_config<DepthwiseConvSpec>(representative(32, 32, 32, 3, 1), 100);
}

TEST(CudaKernelsCompile, EveryPointwiseConfigFitsSm80AndSm90) {
  compile_every_config<PointwiseGemmSpec>(representative(32, 64, 1, 1, 1), 100);
}

TEST(CudaKernelsCompile, EveryDirect3x3ConfigFitsSm80AndSm90) {
  compile_every_config<DirectConv3x3Spec>(representative(16, 32, 1, 3, 2), 100);
}

// The check above can fail: a config the space excludes (1024 threads of 64 accumulators each,
// where __launch_bounds__ leaves 64 registers a thread) compiles, but spills.
TEST(CudaKernelsCompile, ResourceCheckCatchesAConfigOutsideTheSpace) {
  const TunableOp op = representative(32, 64, 1, 1, 1);
  // block_m, block_n, block_k, threads, vec, unroll, staged
  const auto k = knobs_for<PointwiseGemmSpec>(op, {256, 256, 8, 1024, 4, 4, 0});
  ASSERT_FALSE(PointwiseGemmSpec::launchable(k));
  const CompiledKernel compiled = compile_with_nvrtc(kernel_source<PointwiseGemmSpec>(k), 80);
  EXPECT_NE(resource_problem(compiled.resources, k.threads, arch_limits(80)), "");
}

TEST(CudaKernelsCompile, ReadsResourcesFromPtxasReport) {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'other' for 'sm_90'\n"
      "ptxas info    : Used 99 registers, used 1 barriers, 8 bytes smem\n"
      "ptxas info    : Compiling entry function 'nimble_depthwise_conv' for 'sm_90'\n"
      "ptxas info    : Function properties for nimble_depthwise_conv\n"
      "ptxas         .     16 bytes stack frame, 12 bytes spill stores, 8 bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 1 barriers, 1296 bytes smem, 400 bytes cmem[0]\n";
  const KernelResources r = parse_ptxas_report(log, "nimble_depthwise_conv");
  EXPECT_EQ(r.registers, 40);
  EXPECT_EQ(r.shared_bytes, 1296);
  EXPECT_EQ(r.stack_bytes, 16);
  EXPECT_EQ(r.spill_store_bytes, 12);
  EXPECT_EQ(r.spill_load_bytes, 8);
  EXPECT_THROW(parse_ptxas_report(log, "missing"), std::runtime_error);
}

TEST(CudaKernelsCompile, ResourceLimitsRejectWhatCannotLaunch) {
  const ArchLimits limits = arch_limits(80);
  KernelResources fits;
  fits.registers = 64;
  fits.shared_bytes = 48 * 1024;
  EXPECT_EQ(resource_problem(fits, 1024, limits), "");
  KernelResources many = fits;
  many.registers = 72;  // 1024 threads x 72 registers > 65536
  EXPECT_NE(resource_problem(many, 1024, limits), "");
  KernelResources spills = fits;
  spills.spill_store_bytes = 4;
  EXPECT_NE(resource_problem(spills, 128, limits), "");
  KernelResources shared = fits;
  shared.shared_bytes = 48 * 1024 + 4;
  EXPECT_NE(resource_problem(shared, 128, limits), "");
  EXPECT_NE(resource_problem(fits, 1025, limits), "");
  EXPECT_THROW(arch_limits(50), std::invalid_argument);
}

TEST(CudaKernelsCompile, CubinCacheKeysBySourceOptionsAndArchitecture) {
  // POSIX calls: libtorch's exported std::filesystem interposes on the test's (cubin_cache.cpp).
  char pattern[] = "/tmp/nimble_cubins_XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string dir = std::string(pattern) + "/cache";
  const CubinCache cache(dir);
  const TunableOp op = representative(8, 8, 8, 3, 1);
  const auto configs = launchable_configs<DepthwiseConvSpec>(op);
  const KernelSource a =
      kernel_source<DepthwiseConvSpec>(knobs_for<DepthwiseConvSpec>(op, configs[0]));
  const KernelSource b =
      kernel_source<DepthwiseConvSpec>(knobs_for<DepthwiseConvSpec>(op, configs[1]));
  EXPECT_NE(CubinCache::key(a, 80), CubinCache::key(b, 80));
  EXPECT_NE(CubinCache::key(a, 80), CubinCache::key(a, 90));
  KernelSource edited = a;
  edited.text += "\n// edited\n";
  EXPECT_NE(CubinCache::key(a, 80), CubinCache::key(edited, 80));

  const CompiledKernel first = cache.compile(a, 80);
  const std::string file = dir + "/sm_80/" + CubinCache::key(a, 80) + ".cubin";
  ASSERT_EQ(access(file.c_str(), R_OK), 0) << file;
  const auto start = std::chrono::steady_clock::now();
  const CompiledKernel second = cache.compile(a, 80);
  EXPECT_EQ(second.cubin, first.cubin);
  EXPECT_EQ(second.resources.registers, first.resources.registers);
  EXPECT_EQ(second.resources.shared_bytes, first.resources.shared_bytes);
  // Read from disk, not compiled again (NVRTC takes ~0.1 s).
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 0.05);
  for (const std::string& path : {file, dir + "/sm_80", dir, std::string(pattern)})
    EXPECT_EQ(std::remove(path.c_str()), 0) << path;
}

TEST(CudaKernelsCompile, SpaceOfACudaOpHoldsOnlyLaunchableConfigs) {
  TunableOp op = representative(32, 32, 32, 3, 1);
  op.device = c10::DeviceType::CUDA;
  const KernelSpace space(op, cuda_families(""));
  ASSERT_FALSE(space.empty());
  const tuning::Knob& family = space.knobs().knobs()[0];
  std::vector<std::string> names;
  for (int i = 0; i < family.size(); ++i) names.push_back(family.label(i));
  EXPECT_EQ(names, (std::vector<std::string>{"cudnn", "cuda_depthwise"}));
  std::mt19937_64 rng(5);
  int depthwise = 0;
  for (int i = 0; i < 300; ++i) {
    const tuning::Config config = space.knobs().random_config(rng);
    if (space.family(config).name() != "cuda_depthwise") continue;
    ++depthwise;
    std::vector<int64_t> tuned;
    for (const tuning::Knob& knob : DepthwiseConvSpec::tuned_knobs())
      tuned.push_back(KnobValues(space.knobs(), config, "cuda_depthwise.").value(knob.name()));
    EXPECT_TRUE(DepthwiseConvSpec::launchable(knobs_for<DepthwiseConvSpec>(op, tuned)))
        << space.describe(config);
  }
  EXPECT_GT(depthwise, 50);
}

}  // namespace
}  // namespace nimble::kernels::cuda
