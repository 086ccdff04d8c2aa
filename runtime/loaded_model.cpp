// runtime/loaded_model.cpp: GGUF file -> tokenizer + model.
#include "runtime/loaded_model.h"

#include "common/errors.h"
#include "common/logging.h"
#include "formats/gguf_file.h"
#include "formats/tokenizer_gguf.h"

namespace lorakv::runtime {

at::ScalarType parse_model_dtype(const std::string& name) {
  if (name == "float32" || name == "f32" || name == "fp32") return at::kFloat;
  if (name == "bfloat16" || name == "bf16") return at::kBFloat16;
  throw ConfigError("unsupported model dtype", {"", "dtype", "float32 or bfloat16", "'" + name + "'", ""});
}

LoadedModel load_model(const std::string& path, at::ScalarType dtype) {
  log::Stopwatch watch;
  log::info("loading " + path);
  std::unique_ptr<formats::GgufFile> file = formats::GgufFile::open(path);
  LoadedModel loaded;
  loaded.tokenizer = std::make_unique<formats::BpeTokenizer>(formats::tokenizer_from_gguf(*file));
  loaded.model = LlamaModel::from_gguf(*file, dtype);
  const ModelConfig& c = loaded.model->config();
  log::info(c.architecture + " model '" + c.name + "': " + std::to_string(c.num_layers) + " layers, hidden " +
            std::to_string(c.hidden_dim) + ", heads " + std::to_string(c.num_heads) + "/" +
            std::to_string(c.num_kv_heads) + ", vocab " + std::to_string(c.vocab_size) + "; ready in " +
            std::to_string(watch.seconds()).substr(0, 4) + " s");
  return loaded;
}

}  // namespace lorakv::runtime
