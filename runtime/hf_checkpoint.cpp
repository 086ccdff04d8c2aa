// runtime/hf_checkpoint.cpp: config.json -> ModelConfig, safetensors -> ModelWeights.
#include "lorakv/runtime/hf_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lorakv/common/errors.h"
#include "lorakv/common/shape_string.h"
#include "lorakv/formats/json.h"
#include "lorakv/formats/safetensors_file.h"
#include "lorakv/formats/safetensors_index.h"
#include "lorakv/formats/tokenizer_json.h"

namespace lorakv::runtime {
namespace fs = std::filesystem;

const std::vector<std::string>& supported_hf_model_types() {
  static const std::vector<std::string> types = {"llama", "mistral", "qwen2"};
  return types;
}

bool is_hf_checkpoint(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "config.json", ec);
}

namespace {

formats::JsonValue read_json(const fs::path& path) {
  formats::JsonParseOptions options;
  options.source = path.string();
  return formats::parse_json_file(path.string(), options);
}

[[noreturn]] void unsupported(const std::string& file, const std::string& key, const std::string& expected,
                              const std::string& found, const std::string& hint = "") {
  throw ConfigError("unsupported model configuration", {file, key, expected, found, hint});
}

// rope_parameters (transformers 5) or rope_theta + rope_scaling (older files).
void read_rope(const formats::JsonValue& j, const std::string& file, ModelConfig& c) {
  const formats::JsonValue* params = j.find("rope_parameters");
  if (params == nullptr || params->is_null()) params = j.find("rope_scaling");
  c.rope_theta = j.find_double("rope_theta").value_or(10000.0);
  if (params == nullptr || params->is_null()) return;
  if (auto theta = params->find_double("rope_theta")) c.rope_theta = *theta;
  std::string type = params->find_string("rope_type").value_or(params->find_string("type").value_or("default"));
  RopeScaling& s = c.rope_scaling;
  s.type = type;
  if (type == "default") return;
  s.factor = params->at("factor").as_double();
  if (type == "linear") return;
  if (type == "llama3") {
    s.low_freq_factor = params->at("low_freq_factor").as_double();
    s.high_freq_factor = params->at("high_freq_factor").as_double();
    s.original_max_position = params->at("original_max_position_embeddings").as_int();
    return;
  }
  unsupported(file, params->display_path() + ".rope_type", "default, linear or llama3", "'" + type + "'");
}

void require_positive(const std::string& file, const std::string& key, int64_t value) {
  if (value <= 0) throw ConfigError("value must be positive", {file, key, "> 0", std::to_string(value), ""});
}

}  // namespace

ModelConfig read_hf_config(const std::string& dir) {
  const fs::path path = fs::path(dir) / "config.json";
  if (!fs::exists(path)) {
    throw ModelLoadError("not a Hugging Face checkpoint: config.json is missing",
                         {dir, "config.json", "a config.json in the directory", "none", "pass a GGUF file or an HF model folder"});
  }
  const formats::JsonValue j = read_json(path);
  const std::string file = path.string();
  ModelConfig c;
  c.architecture = j.find_string("model_type").value_or("");
  const auto& types = supported_hf_model_types();
  if (std::find(types.begin(), types.end(), c.architecture) == types.end()) {
    unsupported(file, "model_type", "one of: llama, mistral, qwen2", "'" + c.architecture + "'",
                "lorakv runs Llama-family models");
  }
  c.name = fs::path(dir).filename().string();
  c.num_layers = j.at("num_hidden_layers").as_int();
  c.hidden_dim = j.at("hidden_size").as_int();
  c.intermediate_dim = j.at("intermediate_size").as_int();
  c.num_heads = j.at("num_attention_heads").as_int();
  c.num_kv_heads = j.find_int("num_key_value_heads").value_or(c.num_heads);
  c.vocab_size = j.at("vocab_size").as_int();
  c.context_length = j.find_int("max_position_embeddings").value_or(2048);
  c.rms_norm_eps = j.find_double("rms_norm_eps").value_or(1e-6);
  c.tied_embeddings = j.find_bool("tie_word_embeddings").value_or(false);
  for (const char* key : {"num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                          "num_key_value_heads", "vocab_size"}) {
    if (auto v = j.find_int(key)) require_positive(file, key, *v);
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    throw ConfigError("heads are not a multiple of KV heads", {file, "num_key_value_heads",
                                                              "a divisor of " + std::to_string(c.num_heads),
                                                              std::to_string(c.num_kv_heads), ""});
  }
  c.head_dim = j.find_int("head_dim").value_or(c.hidden_dim / c.num_heads);
  require_positive(file, "head_dim", c.head_dim);
  read_rope(j, file, c);
  if (j.find_string("hidden_act").value_or("silu") != "silu") {
    unsupported(file, "hidden_act", "silu", "'" + *j.find_string("hidden_act") + "'");
  }
  if (j.find_bool("mlp_bias").value_or(false)) unsupported(file, "mlp_bias", "false", "true");
  c.attention_bias = c.architecture == "qwen2" || j.find_bool("attention_bias").value_or(false);
  if (c.architecture == "mistral") c.sliding_window = j.find_int("sliding_window").value_or(0);
  if (c.architecture == "qwen2" && j.find_bool("use_sliding_window").value_or(false)) {
    unsupported(file, "use_sliding_window", "false", "true");
  }
  return c;
}

ModelWeights load_hf_weights(const std::string& dir, const ModelConfig& config, at::ScalarType dtype,
                             WeightForm form) {
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::unique_ptr<formats::SafetensorsFile> file;
  std::unique_ptr<formats::SafetensorsIndex> shards;
  if (fs::exists(single)) {
    file = formats::SafetensorsFile::open(single.string());
  } else if (fs::exists(index)) {
    shards = formats::SafetensorsIndex::open(index.string());
  } else {
    throw ModelLoadError("no weights found", {dir, "", "model.safetensors or model.safetensors.index.json", "neither",
                                              "PyTorch .bin checkpoints are not loaded (no code runs from files)"});
  }
  return assemble_weights(config, dtype, form, [&](const std::string& name, const std::vector<int64_t>& shape) {
    const formats::SafetensorsTensorInfo& info = file ? file->tensor(name) : shards->tensor(name);
    if (info.shape != shape) {
      throw ModelLoadError("tensor shape disagrees with config.json",
                           {info.file, name, shape_string(shape), shape_string(info.shape), "the weights and config.json do not belong together"});
    }
    at::Tensor out = at::empty(shape, at::kFloat);
    formats::convert_to_f32(info, out.data_ptr<float>());
    return out;
  });
}

std::unique_ptr<formats::BpeTokenizer> load_hf_tokenizer(const std::string& dir) {
  const fs::path path = fs::path(dir) / "tokenizer.json";
  if (!fs::exists(path)) return nullptr;
  formats::TokenizerVocab vocab = formats::vocab_from_tokenizer_json(path.string());
  // Special ids: generation_config.json, then config.json; the chat template from
  // tokenizer_config.json or chat_template.jinja.
  for (const char* name : {"config.json", "generation_config.json"}) {
    const fs::path p = fs::path(dir) / name;
    if (!fs::exists(p)) continue;
    const formats::JsonValue j = read_json(p);
    auto id = [&](const char* key) -> std::optional<int64_t> {
      const formats::JsonValue* v = j.find(key);
      if (v == nullptr || v->is_null()) return std::nullopt;
      return v->is_array() ? (v->size() ? std::optional<int64_t>(v->at(size_t{0}).as_int()) : std::nullopt) : v->as_int();
    };
    if (auto v = id("bos_token_id")) vocab.bos_id = static_cast<int32_t>(*v);
    if (auto v = id("eos_token_id")) vocab.eos_id = static_cast<int32_t>(*v);
    if (auto v = id("pad_token_id")) vocab.pad_id = static_cast<int32_t>(*v);
  }
  const fs::path jinja = fs::path(dir) / "chat_template.jinja";
  const fs::path tok_config = fs::path(dir) / "tokenizer_config.json";
  if (fs::exists(jinja)) {
    std::ifstream in(jinja);
    std::stringstream ss;
    ss << in.rdbuf();
    vocab.chat_template = ss.str();
  } else if (fs::exists(tok_config)) {
    vocab.chat_template = read_json(tok_config).find_string("chat_template").value_or("");
  }
  return std::make_unique<formats::BpeTokenizer>(std::move(vocab));
}

}  // namespace lorakv::runtime
