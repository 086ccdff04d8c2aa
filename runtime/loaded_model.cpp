// runtime/loaded_model.cpp: GGUF file -> tokenizer + model.
#include "lorakv/runtime/loaded_model.h"

#include "lorakv/common/errors.h"
#include "lorakv/common/logging.h"
#include "lorakv/formats/gguf_file.h"
#include "lorakv/formats/tokenizer_gguf.h"
#include "lorakv/runtime/hf_checkpoint.h"

namespace lorakv::runtime {

at::ScalarType parse_model_dtype(const std::string& name) {
  if (name == "float32" || name == "f32" || name == "fp32") return at::kFloat;
  if (name == "bfloat16" || name == "bf16") return at::kBFloat16;
  throw ConfigError("unsupported model dtype", {"", "dtype", "float32 or bfloat16", "'" + name + "'", ""});
}

LoadedModel load_model(const std::string& path, at::ScalarType dtype, WeightForm form) {
  log::Stopwatch watch;
  log::info("loading " + path);
  LoadedModel loaded;
  if (is_hf_checkpoint(path)) {
    ModelConfig config = read_hf_config(path);
    ModelWeights weights = load_hf_weights(path, config, dtype, form);
    loaded.model = std::make_unique<LlamaModel>(std::move(config), std::move(weights));
    loaded.tokenizer = load_hf_tokenizer(path);
    if (!loaded.tokenizer) log::warn("no tokenizer.json in " + path + ": token ids only");
  } else {
    std::unique_ptr<formats::GgufFile> file = formats::GgufFile::open(path);
    loaded.tokenizer = std::make_unique<formats::BpeTokenizer>(formats::tokenizer_from_gguf(*file));
    loaded.model = LlamaModel::from_gguf(*file, dtype, form);
  }
  const ModelConfig& c = loaded.model->config();
  log::info(c.architecture + " model '" + c.name + "': " + std::to_string(c.num_layers) + " layers, hidden " +
            std::to_string(c.hidden_dim) + ", heads " + std::to_string(c.num_heads) + "/" +
            std::to_string(c.num_kv_heads) + ", vocab " + std::to_string(c.vocab_size) + "; ready in " +
            std::to_string(watch.seconds()).substr(0, 4) + " s");
  return loaded;
}

}  // namespace lorakv::runtime
