// fuzz/gguf_fuzzer.cpp: the GGUF reader on arbitrary bytes: header, metadata, tensor
// infos, every typed getter on every key, and dequantisation of every (small) tensor.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lorakv/formats/ggml_types.h"
#include "lorakv/formats/gguf_file.h"
#include "fuzz/fuzz_support.h"

namespace {

using lorakv::formats::GgufFile;

// Each getter on its own: a wrong type is a ModelLoadError, anything else a finding.
void read_every_key(const GgufFile& f) {
  for (const auto& entry : f.metadata()) {
    const std::string& key = entry.first;  // a named copy: lambdas cannot capture bindings (C++17)
    (void)entry.second.describe();
    lorakv::fuzz::expect_only_typed_errors("gguf", [&] { (void)f.get_string(key); });
    lorakv::fuzz::expect_only_typed_errors("gguf", [&] { (void)f.get_int(key); });
    lorakv::fuzz::expect_only_typed_errors("gguf", [&] { (void)f.get_float(key); });
    lorakv::fuzz::expect_only_typed_errors("gguf", [&] { (void)f.get_bool(key); });
    lorakv::fuzz::expect_only_typed_errors("gguf", [&] { (void)f.get_string_array(key); });
    lorakv::fuzz::expect_only_typed_errors("gguf", [&] { (void)f.get_int_array(key); });
    lorakv::fuzz::expect_only_typed_errors("gguf", [&] { (void)f.get_float_array(key); });
  }
}

// The reader promises that every tensor's bytes lie inside the file: dequantising reads
// all of them, so ASan sees any broken promise.
void dequantize_small_tensors(const GgufFile& f) {
  constexpr int64_t kMaxElements = int64_t{1} << 16;
  std::vector<float> out;
  for (const auto& t : f.tensors()) {
    if (t.num_elements == 0 || t.num_elements > kMaxElements) continue;
    out.resize(static_cast<size_t>(t.num_elements));
    lorakv::formats::dequantize_to_f32(t.type(), t.data, out.data(), t.num_elements);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lorakv::fuzz::expect_only_typed_errors("gguf", [&] {
    auto f = GgufFile::parse_bytes(lorakv::fuzz::exact_copy(data, size), "fuzz.gguf");
    read_every_key(*f);
    dequantize_small_tensors(*f);
  });
  return 0;
}
