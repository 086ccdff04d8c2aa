// runtime/model_config.h: the hyperparameters of a Llama-family model, read from GGUF
// metadata and validated before any tensor is touched.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lorakv::formats {
class GgufFile;
}

namespace lorakv::runtime {

// RoPE frequency scaling. "default": none; "linear": every frequency / factor; "llama3":
// Llama 3.1's band-wise rule (low frequencies / factor, high kept, a smooth blend between).
struct RopeScaling {
  std::string type = "default";
  double factor = 1.0;
  double low_freq_factor = 1.0;            // llama3
  double high_freq_factor = 4.0;           // llama3
  int64_t original_max_position = 8192;    // llama3
};

struct ModelConfig {
  std::string architecture;  // GGUF general.architecture, e.g. "llama"
  std::string name;          // general.name, for display
  int64_t num_layers = 0;
  int64_t hidden_dim = 0;
  int64_t intermediate_dim = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  int64_t context_length = 0;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int64_t sliding_window = 0;   // > 0: attention sees only the last N positions (Mistral)
  bool attention_bias = false;  // q/k/v projections have biases (Qwen2; Llama's attention_bias)
  double rms_norm_eps = 1e-5;
  bool tied_embeddings = true;  // no separate output.weight in the file
};

// Architectures lorakv can run from GGUF today.
const std::vector<std::string>& supported_gguf_architectures();

// True when llama.cpp's converter permuted this architecture's Q/K rows for its
// interleaved RoPE (only "llama"); those rows are un-permuted at load.
bool gguf_permutes_qk(const std::string& architecture);

// Reads and checks the config. Throws ModelLoadError for an unsupported architecture
// (listing the supported ones), missing keys, or inconsistent values.
ModelConfig read_model_config(const formats::GgufFile& file);

}  // namespace lorakv::runtime
