// tests/agents/session_test_util.h: one Runtime on the real model with the committed role
// adapters, shared by the session tests (loading it once keeps them quick).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "lorakv/agents/runtime.h"
#include "tests/support/test_settings.h"

namespace lorakv::agents::testing {

// The agentic QA task's system turn and a held-out question (tools/agentic_qa/README.md).
inline constexpr const char* kSystem = "Answer with tools: Lookup[name], Calculate[a - b], Finish[answer].";
inline constexpr const char* kQuestion = "How old was Dok Gramein in 1940?";

inline std::string role_adapter_path(const std::string& set, const std::string& role) {
  return lorakv::testing::test_setting("LORAKV_SOURCE_DIR") + "/assets/role_adapters/" + set + "/" + role;
}

inline RuntimeOptions real_model_options() {
  RuntimeOptions o;
  o.model = lorakv::testing::test_setting("LORAKV_MODEL");
  o.kv_pool_bytes = int64_t{256} << 20;
  return o;
}

// The runtime of a suite: the three roles of each set, as "<set>.<role>" (the all-linear set
// as "planner", "actor", "reflector" too: the names the layout tests use).
inline std::unique_ptr<Runtime> make_role_runtime(RuntimeOptions options = real_model_options()) {
  auto rt = std::make_unique<Runtime>(options);
  for (const char* role : {"planner", "actor", "reflector"}) {
    rt->load_adapter(role, role_adapter_path("all_linear", role));
    rt->load_adapter(std::string("shared.") + role, role_adapter_path("qv_shared_a", role));
  }
  return rt;
}

// A suite sharing one role runtime, loaded once per suite (Suite: the fixture itself, so
// each suite has its own).
template <typename Suite>
class RoleRuntimeSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { rt_ = make_role_runtime(); }
  static void TearDownTestSuite() { rt_.reset(); }
  static Runtime& rt() { return *rt_; }

 private:
  static inline std::unique_ptr<Runtime> rt_;
};

// The first index where two replies differ, or their common length.
inline size_t first_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

// Two lorakv replies agree under the near-tie rule (docs/testing.md): tokens equal, except
// from a step where the reference reply's own margin over its runner-up is below
// kBatchMargin: batched GEMMs round differently by batch composition (a few 1e-6 of the
// largest logit, which stays under 30 here: about 1e-4), so closer candidates may swap, and
// from there the continuations may differ. Returns false (with the reason) otherwise.
inline constexpr double kBatchMargin = 1e-3;
inline ::testing::AssertionResult same_reply(const Reply& reference, const Reply& other) {
  const size_t d = first_difference(reference.tokens, other.tokens);
  if (d == reference.tokens.size() && d == other.tokens.size()) return ::testing::AssertionSuccess();
  if (d < reference.tokens.size() && d < reference.logprobs.size()) {
    const double margin = reference.logprobs[d] - reference.runner_up_logprobs[d];
    if (margin < kBatchMargin) {
      std::printf("  near tie accepted: %s step %zu, margin %.2e\n", reference.agent.c_str(), d, margin);
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << reference.agent << " differs at token " << d << " (margin " << margin
                                         << "): " << reference.text << " | " << other.text;
  }
  return ::testing::AssertionFailure() << reference.agent << ": one reply is a prefix of the other at " << d << ": "
                                       << reference.text << " | " << other.text;
}

}  // namespace lorakv::agents::testing
