// tests/common/error_codes_test.cpp: the stable error codes a caller maps to statuses: each
// code's name as documented (docs/sessions.md, "Errors"; the names are a contract, written
// out here, not read from the code), every name distinct, the code each common error
// class carries, and InternalError as an Error without a doubled label.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lorakv/common/errors.h"

namespace lorakv {
namespace {

TEST(ErrorCodes, EveryCodeHasItsDocumentedDistinctName) {
  const std::vector<std::pair<ErrorCode, std::string>> documented = {
      {ErrorCode::kConfig, "config_error"},
      {ErrorCode::kUsage, "usage_error"},
      {ErrorCode::kInvalidArgument, "invalid_argument"},
      {ErrorCode::kModelLoad, "model_load_error"},
      {ErrorCode::kAdapterLoad, "adapter_load_error"},
      {ErrorCode::kTokenizer, "tokenizer_error"},
      {ErrorCode::kCapacity, "capacity_exceeded"},
      {ErrorCode::kContextLength, "context_length_exceeded"},
      {ErrorCode::kUnknownAgent, "unknown_agent"},
      {ErrorCode::kUnknownAdapter, "unknown_adapter"},
      {ErrorCode::kSessionClosed, "session_closed"},
      {ErrorCode::kAgentBusy, "agent_busy"},
      {ErrorCode::kDeadlock, "deadlock"},
      {ErrorCode::kOverloaded, "overloaded"},
      {ErrorCode::kSessionFile, "session_file_error"},
      {ErrorCode::kTool, "tool_error"},
      {ErrorCode::kCalculation, "calculation_error"},
      {ErrorCode::kDocumentStore, "document_store_error"},
      {ErrorCode::kSystem, "system_error"},
      {ErrorCode::kInternal, "internal_error"},
  };
  std::set<std::string> names;
  for (const auto& [code, name] : documented) {
    EXPECT_EQ(error_code_name(code), name);
    names.insert(error_code_name(code));
  }
  EXPECT_EQ(names.size(), documented.size());
}

TEST(ErrorCodes, EachClassCarriesItsCode) {
  EXPECT_EQ(ConfigError("x").code(), ErrorCode::kConfig);
  EXPECT_EQ(ModelLoadError("x").code(), ErrorCode::kModelLoad);
  EXPECT_EQ(AdapterLoadError("x").code(), ErrorCode::kAdapterLoad);
  EXPECT_EQ(TokenizerError("x").code(), ErrorCode::kTokenizer);
  EXPECT_EQ(InvalidArgumentError("x").code(), ErrorCode::kInvalidArgument);
}

TEST(ErrorCodes, AnInternalErrorIsAnErrorWithItsOwnMessage) {
  try {
    LORAKV_ASSERT(1 + 1 == 3, "arithmetic");
    FAIL() << "no throw";
  } catch (const Error& e) {  // a caller catching Error sees bugs too, and can tell them apart
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    EXPECT_EQ(std::string(e.what()).rfind("lorakv internal error: 1 + 1 == 3 failed at ", 0), 0u) << e.what();
    EXPECT_NE(dynamic_cast<const InternalError*>(&e), nullptr);
  }
}

}  // namespace
}  // namespace lorakv
