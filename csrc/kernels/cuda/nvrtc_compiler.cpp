#include "csrc/kernels/cuda/nvrtc_compiler.h"

#include <nvrtc.h>

#include <regex>
#include <sstream>
#include <stdexcept>

namespace nimble::kernels::cuda {
namespace {

void check(nvrtcResult result, const char* what) {
  if (result != NVRTC_SUCCESS)
    throw std::runtime_error(std::string(what) + " failed: " + nvrtcGetErrorString(result));
}

// An NVRTC program, destroyed with its owner.
class OwnedProgram {
 public:
  explicit OwnedProgram(const KernelSource& source) {
    std::vector<const char*> texts, names;
    for (const auto& [name, text] : source.headers) {
      names.push_back(name.c_str());
      texts.push_back(text.c_str());
    }
    check(nvrtcCreateProgram(&program_, source.text.c_str(), source.name.c_str(),
                             static_cast<int>(texts.size()), texts.data(), names.data()),
          "nvrtcCreateProgram");
  }
  ~OwnedProgram() { nvrtcDestroyProgram(&program_); }
  OwnedProgram(const OwnedProgram&) = delete;
  OwnedProgram& operator=(const OwnedProgram&) = delete;
  nvrtcProgram get() const { return program_; }

 private:
  nvrtcProgram program_ = nullptr;
};

std::string program_log(nvrtcProgram program) {
  size_t size = 0;
  check(nvrtcGetProgramLogSize(program, &size), "nvrtcGetProgramLogSize");
  std::string log(size, '\0');
  check(nvrtcGetProgramLog(program, log.data()), "nvrtcGetProgramLog");
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

int read_int(const std::string& text, const std::regex& pattern) {
  std::smatch m;
  return std::regex_search(text, m, pattern) ? std::stoi(m[1].str()) : 0;
}

}  // namespace

ArchLimits arch_limits(int sm) {
  // Every architecture from Volta on shares these per-block limits; what differs (the opt-in
  // shared memory beyond 48 KiB) nimble does not use.
  if (sm < 70 || sm > 120)
    throw std::invalid_argument("no resource limits known for sm_" + std::to_string(sm) +
                                " (expected a compute capability from 7.0 to 12.0)");
  ArchLimits limits;
  limits.sm = sm;
  return limits;
}

std::string resource_problem(const KernelResources& r, int threads, const ArchLimits& limits) {
  std::ostringstream why;
  if (r.registers < 0) why << "no register count in ptxas's report; ";
  if (threads > limits.max_threads_per_block)
    why << threads << " threads per block, sm_" << limits.sm << " allows "
        << limits.max_threads_per_block << "; ";
  if (r.registers > limits.registers_per_thread)
    why << r.registers << " registers per thread, at most " << limits.registers_per_thread << "; ";
  // Registers are allocated per warp in units of 256: round the thread's count up to 8.
  const int per_thread = (r.registers + 7) / 8 * 8;
  const int warps = (threads + 31) / 32;
  if (per_thread * 32 * warps > limits.registers_per_block)
    why << warps << " warps x 32 x " << per_thread << " registers exceed the block's "
        << limits.registers_per_block << "; ";
  if (r.shared_bytes > limits.static_shared_bytes)
    why << r.shared_bytes << " bytes of static shared memory, at most "
        << limits.static_shared_bytes << "; ";
  if (r.spill_store_bytes > 0 || r.spill_load_bytes > 0)
    why << "spills " << r.spill_store_bytes << " bytes stored, " << r.spill_load_bytes
        << " loaded; ";
  std::string out = why.str();
  if (!out.empty()) out.resize(out.size() - 2);
  return out;
}

KernelResources parse_ptxas_report(const std::string& log, const std::string& entry) {
  // ptxas reports each entry function as
  //   ptxas info    : Compiling entry function 'NAME' for 'sm_90'
  //   ptxas info    : Function properties for NAME
  //   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
  //   ptxas info    : Used 30 registers, used 1 barriers, 240 bytes smem, ...
  const std::string start = "Compiling entry function '" + entry + "'";
  const size_t at = log.find(start);
  if (at == std::string::npos)
    throw std::runtime_error("ptxas's report names no entry function " + entry + ":\n" + log);
  size_t end = log.find("Compiling entry function", at + start.size());
  const std::string block = log.substr(at, end == std::string::npos ? end : end - at);
  KernelResources r;
  r.registers = read_int(block, std::regex(R"(Used (\d+) registers)"));
  if (block.find("Used ") == std::string::npos) r.registers = -1;
  r.shared_bytes = read_int(block, std::regex(R"((\d+) bytes smem)"));
  r.stack_bytes = read_int(block, std::regex(R"((\d+) bytes stack frame)"));
  r.spill_store_bytes = read_int(block, std::regex(R"((\d+) bytes spill stores)"));
  r.spill_load_bytes = read_int(block, std::regex(R"((\d+) bytes spill loads)"));
  return r;
}

CompiledKernel compile_with_nvrtc(const KernelSource& source, int sm) {
  const OwnedProgram program(source);
  std::vector<std::string> options = source.options;
  options.push_back("--gpu-architecture=sm_" + std::to_string(sm));
  options.push_back("-std=c++17");
  options.push_back("-Xptxas");
  options.push_back("-v");
  std::vector<const char*> argv;
  for (const std::string& o : options) argv.push_back(o.c_str());
  const nvrtcResult result =
      nvrtcCompileProgram(program.get(), static_cast<int>(argv.size()), argv.data());
  const std::string log = program_log(program.get());
  if (result != NVRTC_SUCCESS)
    throw std::runtime_error("NVRTC could not compile " + source.name + " for sm_" +
                             std::to_string(sm) + " (" + nvrtcGetErrorString(result) + "):\n" +
                             log);
  CompiledKernel out;
  size_t size = 0;
  check(nvrtcGetCUBINSize(program.get(), &size), "nvrtcGetCUBINSize");
  out.cubin.resize(size);
  check(nvrtcGetCUBIN(program.get(), out.cubin.data()), "nvrtcGetCUBIN");
  out.resources = parse_ptxas_report(log, source.entry);
  return out;
}

}  // namespace nimble::kernels::cuda
