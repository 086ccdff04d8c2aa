// cli/inspect_command.cpp: `lorakv inspect`: what a GGUF file or a Hugging Face
// checkpoint folder holds (architecture, sizes, tokenizer, tensors), without loading weights.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "lorakv/adapters/adapter_loader.h"
#include "lorakv/adapters/peft_config_rules.h"
#include "lorakv/cli/cli_args.h"
#include "lorakv/cli/commands.h"
#include "lorakv/common/errors.h"
#include "lorakv/common/shape_string.h"
#include "lorakv/formats/chat_template.h"
#include "lorakv/formats/ggml_types.h"
#include "lorakv/formats/gguf_file.h"
#include "lorakv/formats/json.h"
#include "lorakv/formats/safetensors_file.h"
#include "lorakv/formats/safetensors_index.h"
#include "lorakv/formats/tokenizer_gguf.h"
#include "lorakv/formats/tokenizer_json.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/hf_checkpoint.h"
#include "lorakv/runtime/llama_model.h"
#include "lorakv/runtime/model_config.h"

namespace lorakv::cli {
namespace {
namespace fs = std::filesystem;

const char* kInspectHelp = R"(usage: lorakv inspect FILE_OR_DIR [flags]

Describes a model or an adapter without loading its weights. For a GGUF file or a Hugging
Face checkpoint folder (config.json with model.safetensors or an index): the architecture
and sizes (validated as lorakv would load them), the KV bytes one token takes per KV dtype,
parameters and bytes, the tokenizer and chat format. For a LoRA adapter (a GGUF LoRA file,
or a PEFT folder with adapter_config.json): rank, alpha, the modules it targets, whether it
is an activated LoRA (aLoRA) with its invocation tokens, and with --model whether it fits
that model. For a folder of adapters: one line per adapter in it.

flags:
  --tensors     also list every tensor (name, type, shape in PyTorch order, bytes), in
                layer order (blk.2 before blk.10)
  --metadata    also print every GGUF metadata key with its type and value (long arrays
                and strings abbreviated); for a checkpoint, config.json and the safetensors
                metadata; for a PEFT adapter, every key of adapter_config.json
  --model PATH  for an adapter: the base model (GGUF file or checkpoint folder) it must
                fit, whose tokenizer also shows the invocation tokens as text
  --help        this text
)";

constexpr size_t kMaxArrayItems = 8;     // array elements shown by --metadata
constexpr size_t kMaxStringBytes = 100;  // string bytes shown before "..."

// "1,234,567"
std::string grouped(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// "93.5 MiB (98,038,528 bytes)"
std::string bytes_text(uint64_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB (%s bytes)", static_cast<double>(n) / (1 << 20), grouped(n).c_str());
  return buf;
}

// A quoted, escaped, possibly shortened string for one output line.
std::string quoted(const std::string& s, size_t max_bytes = kMaxStringBytes) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < max_bytes; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '"' || c == '\\') out += std::string("\\") + static_cast<char>(c);
    else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += "\"";
  if (s.size() > max_bytes) out += "... (" + grouped(s.size()) + " bytes)";
  return out;
}

std::string value_text(const formats::GgufValue& v) {
  using formats::GgufType;
  char buf[64];
  switch (v.type) {
    case GgufType::kUint8: case GgufType::kUint16: case GgufType::kUint32: case GgufType::kUint64:
      return std::to_string(v.u);
    case GgufType::kInt8: case GgufType::kInt16: case GgufType::kInt32: case GgufType::kInt64:
      return std::to_string(v.i);
    case GgufType::kFloat32: case GgufType::kFloat64:
      std::snprintf(buf, sizeof buf, "%.9g", v.f);
      return buf;
    case GgufType::kBool: return v.b ? "true" : "false";
    case GgufType::kString: return quoted(v.s);
    case GgufType::kArray: {
      std::string out = "[";
      for (size_t i = 0; i < v.array.size() && i < kMaxArrayItems; ++i) {
        out += (i ? ", " : "") + value_text(v.array[i]);
      }
      if (v.array.size() > kMaxArrayItems) out += ", ... (" + grouped(v.array.size()) + " items)";
      return out + "]";
    }
  }
  return "?";
}

void row(std::ostream& out, const std::string& label, const std::string& value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "  %-18s ", label.c_str());
  out << buf << value << "\n";
}

void print_config(std::ostream& out, const runtime::ModelConfig& c) {
  char buf[64];
  row(out, "architecture", c.architecture);
  row(out, "name", c.name.empty() ? "(none)" : c.name);
  row(out, "layers", std::to_string(c.num_layers));
  row(out, "hidden", std::to_string(c.hidden_dim));
  row(out, "heads / KV heads", std::to_string(c.num_heads) + " / " + std::to_string(c.num_kv_heads));
  row(out, "head dim", std::to_string(c.head_dim));
  row(out, "intermediate", std::to_string(c.intermediate_dim));
  row(out, "vocab", std::to_string(c.vocab_size));
  row(out, "context length", std::to_string(c.context_length));
  std::snprintf(buf, sizeof buf, "%g", c.rope_theta);
  std::string rope = buf;
  if (c.rope_scaling.type != "default") {
    std::snprintf(buf, sizeof buf, " (%s scaling, factor %g)", c.rope_scaling.type.c_str(), c.rope_scaling.factor);
    rope += buf;
  }
  row(out, "rope theta", rope);
  std::snprintf(buf, sizeof buf, "%g", c.rms_norm_eps);
  row(out, "rms eps", buf);
  row(out, "tied embeddings", c.tied_embeddings ? "yes" : "no");
  if (c.attention_bias) row(out, "attention bias", "yes");
  if (c.sliding_window > 0) row(out, "sliding window", std::to_string(c.sliding_window));
}

// The KV bytes one token's row takes in the base pool (every layer's K and V, and its
// position), per KV dtype, as the engine sizes its pools.
std::string kv_bytes_per_token(const runtime::ModelConfig& c) {
  std::string text;
  for (const cache::StorageDtype dtype :
       {cache::StorageDtype::kFloat32, cache::StorageDtype::kBFloat16, cache::StorageDtype::kInt8}) {
    runtime::EngineOptions o;
    o.kv_dtype = dtype;
    text += (text.empty() ? "" : ", ") + std::string(runtime::kv_dtype_name(dtype)) + " " +
            grouped(static_cast<uint64_t>(runtime::Engine::base_row_bytes(c, at::kFloat, o)));
  }
  return text + " bytes";
}

// The config as lorakv would load it, or why it cannot.
void print_model(std::ostream& out, const std::function<runtime::ModelConfig()>& read) {
  out << "model:\n";
  try {
    const runtime::ModelConfig c = read();
    print_config(out, c);
    row(out, "KV per token", kv_bytes_per_token(c));
  } catch (const InternalError&) {  // a bug stays one
    throw;
  } catch (const Error& e) {
    row(out, "not runnable", e.what());
  }
}

struct TensorRow {
  std::string name, type;
  std::vector<int64_t> shape;
  int64_t num_elements = 0, num_bytes = 0;
};

// Names compared with their digit runs as numbers: blk.2 before blk.10, layers.9 before
// layers.10.
bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      const std::string da = a.substr(i, ie - i), db = b.substr(j, je - j);
      const std::string ta = da.substr(std::min(da.find_first_not_of('0'), da.size() - 1));
      const std::string tb = db.substr(std::min(db.find_first_not_of('0'), db.size() - 1));
      if (ta.size() != tb.size()) return ta.size() < tb.size();
      if (ta != tb) return ta < tb;
      i = ie, j = je;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i, ++j;
  }
  return a.size() - i < b.size() - j;
}

// Parameters and bytes; with `list`, every tensor in natural name order.
void print_tensors(std::ostream& out, std::vector<TensorRow> rows, bool list) {
  size_t width = 4;
  int64_t params = 0, bytes = 0;
  for (const TensorRow& r : rows) {
    width = std::max(width, r.name.size());
    params += r.num_elements;
    bytes += r.num_bytes;
  }
  row(out, "parameters", grouped(static_cast<uint64_t>(params)));
  row(out, "tensor bytes", bytes_text(static_cast<uint64_t>(bytes)));
  if (!list) {
    row(out, "tensors", std::to_string(rows.size()) + " (--tensors lists them)");
    return;
  }
  std::stable_sort(rows.begin(), rows.end(), [](const TensorRow& x, const TensorRow& y) { return natural_less(x.name, y.name); });
  out << "tensors (" << rows.size() << "):\n";
  const int w = static_cast<int>(width);
  char buf[512];
  std::snprintf(buf, sizeof buf, "  %-*s  %-6s  %-16s  %s\n", w, "name", "type", "shape", "bytes");
  out << buf;
  for (const TensorRow& r : rows) {
    std::snprintf(buf, sizeof buf, "  %-*s  %-6s  %-16s  %s\n", w, r.name.c_str(), r.type.c_str(),
                  shape_string(r.shape).c_str(), grouped(static_cast<uint64_t>(r.num_bytes)).c_str());
    out << buf;
  }
}

// "2 \"<|im_end|>\"", or "(none)".
std::string token_text(const formats::GgufFile& f, const char* key) {
  const std::optional<int64_t> id = f.find_int(key);
  if (!id) return "(none)";
  const formats::GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  std::string out = std::to_string(*id);
  if (tokens && tokens->type == formats::GgufType::kArray && *id >= 0 &&
      static_cast<size_t>(*id) < tokens->array.size()) {
    out += " " + quoted(tokens->array[static_cast<size_t>(*id)].s);
  }
  return out;
}

std::string array_size(const formats::GgufFile& f, const char* key) {
  const formats::GgufValue* v = f.find(key);
  return v && v->type == formats::GgufType::kArray ? grouped(v->array.size()) : "(none)";
}

std::string chat_format(const std::string& jinja) {
  if (jinja.empty()) return "none (no chat template)";
  try {
    const formats::ChatTemplate t = formats::ChatTemplate::from_jinja(jinja);
    std::string out = t.name();
    if (!t.default_system().empty()) out += " (default system prompt " + quoted(t.default_system(), 80) + ")";
    return out;
  } catch (const ConfigError&) {
    return "unknown";
  }
}

// The --model an adapter is inspected against: its hyperparameters (what the adapter must
// fit) and its tokenizer (the invocation tokens as text).
struct BaseModel {
  runtime::ModelConfig config;
  std::unique_ptr<formats::BpeTokenizer> tokenizer;
};

std::unique_ptr<BaseModel> read_base_model(const std::optional<std::string>& model) {
  if (!model) return nullptr;
  auto base = std::make_unique<BaseModel>();
  std::error_code ec;
  if (fs::is_directory(*model, ec)) {
    base->config = runtime::read_hf_config(*model);
    base->tokenizer = std::make_unique<formats::BpeTokenizer>(
        formats::vocab_from_tokenizer_json((fs::path(*model) / "tokenizer.json").string()));
    return base;
  }
  const std::unique_ptr<formats::GgufFile> f = formats::GgufFile::open(*model);
  base->config = runtime::read_model_config(*f);
  base->tokenizer = std::make_unique<formats::BpeTokenizer>(formats::tokenizer_from_gguf(*f));
  return base;
}

struct InspectOptions {
  bool metadata = false;  // --metadata
  bool tensors = false;   // --tensors
  const BaseModel* model = nullptr;  // --model
  const formats::BpeTokenizer* tokenizer() const { return model ? model->tokenizer.get() : nullptr; }
};

// With --model: whether the adapter loads against it (every module's shape), as a session
// would load it, or the loader's refusal.
void print_fit(std::ostream& out, const std::string& path, const InspectOptions& o) {
  if (o.model == nullptr) {
    row(out, "fits", "(--model tells)");
    return;
  }
  try {
    adapters::load_adapter("inspected", path, runtime::adapter_shape_of(o.model->config));
    row(out, "fits", "yes: " + o.model->config.architecture + " '" + o.model->config.name + "'");
  } catch (const InternalError&) {  // a bug stays one
    throw;
  } catch (const Error& e) {
    row(out, "fits", std::string("no: ") + e.what());
  }
}

// How the adapter acts, and its aLoRA invocation tokens (as text too, given a tokenizer).
// `read` returns them, or throws the loader's refusal, which is shown instead.
void print_activation(std::ostream& out, const std::function<std::vector<int32_t>()>& read,
                      const formats::BpeTokenizer* tokenizer) {
  std::vector<int32_t> ids;
  try {
    ids = read();
  } catch (const InternalError&) {  // a bug stays one
    throw;
  } catch (const Error& e) {
    row(out, "activation", std::string("not loadable: ") + e.what());
    return;
  }
  if (ids.empty()) {
    row(out, "activation", "standard LoRA (every token)");
    return;
  }
  row(out, "activation", "activated LoRA (aLoRA): from the last occurrence of its invocation tokens on; its "
                         "context rows are base rows");
  std::string list = "[";
  for (size_t i = 0; i < ids.size(); ++i) list += (i ? ", " : "") + std::to_string(ids[i]);
  row(out, "invocation tokens", list + "] (" + std::to_string(ids.size()) + ")");
  if (tokenizer == nullptr) {
    row(out, "invocation text", "(pass --model to see it)");
    return;
  }
  std::string pieces;
  for (int32_t id : ids) {
    if (id >= tokenizer->vocab_size()) {
      row(out, "invocation text", "token " + std::to_string(id) + " is outside the model's vocabulary (" +
                                      std::to_string(tokenizer->vocab_size()) + " tokens)");
      return;
    }
    pieces += (pieces.empty() ? "" : " ") + quoted(tokenizer->token_piece(id));
  }
  row(out, "invocation text", quoted(tokenizer->decode(ids)));
  row(out, "invocation pieces", pieces);
}

int inspect_gguf_adapter(const std::string& path, const formats::GgufFile& f, const InspectOptions& o,
                         std::ostream& out) {
  out << "adapter: " << path << " (GGUF)\n";
  row(out, "format", "GGUF v" + std::to_string(f.version()) + ", " + std::to_string(f.metadata().size()) +
                         " metadata keys, alignment " + std::to_string(f.alignment()));
  row(out, "file size", bytes_text(f.file_size()));
  row(out, "adapter type", f.find_string("adapter.type").value_or("(none)"));
  row(out, "architecture", f.find_string("general.architecture").value_or("(none)"));
  const std::optional<double> alpha = f.find_float("adapter.lora.alpha");
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", alpha.value_or(0.0));
  row(out, "alpha", alpha ? buf : "(none)");
  print_activation(out, [&] { return adapters::gguf_invocation_tokens(f); }, o.tokenizer());
  print_fit(out, path, o);
  if (o.metadata) {
    out << "metadata (" << f.metadata().size() << " keys):\n";
    for (const auto& [key, value] : f.metadata()) {
      out << "  " << key << " (" << value.describe() << ") = " << value_text(value) << "\n";
    }
  }
  out << "weights:\n";
  std::vector<TensorRow> rows;
  for (const formats::GgufTensorInfo& t : f.tensors()) {
    rows.push_back({t.name, formats::ggml_type_name(t.type_id), t.torch_shape(), t.num_elements, t.num_bytes});
  }
  print_tensors(out, rows, o.tensors);
  return 0;
}

// A key of adapter_config.json as JSON text, or "(none)".
std::string config_value(const formats::JsonValue& config, const char* key) {
  const formats::JsonValue* v = config.find(key);
  return v == nullptr || v->is_null() ? "(none)" : v->to_string();
}

int inspect_peft(const std::string& dir, const InspectOptions& o, std::ostream& out) {
  const fs::path config_path = fs::path(dir) / "adapter_config.json";
  formats::JsonParseOptions options;
  options.source = config_path.string();
  const formats::JsonValue config = formats::parse_json_file(config_path.string(), options);
  if (!config.is_object()) {
    throw AdapterLoadError("adapter_config.json is not a JSON object", {config_path.string(), "", "an object",
                                                                         config.describe(), ""});
  }
  out << "adapter: " << dir << " (PEFT)\n";
  row(out, "type", config_value(config, "peft_type"));
  row(out, "rank", config_value(config, "r"));
  row(out, "alpha", config_value(config, "lora_alpha"));
  row(out, "targets", config_value(config, "target_modules"));
  for (const char* key : {"rank_pattern", "alpha_pattern", "layers_to_transform", "use_rslora", "use_dora"}) {
    const formats::JsonValue* v = config.find(key);
    const bool set = v != nullptr && !v->is_null() && v->to_string() != "{}" && v->to_string() != "false";
    if (set) row(out, key, v->to_string());  // only what changes the math
  }
  row(out, "base model", config_value(config, "base_model_name_or_path"));
  print_activation(out, [&] { return adapters::parse_invocation_tokens(config_path.string(), config); }, o.tokenizer());
  print_fit(out, dir, o);
  if (o.metadata) {
    out << "adapter_config.json (" << config.size() << " keys):\n";
    for (const auto& [key, value] : config.as_object()) {
      std::string text = value.to_string();
      if (text.size() > kMaxStringBytes) text = text.substr(0, kMaxStringBytes) + "... (" + grouped(text.size()) + " bytes)";
      row(out, key, text);
    }
  }
  const fs::path weights = fs::path(dir) / "adapter_model.safetensors";
  out << "weights:\n";
  if (!fs::exists(weights)) {
    row(out, "files", "no adapter_model.safetensors");
    return 0;
  }
  const std::unique_ptr<formats::SafetensorsFile> file = formats::SafetensorsFile::open(weights.string());
  std::vector<TensorRow> rows;
  for (const auto& t : file->tensors()) rows.push_back({t.name, t.dtype_name(), t.shape, t.num_elements, t.num_bytes});
  row(out, "files", "adapter_model.safetensors, " + bytes_text(file->file_size()));
  print_tensors(out, rows, o.tensors);
  return 0;
}

int inspect_gguf(const std::string& path, const InspectOptions& o, std::ostream& out) {
  const std::unique_ptr<formats::GgufFile> f = formats::GgufFile::open(path);
  const formats::GgufValue* type = f->find("general.type");
  if (type != nullptr && type->type == formats::GgufType::kString && type->s == "adapter") {
    return inspect_gguf_adapter(path, *f, o, out);
  }
  out << "file: " << path << "\n";
  row(out, "format", "GGUF v" + std::to_string(f->version()) + ", " + std::to_string(f->metadata().size()) +
                         " metadata keys, alignment " + std::to_string(f->alignment()));
  row(out, "file size", bytes_text(f->file_size()));
  print_model(out, [&] { return runtime::read_model_config(*f); });

  out << "tokenizer:\n";
  row(out, "model", f->find_string("tokenizer.ggml.model").value_or("(none)"));
  row(out, "pre", f->find_string("tokenizer.ggml.pre").value_or("(none)"));
  row(out, "vocab size", array_size(*f, "tokenizer.ggml.tokens"));
  row(out, "merges", array_size(*f, "tokenizer.ggml.merges"));
  row(out, "bos", token_text(*f, "tokenizer.ggml.bos_token_id"));
  row(out, "eos", token_text(*f, "tokenizer.ggml.eos_token_id"));
  row(out, "pad", token_text(*f, "tokenizer.ggml.padding_token_id"));
  const std::optional<bool> add_bos = f->find_bool("tokenizer.ggml.add_bos_token");
  row(out, "add bos", add_bos ? (*add_bos ? "yes" : "no") : "(not set: no)");
  row(out, "chat format", chat_format(f->find_string("tokenizer.chat_template").value_or("")));

  if (o.metadata) {
    out << "metadata (" << f->metadata().size() << " keys):\n";
    for (const auto& [key, value] : f->metadata()) {
      out << "  " << key << " (" << value.describe() << ") = " << value_text(value) << "\n";
    }
  }

  out << "weights:\n";
  std::vector<TensorRow> rows;
  for (const formats::GgufTensorInfo& t : f->tensors()) {
    rows.push_back({t.name, formats::ggml_type_name(t.type_id), t.torch_shape(), t.num_elements, t.num_bytes});
  }
  print_tensors(out, rows, o.tensors);
  return 0;
}

// A special token in tokenizer_config.json: a string, or an object with "content".
std::string special_token(const formats::JsonValue& config, const char* key) {
  const formats::JsonValue* v = config.find(key);
  if (v == nullptr || v->is_null()) return "(none)";
  if (v->is_string()) return quoted(v->as_string());
  if (v->is_object() && v->find_string("content")) return quoted(*v->find_string("content"));
  return v->to_string();
}

void print_hf_tokenizer(std::ostream& out, const std::string& dir) {
  const fs::path tok_config = fs::path(dir) / "tokenizer_config.json";
  const fs::path jinja = fs::path(dir) / "chat_template.jinja";
  out << "tokenizer:\n";
  row(out, "tokenizer.json", fs::exists(fs::path(dir) / "tokenizer.json") ? "present" : "missing");
  std::string chat_template;
  if (fs::exists(tok_config)) {
    formats::JsonParseOptions options;
    options.source = tok_config.string();
    const formats::JsonValue c = formats::parse_json_file(tok_config.string(), options);
    if (c.is_object()) {
      row(out, "bos", special_token(c, "bos_token"));
      row(out, "eos", special_token(c, "eos_token"));
      row(out, "pad", special_token(c, "pad_token"));
      chat_template = c.find_string("chat_template").value_or("");
    }
  }
  if (fs::exists(jinja)) {
    std::ifstream f(jinja, std::ios::binary);
    std::ostringstream ss;
    ss << f.rdbuf();
    chat_template = ss.str();
  }
  row(out, "chat format", chat_format(chat_template));
}

int inspect_hf(const std::string& dir, const InspectOptions& o, std::ostream& out) {
  const fs::path config_path = fs::path(dir) / "config.json";
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (!fs::exists(config_path)) {
    throw ModelLoadError("not a Hugging Face checkpoint: config.json is missing",
                         {dir, "config.json", "a config.json beside the weights", "a folder without one",
                          "pass a GGUF file, or a folder as saved by save_pretrained()"});
  }
  if (!fs::exists(index) && !fs::exists(single)) {
    throw ModelLoadError("no weights in the checkpoint",
                         {dir, "model.safetensors", "model.safetensors or model.safetensors.index.json", "neither",
                          "download the safetensors weights too"});
  }
  formats::JsonParseOptions options;
  options.source = config_path.string();
  const formats::JsonValue config = formats::parse_json_file(config_path.string(), options);
  if (!config.is_object()) {
    throw ModelLoadError("config.json is not a JSON object",
                         {config_path.string(), "", "an object", config.describe(), ""});
  }
  out << "checkpoint: " << dir << " (Hugging Face)\n";
  if (o.metadata) {
    out << "config.json (" << config.size() << " keys):\n";
    for (const auto& [key, value] : config.as_object()) {
      std::string text = value.to_string();
      if (text.size() > kMaxStringBytes) {
        text = text.substr(0, kMaxStringBytes) + "... (" + grouped(text.size()) + " bytes)";
      }
      row(out, key, text);
    }
  }
  print_model(out, [&] { return runtime::read_hf_config(dir); });
  print_hf_tokenizer(out, dir);

  out << "weights:\n";
  std::vector<TensorRow> rows;
  uint64_t file_bytes = 0;
  auto add = [&](const formats::SafetensorsTensorInfo& t) {
    rows.push_back({t.name, t.dtype_name(), t.shape, t.num_elements, t.num_bytes});
  };
  if (fs::exists(index)) {
    const std::unique_ptr<formats::SafetensorsIndex> idx = formats::SafetensorsIndex::open(index.string());
    for (const auto& shard : idx->shards()) file_bytes += shard->file_size();
    for (const std::string& name : idx->tensor_names()) add(idx->tensor(name));
    row(out, "files", "model.safetensors.index.json, " + std::to_string(idx->shards().size()) + " shards, " +
                          bytes_text(file_bytes));
    if (o.metadata) row(out, "index metadata", idx->metadata().to_string());
  } else {
    const std::unique_ptr<formats::SafetensorsFile> file = formats::SafetensorsFile::open(single.string());
    for (const auto& t : file->tensors()) add(t);
    row(out, "files", "model.safetensors, " + bytes_text(file->file_size()));
    if (o.metadata) {
      for (const auto& [key, value] : file->metadata()) row(out, "metadata " + key, quoted(value));
    }
  }
  print_tensors(out, rows, o.tensors);
  return 0;
}

bool is_peft_folder(const fs::path& dir) {
  return fs::exists(dir / "adapter_config.json") && !fs::exists(dir / "config.json");
}

bool is_gguf_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string(magic, 4) == "GGUF";
}

// One PEFT adapter on one line, from its config and file sizes (no weights read).
std::string peft_line(const fs::path& dir) {
  formats::JsonParseOptions options;
  options.source = (dir / "adapter_config.json").string();
  const formats::JsonValue config = formats::parse_json_file(options.source, options);
  if (!config.is_object()) throw AdapterLoadError("adapter_config.json is not a JSON object", {options.source});
  const fs::path weights = dir / "adapter_model.safetensors";
  std::error_code ec;
  const uintmax_t bytes = fs::file_size(weights, ec);
  return "PEFT, rank " + config_value(config, "r") + ", alpha " + config_value(config, "lora_alpha") + ", targets " +
         config_value(config, "target_modules") + ", " + (ec ? std::string("no weights file") : bytes_text(bytes));
}

// One GGUF LoRA file on one line, from its header.
std::string gguf_adapter_line(const fs::path& path) {
  const std::unique_ptr<formats::GgufFile> f = formats::GgufFile::open(path.string());
  char alpha[32];
  std::snprintf(alpha, sizeof alpha, "%g", f->find_float("adapter.lora.alpha").value_or(0.0));
  return "GGUF " + f->find_string("adapter.type").value_or("(no adapter.type)") + ", alpha " + alpha + ", " +
         std::to_string(f->tensors().size()) + " tensors, " + bytes_text(f->file_size());
}

// A folder that is neither a checkpoint nor an adapter: one line per adapter in it (PEFT
// folders and GGUF LoRA files), in name order: name, format, rank, alpha, targets, bytes;
// with --model, whether it fits.
int inspect_adapter_folder(const std::string& dir, const InspectOptions& o, std::ostream& out) {
  std::vector<fs::path> entries;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) entries.push_back(e.path());
  std::sort(entries.begin(), entries.end(), [](const fs::path& a, const fs::path& b) {
    return natural_less(a.filename().string(), b.filename().string());
  });
  out << "adapters in " << dir << ":\n";
  size_t found = 0;
  for (const fs::path& p : entries) {
    const bool peft = fs::is_directory(p) && is_peft_folder(p);
    if (!peft && !(fs::is_regular_file(p) && is_gguf_file(p))) continue;
    ++found;
    std::string line = p.filename().string() + ": ";
    try {
      line += peft ? peft_line(p) : gguf_adapter_line(p);
      if (o.model) {
        adapters::load_adapter(p.filename().string(), p.string(), runtime::adapter_shape_of(o.model->config));
        line += ", fits";
      }
    } catch (const InternalError&) {  // a bug stays one
      throw;
    } catch (const Error& e) {
      line += std::string("cannot use: ") + e.what();
    }
    out << "  " << line << "\n";
  }
  if (found == 0) {
    throw ConfigError("no model, checkpoint or adapter here",
                      {dir, "FILE_OR_DIR", "a GGUF file, a checkpoint folder, an adapter, or a folder of adapters",
                       "a folder without any", "check the path"});
  }
  return 0;
}

}  // namespace

int run_inspect(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CliArgs a(args, {"--model"}, {"--metadata", "--tensors", "--help"}, "inspect");
  if (a.has("--help")) {
    out << kInspectHelp;
    return 0;
  }
  if (a.positional().size() != 1) {
    throw UsageError("inspect takes one path", {"", "FILE_OR_DIR", "one GGUF file or checkpoint folder",
                                                 std::to_string(a.positional().size()) + " paths",
                                                 "see 'lorakv inspect --help'"});
  }
  const std::string& path = a.positional().front();
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw ConfigError("no such file or directory", {path, "FILE_OR_DIR", "a GGUF file or a checkpoint folder",
                                                    "nothing at that path", "check the path"});
  }
  const std::unique_ptr<BaseModel> model = read_base_model(a.get("--model"));
  InspectOptions o;
  o.metadata = a.has("--metadata");
  o.tensors = a.has("--tensors");
  o.model = model.get();
  if (!fs::is_directory(path, ec)) return inspect_gguf(path, o, out);
  if (is_peft_folder(path)) return inspect_peft(path, o, out);
  if (fs::exists(fs::path(path) / "config.json")) return inspect_hf(path, o, out);
  return inspect_adapter_folder(path, o, out);
}

}  // namespace lorakv::cli
