// formats/gguf_file.cpp: GGUF parsing with a bounds-checked cursor. Every read checks
// the remaining bytes first, so a truncated or corrupt file becomes a ModelLoadError that
// names the file, the field and the byte offset, never an out-of-bounds read.
#include "lorakv/formats/gguf_file.h"

#include <cstring>
#include <limits>
#include <utility>

#include "lorakv/common/errors.h"

namespace lorakv::formats {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian uint32
constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;
constexpr uint32_t kMaxDims = 4;
constexpr int kMaxArrayNesting = 8;

// Reads little-endian values from the map, refusing to step past its end.
class Cursor {
 public:
  Cursor(const MappedFile& map) : map_(map) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return map_.size() - pos_; }

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, map_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }

  std::string read_string(const char* what) {
    const uint64_t len = read<uint64_t>(what);
    if (len > kMaxStringBytes || len > remaining()) {
      fail(std::string("string length out of bounds while reading ") + what,
           "at most " + std::to_string(remaining()) + " bytes", std::to_string(len) + " bytes");
    }
    std::string s(reinterpret_cast<const char*>(map_.data() + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

  [[noreturn]] void fail(const std::string& message, const std::string& expected,
                         const std::string& found, const std::string& key = "") const {
    throw ModelLoadError(message + " (at byte " + std::to_string(pos_) + ")",
                         {map_.path(), key, expected, found, ""});
  }

 private:
  void need(size_t n, const char* what) const {
    if (remaining() < n) {
      throw ModelLoadError(std::string("file is truncated while reading ") + what,
                           {map_.path(), "", std::to_string(n) + " more bytes at byte " + std::to_string(pos_),
                            std::to_string(remaining()), "the download may be incomplete; fetch it again"});
    }
  }

  const MappedFile& map_;
  size_t pos_ = 0;
};

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }

// The fewest bytes one value of `type` takes in the file: a string is at least its 8-byte
// length, an array at least its element type and count. Counts are checked against it, so
// nothing is allocated for elements that the remaining bytes cannot hold.
uint64_t min_encoded_bytes(GgufType type) {
  switch (type) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: return 1;
    case GgufType::kUint16: case GgufType::kInt16: return 2;
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
    case GgufType::kUint64: case GgufType::kInt64: case GgufType::kFloat64: return 8;
    case GgufType::kString: return 8;
    case GgufType::kArray: return 4 + 8;
  }
  return 1;
}

// A metadata pair: key (length + >= 0 bytes), value type, the smallest value.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
// A tensor info: name length, dimension count, one dimension, type, offset.
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

// Fails unless `count` items (`items`: "string elements"...) of at least `item_bytes`
// each fit in the remaining bytes.
void check_count_fits(const Cursor& cur, uint64_t count, uint64_t item_bytes, const std::string& what,
                      const std::string& items, const std::string& key) {
  const uint64_t most = cur.remaining() / item_bytes;
  if (count > most) {
    cur.fail(what + " out of bounds", "at most " + std::to_string(most) + " " + items + " (" +
             std::to_string(cur.remaining()) + " bytes left, " + std::to_string(item_bytes) + " or more each)",
             std::to_string(count), key);
  }
}

GgufValue read_value(Cursor& cur, GgufType type, const std::string& key, int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::kUint8: v.u = cur.read<uint8_t>("uint8 value"); break;
    case GgufType::kInt8: v.i = cur.read<int8_t>("int8 value"); break;
    case GgufType::kUint16: v.u = cur.read<uint16_t>("uint16 value"); break;
    case GgufType::kInt16: v.i = cur.read<int16_t>("int16 value"); break;
    case GgufType::kUint32: v.u = cur.read<uint32_t>("uint32 value"); break;
    case GgufType::kInt32: v.i = cur.read<int32_t>("int32 value"); break;
    case GgufType::kUint64: v.u = cur.read<uint64_t>("uint64 value"); break;
    case GgufType::kInt64: v.i = cur.read<int64_t>("int64 value"); break;
    case GgufType::kFloat32: v.f = cur.read<float>("float32 value"); break;
    case GgufType::kFloat64: v.f = cur.read<double>("float64 value"); break;
    case GgufType::kBool: {
      const uint8_t b = cur.read<uint8_t>("bool value");
      if (b > 1) cur.fail("invalid bool value", "0 or 1", std::to_string(b), key);
      v.b = b == 1;
      break;
    }
    case GgufType::kString: v.s = cur.read_string("string value"); break;
    case GgufType::kArray: {
      if (depth >= kMaxArrayNesting) cur.fail("arrays nested too deeply", "at most 8 levels", "more", key);
      const uint32_t elem = cur.read<uint32_t>("array element type");
      if (!valid_value_type(elem)) {
        cur.fail("unknown array element type", "a type code 0..12", std::to_string(elem), key);
      }
      const uint64_t count = cur.read<uint64_t>("array length");
      v.elem_type = static_cast<GgufType>(elem);
      check_count_fits(cur, count, min_encoded_bytes(v.elem_type), "array length",
                       std::string(gguf_type_name(v.elem_type)) + " elements", key);
      v.array.reserve(static_cast<size_t>(count));
      for (uint64_t k = 0; k < count; ++k) v.array.push_back(read_value(cur, v.elem_type, key, depth + 1));
      break;
    }
  }
  return v;
}

[[noreturn]] void type_mismatch(const std::string& path, const std::string& key, const std::string& expected,
                                const GgufValue& v) {
  throw ModelLoadError("metadata value has the wrong type", {path, key, expected, v.describe(), ""});
}

int64_t as_int(const std::string& path, const std::string& key, const GgufValue& v) {
  if (!v.is_integer()) type_mismatch(path, key, "an integer", v);
  if (v.type == GgufType::kUint8 || v.type == GgufType::kUint16 || v.type == GgufType::kUint32 ||
      v.type == GgufType::kUint64) {
    if (v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw ModelLoadError("integer too large", {path, key, "at most 2^63-1", std::to_string(v.u), ""});
    }
    return static_cast<int64_t>(v.u);
  }
  return v.i;
}

double as_float(const std::string& path, const std::string& key, const GgufValue& v) {
  if (v.is_float()) return v.f;
  if (v.is_integer()) return static_cast<double>(as_int(path, key, v));
  type_mismatch(path, key, "a number", v);
}

const GgufValue& require_array(const std::string& path, const std::string& key, const GgufValue& v) {
  if (v.type != GgufType::kArray) type_mismatch(path, key, "an array", v);
  return v;
}

}  // namespace

const char* gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::kUint8: return "uint8";
    case GgufType::kInt8: return "int8";
    case GgufType::kUint16: return "uint16";
    case GgufType::kInt16: return "int16";
    case GgufType::kUint32: return "uint32";
    case GgufType::kInt32: return "int32";
    case GgufType::kFloat32: return "float32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kUint64: return "uint64";
    case GgufType::kInt64: return "int64";
    case GgufType::kFloat64: return "float64";
  }
  return "unknown";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kUint16: case GgufType::kInt16:
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kUint64: case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}

std::string GgufValue::describe() const {
  if (type != GgufType::kArray) return gguf_type_name(type);
  return std::string("array<") + gguf_type_name(elem_type) + ">[" + std::to_string(array.size()) + "]";
}

GgufFile::GgufFile(const std::string& path) : map_(path) {}
GgufFile::GgufFile(const std::string& name, std::vector<uint8_t> bytes) : map_(name, std::move(bytes)) {}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::unique_ptr<GgufFile> file(new GgufFile(path));
  file->parse();
  return file;
}

std::unique_ptr<GgufFile> GgufFile::parse_bytes(std::vector<uint8_t> bytes, const std::string& name) {
  std::unique_ptr<GgufFile> file(new GgufFile(name, std::move(bytes)));
  file->parse();
  return file;
}

void GgufFile::parse() {
  Cursor cur(map_);
  const std::string& path = map_.path();
  const uint32_t magic = cur.read<uint32_t>("magic");
  if (magic != kGgufMagic) {
    char found[5] = {};
    std::memcpy(found, &magic, 4);
    for (int k = 0; k < 4; ++k) found[k] = (found[k] >= 32 && found[k] < 127) ? found[k] : '?';  // keep the NUL
    throw ModelLoadError("not a GGUF file (bad magic)",
                         {path, "", "the bytes 'GGUF'", std::string("'") + found + "'",
                          "is this a safetensors or PyTorch file?"});
  }
  version_ = cur.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3) {
    throw ModelLoadError("unsupported GGUF version",
                         {path, "", "version 2 or 3", std::to_string(version_),
                          "re-convert the model with a current llama.cpp"});
  }
  const int64_t num_tensors = cur.read<int64_t>("tensor count");
  const int64_t num_kv = cur.read<int64_t>("metadata count");
  if (num_tensors < 0) cur.fail("negative tensor count", ">= 0", std::to_string(num_tensors));
  if (num_kv < 0) cur.fail("negative metadata count", ">= 0", std::to_string(num_kv));
  check_count_fits(cur, static_cast<uint64_t>(num_kv), kMinKvBytes, "metadata count", "key-value pairs", "");
  check_count_fits(cur, static_cast<uint64_t>(num_tensors), kMinTensorInfoBytes, "tensor count", "tensor infos", "");

  for (int64_t k = 0; k < num_kv; ++k) {
    std::string key = cur.read_string("metadata key");
    const uint32_t type = cur.read<uint32_t>("metadata value type");
    if (!valid_value_type(type)) cur.fail("unknown metadata value type", "a type code 0..12", std::to_string(type), key);
    GgufValue value = read_value(cur, static_cast<GgufType>(type), key, 0);
    if (!metadata_.emplace(key, std::move(value)).second) {
      cur.fail("duplicate metadata key", "unique keys", "a second '" + key + "'", key);
    }
  }

  if (const GgufValue* a = find("general.alignment")) {
    const int64_t align = as_int(path, "general.alignment", *a);
    if (align <= 0 || (align & (align - 1)) != 0 || align % 8 != 0) {
      throw ModelLoadError("invalid alignment", {path, "general.alignment",
                                                 "a power of two and a multiple of 8", std::to_string(align), ""});
    }
    alignment_ = static_cast<uint64_t>(align);
  }

  // Checked again now that the metadata has used its share of the bytes.
  check_count_fits(cur, static_cast<uint64_t>(num_tensors), kMinTensorInfoBytes, "tensor count", "tensor infos", "");
  tensors_.reserve(static_cast<size_t>(num_tensors));
  for (int64_t t = 0; t < num_tensors; ++t) {
    GgufTensorInfo info;
    info.name = cur.read_string("tensor name");
    const uint32_t n_dims = cur.read<uint32_t>("tensor dimension count");
    if (n_dims == 0 || n_dims > kMaxDims) {
      cur.fail("invalid number of dimensions", "1 to 4", std::to_string(n_dims), info.name);
    }
    int64_t count = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const int64_t ne = cur.read<int64_t>("tensor dimension");
      if (ne < 0) cur.fail("negative tensor dimension", ">= 0", std::to_string(ne), info.name);
      if (ne > 0 && count > std::numeric_limits<int64_t>::max() / ne) {
        cur.fail("tensor element count overflows", "a count below 2^63", "overflow", info.name);
      }
      count *= ne;
      info.dims.push_back(ne);
    }
    info.num_elements = count;
    info.type_id = cur.read<uint32_t>("tensor type");
    info.offset = cur.read<uint64_t>("tensor data offset");
    auto traits = ggml_type_traits(info.type_id);
    if (!traits) {
      throw ModelLoadError("unsupported tensor type",
                           {path, info.name, "one of F32, F16, BF16, Q4_0, Q4_1, Q8_0",
                            ggml_type_name(info.type_id), "re-quantise the model to a supported type"});
    }
    if (info.dims[0] % traits->block_elements != 0) {
      throw ModelLoadError("tensor row is not a whole number of blocks",
                           {path, info.name, "dims[0] a multiple of " + std::to_string(traits->block_elements),
                            std::to_string(info.dims[0]), ""});
    }
    const int64_t blocks = count / traits->block_elements;
    if (blocks > std::numeric_limits<int64_t>::max() / traits->block_bytes) {
      cur.fail("tensor byte size overflows", "a size below 2^63", std::to_string(blocks) + " blocks of " +
               std::to_string(traits->block_bytes) + " bytes", info.name);
    }
    info.num_bytes = blocks * traits->block_bytes;
    if (info.offset % alignment_ != 0) {
      throw ModelLoadError("misaligned tensor data offset",
                           {path, info.name, "a multiple of " + std::to_string(alignment_),
                            std::to_string(info.offset), ""});
    }
    if (!tensor_index_.emplace(info.name, tensors_.size()).second) {
      throw ModelLoadError("duplicate tensor name", {path, info.name, "unique tensor names", "a duplicate", ""});
    }
    tensors_.push_back(std::move(info));
  }

  // The data section starts at the next multiple of the alignment after the infos.
  const uint64_t header_end = cur.pos();
  const uint64_t data_start = header_end + (alignment_ - header_end % alignment_) % alignment_;
  if (data_start > map_.size() && !tensors_.empty()) {
    throw ModelLoadError("file is truncated before the tensor data",
                         {path, "", "at least " + std::to_string(data_start) + " bytes",
                          std::to_string(map_.size()) + " bytes", "the download may be incomplete"});
  }
  const uint64_t data_size = map_.size() > data_start ? map_.size() - data_start : 0;
  for (GgufTensorInfo& info : tensors_) {
    const uint64_t nbytes = static_cast<uint64_t>(info.num_bytes);
    if (info.offset > data_size || nbytes > data_size - info.offset) {
      throw ModelLoadError("tensor data out of bounds",
                           {path, info.name,
                            "bytes [" + std::to_string(info.offset) + ", " + std::to_string(info.offset + nbytes) +
                                ") inside a data section of " + std::to_string(data_size) + " bytes",
                            "they run past the end of the file", "the file is truncated or corrupt"});
    }
    info.data = map_.data() + data_start + info.offset;
  }
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {
[[noreturn]] void missing_key(const std::string& path, const std::string& key, const std::string& expected) {
  throw ModelLoadError("required metadata key is missing", {path, key, expected, "nothing", ""});
}
}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
  auto v = find_string(key);
  if (!v) missing_key(path(), key, "a string");
  return *v;
}

int64_t GgufFile::get_int(const std::string& key) const {
  auto v = find_int(key);
  if (!v) missing_key(path(), key, "an integer");
  return *v;
}

double GgufFile::get_float(const std::string& key) const {
  auto v = find_float(key);
  if (!v) missing_key(path(), key, "a number");
  return *v;
}

bool GgufFile::get_bool(const std::string& key) const {
  auto v = find_bool(key);
  if (!v) missing_key(path(), key, "a bool");
  return *v;
}

std::optional<std::string> GgufFile::find_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != GgufType::kString) type_mismatch(path(), key, "a string", *v);
  return v->s;
}

std::optional<int64_t> GgufFile::find_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  return as_int(path(), key, *v);
}

std::optional<double> GgufFile::find_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  return as_float(path(), key, *v);
}

std::optional<bool> GgufFile::find_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != GgufType::kBool) type_mismatch(path(), key, "a bool", *v);
  return v->b;
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) missing_key(path(), key, "an array of strings");
  const GgufValue& a = require_array(path(), key, *v);
  if (a.elem_type != GgufType::kString) type_mismatch(path(), key, "an array of strings", a);
  std::vector<std::string> out;
  out.reserve(a.array.size());
  for (const GgufValue& e : a.array) out.push_back(e.s);
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) missing_key(path(), key, "an array of integers");
  const GgufValue& a = require_array(path(), key, *v);
  std::vector<int64_t> out;
  out.reserve(a.array.size());
  for (const GgufValue& e : a.array) out.push_back(as_int(path(), key, e));
  return out;
}

std::vector<double> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) missing_key(path(), key, "an array of numbers");
  const GgufValue& a = require_array(path(), key, *v);
  std::vector<double> out;
  out.reserve(a.array.size());
  for (const GgufValue& e : a.array) out.push_back(as_float(path(), key, e));
  return out;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(const std::string& name) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (t == nullptr) {
    throw ModelLoadError("required tensor is missing",
                         {path(), name, "a tensor of that name", "none among " + std::to_string(tensors_.size()) + " tensors",
                          "the file may be incomplete or of another architecture"});
  }
  return *t;
}

}  // namespace lorakv::formats
