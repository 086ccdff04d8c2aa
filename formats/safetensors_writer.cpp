// formats/safetensors_writer.cpp: header JSON, then the data, 8-byte aligned.
#include "lorakv/formats/safetensors_writer.h"

#include <cstring>
#include <set>

#include "lorakv/common/errors.h"
#include "lorakv/formats/json.h"

namespace lorakv::formats {

namespace {

void put(JsonObject& object, const std::string& key, JsonValue value) {
  object.index[key] = object.members.size();
  object.members.emplace_back(key, std::move(value));
}

JsonValue integer(uint64_t v) { return JsonValue::make_number(static_cast<double>(v), static_cast<int64_t>(v)); }

}  // namespace

std::vector<uint8_t> safetensors_bytes(const std::vector<SafetensorsEntry>& tensors,
                                       const std::map<std::string, std::string>& metadata) {
  JsonObject header;
  if (!metadata.empty()) {
    JsonObject meta;
    for (const auto& [key, value] : metadata) put(meta, key, JsonValue::make_string(value));
    put(header, "__metadata__", JsonValue::make_object(std::move(meta)));
  }
  std::set<std::string> names;
  std::vector<size_t> sizes;
  uint64_t offset = 0;
  for (const SafetensorsEntry& t : tensors) {
    if (t.name.empty() || t.name.rfind("__", 0) == 0 || !names.insert(t.name).second) {
      throw ConfigError("bad or duplicate tensor name", {"", t.name, "unique names not starting with __"});
    }
    int64_t elements = 1;
    std::vector<JsonValue> shape;
    for (int64_t d : t.shape) {
      elements *= d;
      shape.push_back(integer(static_cast<uint64_t>(d)));
    }
    const auto bytes = static_cast<uint64_t>(elements * safetensors_dtype_size(t.dtype));
    JsonObject info;
    put(info, "dtype", JsonValue::make_string(safetensors_dtype_name(t.dtype)));
    put(info, "shape", JsonValue::make_array(std::move(shape)));
    put(info, "data_offsets", JsonValue::make_array({integer(offset), integer(offset + bytes)}));
    put(header, t.name, JsonValue::make_object(std::move(info)));
    sizes.push_back(bytes);
    offset += bytes;
  }
  std::string text = JsonValue::make_object(std::move(header)).to_string();
  while (text.size() % 8 != 0) text += ' ';  // the data starts 8-byte aligned
  std::vector<uint8_t> out(8 + text.size() + offset);
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(out.data() + 8, text.data(), text.size());
  uint8_t* data = out.data() + 8 + text.size();
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (sizes[i] > 0) std::memcpy(data, tensors[i].data, sizes[i]);
    data += sizes[i];
  }
  return out;
}

}  // namespace lorakv::formats
