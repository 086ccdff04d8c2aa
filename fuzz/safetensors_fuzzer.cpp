// fuzz/safetensors_fuzzer.cpp: the safetensors reader on arbitrary bytes: header length,
// JSON header, every entry's checks, and conversion of every F32/F16/BF16 tensor.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "lorakv/formats/safetensors_file.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using lorakv::formats::SafetensorsFile;
  lorakv::fuzz::expect_only_typed_errors("safetensors", [&] {
    auto f = SafetensorsFile::parse_bytes(lorakv::fuzz::exact_copy(data, size), "fuzz.safetensors");
    std::vector<float> out;
    for (const auto& t : f->tensors()) {
      (void)f->tensor(t.name);
      // Every tensor's bytes are inside the file, so its element count is bounded by it.
      out.resize(static_cast<size_t>(t.num_elements));
      lorakv::fuzz::expect_only_typed_errors("safetensors", [&] { lorakv::formats::convert_to_f32(t, out.data()); });
    }
  });
  return 0;
}
