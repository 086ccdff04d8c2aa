// tests/support/safetensors_builder.h: writes small safetensors files byte by byte, so
// tests can hand-make valid and deliberately corrupt checkpoints without Python. The JSON
// header is written as text, so a test can also swap in any header it likes.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace lorakv::testing {

class SafetensorsBuilder {
 public:
  struct Tensor {
    std::string name;
    std::string dtype;            // "F32", "F16", ... written as is (unknown ones too)
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;    // raw little-endian bytes
    // When set, written instead of the computed [begin, end).
    std::optional<std::pair<uint64_t, uint64_t>> offsets;
    // When set, the whole entry's JSON value is written as this text.
    std::optional<std::string> entry_json;
  };

  std::map<std::string, std::string> metadata;  // written as "__metadata__" when non-empty
  std::vector<Tensor> tensors;
  std::optional<std::string> header_json;        // replaces the generated header text
  std::optional<uint64_t> header_length;         // replaces the real header length
  std::vector<uint8_t> trailing;                 // extra bytes after the data

  Tensor& add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
              std::vector<uint8_t> data) {
    tensors.push_back(Tensor{name, dtype, std::move(shape), std::move(data), std::nullopt, std::nullopt});
    return tensors.back();
  }
  Tensor& add_f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values) {
    return add(name, "F32", std::move(shape), raw(values));
  }
  // F16 and BF16 take bit patterns, so the test states the exact stored halves.
  Tensor& add_f16(const std::string& name, std::vector<int64_t> shape, const std::vector<uint16_t>& bits) {
    return add(name, "F16", std::move(shape), raw(bits));
  }
  Tensor& add_bf16(const std::string& name, std::vector<int64_t> shape, const std::vector<uint16_t>& bits) {
    return add(name, "BF16", std::move(shape), raw(bits));
  }

  // The header as the builder would write it (before padding).
  std::string header() const {
    if (header_json) return *header_json;
    std::string h = "{";
    bool first = true;
    const auto sep = [&] { h += first ? "" : ","; first = false; };
    if (!metadata.empty()) {
      sep();
      h += "\"__metadata__\":{";
      bool first_kv = true;
      for (const auto& [k, v] : metadata) {
        h += (first_kv ? "\"" : ",\"") + k + "\":\"" + v + "\"";
        first_kv = false;
      }
      h += "}";
    }
    uint64_t offset = 0;
    for (const Tensor& t : tensors) {
      sep();
      h += "\"" + t.name + "\":";
      const auto [begin, end] = t.offsets.value_or(std::pair(offset, offset + t.data.size()));
      offset += t.data.size();
      if (t.entry_json) {
        h += *t.entry_json;
        continue;
      }
      h += "{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
      for (size_t k = 0; k < t.shape.size(); ++k) h += (k ? "," : "") + std::to_string(t.shape[k]);
      h += "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
    }
    return h + "}";
  }

  std::vector<uint8_t> bytes() const {
    std::string h = header();
    if (!header_json) h.resize((h.size() + 7) / 8 * 8, ' ');  // pad as the reference writer does
    // Sized up front: GCC 12's -Warray-bounds misfires on inserting into a tiny vector.
    std::vector<uint8_t> out(8 + h.size());
    const uint64_t n = header_length.value_or(h.size());
    std::memcpy(out.data(), &n, 8);
    std::memcpy(out.data() + 8, h.data(), h.size());
    for (const Tensor& t : tensors) out.insert(out.end(), t.data.begin(), t.data.end());
    out.insert(out.end(), trailing.begin(), trailing.end());
    return out;
  }

  void write(const std::string& path, size_t truncate_to = SIZE_MAX) const {
    std::vector<uint8_t> b = bytes();
    if (truncate_to < b.size()) b.resize(truncate_to);
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }

  template <typename T>
  static std::vector<uint8_t> raw(const std::vector<T>& values) {
    std::vector<uint8_t> out(values.size() * sizeof(T));
    if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
    return out;
  }
};

}  // namespace lorakv::testing
