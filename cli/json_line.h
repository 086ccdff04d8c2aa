// cli/json_line.h: one JSON object built key by key and printed on one line (the events of
// `lorakv run --json`, the transcript's turns), with formats/json's escaping.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lorakv/formats/json.h"

namespace lorakv::cli {

class JsonLine {
 public:
  JsonLine& add(const std::string& key, formats::JsonValue v) {
    object_.index[key] = object_.members.size();
    object_.members.emplace_back(key, std::move(v));
    return *this;
  }
  JsonLine& add(const std::string& key, const std::string& s) { return add(key, formats::JsonValue::make_string(s)); }
  JsonLine& add(const std::string& key, const char* s) { return add(key, std::string(s)); }
  JsonLine& add(const std::string& key, int64_t v) {
    return add(key, formats::JsonValue::make_number(static_cast<double>(v), v));
  }
  JsonLine& add(const std::string& key, double v) { return add(key, formats::JsonValue::make_number(v)); }
  JsonLine& add(const std::string& key, bool v) { return add(key, formats::JsonValue::make_bool(v)); }
  JsonLine& add(const std::string& key, const std::vector<int32_t>& ids) {
    std::vector<formats::JsonValue> items;
    for (int32_t id : ids) items.push_back(formats::JsonValue::make_number(id, id));
    return add(key, formats::JsonValue::make_array(std::move(items)));
  }
  JsonLine& add(const std::string& key, const JsonLine& nested) { return add(key, nested.value()); }

  formats::JsonValue value() const { return formats::JsonValue::make_object(object_); }
  std::string str() const { return value().to_string(); }

 private:
  formats::JsonObject object_;
};

}  // namespace lorakv::cli
