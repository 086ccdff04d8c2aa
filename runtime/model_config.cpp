// runtime/model_config.cpp: GGUF metadata -> ModelConfig.
#include "lorakv/runtime/model_config.h"

#include <algorithm>

#include "lorakv/common/errors.h"
#include "lorakv/formats/gguf_file.h"

namespace lorakv::runtime {

const std::vector<std::string>& supported_gguf_architectures() {
  static const std::vector<std::string> archs = {"llama"};
  return archs;
}

bool gguf_permutes_qk(const std::string& architecture) { return architecture == "llama"; }

namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

void require_positive(const formats::GgufFile& f, const std::string& key, int64_t value) {
  if (value <= 0) {
    throw ModelLoadError("hyperparameter must be positive", {f.path(), key, "> 0", std::to_string(value), ""});
  }
}

}  // namespace

ModelConfig read_model_config(const formats::GgufFile& f) {
  ModelConfig c;
  c.architecture = f.get_string("general.architecture");
  const auto& supported = supported_gguf_architectures();
  if (std::find(supported.begin(), supported.end(), c.architecture) == supported.end()) {
    throw ModelLoadError("unsupported architecture",
                         {f.path(), "general.architecture", "one of: " + join(supported), "'" + c.architecture + "'",
                          "convert a Llama-family model, or open an issue for this architecture"});
  }
  const std::string a = c.architecture + ".";
  c.name = f.find_string("general.name").value_or("");
  c.num_layers = f.get_int(a + "block_count");
  c.hidden_dim = f.get_int(a + "embedding_length");
  c.intermediate_dim = f.get_int(a + "feed_forward_length");
  c.num_heads = f.get_int(a + "attention.head_count");
  c.num_kv_heads = f.find_int(a + "attention.head_count_kv").value_or(c.num_heads);
  c.context_length = f.get_int(a + "context_length");
  c.rope_theta = f.find_float(a + "rope.freq_base").value_or(10000.0);
  c.rms_norm_eps = f.get_float(a + "attention.layer_norm_rms_epsilon");
  for (const auto& [key, value] :
       {std::pair<std::string, int64_t>{"block_count", c.num_layers}, {"embedding_length", c.hidden_dim},
        {"feed_forward_length", c.intermediate_dim}, {"attention.head_count", c.num_heads},
        {"attention.head_count_kv", c.num_kv_heads}, {"context_length", c.context_length}}) {
    require_positive(f, a + key, value);
  }
  if (c.hidden_dim % c.num_heads != 0) {
    throw ModelLoadError("embedding length is not a multiple of the head count",
                         {f.path(), a + "embedding_length", "a multiple of " + std::to_string(c.num_heads),
                          std::to_string(c.hidden_dim), ""});
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    throw ModelLoadError("head count is not a multiple of the KV head count",
                         {f.path(), a + "attention.head_count_kv", "a divisor of " + std::to_string(c.num_heads),
                          std::to_string(c.num_kv_heads), ""});
  }
  c.head_dim = c.hidden_dim / c.num_heads;
  if (auto rot = f.find_int(a + "rope.dimension_count"); rot && *rot != c.head_dim) {
    throw ModelLoadError("partial rotary embeddings are not supported",
                         {f.path(), a + "rope.dimension_count", std::to_string(c.head_dim), std::to_string(*rot), ""});
  }
  // Vocabulary size: the explicit key when present, else the embedding's row count.
  const auto& embd = f.tensor("token_embd.weight");
  c.vocab_size = f.find_int(a + "vocab_size").value_or(embd.dims.size() == 2 ? embd.dims[1] : 0);
  require_positive(f, a + "vocab_size", c.vocab_size);
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  c.attention_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  if (auto scaling = f.find_string(a + "rope.scaling.type"); scaling && *scaling != "none") {
    throw ModelLoadError("RoPE scaling in GGUF files is not supported yet",
                         {f.path(), a + "rope.scaling.type", "none", "'" + *scaling + "'",
                          "load the Hugging Face checkpoint directory instead"});
  }
  return c;
}

}  // namespace lorakv::runtime
