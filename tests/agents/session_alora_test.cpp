// tests/agents/session_alora_test.cpp: an activated LoRA (aLoRA) agent in a session. Its turn
// header is its invocation: the session runs it privately, so the agent's turn is adapted from
// its header on and the trajectory before it is the base model's. The greedy turn equals the
// generator's on the same tokens (prompt = trajectory + header, split at the invocation; the
// engine's aLoRA rule is checked against PEFT in tests/adapters/alora_parity_test.cpp), in a
// residual mode beside a standard agent. An agent named by another turn is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "lorakv/adapters/adapter_registry.h"
#include "lorakv/common/errors.h"
#include "lorakv/formats/bpe_tokenizer.h"
#include "lorakv/formats/gguf_file.h"
#include "lorakv/formats/tokenizer_gguf.h"
#include "lorakv/runtime/generator.h"
#include "tests/agents/session_test_util.h"

namespace lorakv::agents {
namespace {

using AdapterPtr = std::shared_ptr<const adapters::Adapter>;

TEST(SessionAlora, AgentTurnIsAdaptedFromItsHeaderOn) {
  const std::string model_path = lorakv::testing::test_setting("LORAKV_MODEL");
  const auto file = formats::GgufFile::open(model_path);
  const auto model = runtime::LlamaModel::from_gguf(*file);
  const formats::BpeTokenizer tokenizer = formats::tokenizer_from_gguf(*file);
  adapters::AdapterRegistry registry(model->adapter_shape(), model->dtype());
  registry.load("planner", testing::role_adapter_path("all_linear", "planner"));
  const AdapterPtr standard = registry.require("planner");
  const std::vector<int32_t> header = tokenizer.encode("<|im_start|>planner\n", /*parse_special=*/true);
  const auto alora = std::make_shared<const adapters::Adapter>("alora.planner", "alora.planner", adapters::AdapterFormat::kPeft,
                                                               standard->base_shape(), standard->modules(), header);

  Runtime rt(testing::real_model_options());
  rt.add_adapter(alora);
  rt.load_adapter("shared.actor", testing::role_adapter_path("qv_shared_a", "actor"));
  SessionOptions so;
  so.mode = runtime::SharingMode::kBaseLrShared;
  so.writer = runtime::SharedWriter::kBase;
  const std::shared_ptr<Session> s = rt.open_session(so);
  try {
    s->add_agent({"critic", "alora.planner"});
    ADD_FAILURE() << "an aLoRA agent whose turn lacks its invocation was added";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("invocation tokens are not in its turn"), std::string::npos) << m;
    EXPECT_NE(m.find("'<|im_start|>planner\\n'"), std::string::npos) << m;
  }
  s->add_agent({"planner", "alora.planner"});
  s->add_agent({"actor", "shared.actor"});
  s->append("system", testing::kSystem);
  s->append("user", testing::kQuestion);
  GenerateOptions go;
  go.max_tokens = 24;
  for (int turn = 0; turn < 2; ++turn) {
    SCOPED_TRACE("turn " + std::to_string(turn));
    std::vector<int32_t> prompt = s->tokens();
    prompt.insert(prompt.end(), header.begin(), header.end());
    const Reply reply = s->generate("planner", go);
    ASSERT_TRUE(reply.appended);
    runtime::GenerationRequest req;
    req.prompt = prompt;
    req.adapter = alora;
    req.max_tokens = static_cast<int64_t>(reply.tokens.size());
    const std::vector<runtime::GenerationOutput> ref = runtime::generate(*model, nullptr, {req});
    EXPECT_EQ(reply.tokens, ref[0].tokens) << reply.text;
    // The turn joined the trajectory after the header; the standard agent then takes its turn.
    const std::vector<int32_t> now = s->tokens();
    ASSERT_GE(now.size(), prompt.size() + reply.tokens.size());
    EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), now.begin()));
    EXPECT_TRUE(s->generate("actor", go).appended);
  }
}

}  // namespace
}  // namespace lorakv::agents
