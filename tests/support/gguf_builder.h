// tests/support/gguf_builder.h: writes small GGUF v3 files byte by byte, so tests can
// hand-make valid and deliberately corrupt models without any Python or real weights.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace lorakv::testing {

class GgufBuilder {
 public:
  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;  // ggml order: dims[0] contiguous
    uint32_t type = 0;          // ggml type id
    std::vector<uint8_t> data;  // raw bytes as stored
  };

  uint32_t magic = 0x46554747;
  uint32_t version = 3;
  uint64_t alignment = 32;

  void add_string(const std::string& key, const std::string& value) {
    kv_key(key, 8);
    put_string(kv_, value);
    ++num_kv_;
  }
  void add_u32(const std::string& key, uint32_t value) {
    kv_key(key, 4);
    put(kv_, value);
    ++num_kv_;
  }
  void add_f32(const std::string& key, float value) {
    kv_key(key, 6);
    put(kv_, value);
    ++num_kv_;
  }
  void add_bool(const std::string& key, bool value) {
    kv_key(key, 7);
    put<uint8_t>(kv_, value ? 1 : 0);
    ++num_kv_;
  }
  void add_string_array(const std::string& key, const std::vector<std::string>& values) {
    kv_key(key, 9);
    put<uint32_t>(kv_, 8);
    put<uint64_t>(kv_, values.size());
    for (const auto& v : values) put_string(kv_, v);
    ++num_kv_;
  }
  void add_u32_array(const std::string& key, const std::vector<uint32_t>& values) {
    kv_key(key, 9);
    put<uint32_t>(kv_, 4);
    put<uint64_t>(kv_, values.size());
    for (uint32_t v : values) put(kv_, v);
    ++num_kv_;
  }
  void add_i32_array(const std::string& key, const std::vector<int32_t>& values) {
    kv_key(key, 9);
    put<uint32_t>(kv_, 5);
    put<uint64_t>(kv_, values.size());
    for (int32_t v : values) put(kv_, v);
    ++num_kv_;
  }
  // Appends a raw key with an arbitrary type code and payload (for corrupt-type tests).
  void add_raw(const std::string& key, uint32_t type, const std::vector<uint8_t>& payload) {
    kv_key(key, type);
    kv_.insert(kv_.end(), payload.begin(), payload.end());
    ++num_kv_;
  }
  void add_f32_tensor(const std::string& name, std::vector<int64_t> dims, const std::vector<float>& values) {
    Tensor t{name, std::move(dims), 0, {}};
    t.data.resize(values.size() * 4);
    std::memcpy(t.data.data(), values.data(), t.data.size());
    tensors.push_back(std::move(t));
  }

  std::vector<Tensor> tensors;
  // When set, tensor i's offset is written as this value instead of the computed one.
  std::vector<int64_t> offset_override;

  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out;
    put(out, magic);
    put(out, version);
    put<int64_t>(out, static_cast<int64_t>(tensors.size()));
    put<int64_t>(out, num_kv_);
    out.insert(out.end(), kv_.begin(), kv_.end());
    std::vector<uint64_t> offsets;
    uint64_t offset = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = tensors[i];
      put_string(out, t.name);
      put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
      for (int64_t d : t.dims) put(out, d);
      put(out, t.type);
      const uint64_t written =
          i < offset_override.size() && offset_override[i] >= 0 ? static_cast<uint64_t>(offset_override[i]) : offset;
      put(out, written);
      offsets.push_back(offset);
      offset += align_up(t.data.size());
    }
    out.resize(align_up(out.size()), 0);
    for (const Tensor& t : tensors) {
      out.insert(out.end(), t.data.begin(), t.data.end());
      out.resize(align_up(out.size()), 0);
    }
    return out;
  }

  void write(const std::string& path, size_t truncate_to = SIZE_MAX) const {
    std::vector<uint8_t> b = bytes();
    if (truncate_to < b.size()) b.resize(truncate_to);
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }

 private:
  template <typename T>
  static void put(std::vector<uint8_t>& out, T v) {
    uint8_t buf[sizeof(T)];
    std::memcpy(buf, &v, sizeof(T));
    out.insert(out.end(), buf, buf + sizeof(T));
  }
  static void put_string(std::vector<uint8_t>& out, const std::string& s) {
    put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  void kv_key(const std::string& key, uint32_t type) {
    put_string(kv_, key);
    put(kv_, type);
  }
  uint64_t align_up(uint64_t n) const { return n + (alignment - n % alignment) % alignment; }

  std::vector<uint8_t> kv_;
  int64_t num_kv_ = 0;
};

// A unique scratch path under the system temp dir for one test.
std::string temp_path(const std::string& name);

}  // namespace lorakv::testing
