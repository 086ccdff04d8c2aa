// adapters/gguf_lora_loader.cpp: llama.cpp GGUF LoRA adapters (convert_lora_to_gguf.py's
// output) and the loader dispatch. Tensor layout as llama.cpp reads it: lora_a ne =
// [in, r] (torch [r, in]) and lora_b ne = [r, out] (torch [out, r]); scale = alpha / r.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "lorakv/adapters/adapter_loader.h"
#include "lorakv/common/errors.h"
#include "lorakv/formats/ggml_types.h"
#include "lorakv/formats/gguf_file.h"
#include "lorakv/formats/llama_modules.h"
#include "lorakv/kernels/qk_unpermute.h"

namespace lorakv::adapters {
namespace {

namespace fs = std::filesystem;

at::Tensor read_f32(const formats::GgufTensorInfo& t) {
  at::Tensor out = at::empty(t.torch_shape(), at::kFloat);
  formats::dequantize_to_f32(t.type(), t.data, out.data_ptr<float>(), t.num_elements);
  return out;
}

}  // namespace

std::vector<int32_t> gguf_invocation_tokens(const formats::GgufFile& file) {
  using formats::GgufType;
  const std::string& path = file.path();
  const std::string key = invocation_tokens_key(AdapterFormat::kGgufLora);
  const char* expected = "an array of token ids (uint32, as llama.cpp's convert_lora_to_gguf.py writes them)";
  // An aLoRA key lorakv does not know may change which tokens are adapted: refused, never ignored.
  for (const auto& [k, value] : file.metadata()) {
    if (k.rfind("adapter.alora.", 0) == 0 && k != key) {
      throw AdapterLoadError(file.has(key) ? "unknown activated LoRA key" : "activated LoRA without invocation tokens",
                             {path, k, key + " (the only adapter.alora.* key lorakv reads)", value.describe(),
                              "convert the adapter with llama.cpp's convert_lora_to_gguf.py"});
    }
  }
  const formats::GgufValue* v = file.find(key);
  if (v == nullptr) return {};
  const bool int_array = v->type == GgufType::kArray &&
                         (v->elem_type == GgufType::kUint32 || v->elem_type == GgufType::kInt32);
  if (!int_array) {
    throw AdapterLoadError("activated LoRA invocation tokens of the wrong type", {path, key, expected, v->describe(), ""});
  }
  std::vector<int32_t> out;
  for (const formats::GgufValue& e : v->array) {
    const int64_t id = e.type == GgufType::kUint32 ? static_cast<int64_t>(e.u) : e.i;
    if (id < 0 || id > INT32_MAX) {
      throw AdapterLoadError("activated LoRA invocation token is not a token id", {path, key, expected, std::to_string(id), ""});
    }
    out.push_back(static_cast<int32_t>(id));
  }
  if (out.empty()) {
    throw AdapterLoadError("activated LoRA without invocation tokens",
                           {path, key, expected, "an empty array", "remove the key for a standard LoRA"});
  }
  return out;
}

std::shared_ptr<const Adapter> load_gguf_lora(const std::string& name, const std::string& path,
                                              const BaseModelShape& shape, const AdapterLoadOptions& options) {
  std::unique_ptr<formats::GgufFile> file;
  try {
    file = formats::GgufFile::open(path);
  } catch (const InternalError&) {  // a bug stays one
    throw;
  } catch (const Error& e) {
    throw AdapterLoadError(e.message(), e.context());
  }
  const auto require = [&](const char* key, const std::string& want) {
    const std::optional<std::string> v = file->find_string(key);
    if (v != want) {
      throw AdapterLoadError("not a GGUF LoRA adapter", {path, key, "\"" + want + "\"", v ? "\"" + *v + "\"" : "absent",
                                                          "a base model file is loaded with --model, not as an adapter"});
    }
  };
  require("general.type", "adapter");
  require("adapter.type", "lora");
  // Activated LoRA: kept with the adapter; the runtime refuses to run it (adapter.h).
  std::vector<int32_t> invocation_tokens = gguf_invocation_tokens(*file);
  if (!invocation_tokens.empty()) {
    check_invocation_tokens(invocation_tokens, shape, path, invocation_tokens_key(AdapterFormat::kGgufLora));
  }
  const std::string arch = file->find_string("general.architecture").value_or("");
  if (arch != shape.architecture) {
    throw AdapterLoadError("adapter for another architecture", {path, "general.architecture", shape.architecture, arch,
                                                                "was the adapter trained for another base model?"});
  }
  const double alpha = file->find_float("adapter.lora.alpha").value_or(0.0);

  static const std::regex name_re(R"(^blk\.(\d+)\.([a-z_]+)\.weight\.lora_(a|b)$)");
  std::map<std::pair<int64_t, int>, std::pair<const formats::GgufTensorInfo*, const formats::GgufTensorInfo*>> found;
  for (const formats::GgufTensorInfo& t : file->tensors()) {
    std::smatch m;
    std::optional<ModuleId> mod;
    if (std::regex_match(t.name, m, name_re)) mod = formats::module_from_gguf_name(m[2].str());
    if (!mod) {
      throw AdapterLoadError("unsupported tensor in a GGUF LoRA adapter",
                             {path, t.name, "blk.N.{attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down}.weight."
                              "lora_a/lora_b", t.name, "embedding and output-layer LoRA are not supported"});
    }
    const int64_t layer = std::stoll(m[1].str());
    if (layer >= shape.num_layers) {
      throw AdapterLoadError("layer out of range", {path, t.name, "layers 0.." + std::to_string(shape.num_layers - 1),
                                                    std::to_string(layer), "was the adapter trained for another base model?"});
    }
    auto& slot = found[{layer, static_cast<int>(*mod)}];
    (m[3].str() == "a" ? slot.first : slot.second) = &t;
  }
  std::vector<LoraModule> modules;
  for (const auto& [key, ab] : found) {
    const ModuleId m = static_cast<ModuleId>(key.second);
    const std::string tname = "blk." + std::to_string(key.first) + ".*.weight.lora_" + (ab.first ? "b" : "a");
    if (ab.first == nullptr || ab.second == nullptr) {
      throw AdapterLoadError("LoRA factor missing", {path, tname, "both lora_a and lora_b", "only one", ""});
    }
    at::Tensor a, b;
    try {
      a = read_f32(*ab.first);
      b = read_f32(*ab.second);
    } catch (const InternalError&) {  // a bug stays one
      throw;
    } catch (const Error& e) {
      throw AdapterLoadError(e.message(), e.context());
    }
    if (shape.gguf_permutes_qk && b.dim() == 2 && b.size(0) == shape.out_dim(m) && (m == ModuleId::kQ || m == ModuleId::kK)) {
      // llama.cpp's Q/K row order back to Hugging Face's. b: float32 [num_heads * head_dim, r].
      b = kernels::unpermute_qk_rows(b, m == ModuleId::kQ ? shape.num_heads : shape.num_kv_heads);
    }
    const int64_t rank = a.dim() == 2 ? a.size(0) : 1;
    const double scale = alpha == 0.0 ? 1.0 : alpha / static_cast<double>(rank);  // llama.cpp's rule
    modules.push_back(make_lora_module(shape, key.first, m, a, b, alpha, scale, options.dtype, path, ab.first->name));
  }
  if (modules.empty()) throw AdapterLoadError("the adapter adapts no module", {path, "tensors", "lora_a/lora_b pairs", "none", ""});
  return std::make_shared<Adapter>(name, path, AdapterFormat::kGgufLora, shape, std::move(modules),
                                   std::move(invocation_tokens));
}

std::shared_ptr<const Adapter> load_adapter(const std::string& name, const std::string& path,
                                            const BaseModelShape& shape, const AdapterLoadOptions& options) {
  const fs::path p(path);
  if (fs::is_directory(p)) return load_peft_adapter(name, path, shape, options);
  const std::string file = p.filename().string();
  if (file == "adapter_config.json" || file == "adapter_model.safetensors" || file == "adapter_model.bin") {
    return load_peft_adapter(name, p.parent_path().string(), shape, options);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw AdapterLoadError("cannot open the adapter", {path, "", "a PEFT directory or a GGUF LoRA file", "nothing readable", ""});
  char magic[4] = {};
  in.read(magic, 4);
  if (in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) return load_gguf_lora(name, path, shape, options);
  throw AdapterLoadError("unrecognised adapter format",
                         {path, "", "a PEFT directory (adapter_config.json + adapter_model.safetensors) or a GGUF LoRA file",
                          "neither", "pickled .bin/.pt files are never loaded"});
}

}  // namespace lorakv::adapters
