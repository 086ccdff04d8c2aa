// common/shape_string.h: a tensor shape as error messages print it, "[2, 8]" ("[]" for a
// scalar). A template over any sequence of integers (std::vector<int64_t>, at::IntArrayRef),
// so torch-free layers and ATen users print shapes the same way.
#pragma once

#include <string>

namespace lorakv {

template <typename Dims>
std::string shape_string(const Dims& dims) {
  std::string out = "[";
  bool first = true;
  for (const auto d : dims) {
    out += (first ? "" : ", ") + std::to_string(d);
    first = false;
  }
  return out + "]";
}

}  // namespace lorakv
