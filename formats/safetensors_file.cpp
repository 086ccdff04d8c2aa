// formats/safetensors_file.cpp: safetensors parsing. The header goes through the strict
// JSON parser (which already rejects duplicate names); every entry, size and offset is
// then checked before a data pointer is handed out, so a corrupt file becomes a
// ModelLoadError naming the file and the tensor, never an out-of-bounds read.
#include "lorakv/formats/safetensors_file.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>
#include <numeric>
#include <utility>

#include "lorakv/common/errors.h"
#include "lorakv/formats/ggml_types.h"
#include "lorakv/formats/json.h"

namespace lorakv::formats {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");

// The reference implementation refuses headers above 100 MB; so do we.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeInfo {
  const char* name;
  SafetensorsDtype dtype;
  int64_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {"BOOL", SafetensorsDtype::kBool, 1},       {"U8", SafetensorsDtype::kU8, 1},
    {"I8", SafetensorsDtype::kI8, 1},           {"F8_E4M3", SafetensorsDtype::kF8_E4M3, 1},
    {"F8_E4M3FNUZ", SafetensorsDtype::kF8_E4M3FNUZ, 1}, {"F8_E5M2", SafetensorsDtype::kF8_E5M2, 1},
    {"F8_E5M2FNUZ", SafetensorsDtype::kF8_E5M2FNUZ, 1}, {"F8_E8M0", SafetensorsDtype::kF8_E8M0, 1},
    {"I16", SafetensorsDtype::kI16, 2},         {"U16", SafetensorsDtype::kU16, 2},
    {"F16", SafetensorsDtype::kF16, 2},         {"BF16", SafetensorsDtype::kBF16, 2},
    {"I32", SafetensorsDtype::kI32, 4},         {"U32", SafetensorsDtype::kU32, 4},
    {"F32", SafetensorsDtype::kF32, 4},         {"F64", SafetensorsDtype::kF64, 8},
    {"I64", SafetensorsDtype::kI64, 8},         {"U64", SafetensorsDtype::kU64, 8},
    {"C64", SafetensorsDtype::kC64, 8},
};

// kDtypes lists the enum in order, so it doubles as the enum's lookup table.
const DtypeInfo& dtype_info(SafetensorsDtype dtype) {
  const auto k = static_cast<size_t>(dtype);
  LORAKV_ASSERT(k < std::size(kDtypes) && kDtypes[k].dtype == dtype, "unlisted safetensors dtype " << k);
  return kDtypes[k];
}

[[noreturn]] void fail(const std::string& path, const std::string& message, const std::string& key,
                       const std::string& expected, const std::string& found, const std::string& hint = "") {
  throw ModelLoadError(message, {path, key, expected, found, hint});
}

// A non-negative integer field (a shape dimension or an offset) of tensor `name`.
uint64_t read_count(const std::string& path, const std::string& name, const char* field, const JsonValue& v) {
  if (!v.is_number() || !v.as_number().integer || *v.as_number().integer < 0) {
    fail(path, std::string("tensor ") + field + " is not a non-negative integer", name, "an integer >= 0", v.describe());
  }
  return static_cast<uint64_t>(*v.as_number().integer);
}

const JsonValue& require_member(const std::string& path, const std::string& name, const JsonValue& entry,
                                const char* field, JsonType type) {
  const JsonValue* v = entry.find(field);
  if (v == nullptr) {
    fail(path, std::string("tensor entry has no \"") + field + "\"", name,
         std::string("a \"") + field + "\" " + json_type_name(type), "nothing");
  }
  if (v->type() != type) {
    fail(path, std::string("tensor \"") + field + "\" has the wrong type", name, json_type_name(type), v->describe());
  }
  return *v;
}

}  // namespace

const char* safetensors_dtype_name(SafetensorsDtype dtype) { return dtype_info(dtype).name; }
int64_t safetensors_dtype_size(SafetensorsDtype dtype) { return dtype_info(dtype).size; }

SafetensorsFile::SafetensorsFile(const std::string& path) : map_(path) {}
SafetensorsFile::SafetensorsFile(const std::string& name, std::vector<uint8_t> bytes) : map_(name, std::move(bytes)) {}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile(path));
  file->parse();
  return file;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::parse_bytes(std::vector<uint8_t> bytes, const std::string& name) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile(name, std::move(bytes)));
  file->parse();
  return file;
}

void SafetensorsFile::parse() {
  const std::string& path = map_.path();
  if (map_.size() < 8) {
    fail(path, "file is truncated while reading the header length", "", "at least 8 bytes",
         std::to_string(map_.size()) + " bytes", "the download may be incomplete; fetch it again");
  }
  std::memcpy(&header_size_, map_.data(), 8);
  if (header_size_ > kMaxHeaderBytes) {
    fail(path, "header length is implausibly large", "", "at most " + std::to_string(kMaxHeaderBytes) + " bytes",
         std::to_string(header_size_) + " bytes", "is this a safetensors file?");
  }
  if (header_size_ > map_.size() - 8) {
    fail(path, "header length runs past the end of the file", "",
         "at most " + std::to_string(map_.size() - 8) + " bytes", std::to_string(header_size_) + " bytes",
         "the file is truncated or not a safetensors file");
  }
  JsonValue header;
  try {
    JsonParseOptions options;
    options.source = path;
    options.max_bytes = kMaxHeaderBytes;
    header = parse_json({reinterpret_cast<const char*>(map_.data()) + 8, header_size_}, options);
  } catch (const ConfigError& e) {
    ErrorContext c = e.context();
    c.hint = "the header is corrupt; is this a safetensors file?";
    throw ModelLoadError("invalid safetensors header: " + e.message(), c);
  }
  if (!header.is_object()) {
    fail(path, "safetensors header is not a JSON object", "", "an object", header.describe());
  }

  const uint64_t data_start = 8 + header_size_;
  const uint64_t data_size = map_.size() - data_start;
  for (const auto& [name, entry] : header.as_object()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(path, "__metadata__ is not an object", name, "an object of strings", entry.describe());
      for (const auto& [key, value] : entry.as_object()) {
        if (!value.is_string()) fail(path, "__metadata__ value is not a string", "__metadata__." + key, "a string", value.describe());
        metadata_.emplace(key, value.as_string());
      }
      continue;
    }
    if (!entry.is_object()) fail(path, "tensor entry is not an object", name, "{dtype, shape, data_offsets}", entry.describe());
    SafetensorsTensorInfo info;
    info.name = name;
    info.file = path;

    const std::string& dtype = require_member(path, name, entry, "dtype", JsonType::kString).as_string();
    const auto known = std::find_if(std::begin(kDtypes), std::end(kDtypes), [&](const DtypeInfo& d) { return dtype == d.name; });
    if (known == std::end(kDtypes)) {
      fail(path, "unknown tensor dtype", name, "a safetensors dtype such as F32, F16 or BF16", "\"" + dtype + "\"",
           "the file may come from a newer safetensors version");
    }
    info.dtype = known->dtype;

    uint64_t count = 1;
    for (const JsonValue& dim : require_member(path, name, entry, "shape", JsonType::kArray).as_array()) {
      const uint64_t d = read_count(path, name, "shape dimension", dim);
      if (d != 0 && count > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / d) {
        fail(path, "tensor element count overflows", name, "a count below 2^63", "overflow");
      }
      count *= d;
      info.shape.push_back(static_cast<int64_t>(d));
    }
    const uint64_t elem = static_cast<uint64_t>(known->size);
    if (count > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / elem) {
      fail(path, "tensor byte size overflows", name, "a size below 2^63", "overflow");
    }
    info.num_elements = static_cast<int64_t>(count);
    info.num_bytes = static_cast<int64_t>(count * elem);

    const JsonValue& offsets = require_member(path, name, entry, "data_offsets", JsonType::kArray);
    if (offsets.size() != 2) fail(path, "tensor data_offsets is not a [begin, end] pair", name, "2 integers", offsets.describe());
    const uint64_t begin = read_count(path, name, "data offset", offsets.at(size_t{0}));
    const uint64_t end = read_count(path, name, "data offset", offsets.at(size_t{1}));
    if (end < begin) {
      fail(path, "tensor data_offsets end before they begin", name, "begin <= end",
           "[" + std::to_string(begin) + ", " + std::to_string(end) + "]");
    }
    if (end - begin != static_cast<uint64_t>(info.num_bytes)) {
      fail(path, "tensor byte size does not match its shape and dtype", name,
           std::to_string(info.num_bytes) + " bytes (" + std::to_string(count) + " x " + dtype + ")",
           std::to_string(end - begin) + " bytes in data_offsets");
    }
    if (end > data_size) {
      fail(path, "tensor data out of bounds", name,
           "bytes [" + std::to_string(begin) + ", " + std::to_string(end) + ") inside a data buffer of " +
               std::to_string(data_size) + " bytes",
           "they run past the end of the file", "the file is truncated or corrupt");
    }
    info.data_begin = begin;
    info.data = map_.data() + data_start + begin;
    if (!index_.emplace(name, tensors_.size()).second) fail(path, "duplicate tensor name", name, "unique names", "a duplicate");
    tensors_.push_back(std::move(info));
  }

  // Tensors must tile the buffer exactly, as the reference implementation demands:
  // sorted by offset, each starts where the previous ended and the last ends the file.
  std::vector<size_t> order(tensors_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto& x = tensors_[a];
    const auto& y = tensors_[b];
    return std::pair(x.data_begin, x.num_bytes) < std::pair(y.data_begin, y.num_bytes);
  });
  uint64_t expected = 0;
  const SafetensorsTensorInfo* previous = nullptr;
  for (size_t k : order) {
    const SafetensorsTensorInfo& t = tensors_[k];
    if (t.data_begin < expected) {
      fail(path, "tensor data overlaps another tensor", t.name, "data starting at byte " + std::to_string(expected) +
           " or later (after '" + previous->name + "')", "data starting at byte " + std::to_string(t.data_begin));
    }
    if (t.data_begin > expected) {
      fail(path, "gap in the data buffer before a tensor", t.name, "data starting at byte " + std::to_string(expected),
           "data starting at byte " + std::to_string(t.data_begin), "safetensors forbids unused bytes between tensors");
    }
    expected = t.data_begin + static_cast<uint64_t>(t.num_bytes);
    previous = &t;
  }
  if (expected != data_size) {
    fail(path, "data buffer has bytes that belong to no tensor", "", std::to_string(expected) + " bytes of data",
         std::to_string(data_size) + " bytes", "the file is corrupt");
  }
}

const SafetensorsTensorInfo* SafetensorsFile::find_tensor(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const SafetensorsTensorInfo& SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsTensorInfo* t = find_tensor(name);
  if (t == nullptr) {
    fail(path(), "required tensor is missing", name, "a tensor of that name",
         "none among " + std::to_string(tensors_.size()) + " tensors",
         "the file may be incomplete or of another architecture");
  }
  return *t;
}

void convert_to_f32(const SafetensorsTensorInfo& tensor, float* dst) {
  const uint8_t* src = tensor.data;
  const int64_t n = tensor.num_elements;
  switch (tensor.dtype) {
    case SafetensorsDtype::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case SafetensorsDtype::kF16:
    case SafetensorsDtype::kBF16: {
      const bool half = tensor.dtype == SafetensorsDtype::kF16;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);  // the data may be unaligned
        dst[i] = half ? fp16_to_f32(bits) : bf16_to_f32(bits);
      }
      return;
    }
    default:
      fail(tensor.file, "tensor dtype cannot be converted to float32", tensor.name, "F32, F16 or BF16",
           tensor.dtype_name(), "convert the checkpoint to a float dtype");
  }
}

}  // namespace lorakv::formats
