// tests/formats/chat_template_test.cpp: formats::ChatTemplate: format detection from real
// Jinja templates, and rendering compared with exact strings.
//
// Inputs: the templates under tests/formats/data/chat_templates/, copied verbatim from
// their sources: smollm2.jinja from the GGUF's tokenizer.chat_template (the test below
// checks the copy against the file), llama3_instruct.jinja from Meta-Llama-3-8B-Instruct's
// tokenizer_config.json (as llama-cpp-python quotes it). Expected strings: written from
// the templates' definitions, and cross-checked with transformers' own renderer by
// tools/chat_template_oracle.py (run by hand; it prints every case below).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "lorakv/common/errors.h"
#include "lorakv/formats/chat_template.h"
#include "lorakv/formats/gguf_file.h"
#include "tests/support/test_settings.h"

namespace lorakv::formats {
namespace {

const char* const kSmolSystem = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

std::string read_template(const std::string& name) {
  const std::string path =
      lorakv::testing::test_setting("LORAKV_SOURCE_DIR") + "/tests/formats/data/chat_templates/" + name;
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const std::vector<ChatMessage> kUserOnly = {{"user", "What is 2+2?"}};
// A system turn, a whole exchange, and content with surrounding whitespace.
const std::vector<ChatMessage> kWithSystem = {
    {"system", "You are terse."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "  Bye \n"}};
const std::vector<ChatMessage> kAgentRole = {{"planner", "Plan the trip."}};

TEST(ChatTemplate, RealSmolLM2TemplateFromTheGguf) {
  const std::string model = lorakv::testing::test_setting("LORAKV_MODEL");
  ASSERT_FALSE(model.empty()) << "LORAKV_MODEL is not set";
  const std::string jinja = GgufFile::open(model)->get_string("tokenizer.chat_template");
  EXPECT_EQ(jinja, read_template("smollm2.jinja")) << "the committed copy differs from the model's template";
  const ChatTemplate t = ChatTemplate::from_jinja(jinja);
  EXPECT_EQ(t.format(), ChatTemplate::Format::kChatML);
  EXPECT_STREQ(t.name(), "chatml");
  EXPECT_EQ(t.default_system(), kSmolSystem);
  EXPECT_EQ(t.bos_text(), "");
  EXPECT_EQ(t.end_of_turn(), "<|im_end|>");
}

TEST(ChatTemplate, ChatMLInsertsTheDefaultSystemTurn) {
  const ChatTemplate t = ChatTemplate::from_jinja(read_template("smollm2.jinja"));
  const std::string system = std::string("<|im_start|>system\n") + kSmolSystem + "<|im_end|>\n";
  EXPECT_EQ(t.render(kUserOnly, false), system + "<|im_start|>user\nWhat is 2+2?<|im_end|>\n");
  EXPECT_EQ(t.render(kUserOnly, true), system + "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
  // Any first role other than "system" gets the default, agents' roles too.
  EXPECT_EQ(t.render(kAgentRole, true),
            system + "<|im_start|>planner\nPlan the trip.<|im_end|>\n<|im_start|>assistant\n");
  // The template inserts it inside the message loop: not for an empty conversation.
  EXPECT_EQ(t.render({}, false), "");
  EXPECT_EQ(t.render({}, true), "<|im_start|>assistant\n");
}

TEST(ChatTemplate, ChatMLKeepsAGivenSystemTurnAndContentVerbatim) {
  const ChatTemplate t = ChatTemplate::from_jinja(read_template("smollm2.jinja"));
  const std::string turns =
      "<|im_start|>system\nYou are terse.<|im_end|>\n"
      "<|im_start|>user\nHi<|im_end|>\n"
      "<|im_start|>assistant\nHello!<|im_end|>\n"
      "<|im_start|>user\n  Bye \n<|im_end|>\n";
  EXPECT_EQ(t.render(kWithSystem, false), turns);
  EXPECT_EQ(t.render(kWithSystem, true), turns + "<|im_start|>assistant\n");
  // include_bos changes nothing: ChatML has no BOS text.
  EXPECT_EQ(t.render(kWithSystem, true, /*include_bos=*/false), turns + "<|im_start|>assistant\n");
}

TEST(ChatTemplate, ChatMLByNameHasNoDefaultSystem) {
  const ChatTemplate t = ChatTemplate::by_name("chatml");
  EXPECT_EQ(t.default_system(), "");
  EXPECT_EQ(t.render(kUserOnly, true), "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama3DetectedFromItsTemplate) {
  const ChatTemplate t = ChatTemplate::from_jinja(read_template("llama3_instruct.jinja"));
  EXPECT_EQ(t.format(), ChatTemplate::Format::kLlama3);
  EXPECT_STREQ(t.name(), "llama3");
  EXPECT_EQ(t.default_system(), "");
  EXPECT_EQ(t.bos_text(), "<|begin_of_text|>");
  EXPECT_EQ(t.end_of_turn(), "<|eot_id|>");
}

TEST(ChatTemplate, Llama3RendersHeadersTrimmedContentAndBos) {
  const ChatTemplate t = ChatTemplate::from_jinja(read_template("llama3_instruct.jinja"));
  const std::string gen = "<|start_header_id|>assistant<|end_header_id|>\n\n";
  const std::string user = "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>";
  EXPECT_EQ(t.render(kUserOnly, false), "<|begin_of_text|>" + user);
  EXPECT_EQ(t.render(kUserOnly, true), "<|begin_of_text|>" + user + gen);
  // Without the BOS text, for callers that prepend the BOS id themselves.
  EXPECT_EQ(t.render(kUserOnly, true, /*include_bos=*/false), user + gen);

  // The template trims each message's content (Jinja's `| trim`): "  Bye \n" -> "Bye".
  const std::string turns =
      "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>";
  EXPECT_EQ(t.render(kWithSystem, false), "<|begin_of_text|>" + turns);
  EXPECT_EQ(t.render(kWithSystem, true), "<|begin_of_text|>" + turns + gen);
  EXPECT_EQ(t.render(kAgentRole, true),
            "<|begin_of_text|><|start_header_id|>planner<|end_header_id|>\n\nPlan the trip.<|eot_id|>" + gen);
  // BOS is written with the first message: an empty conversation has none.
  EXPECT_EQ(t.render({}, false), "");
  EXPECT_EQ(t.render({}, true), gen);
}

TEST(ChatTemplate, ByNameMatchesDetection) {
  const ChatTemplate t = ChatTemplate::by_name("llama3");
  EXPECT_EQ(t.format(), ChatTemplate::Format::kLlama3);
  EXPECT_EQ(t.render(kWithSystem, true),
            ChatTemplate::from_jinja(read_template("llama3_instruct.jinja")).render(kWithSystem, true));
  EXPECT_EQ(ChatTemplate::known_names(), (std::vector<std::string>{"chatml", "llama3"}));
}

TEST(ChatTemplate, UnknownTemplateNamesTheKnownFormatsAndByName) {
  // Mistral's [INST] template is neither format.
  const std::string mistral =
      "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
      "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token }}"
      "{% endif %}{% endfor %}";
  for (const std::string& jinja : {mistral, std::string()}) {
    try {
      ChatTemplate::from_jinja(jinja);
      ADD_FAILURE() << "no error for " << jinja;
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("chatml"), std::string::npos) << what;
      EXPECT_NE(what.find("llama3"), std::string::npos) << what;
      EXPECT_NE(e.context().hint.find("by name"), std::string::npos) << what;
    }
  }
  try {
    ChatTemplate::by_name("mistral");
    ADD_FAILURE() << "no error for an unknown name";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'mistral'"), std::string::npos) << what;
    EXPECT_NE(what.find("chatml, llama3"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace lorakv::formats
