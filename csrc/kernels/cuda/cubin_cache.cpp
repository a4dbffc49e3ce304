#include "csrc/kernels/cuda/cubin_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <sstream>

namespace nimble::kernels::cuda {
namespace {

constexpr const char* kMagic = "nimble-cubin-1";

void hash_bytes(uint64_t& h, const std::string& bytes) {
  for (const unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  // A separator, so that ("ab", "c") and ("a", "bc") hash apart.
  h ^= 0xff;
  h *= 1099511628211ull;
}

// POSIX calls, not std::filesystem: libtorch exports its own build of std::filesystem, whose
// symbols then interpose on ours (remove_all crashed in a test).
void make_directories(const std::string& directory) {
  for (size_t at = 1; at != std::string::npos; ++at) {
    at = directory.find('/', at);
    const std::string prefix = directory.substr(0, at);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
      throw std::runtime_error("could not create " + prefix + ": " + std::strerror(errno));
    if (at == std::string::npos) break;
  }
}

bool read_cached(const std::string& path, CompiledKernel& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::string magic;
  KernelResources& r = out.resources;
  size_t size = 0;
  if (!(in >> magic >> r.registers >> r.shared_bytes >> r.stack_bytes >> r.spill_store_bytes >>
        r.spill_load_bytes >> size) ||
      magic != kMagic || in.get() != '\n')
    return false;
  out.cubin.resize(size);
  return static_cast<bool>(in.read(out.cubin.data(), static_cast<std::streamsize>(size)));
}

void write_cached(const std::string& directory, const std::string& path,
                  const CompiledKernel& kernel) {
  make_directories(directory);
  const std::string temporary = path + ".tmp" + std::to_string(static_cast<long>(getpid()));
  {
    std::ofstream out(temporary, std::ios::binary);
    const KernelResources& r = kernel.resources;
    out << kMagic << " " << r.registers << " " << r.shared_bytes << " " << r.stack_bytes << " "
        << r.spill_store_bytes << " " << r.spill_load_bytes << " " << kernel.cubin.size() << "\n";
    out.write(kernel.cubin.data(), static_cast<std::streamsize>(kernel.cubin.size()));
    if (!out) throw std::runtime_error("could not write the compiled kernel " + temporary);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0)
    throw std::runtime_error("could not rename " + temporary + " to " + path + ": " +
                             std::strerror(errno));
}

}  // namespace

std::string CubinCache::key(const KernelSource& source, int sm) {
  uint64_t h = 14695981039346656037ull;
  hash_bytes(h, source.text);
  for (const auto& [name, text] : source.headers) {
    hash_bytes(h, name);
    hash_bytes(h, text);
  }
  hash_bytes(h, source.entry);
  for (const std::string& option : source.options) hash_bytes(h, option);
  hash_bytes(h, "sm_" + std::to_string(sm));
  std::ostringstream out;
  out << std::hex << std::setw(16) << std::setfill('0') << h;
  return out.str();
}

CompiledKernel CubinCache::compile(const KernelSource& source, int sm) const {
  if (directory_.empty()) return compile_with_nvrtc(source, sm);
  const std::string directory = directory_ + "/sm_" + std::to_string(sm);
  const std::string path = directory + "/" + key(source, sm) + ".cubin";
  CompiledKernel kernel;
  if (read_cached(path, kernel)) return kernel;
  kernel = compile_with_nvrtc(source, sm);
  write_cached(directory, path, kernel);
  return kernel;
}

}  // namespace nimble::kernels::cuda
