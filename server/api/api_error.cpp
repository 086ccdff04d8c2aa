// server/api/api_error.cpp: the OpenAI error object.
#include "lorakv/server/api/api_error.h"

#include <nlohmann/json.hpp>

namespace lorakv::server::api {

std::string error_body(const ApiError& error) {
  nlohmann::json inner = {{"message", error.what()}, {"type", error.type()}};
  inner["param"] = error.param().empty() ? nlohmann::json(nullptr) : nlohmann::json(error.param());
  inner["code"] = error.code().empty() ? nlohmann::json(nullptr) : nlohmann::json(error.code());
  // replace: a message quoting the client's bytes stays valid UTF-8.
  return nlohmann::json{{"error", inner}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string loggable(const std::string& text) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace lorakv::server::api
