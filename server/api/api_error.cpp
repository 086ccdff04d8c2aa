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

}  // namespace lorakv::server::api
