// server/api/api_error.h: an error the server answers with OpenAI's error object,
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// and an HTTP status. Torch-free.
#pragma once

#include <stdexcept>
#include <string>

namespace lorakv::server::api {

class ApiError : public std::runtime_error {
 public:
  // type: OpenAI's kinds: invalid_request_error (400, 404, 413), authentication_error
  // (401), rate_limit_error (429), server_error (500, 503). param: the request field it is
  // about (empty: none). code: a short stable name (model_not_found, context_length_exceeded...).
  ApiError(int status, std::string type, const std::string& message, std::string param = "", std::string code = "")
      : std::runtime_error(message), status_(status), type_(std::move(type)), param_(std::move(param)),
        code_(std::move(code)) {}

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string type_, param_, code_;
};

// A 400 invalid_request_error about `param`.
inline ApiError bad_request(const std::string& message, const std::string& param = "", const std::string& code = "") {
  return ApiError(400, "invalid_request_error", message, param, code);
}

// The error object's JSON text (valid UTF-8 whatever the message holds).
std::string error_body(const ApiError& error);

// A client's text for one log line: control characters as \xNN, so that it cannot end the
// line and forge another.
std::string loggable(const std::string& text);

}  // namespace lorakv::server::api
