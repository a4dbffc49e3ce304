#pragma once
// The kernel bodies of this folder as text, for NVRTC: embedded into the library when it is
// built (embed_sources.cmake), so that what NVRTC compiles is what the host build compiled.
#include <string>

namespace nimble::kernels::cuda {

// The text of the embedded file `path` ("csrc/kernels/cuda/portable.h"); throws for a file
// that was not embedded.
const std::string& embedded_source(const std::string& path);

}  // namespace nimble::kernels::cuda
