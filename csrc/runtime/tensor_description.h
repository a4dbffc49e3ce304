#pragma once
// How a replay's messages name a tensor it was handed or watches.
#include <ATen/core/Tensor.h>

#include <sstream>
#include <string>

namespace nimble {

// "a float tensor of shape [2, 3] on cpu"
inline std::string describe(const at::Tensor& t) {
  std::ostringstream out;
  out << "a " << c10::getDtypeNames(t.scalar_type()).first << " tensor of shape " << t.sizes()
      << " on " << t.device();
  return out.str();
}

// "float [2, 3] strides [3, 1] offset 4 on cpu" (no offset when it is 0)
inline std::string describe_layout(c10::ScalarType dtype, c10::Device device,
                                   c10::IntArrayRef sizes, c10::IntArrayRef strides,
                                   int64_t offset) {
  std::ostringstream out;
  out << c10::getDtypeNames(dtype).first << " " << sizes << " strides " << strides;
  if (offset != 0) out << " offset " << offset;
  out << " on " << device;
  return out.str();
}

}  // namespace nimble
