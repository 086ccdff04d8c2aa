// tests/cli/inspect_command_test.cpp: `lorakv inspect` through run_cli: the real GGUF
// (facts cross-checked with gguf-py's GGUFReader: 272 tensors, token_embd.weight Q8_0 of
// shape [49152, 576] in 30,081,024 bytes, 134,515,008 parameters), its KV bytes per token,
// the tensor list in layer order, a hand-made Hugging Face checkpoint folder, adapters (a
// summary first, whether one fits a model, a folder of them), and bad input.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "lorakv/cli/cli.h"
#include "lorakv/common/errors.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/safetensors_builder.h"
#include "tests/support/test_settings.h"

namespace lorakv::cli {
namespace {
namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string out, err;
};

Result inspect(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  std::vector<std::string> all = {"inspect"};
  all.insert(all.end(), args.begin(), args.end());
  Result r;
  r.code = run_cli(all, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// True when some line of `text` matches `pattern` (a whole-line regex).
bool has_line(const std::string& text, const std::string& pattern) {
  std::istringstream lines(text);
  const std::regex re(pattern);
  for (std::string line; std::getline(lines, line);) {
    if (std::regex_match(line, re)) return true;
  }
  return false;
}

// Deletes the named files and then the folder. (Not std::filesystem::remove_all: in a
// binary linked with libtorch that call binds to libtorch's exported copy and crashes.)
void remove_files(const fs::path& dir, const std::vector<std::string>& names) {
  for (const std::string& name : names) std::remove((dir / name).string().c_str());
  std::remove(dir.string().c_str());
}

TEST(InspectCommand, RealGgufModel) {
  const std::string model = lorakv::testing::test_setting("LORAKV_MODEL");
  ASSERT_FALSE(model.empty()) << "LORAKV_MODEL is not set";
  const Result r = inspect({model});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string& o = r.out;
  EXPECT_TRUE(has_line(o, R"( +architecture +llama)")) << o;
  EXPECT_TRUE(has_line(o, R"( +layers +30)")) << o;
  EXPECT_TRUE(has_line(o, R"( +hidden +576)")) << o;
  EXPECT_TRUE(has_line(o, R"( +heads / KV heads +9 / 3)")) << o;
  EXPECT_TRUE(has_line(o, R"( +head dim +64)")) << o;
  EXPECT_TRUE(has_line(o, R"( +intermediate +1536)")) << o;
  EXPECT_TRUE(has_line(o, R"( +vocab +49152)")) << o;
  EXPECT_TRUE(has_line(o, R"( +tied embeddings +yes)")) << o;
  EXPECT_TRUE(has_line(o, R"( +parameters +134,515,008)")) << o;
  EXPECT_TRUE(has_line(o, R"( +file size +93\.8 MiB \(98,362,432 bytes\))")) << o;
  EXPECT_TRUE(has_line(o, R"( +pre +smollm)")) << o;
  EXPECT_TRUE(has_line(o, R"( +model +gpt2)")) << o;
  EXPECT_TRUE(has_line(o, R"( +vocab size +49,152)")) << o;
  EXPECT_TRUE(has_line(o, R"( +eos +2 "<\|im_end\|>")")) << o;
  EXPECT_TRUE(has_line(o, R"( +chat format +chatml .*SmolLM.*)")) << o;
  // A row per token: 30 layers x (K and V of 3 KV heads x 64 values, int8 with a float32
  // scale per head, + a 4-byte position): 30 x (2 x 3 x 256 + 4) = 46,200 in float32,
  // 30 x (2 x 3 x 128 + 4) = 23,160 in bfloat16, 30 x (2 x 3 x (64 + 4) + 4) = 12,360 in int8.
  EXPECT_TRUE(has_line(o, R"( +KV per token +float32 46,200, bfloat16 23,160, int8 12,360 bytes)")) << o;
  EXPECT_TRUE(has_line(o, R"( +tensors +272 \(--tensors lists them\))")) << o;
  EXPECT_EQ(o.find("token_embd"), std::string::npos) << "tensors only with --tensors";
  EXPECT_EQ(o.find("metadata ("), std::string::npos) << "metadata only with --metadata";
  const Result t = inspect({model, "--tensors"});
  EXPECT_TRUE(has_line(t.out, R"(tensors \(272\):)")) << t.out;
  EXPECT_TRUE(has_line(t.out, R"( +token_embd\.weight +Q8_0 +\[49152, 576\] +30,081,024)")) << t.out;
  EXPECT_TRUE(has_line(t.out, R"( +blk\.0\.ffn_down\.weight +Q4_1 +\[576, 1536\] +552,960)")) << t.out;
  // Layer order: blk.2 before blk.10, blk.29 last of the blocks.
  const size_t b2 = t.out.find("blk.2.attn_k"), b10 = t.out.find("blk.10.attn_k"), b29 = t.out.find("blk.29.ffn_up");
  ASSERT_NE(b10, std::string::npos) << t.out;
  EXPECT_LT(b2, b10);
  EXPECT_LT(b10, b29);
  EXPECT_LT(b29, t.out.find("output_norm.weight"));
}

TEST(InspectCommand, MetadataFlagDumpsEveryKeyAbbreviated) {
  const std::string model = lorakv::testing::test_setting("LORAKV_MODEL");
  ASSERT_FALSE(model.empty()) << "LORAKV_MODEL is not set";
  const Result r = inspect({model, "--metadata"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has_line(r.out, R"(metadata \(\d+ keys\):)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(  general\.architecture \(string\) = "llama")")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"(  llama\.block_count \(uint32\) = 30)")) << r.out;
  // 49,152 tokens: eight shown, then the count.
  EXPECT_TRUE(
      has_line(r.out, R"(  tokenizer\.ggml\.tokens \(array<string>\[49152\]\) = \[.*, \.\.\. \(49,152 items\)\])"))
      << r.out;
  // The chat template is one line: newlines escaped, cut after 100 bytes.
  EXPECT_TRUE(has_line(r.out, R"(  tokenizer\.chat_template \(string\) = ".*"\.\.\. \(\d[\d,]* bytes\))")) << r.out;
}

TEST(InspectCommand, HuggingFaceCheckpointFolder) {
  const fs::path dir = lorakv::testing::temp_path("inspect-hf");
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 2, "hidden_size": 8, "intermediate_size": 16, "num_attention_heads": 2,
    "num_key_value_heads": 1, "vocab_size": 10, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "tie_word_embeddings": true, "hidden_act": "silu"})";
  lorakv::testing::SafetensorsBuilder st;
  st.add_f32("model.embed_tokens.weight", {10, 8}, std::vector<float>(80, 0.5f));
  st.add_bf16("model.norm.weight", {8}, std::vector<uint16_t>(8, 0x3f80));
  st.metadata["format"] = "pt";
  st.write((dir / "model.safetensors").string());

  const Result r = inspect({dir.string(), "--metadata", "--tensors"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string& o = r.out;
  EXPECT_TRUE(has_line(o, R"(config\.json \(13 keys\):)")) << o;
  EXPECT_TRUE(has_line(o, R"( +architectures +\["LlamaForCausalLM"\])")) << o;
  EXPECT_TRUE(has_line(o, R"( +layers +2)")) << o;
  EXPECT_TRUE(has_line(o, R"( +heads / KV heads +2 / 1)")) << o;
  EXPECT_TRUE(has_line(o, R"( +head dim +4)")) << o;
  EXPECT_TRUE(has_line(o, R"( +tokenizer\.json +missing)")) << o;
  EXPECT_TRUE(has_line(o, R"( +metadata format +"pt")")) << o;
  EXPECT_TRUE(has_line(o, R"(tensors \(2\):)")) << o;
  EXPECT_TRUE(has_line(o, R"( +parameters +88)")) << o;
  EXPECT_TRUE(has_line(o, R"( +model\.embed_tokens\.weight +F32 +\[10, 8\] +320)")) << o;
  EXPECT_TRUE(has_line(o, R"( +model\.norm\.weight +BF16 +\[8\] +16)")) << o;
  remove_files(dir, {"config.json", "model.safetensors"});
}

// A GGUF LoRA as llama.cpp's converter writes one, with aLoRA invocation tokens when given.
std::string write_gguf_lora(const std::string& name, const std::vector<uint32_t>& tokens) {
  lorakv::testing::GgufBuilder g;
  g.add_string("general.architecture", "llama");
  g.add_string("general.type", "adapter");
  g.add_string("adapter.type", "lora");
  g.add_f32("adapter.lora.alpha", 2.0f);
  if (!tokens.empty()) g.add_u32_array("adapter.alora.invocation_tokens", tokens);
  g.add_f32_tensor("blk.0.attn_v.weight.lora_a", {8, 1}, std::vector<float>(8, 0.5f));
  g.add_f32_tensor("blk.0.attn_v.weight.lora_b", {1, 4}, std::vector<float>(4, 0.25f));
  const std::string path = lorakv::testing::temp_path(name);
  g.write(path);
  return path;
}

TEST(InspectCommand, GgufLoraAdapterShowsItsInvocationTokens) {
  const std::string alora = write_gguf_lora("inspect_alora.gguf", {1, 2});
  const Result r = inspect({alora});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has_line(r.out, R"(adapter: .*inspect_alora\.gguf \(GGUF\))")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"( +activation +activated LoRA \(aLoRA\): from the last occurrence.*context rows are base rows)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"( +invocation tokens +\[1, 2\] \(2\))")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"( +invocation text +\(pass --model to see it\))")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"( +tensors +2 \(--tensors lists them\))")) << r.out;
  EXPECT_EQ(r.out.find("not runnable"), std::string::npos) << "an adapter is not described as a model: " << r.out;
  // With the base model, the tokens as text (SmolLM2: 1 is <|im_start|>, 2 <|im_end|>).
  const std::string model = lorakv::testing::test_setting("LORAKV_MODEL");
  ASSERT_FALSE(model.empty()) << "LORAKV_MODEL is not set";
  const Result t = inspect({alora, "--model", model});
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_TRUE(has_line(t.out, R"( +invocation text +"<\|im_start\|><\|im_end\|>")")) << t.out;
  EXPECT_TRUE(has_line(t.out, R"( +invocation pieces +"<\|im_start\|>" "<\|im_end\|>")")) << t.out;
  // A standard LoRA, and tokens the loader refuses (shown with the loader's reason).
  const Result s = inspect({write_gguf_lora("inspect_lora.gguf", {})});
  EXPECT_TRUE(has_line(s.out, R"( +activation +standard LoRA \(every token\))")) << s.out;
  EXPECT_EQ(s.out.find("invocation tokens"), std::string::npos) << s.out;
  lorakv::testing::GgufBuilder bad;
  bad.add_string("general.type", "adapter");
  bad.add_u32_array("adapter.alora.invocation_tokens", {});
  const std::string bad_path = lorakv::testing::temp_path("inspect_alora_empty.gguf");
  bad.write(bad_path);
  const Result b = inspect({bad_path});
  EXPECT_TRUE(has_line(b.out, R"( +activation +not loadable: .*without invocation tokens \[adapter\.alora\.invocation_tokens\].*)"))
      << b.out;
  std::remove(alora.c_str());
  std::remove(bad_path.c_str());
}

TEST(InspectCommand, PeftAdapterFolderShowsItsInvocationTokens) {
  const fs::path dir = lorakv::testing::temp_path("inspect-peft");
  fs::create_directories(dir);
  std::ofstream(dir / "adapter_config.json") << R"({"peft_type": "LORA", "r": 1, "lora_alpha": 2,
    "target_modules": ["v_proj"], "alora_invocation_tokens": [7, 8, 9]})";
  lorakv::testing::SafetensorsBuilder st;
  st.add_f32("base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight", {1, 8}, std::vector<float>(8, 0.5f));
  st.add_f32("base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight", {4, 1}, std::vector<float>(4, 0.5f));
  st.write((dir / "adapter_model.safetensors").string());
  const Result r = inspect({dir.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has_line(r.out, R"(adapter: .*inspect-peft \(PEFT\))")) << r.out;
  // The summary comes first: rank, alpha and targets, not every config key.
  EXPECT_TRUE(has_line(r.out, R"( +rank +1)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"( +alpha +2)")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"( +targets +\["v_proj"\])")) << r.out;
  EXPECT_TRUE(has_line(r.out, R"( +fits +\(--model tells\))")) << r.out;
  EXPECT_EQ(r.out.find("adapter_config.json ("), std::string::npos) << "every key only with --metadata";
  EXPECT_TRUE(has_line(r.out, R"( +invocation tokens +\[7, 8, 9\] \(3\))")) << r.out;
  const Result all = inspect({dir.string(), "--metadata", "--tensors"});
  EXPECT_TRUE(has_line(all.out, R"(adapter_config\.json \(5 keys\):)")) << all.out;
  EXPECT_TRUE(has_line(all.out, R"(tensors \(2\):)")) << all.out;
  // Against the real model: a v_proj of 4 rows does not fit SmolLM2's 192.
  const Result fit = inspect({dir.string(), "--model", lorakv::testing::test_setting("LORAKV_MODEL")});
  EXPECT_TRUE(has_line(fit.out, R"( +fits +no: adapter load error.*)")) << fit.out;
  remove_files(dir, {"adapter_config.json", "adapter_model.safetensors"});
}

// A folder of adapters: one line each, in name order; with --model, whether each fits.
TEST(InspectCommand, FolderOfAdaptersListsThem) {
  const std::string folder = lorakv::testing::test_setting("LORAKV_SOURCE_DIR") + "/assets/role_adapters/qv_shared_a";
  const Result r = inspect({folder, "--model", lorakv::testing::test_setting("LORAKV_MODEL")});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* role : {"actor", "planner", "reflector"}) {
    EXPECT_TRUE(has_line(r.out, std::string("  ") + role +
                                    R"(: PEFT, rank 8, alpha 16\.0, targets \["q_proj", "v_proj"\], .* bytes\), fits)"))
        << role << " in\n" << r.out;
  }
  EXPECT_LT(r.out.find("  actor:"), r.out.find("  planner:"));
  EXPECT_LT(r.out.find("  planner:"), r.out.find("  reflector:"));
}

TEST(InspectCommand, HelpDocumentsEveryFlag) {
  const Result r = inspect({"--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* flag : {"--metadata", "--tensors", "--model", "--help", "FILE_OR_DIR"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
  std::ostringstream out, err;
  run_cli({"--help"}, out, err);
  EXPECT_NE(out.str().find("inspect"), std::string::npos);
}

TEST(InspectCommand, BadInput) {
  // A missing path.
  try {
    inspect({"/nonexistent/model.gguf"});
    ADD_FAILURE() << "no error for a missing file";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.gguf"), std::string::npos) << e.what();
    EXPECT_FALSE(e.context().hint.empty());
  }
  // A folder with no config.json, adapter or adapter folder in it.
  const fs::path dir = lorakv::testing::temp_path("inspect-empty");
  fs::create_directories(dir);
  try {
    inspect({dir.string()});
    ADD_FAILURE() << "no error for an empty folder";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no model, checkpoint or adapter here"), std::string::npos) << e.what();
    EXPECT_FALSE(e.context().hint.empty());
  }
  // A config.json but no weights.
  std::ofstream(dir / "config.json") << R"({"model_type": "llama"})";
  EXPECT_THROW(inspect({dir.string()}), ModelLoadError);
  remove_files(dir, {"config.json"});
  // A file that is not GGUF.
  const std::string junk = lorakv::testing::temp_path("junk.gguf");
  std::ofstream(junk) << "not a gguf file at all, just text";
  EXPECT_THROW(inspect({junk}), ModelLoadError);
  // Usage errors.
  EXPECT_THROW(inspect({}), ConfigError);
  EXPECT_THROW(inspect({junk, junk}), ConfigError);
  EXPECT_THROW(inspect({junk, "--bogus"}), ConfigError);
  std::remove(junk.c_str());
}

}  // namespace
}  // namespace lorakv::cli
