// tests/support/reference_values.h: reading an oracle's values (JSON arrays, float32
// tensors of a safetensors file) and comparing logits. Header-only: only the test binaries
// that link libtorch include it (lorakv_test_support itself stays torch-free).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "formats/json.h"
#include "formats/safetensors_file.h"

namespace lorakv::testing {

inline std::vector<int32_t> json_ints(const formats::JsonValue& v) {
  std::vector<int32_t> out;
  for (const formats::JsonValue& e : v.as_array()) out.push_back(static_cast<int32_t>(e.as_int()));
  return out;
}

inline std::vector<double> json_doubles(const formats::JsonValue& v) {
  std::vector<double> out;
  for (const formats::JsonValue& e : v.as_array()) out.push_back(e.as_double());
  return out;
}

// A float32 tensor of the file, copied out (the file may be closed afterwards).
inline at::Tensor float_tensor(const formats::SafetensorsFile& file, const std::string& name) {
  const formats::SafetensorsTensorInfo& t = file.tensor(name);
  return at::from_blob(const_cast<uint8_t*>(t.data), t.shape, at::kFloat).clone();
}

// max |ours - ref| / max |ref|: the logits error measure of every parity test.
inline double relative_error(const at::Tensor& ours, const at::Tensor& ref) {
  return (ours - ref).abs().max().item<double>() / ref.abs().max().item<double>();
}

}  // namespace lorakv::testing
