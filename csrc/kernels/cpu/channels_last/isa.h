#pragma once
// Which vector code a kernel runs, and the one way every CPU kernel of nimble writes code
// for several instruction sets (docs/cpu.md, "Instruction sets"):
// - The ISA belongs to the kernel object (the weights are packed for it), chosen when it is
//   made: best_isa() by default, a narrower one where tests and measurements ask. Code a
//   kernel runs, its epilogue included, takes that ISA as an argument; it never reads
//   best_isa() itself, so a test of the AVX2 kernel runs AVX2 code all the way.
// - The vector code is written once, over `Ops` (the vector type, its width, loads, stores,
//   arithmetic: vector_ops.h, plus the kernel's own tuning constants), in a `<kernel>.inc`
//   file. The kernel's .cpp includes it once per ISA inside `namespace avx512` / `avx2`,
//   between `#pragma GCC push_options`, `#pragma GCC target(...)` and `pop_options`, so that
//   every function there, lambdas and templates included, is compiled for that ISA (a target
//   cannot be a template argument in GCC, and target_clones' ifunc resolvers crash TSan
//   binaries). A switch over the Isa picks the namespace.
// - Plain C++ that the compiler vectorizes needs no .inc: its templates are always inlined
//   into a function of each region, through run_for_isa() below.
// - Every header is included before the first region, and code inside one calls no C
//   library function that _FORTIFY_SOURCE wraps (memcpy, memset, memmove, snprintf, ...):
//   the wrapper is an always-inline function of the default target, which GCC cannot inline
//   into a region of another one, and the build fails (CMakeLists.txt builds with that
//   flag for this reason). Use __builtin_memcpy or plain loops there.
#include <cstdint>

namespace nimble::kernels::nhwc {

enum class Isa : int8_t { kPortable, kAvx2, kAvx512 };  // kAvx2 means AVX2 with FMA
// The best this CPU supports (read at run time, not what the build machine had), capped by
// the environment variable NIMBLE_CPU_ISA ("avx2", "portable") when it is set: to run and
// measure the AVX2 code, and the rules that choose for an AVX2 machine, on an AVX-512 one.
// Read once, on first use; an unknown value throws.
Isa best_isa();
bool isa_capped();              // whether NIMBLE_CPU_ISA keeps best_isa() below what the CPU has
bool supports(Isa isa);         // whether this CPU can run `isa`
const char* isa_name(Isa isa);  // "portable", "avx2", "avx512"

// Each instantiation is compiled for its ISA, and so is `f` where it is inlined into it.
namespace isa_detail {
#pragma GCC push_options
#pragma GCC target("avx512f")
template <typename F>
void run_avx512(const F& f) {
  f();
}
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx2,fma")
template <typename F>
void run_avx2(const F& f) {
  f();
}
#pragma GCC pop_options
}  // namespace isa_detail

// Runs f() compiled for `isa`, for kernels written as plain C++ that GCC vectorizes: `f` is
// a lambda marked always_inline (`[&]() __attribute__((always_inline)) { ... }`) whose body
// calls always-inline templates only, so that all of it is compiled inside the ISA's copy.
template <typename F>
void run_for_isa(Isa isa, const F& f) {
  switch (isa) {
    case Isa::kAvx512:
      return isa_detail::run_avx512(f);
    case Isa::kAvx2:
      return isa_detail::run_avx2(f);
    case Isa::kPortable:
      return f();
  }
}

}  // namespace nimble::kernels::nhwc
