// agents/config_model_check.cpp: the model-aware check of a session config, from files
// only: formats:: and runtime:: header readers, adapters::load_adapter, and the engine's
// runtime::check_reader on the agents in the order a session adds them.
#include "lorakv/agents/config_model_check.h"

#include <memory>

#include "lorakv/adapters/adapter_loader.h"
#include "lorakv/agents/alora_turn.h"
#include "lorakv/agents/chat_layout.h"
#include "lorakv/agents/config_options.h"
#include "lorakv/agents/runtime_core.h"
#include "lorakv/common/errors.h"
#include "lorakv/formats/gguf_file.h"
#include "lorakv/formats/tokenizer_gguf.h"
#include "lorakv/runtime/hf_checkpoint.h"
#include "lorakv/runtime/llama_model.h"
#include "lorakv/runtime/loaded_model.h"
#include "lorakv/runtime/model_config.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/sharing_mode.h"

namespace lorakv::agents {
namespace {

using config::SessionConfig;

struct ModelHeader {
  runtime::ModelConfig config;
  std::unique_ptr<formats::BpeTokenizer> tokenizer;
};

// The model's hyperparameters and tokenizer, without its weights (as runtime::load_model
// decides between an HF folder and a GGUF file).
ModelHeader read_model_header(const SessionConfig& c) {
  const char* const hint = "lorakv runs Llama-family GGUF files and HF checkpoint folders with tokenizer.json";
  try {
    ModelHeader header;
    if (runtime::is_hf_checkpoint(c.model.path)) {
      header.config = runtime::read_hf_config(c.model.path);
      header.tokenizer = runtime::load_hf_tokenizer(c.model.path);
      if (!header.tokenizer) throw ConfigError("sessions need the model's tokenizer; the folder has no tokenizer.json");
    } else {
      const std::unique_ptr<formats::GgufFile> file = formats::GgufFile::open(c.model.path);
      header.config = runtime::read_model_config(*file);
      header.tokenizer = std::make_unique<formats::BpeTokenizer>(formats::tokenizer_from_gguf(*file));
    }
    return header;
  } catch (const config::ConfigFileError&) {
    throw;
  } catch (const InternalError&) {  // a bug stays one
    throw;
  } catch (const Error& e) {
    throw c.error_at("model.path", e.what(), hint);
  }
}

// Each agent's turn header must tokenize as the layout needs it (ChatML's special tokens
// in the vocabulary, no special-token text in the name).
void check_turn_headers(const SessionConfig& c, const formats::BpeTokenizer& tokenizer) {
  std::unique_ptr<ChatLayout> layout;
  try {
    layout = std::make_unique<ChatLayout>(tokenizer);
  } catch (const InternalError&) {  // a bug stays one
    throw;
  } catch (const Error& e) {
    throw c.error_at("model.path", e.what(), "sessions need a chat model with <|im_start|> and <|im_end|>");
  }
  for (const config::AgentSection& agent : c.agents) {
    try {
      (void)layout->header(agent.name);
    } catch (const InternalError&) {  // a bug stays one
      throw;
    } catch (const Error& e) {
      throw c.error_at("agents." + agent.name, e.what(), "a turn name is plain text, the role the adapter was trained on");
    }
  }
}

std::vector<std::shared_ptr<const adapters::Adapter>> load_adapters(const SessionConfig& c,
                                                                    const adapters::BaseModelShape& shape) {
  const adapters::AdapterLoadOptions options{runtime::parse_model_dtype(c.model.dtype)};
  std::vector<std::shared_ptr<const adapters::Adapter>> loaded;
  for (const config::AdapterSection& a : c.adapters) {
    try {
      loaded.push_back(adapters::load_adapter(a.name, a.path, shape, options));
    } catch (const InternalError&) {  // a bug stays one
      throw;
    } catch (const Error& e) {
      throw c.error_at("adapters." + a.name, e.what(), "the adapter must be trained for this model");
    }
  }
  return loaded;
}

// The agents join one session in file order; each is checked against those before it,
// exactly as the engine checks a reader joining a context, and an aLoRA agent's turn must
// invoke its adapter (agents/alora_turn.h).
void check_sharing_mode(const SessionConfig& c, const std::vector<std::shared_ptr<const adapters::Adapter>>& loaded,
                        const ChatLayout& layout) {
  const runtime::SharingMode mode = *runtime::parse_sharing_mode(c.cache.mode);
  std::vector<const adapters::Adapter*> earlier;
  for (const config::AgentSection& agent : c.agents) {
    const adapters::Adapter* adapter = nullptr;
    for (size_t i = 0; i < c.adapters.size(); ++i) {
      if (c.adapters[i].name == agent.adapter) adapter = loaded[i].get();
    }
    try {
      if (adapter) check_turn_invokes(layout, agent.name, agent.private_instruction(), *adapter);
    } catch (const InternalError&) {  // a bug stays one
      throw;
    } catch (const Error& e) {
      throw c.error_at("agents." + agent.name + ".adapter", e.what(), e.context().hint);
    }
    try {
      runtime::check_reader(mode, adapter, earlier);
    } catch (const InternalError&) {  // a bug stays one
      throw;
    } catch (const Error& e) {
      const std::string mode_at = config::format_location(c.source, c.marks.at("cache.mode"));
      throw c.error_at("agents." + agent.name + ".adapter", e.what(),
                       "the mode is `cache.mode` (" + mode_at + "); " + e.context().hint);
    }
    earlier.push_back(adapter);
  }
}

// What the engine checks of the session's context when it opens (the eviction keys against
// the model and the cache options: rerotate's rule, a per-head policy's lanes, one layer
// weight per layer), reported at the key in the file.
void check_context_rules(const SessionConfig& c, const runtime::ModelConfig& model) {
  const SessionOptions s = session_options(c);
  try {
    runtime::check_context_options({s.mode, s.writer, s.eviction}, engine_options(runtime_options(c)), model);
  } catch (const config::ConfigFileError&) {
    throw;
  } catch (const ConfigError& e) {
    // The engine names "eviction.policy"...; its layer weights are the YAML's layer_budgets list.
    std::string key = "cache." + e.context().key;
    if (key == "cache.eviction.layer_weights") key = "cache.eviction.layer_budgets";
    for (const char* outer : {"cache.eviction", "cache", "model.path"}) {
      if (!c.marks.has(key)) key = outer;
    }
    std::string message = e.message();
    if (!e.context().found.empty()) message += ": expected " + e.context().expected + ", found " + e.context().found;
    throw c.error_at(key, message, e.context().hint);
  }
}

// Rows rounded up to whole blocks, as the pools hand them out.
int64_t whole_blocks(int64_t rows, int64_t block) { return (rows + block - 1) / block * block; }

// The base pool against the agents, at the least a run needs: the shared context at the
// eviction's token budget (one block without a token budget), held once, or once per agent in
// `full`; and beside it the longest reply with its agent's instruction and turn header. A run
// whose trajectory grows past the pool still fails later, at the step that needs the rows;
// this refuses the configs that cannot run a single turn.
void check_pool_rows(const SessionConfig& c, const ModelHeader& header) {
  const RuntimeOptions options = runtime_options(c);
  const int64_t row_bytes =
      runtime::Engine::base_row_bytes(header.config, runtime::parse_model_dtype(options.dtype), engine_options(options));
  const int64_t block = c.cache.block_size;
  const int64_t pool_rows = c.cache.pool_bytes / row_bytes;
  const int64_t budget = c.cache.eviction.budget_tokens;
  const int64_t copies = c.cache.mode == "full" ? static_cast<int64_t>(c.agents.size()) : 1;
  const int64_t context_rows = copies * whole_blocks(budget > 0 ? budget + 1 : 1, block);
  constexpr int64_t kHeaderTokens = 8;  // "<|im_start|>name\n" and the turn's close, generously
  for (const config::AgentSection& agent : c.agents) {
    const int64_t instruction = static_cast<int64_t>(header.tokenizer->encode(agent.private_instruction()).size());
    const int64_t reply_rows = whole_blocks(instruction + kHeaderTokens + agent.max_tokens, block);
    const int64_t needed = context_rows + reply_rows;
    if (needed <= pool_rows) continue;
    const int64_t mib = (needed * row_bytes + (1 << 20) - 1) >> 20;
    throw c.error_at("cache.pool_bytes",
                     "the KV pool holds " + std::to_string(pool_rows) + " token rows of " + std::to_string(row_bytes) +
                         " bytes; agent " + agent.name + "'s reply (max_tokens " + std::to_string(agent.max_tokens) +
                         ", instruction " + std::to_string(instruction) + " tokens) beside the context (" +
                         std::to_string(context_rows) + " rows" + (copies > 1 ? ", one copy per agent in full" : "") +
                         ") needs " + std::to_string(needed),
                     "raise cache.pool_bytes to at least " + std::to_string(mib) + "MiB, or lower agents." + agent.name +
                         ".max_tokens");
  }
}

}  // namespace

ConfigModelReport check_config_against_model(const SessionConfig& c) {
  const ModelHeader header = read_model_header(c);
  check_turn_headers(c, *header.tokenizer);
  const std::vector<std::shared_ptr<const adapters::Adapter>> loaded = load_adapters(c, runtime::adapter_shape_of(header.config));
  check_sharing_mode(c, loaded, ChatLayout(*header.tokenizer));
  check_context_rules(c, header.config);
  check_pool_rows(c, header);
  ConfigModelReport report;
  report.architecture = header.config.architecture;
  report.model_name = header.config.name;
  report.num_layers = header.config.num_layers;
  report.hidden = header.config.hidden_dim;
  report.context_length = header.config.context_length;
  report.vocab_size = header.config.vocab_size;
  for (const auto& adapter : loaded) {
    report.adapters.push_back({adapter->name(), adapters::adapter_format_name(adapter->format()),
                               adapter->target_names(), adapter->max_rank(), adapter->num_bytes()});
  }
  return report;
}

}  // namespace lorakv::agents
