// agents/session_file.cpp: a session to safetensors bytes and back, with its checks.
#include "lorakv/agents/session_file.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include "lorakv/agents/errors.h"
#include "lorakv/agents/session_file_eviction.h"
#include "lorakv/common/sha256.h"
#include "lorakv/formats/json.h"
#include "lorakv/formats/mapped_file.h"
#include "lorakv/formats/safetensors_file.h"
#include "lorakv/formats/safetensors_writer.h"

namespace lorakv::agents {

namespace {

using formats::JsonObject;
using formats::JsonValue;

constexpr const char* kMetadataKey = "lorakv.session";
constexpr const char* kFormat = "lorakv-session";

void put(JsonObject& o, const std::string& key, JsonValue v) {
  o.index[key] = o.members.size();
  o.members.emplace_back(key, std::move(v));
}
JsonValue number(int64_t v) { return JsonValue::make_number(static_cast<double>(v), v); }
JsonValue text(const std::string& s) { return JsonValue::make_string(s); }
template <class T>
JsonValue numbers(const std::vector<T>& values) {
  std::vector<JsonValue> out;
  for (T v : values) out.push_back(number(static_cast<int64_t>(v)));
  return JsonValue::make_array(std::move(out));
}

std::string sha256_hex(const void* data, size_t bytes) {
  return digest_hex(Sha256().update(data, bytes).finish());
}

formats::SafetensorsDtype dtype_of(const at::Tensor& t) {
  if (t.scalar_type() == at::kFloat) return formats::SafetensorsDtype::kF32;
  if (t.scalar_type() == at::kBFloat16) return formats::SafetensorsDtype::kBF16;
  if (t.scalar_type() == at::kInt) return formats::SafetensorsDtype::kI32;  // lane positions
  if (t.scalar_type() == at::kByte) return formats::SafetensorsDtype::kU8;  // lane masks
  if (t.scalar_type() == at::kChar) return formats::SafetensorsDtype::kI8;  // int8 rows (version 3)
  throw ConfigError("rows of this dtype cannot be saved", {"", "", "float32, bfloat16 or int8", c10::toString(t.scalar_type())});
}

// Collects a sequence's tensors and its JSON part.
struct Encoder {
  std::vector<at::Tensor> keep;  // contiguous copies the entries point into
  std::vector<formats::SafetensorsEntry> entries;
  JsonObject checksums;

  void add(const std::string& name, const at::Tensor& t) {
    keep.push_back(t.contiguous());
    const at::Tensor& c = keep.back();
    entries.push_back({name, dtype_of(c), c.sizes().vec(), c.data_ptr()});
    put(checksums, name, text(sha256_hex(c.data_ptr(), c.nbytes())));
  }

  JsonValue key(const cache::ContentKey& k) {
    JsonObject o;
    put(o, "kind", number(static_cast<int64_t>(k.kind)));
    put(o, "dtype", number(static_cast<int64_t>(k.dtype)));
    put(o, "adapter", text(k.adapter.hex()));
    return JsonValue::make_object(std::move(o));
  }

  // Writers as indices into one table per sequence: a 64-digit identity per row would be
  // most of the header.
  static void writers(JsonObject& o, const std::vector<AdapterIdentity>& per_row, std::vector<AdapterIdentity>& table) {
    std::vector<int64_t> index;
    for (const AdapterIdentity& w : per_row) {
      auto it = std::find(table.begin(), table.end(), w);
      if (it == table.end()) it = table.insert(table.end(), w);
      index.push_back(it - table.begin());
    }
    put(o, "writers", numbers(index));
  }

  // Per-position identities (a sequence's writers, a trajectory's authors) with their table.
  static JsonValue identities(const std::vector<AdapterIdentity>& per_position) {
    JsonObject o;
    std::vector<AdapterIdentity> table;
    writers(o, per_position, table);
    put(o, "writer_table", table_json(table));
    return JsonValue::make_object(std::move(o));
  }
  static JsonValue table_json(const std::vector<AdapterIdentity>& table) {
    std::vector<JsonValue> ids;
    for (const AdapterIdentity& w : table) ids.push_back(text(w.hex()));
    return JsonValue::make_array(std::move(ids));
  }

  JsonValue sequence(const std::string& prefix, const runtime::SequenceRows& rows) {
    JsonObject o;
    std::vector<AdapterIdentity> table;
    put(o, "key", key(rows.key));
    put(o, "tokens", numbers(rows.tokens));
    writers(o, rows.writers, table);
    // Per layer, or with lanes per lane (runtime::SequenceRows).
    for (size_t l = 0; l < rows.k.size(); ++l) {
      add(prefix + ".k." + std::to_string(l), rows.k[l]);
      add(prefix + ".v." + std::to_string(l), rows.v[l]);
      if (!rows.k_scale.empty()) {  // int8 rows (version 3): their float32 scales
        add(prefix + ".ks." + std::to_string(l), rows.k_scale[l]);
        add(prefix + ".vs." + std::to_string(l), rows.v_scale[l]);
      }
    }
    if (!rows.lanes.empty()) {
      put(o, "lanes", encode_lanes(prefix, rows.lanes, [this](const std::string& name, const at::Tensor& t) { add(name, t); }));
    }
    if (rows.query_sum.defined()) {  // capkv's anchor
      add(prefix + ".query_sum", rows.query_sum);
      put(o, "query_count", number(rows.query_count));
    }
    std::vector<JsonValue> residuals;
    for (size_t j = 0; j < rows.residuals.size(); ++j) {
      const runtime::SequenceRows::Residual& r = rows.residuals[j];
      JsonObject ro;
      put(ro, "key", key(r.key));
      put(ro, "ranks", numbers(r.ranks));
      writers(ro, r.writers, table);
      for (size_t l = 0; l < r.c.size(); ++l) {
        if (r.c[l].defined()) add(prefix + ".r" + std::to_string(j) + "." + std::to_string(l), r.c[l]);
      }
      residuals.push_back(JsonValue::make_object(std::move(ro)));
    }
    put(o, "residuals", JsonValue::make_array(std::move(residuals)));
    put(o, "writer_table", table_json(table));
    return JsonValue::make_object(std::move(o));
  }
};

// Reading: every field checked, errors naming the file and the field.
struct Decoder {
  const std::string& path;
  const formats::SafetensorsFile& file;
  const JsonValue& checksums;
  int64_t version = 0;

  [[noreturn]] void fail(const std::string& what, const std::string& field) const {
    throw SessionFileError(what, {path, field, "", "", "the file is damaged, or not a lorakv session"});
  }

  AdapterIdentity identity(const JsonValue& v, const std::string& field) const {
    const std::optional<AdapterIdentity> id = AdapterIdentity::from_hex(v.as_string());
    if (!id) fail("not an identity (64 hex digits)", field);
    return *id;
  }

  cache::ContentKey key(const JsonValue& v) const {
    cache::ContentKey k;
    const int64_t kind = v.at("kind").as_int(), dtype = v.at("dtype").as_int();
    if (kind < 0 || kind > static_cast<int64_t>(cache::StreamKind::kResidualK)) fail("an unknown stream kind", v.at("kind").path());
    if (dtype < 0 || dtype > static_cast<int64_t>(cache::StorageDtype::kInt8)) fail("an unknown dtype", v.at("dtype").path());
    k.kind = static_cast<cache::StreamKind>(kind);
    k.dtype = static_cast<cache::StorageDtype>(dtype);
    k.adapter = identity(v.at("adapter"), v.at("adapter").path());
    return k;
  }

  // A tensor that is there and matches its checksum.
  const formats::SafetensorsTensorInfo& checked(const std::string& name) const {
    const formats::SafetensorsTensorInfo* info = file.find_tensor(name);
    if (info == nullptr) fail("a tensor is missing", name);
    const JsonValue* sum = checksums.find(name);
    if (sum == nullptr || sum->as_string() != sha256_hex(info->data, static_cast<size_t>(info->num_bytes))) {
      fail("a tensor's bytes do not match their checksum", name);
    }
    return *info;
  }

  at::Tensor tensor(const std::string& name) const {
    const formats::SafetensorsTensorInfo* info = &checked(name);
    const at::ScalarType dtype = info->dtype == formats::SafetensorsDtype::kF32    ? at::kFloat
                                 : info->dtype == formats::SafetensorsDtype::kBF16 ? at::kBFloat16
                                 : info->dtype == formats::SafetensorsDtype::kI8   ? at::kChar
                                                                                   : at::kByte;
    if (dtype == at::kByte) fail("rows of an unexpected dtype", name);
    at::Tensor t = at::empty(info->shape, dtype);
    std::memcpy(t.data_ptr(), info->data, static_cast<size_t>(info->num_bytes));
    return t;
  }

  static std::vector<AdapterIdentity> writers(const JsonValue& o, const std::vector<AdapterIdentity>& table,
                                              const Decoder& d) {
    std::vector<AdapterIdentity> out;
    for (const JsonValue& i : o.at("writers").as_array()) {
      const int64_t index = i.as_int();
      if (index < 0 || index >= static_cast<int64_t>(table.size())) d.fail("a writer index outside the table", i.path());
      out.push_back(table[static_cast<size_t>(index)]);
    }
    return out;
  }

  // `layers`: K and V tensors of a sequence without lanes; `with_lanes`: the sequence must
  // have lanes (a file with an eviction policy), and then has a K and V per lane.
  std::vector<AdapterIdentity> writer_table(const JsonValue& o) const {
    std::vector<AdapterIdentity> table;
    for (const JsonValue& w : o.at("writer_table").as_array()) table.push_back(identity(w, w.path()));
    return table;
  }
  std::vector<AdapterIdentity> identities(const JsonValue& o) const { return writers(o, writer_table(o), *this); }

  runtime::SequenceRows sequence(const std::string& prefix, const JsonValue& o, int64_t layers, bool with_lanes) const {
    runtime::SequenceRows rows;
    const std::vector<AdapterIdentity> table = writer_table(o);
    rows.key = key(o.at("key"));
    for (const JsonValue& t : o.at("tokens").as_array()) rows.tokens.push_back(static_cast<int32_t>(t.as_int()));
    rows.writers = writers(o, table, *this);
    if (with_lanes != o.contains("lanes")) {
      fail(with_lanes ? "a sequence without the lanes its eviction policy needs" : "lanes in a file without eviction",
           prefix + ".lanes");
    }
    if (with_lanes) {
      rows.lanes = decode_lanes(path, prefix, o.at("lanes"), static_cast<int64_t>(rows.tokens.size()),
                                [this](const std::string& name) -> const formats::SafetensorsTensorInfo& { return checked(name); });
    }
    if (o.contains("query_count")) {  // capkv's anchor: float32 [layers, heads, head_dim] (the engine checks the sizes)
      rows.query_count = o.at("query_count").as_int();
      rows.query_sum = tensor(prefix + ".query_sum");
      if (rows.query_count < 0 || rows.query_sum.scalar_type() != at::kFloat || rows.query_sum.dim() != 3) {
        fail("a query anchor of another dtype, shape or count", prefix + ".query_sum");
      }
    }
    const int64_t tensors = with_lanes ? static_cast<int64_t>(rows.lanes.size()) : layers;
    if (rows.key.dtype == cache::StorageDtype::kInt8 && version < 3) {
      fail("int8 rows in a file of version " + std::to_string(version) + " (int8 came with version 3)", prefix + ".key");
    }
    for (int64_t l = 0; l < tensors; ++l) {
      rows.k.push_back(tensor(prefix + ".k." + std::to_string(l)));
      rows.v.push_back(tensor(prefix + ".v." + std::to_string(l)));
      if (rows.key.dtype == cache::StorageDtype::kInt8) {  // the engine checks dtypes and shapes
        rows.k_scale.push_back(tensor(prefix + ".ks." + std::to_string(l)));
        rows.v_scale.push_back(tensor(prefix + ".vs." + std::to_string(l)));
      }
    }
    const std::vector<JsonValue>& residuals = o.at("residuals").as_array();
    for (size_t j = 0; j < residuals.size(); ++j) {
      runtime::SequenceRows::Residual r;
      r.key = key(residuals[j].at("key"));
      for (const JsonValue& rank : residuals[j].at("ranks").as_array()) r.ranks.push_back(rank.as_int());
      r.writers = writers(residuals[j], table, *this);
      // Per layer, or per lane (lanes are layer-major: lane / lanes-per-layer is its layer).
      if (r.ranks.empty() || tensors % static_cast<int64_t>(r.ranks.size()) != 0) {
        fail("a residual stream's ranks do not match its sequence's layers", residuals[j].at("ranks").path());
      }
      const int64_t per_layer = tensors / static_cast<int64_t>(r.ranks.size());
      for (int64_t l = 0; l < tensors; ++l) {
        const bool adapted = r.ranks[static_cast<size_t>(l / per_layer)] > 0;
        r.c.push_back(adapted ? tensor(prefix + ".r" + std::to_string(j) + "." + std::to_string(l)) : at::Tensor());
      }
      rows.residuals.push_back(std::move(r));
    }
    return rows;
  }
};

}  // namespace

std::vector<uint8_t> encode_session(const SessionFile& f) {
  Encoder enc;
  JsonObject header;
  // The oldest version that holds the session, so older readers take what they can: 1 when
  // there is nothing to evict, 2 with eviction, 3 with int8 rows, 4 with keys before RoPE,
  // 5 with writer author.
  const bool evicts = f.options.eviction.enabled();
  const auto int8 = [](const std::optional<runtime::SequenceRows>& s) { return s && !s->k_scale.empty(); };
  bool any_int8 = int8(f.rows.shared);
  for (const auto& own : f.rows.own) any_int8 = any_int8 || int8(own);
  const bool before_rope = f.rows.keys_before_rope;
  const bool authors = f.options.writer == runtime::SharedWriter::kAuthor;
  put(header, "format", text(kFormat));
  put(header, "version", number(authors       ? kSessionFormatVersionWithAuthors
                                : before_rope ? kSessionFormatVersionWithKeysBeforeRope
                                : any_int8    ? kSessionFormatVersionWithInt8
                                : evicts      ? kSessionFormatVersionWithEviction
                                              : kSessionFormatVersionWithoutEviction));
  // Version 5: the tokens' authors. An older reader refuses the version (and the writer).
  if (authors) put(header, "authors", Encoder::identities(f.rows.authors));
  // Version 4: keys before RoPE. An older reader refuses the version rather than taking
  // unrotated keys for rotated ones.
  if (before_rope) put(header, "keys_before_rope", JsonValue::make_bool(true));
  put(header, "model_sha256", text(f.model_sha256));
  JsonObject options;
  put(options, "mode", text(runtime::sharing_mode_name(f.options.mode)));
  put(options, "writer", text(runtime::shared_writer_name(f.options.writer)));
  put(options, "priority", number(f.options.priority));
  put(options, "max_tokens_per_step", number(f.options.max_tokens_per_step));
  put(options, "reserve_tokens", number(f.options.reserve_tokens));
  put(options, "reserve_reply_tokens", number(f.options.reserve_reply_tokens));
  put(header, "options", JsonValue::make_object(std::move(options)));
  if (evicts || any_int8 || before_rope || authors) put(header, "eviction", eviction_json(f.options.eviction));  // versions 2 to 5 have it
  std::vector<JsonValue> agents;
  for (const SavedAgent& a : f.agents) {
    JsonObject o;
    put(o, "name", text(a.options.name));
    put(o, "adapter", text(a.options.adapter));
    put(o, "adapter_sha256", text(a.adapter.hex()));
    put(o, "instruction", text(a.options.instruction));
    agents.push_back(JsonValue::make_object(std::move(o)));
  }
  put(header, "agents", JsonValue::make_array(std::move(agents)));
  put(header, "tokens", numbers(f.rows.tokens));
  // K and V tensors per sequence without lanes (a sequence with lanes has one per lane).
  const auto layers_of = [](const std::optional<runtime::SequenceRows>& s) -> int64_t {
    return s && s->lanes.empty() ? static_cast<int64_t>(s->k.size()) : 0;
  };
  put(header, "layers", number(layers_of(f.rows.shared)));
  put(header, "shared", f.rows.shared ? enc.sequence("shared", *f.rows.shared) : JsonValue());
  std::vector<JsonValue> own;
  int64_t layers = layers_of(f.rows.shared);
  for (size_t i = 0; i < f.rows.own.size(); ++i) {
    layers = std::max(layers, layers_of(f.rows.own[i]));
    own.push_back(f.rows.own[i] ? enc.sequence("own" + std::to_string(i), *f.rows.own[i]) : JsonValue());
  }
  put(header, "own", JsonValue::make_array(std::move(own)));
  header.members[header.index.at("layers")].second = number(layers);
  put(header, "checksums", JsonValue::make_object(std::move(enc.checksums)));
  return formats::safetensors_bytes(enc.entries, {{kMetadataKey, JsonValue::make_object(std::move(header)).to_string()}});
}

SessionFile read_session(const std::string& path) {
  std::unique_ptr<formats::SafetensorsFile> file;
  try {
    file = formats::SafetensorsFile::open(path);
  } catch (const InternalError&) {  // a bug stays one
    throw;
  } catch (const Error& e) {
    throw SessionFileError("not a readable session file: " + e.message(), {path, "", "", "", "truncated or damaged?"});
  }
  const auto meta = file->metadata().find(kMetadataKey);
  if (meta == file->metadata().end()) {
    throw SessionFileError("no lorakv session header", {path, kMetadataKey, "", "", "was it saved by Session::save?"});
  }
  try {
    const JsonValue h = formats::parse_json(meta->second);
    if (h.at("format").as_string() != kFormat) throw SessionFileError("not a lorakv session", {path, "format"});
    const int64_t version = h.at("version").as_int();
    if (version < kSessionFormatVersionWithoutEviction || version > kSessionFormatVersion) {
      throw SessionFileError("unknown session format version " + std::to_string(version),
                             {path, "version",
                              std::to_string(kSessionFormatVersionWithoutEviction) + " or " +
                                  std::to_string(kSessionFormatVersion),
                              std::to_string(version), "restore it with the lorakv that saved it"});
    }
    const Decoder d{path, *file, h.at("checksums"), version};
    SessionFile f;
    f.model_sha256 = h.at("model_sha256").as_string();
    const JsonValue& o = h.at("options");
    const std::optional<runtime::SharingMode> mode = runtime::parse_sharing_mode(o.at("mode").as_string());
    const std::optional<runtime::SharedWriter> writer = runtime::parse_shared_writer(o.at("writer").as_string());
    if (!mode || !writer) d.fail("an unknown sharing mode or writer", "options");
    f.options.mode = *mode;
    f.options.writer = *writer;
    f.options.priority = static_cast<int32_t>(o.at("priority").as_int());
    f.options.max_tokens_per_step = o.at("max_tokens_per_step").as_int();
    // Added within version 1: absent in files written before admission existed.
    f.options.reserve_tokens = o.find_int("reserve_tokens").value_or(0);
    f.options.reserve_reply_tokens = o.find_int("reserve_reply_tokens").value_or(SessionOptions{}.reserve_reply_tokens);
    // Version 2: the eviction keys (and lanes, with a policy); version 1 evicts nothing.
    if (version >= 2) f.options.eviction = eviction_from_json(path, h.at("eviction"));
    const bool with_lanes = f.options.eviction.enabled();
    for (const JsonValue& a : h.at("agents").as_array()) {
      f.agents.push_back({{a.at("name").as_string(), a.at("adapter").as_string(), a.at("instruction").as_string()},
                          d.identity(a.at("adapter_sha256"), a.at("adapter_sha256").path())});
    }
    f.rows.options = {*mode, *writer, f.options.eviction};
    // Version 5: writer author and the tokens' authors, one per token; unknown before.
    if (*writer == runtime::SharedWriter::kAuthor && version < kSessionFormatVersionWithAuthors) {
      d.fail("writer author in a file of version " + std::to_string(version) + " (it came with version 5)", "options.writer");
    }
    if (h.contains("authors") != (*writer == runtime::SharedWriter::kAuthor)) {
      d.fail(h.contains("authors") ? "authors in a session whose writer is not author" : "writer author without the tokens' authors",
             "authors");
    }
    // Version 4: keys before RoPE; required there, optional after, unknown before.
    if (version == kSessionFormatVersionWithKeysBeforeRope ||
        (version > kSessionFormatVersionWithKeysBeforeRope && h.contains("keys_before_rope"))) {
      f.rows.keys_before_rope = h.at("keys_before_rope").as_bool();
    } else if (h.contains("keys_before_rope")) {
      d.fail("keys before RoPE in a file of version " + std::to_string(version) + " (they came with version 4)",
             "keys_before_rope");
    }
    for (const JsonValue& t : h.at("tokens").as_array()) f.rows.tokens.push_back(static_cast<int32_t>(t.as_int()));
    if (h.contains("authors")) {
      f.rows.authors = d.identities(h.at("authors"));
      if (f.rows.authors.size() != f.rows.tokens.size()) d.fail("authors and tokens differ in number", "authors");
    }
    const int64_t layers = h.at("layers").as_int();
    if (!h.at("shared").is_null()) f.rows.shared = d.sequence("shared", h.at("shared"), layers, with_lanes);
    const std::vector<JsonValue>& own = h.at("own").as_array();
    for (size_t i = 0; i < own.size(); ++i) {
      if (own[i].is_null()) {
        f.rows.own.push_back(std::nullopt);
      } else {
        f.rows.own.push_back(d.sequence("own" + std::to_string(i), own[i], layers, with_lanes));
      }
    }
    if (f.rows.own.size() != f.agents.size()) d.fail("agents and their rows differ in number", "own");
    return f;
  } catch (const SessionFileError&) {
    throw;
  } catch (const InternalError&) {  // a bug stays one
    throw;
  } catch (const Error& e) {
    throw SessionFileError("a damaged session header: " + e.message(), {path, e.context().key});
  }
}

std::string model_files_sha256(const std::string& path) {
  Sha256 h;
  std::vector<std::string> files;
  if (std::filesystem::is_directory(path)) {
    for (const auto& entry : std::filesystem::directory_iterator(path)) {
      if (entry.is_regular_file()) files.push_back(entry.path().string());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  const bool folder = files.size() != 1 || files.front() != path;
  for (const std::string& f : files) {
    const formats::MappedFile map(f);
    if (folder) h.update_string(std::filesystem::path(f).filename().string());  // a folder's file names matter
    h.update_u64(map.size());
    h.update(map.data(), map.size());
  }
  return digest_hex(h.finish());
}

}  // namespace lorakv::agents
