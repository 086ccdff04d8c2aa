// The OpenAI error object: its fields, and valid UTF-8 whatever the message quotes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "lorakv/server/api/api_error.h"

namespace lorakv::server::api {
namespace {

TEST(ApiError, BodyHoldsOpenAisFields) {
  const nlohmann::json body = nlohmann::json::parse(error_body(ApiError(404, "invalid_request_error",
                                                                        "no model x", "model", "model_not_found")));
  EXPECT_EQ(body["error"]["message"], "no model x");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["param"], "model");
  EXPECT_EQ(body["error"]["code"], "model_not_found");
}

TEST(ApiError, EmptyParamAndCodeAreNull) {
  const nlohmann::json body = nlohmann::json::parse(error_body(bad_request("broken")));
  EXPECT_TRUE(body["error"]["param"].is_null());
  EXPECT_TRUE(body["error"]["code"].is_null());
}

TEST(ApiError, InvalidUtf8InTheMessageIsReplaced) {
  const std::string text = error_body(bad_request(std::string("bad \xff\xfe name")));
  nlohmann::json parsed;
  EXPECT_NO_THROW(parsed = nlohmann::json::parse(text));  // parse refuses invalid UTF-8
  EXPECT_NE(parsed["error"]["message"].get<std::string>().find("\xEF\xBF\xBD"), std::string::npos);  // U+FFFD
}

TEST(ApiError, LoggableTextCannotForgeALogLine) {
  EXPECT_EQ(loggable("user-7"), "user-7");
  EXPECT_EQ(loggable("a\n[info] request done\r\x7f"), "a\\x0a[info] request done\\x0d\\x7f");
  EXPECT_EQ(loggable("caf\xc3\xa9"), "caf\xc3\xa9");  // UTF-8 stays as it is
}

}  // namespace
}  // namespace lorakv::server::api
