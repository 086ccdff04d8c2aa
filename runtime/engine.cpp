// runtime/engine.cpp: contexts, readers and their streams, appends, prefill in chunks,
// private rows, memory. The step itself is in engine_step.cpp.
#include "lorakv/runtime/engine.h"

#include <algorithm>
#include <limits>
#include <initializer_list>
#include <set>
#include <string>
#include <tuple>

#include "lorakv/common/errors.h"
#include "lorakv/common/sha256.h"
#include "lorakv/kernels/lora_attention.h"
#include "lorakv/runtime/engine_state.h"

namespace lorakv::runtime {

namespace {

cache::StorageDtype storage_dtype(at::ScalarType t) {
  return t == at::kBFloat16 ? cache::StorageDtype::kBFloat16 : cache::StorageDtype::kFloat32;
}

cache::StorageDtype base_dtype(const EngineOptions& o, at::ScalarType model_dtype) {
  return o.kv_dtype.value_or(storage_dtype(model_dtype));
}

cache::StorageDtype residual_dtype(const EngineOptions& o, at::ScalarType model_dtype) {
  const cache::StorageDtype d = o.residual_dtype.value_or(storage_dtype(model_dtype));
  if (d == cache::StorageDtype::kInt8) {
    throw ConfigError("residual rows cannot be int8",
                      {"", "residual_dtype", "float32 or bfloat16", "int8",
                       "int8 is for the base pool (kv_dtype); residual rows are small and stay in a float type"});
  }
  return d;
}

// Bytes one row of one KV head takes in the base pool for K (or V): int8 adds its scale.
int64_t head_row_bytes(cache::StorageDtype dtype, int64_t head_dim) {
  return head_dim * cache::storage_element_bytes(dtype) + (dtype == cache::StorageDtype::kInt8 ? 4 : 0);
}

// The product of `factors`, or ConfigError naming `what` when it does not fit in int64
// (pool sizes come from users: rows, block size, heads, head size, element bytes).
int64_t checked_product(std::initializer_list<int64_t> factors, const std::string& what) {
  int64_t product = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(product, f, &product)) {
      throw ConfigError("the cache pool is too large", {"", what, "a pool whose bytes fit in 64 bits", "", "ask for fewer rows"});
    }
  }
  return product;
}

// Blocks of one pool for `rows` rows per lane, checked: the pool's bytes (rows of `row_values`
// values of `element_bytes`, K and V for the base pool) must be a 64-bit number.
int64_t pool_blocks(const cache::CacheLayout& l, int64_t rows, int64_t row_values, int64_t element_bytes,
                    const std::string& what) {
  const int64_t blocks_per_lane = rows / l.block_size + (rows % l.block_size != 0 ? 1 : 0);  // no rows + bs - 1 overflow
  const int64_t blocks = checked_product({l.num_lanes(), blocks_per_lane}, what);
  checked_product({blocks, l.block_size, row_values, element_bytes, 2}, what);
  return blocks;
}

// Blocks of each residual pool (one per rank); rank 128, the kernel's largest, bounds its bytes.
int64_t residual_pool_blocks(const cache::CacheLayout& l, int64_t residual_rows) {
  return pool_blocks(l, residual_rows, 128, 4, "EngineOptions::residual_rows = " + std::to_string(residual_rows));
}

cache::CacheLayout cache_layout(const ModelConfig& c, const EngineOptions& o) {
  cache::CacheLayout layout;
  layout.num_layers = c.num_layers;
  layout.num_kv_heads = c.num_kv_heads;
  layout.head_dim = c.head_dim;
  layout.block_size = o.block_size;
  layout.heads_per_group = o.per_head_token_sets ? 1 : c.num_kv_heads;
  return layout;
}

cache::CacheConfig cache_config(const ModelConfig& c, const EngineOptions& o, at::ScalarType dtype) {
  cache::CacheConfig config;
  config.layout = cache_layout(c, o);
  config.base_dtype = base_dtype(o, dtype);
  config.keys_before_rope = o.rerotate;
  config.residual_dtype = residual_dtype(o, dtype);
  config.num_base_blocks = pool_blocks(config.layout, o.base_rows, config.layout.heads_per_group,
                                       head_row_bytes(config.base_dtype, c.head_dim),
                                       "EngineOptions::base_rows = " + std::to_string(o.base_rows));
  return config;
}

// The identity of the stream whose rows every reader of a base_lr_shared context shares:
// the module and the A of each layer (a_hash), so equal A means one stream.
AdapterIdentity group_identity(adapters::ModuleId module, const adapters::Adapter& a) {
  Sha256 h;
  h.update_string("lorakv.shared_a_stream").update_string(adapters::module_name(module));
  for (const adapters::LoraModule& m : a.modules()) {
    if (m.module == module) h.update_u64(static_cast<uint64_t>(m.layer)).update_digest(m.a_hash.digest);
  }
  return AdapterIdentity{h.finish()};
}

// A stream of `module` filled with `a`'s A (and, when `reader` is given, read with its B).
ReaderStream make_stream(const ModelConfig& c, adapters::ModuleId module, const adapters::Adapter& a,
                         const cache::ContentKey& key, const adapters::Adapter* reader) {
  ReaderStream s;
  s.key = key;
  s.module = module;
  s.ranks.assign(static_cast<size_t>(c.num_layers), 0);
  s.a.resize(static_cast<size_t>(c.num_layers));
  s.b.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const adapters::LoraModule* m = a.find(l, module);
    if (m == nullptr) continue;
    s.ranks[static_cast<size_t>(l)] = m->rank;
    s.a[static_cast<size_t>(l)] = m->a;
    const adapters::LoraModule* mine = reader ? reader->find(l, module) : nullptr;
    if (mine == nullptr) continue;
    // B [kv_heads * head_dim, rank] (scale folded) -> [kv_heads, rank, head_dim] float32.
    s.b[static_cast<size_t>(l)] =
        mine->b.to(at::kFloat).view({c.num_kv_heads, c.head_dim, mine->rank}).permute({0, 2, 1}).contiguous();
  }
  return s;
}

bool adapts(const adapters::Adapter* a, adapters::ModuleId module) {
  if (a == nullptr) return false;
  for (const adapters::LoraModule& m : a->modules()) {
    if (m.module == module) return true;
  }
  return false;
}

constexpr adapters::ModuleId kCachedModules[] = {adapters::ModuleId::kV, adapters::ModuleId::kK};

cache::StreamKind stream_kind(adapters::ModuleId module) {
  return module == adapters::ModuleId::kV ? cache::StreamKind::kResidualV : cache::StreamKind::kResidualK;
}

}  // namespace

cache::StorageDtype parse_kv_dtype(const std::string& name, const std::string& key) {
  if (name == "float32" || name == "f32" || name == "fp32") return cache::StorageDtype::kFloat32;
  if (name == "bfloat16" || name == "bf16") return cache::StorageDtype::kBFloat16;
  if (name == "int8" || name == "i8") return cache::StorageDtype::kInt8;
  throw ConfigError("unsupported KV cache dtype", {"", key, "float32, bfloat16 or int8", "'" + name + "'", ""});
}

const char* kv_dtype_name(cache::StorageDtype dtype) {
  switch (dtype) {
    case cache::StorageDtype::kFloat32: return "float32";
    case cache::StorageDtype::kBFloat16: return "bfloat16";
    case cache::StorageDtype::kInt8: return "int8";
  }
  return "unknown";
}

cache::ContentKey shared_base_key(SharingMode mode, cache::StorageDtype dtype) {
  if (mode != SharingMode::kFullShared) return cache::ContentKey::base(dtype);
  // full_shared rows include their writer's adapter output: never reuse them as base rows.
  static const AdapterIdentity full_shared{Sha256().update_string("lorakv.full_shared_rows").finish()};
  return cache::ContentKey::base_with_adapter(dtype, full_shared);
}

cache::ContentKey own_base_key(const ReaderState& reader, cache::StorageDtype dtype) {
  if (!reader.context_adapter()) return cache::ContentKey::base(dtype);
  return cache::ContentKey::base_with_adapter(dtype, reader.identity);
}

cache::ContentKey private_key(const ReaderState& reader, cache::StorageDtype dtype) {
  if (!reader.adapter) return cache::ContentKey::base(dtype);
  return cache::ContentKey::base_with_adapter(dtype, reader.identity);
}

AdapterIdentity context_writer(const ContextOptions& options, const ReaderState& reader) {
  if (options.mode != SharingMode::kFull && options.writer == SharedWriter::kBase) return AdapterIdentity::base_model();
  return reader.context_identity();
}

AdapterIdentity residual_writer(const ContextOptions& options, const ReaderState& reader) {
  if (options.mode == SharingMode::kBaseShared) return reader.identity;  // C_i = X_i A_i, always its own
  return context_writer(options, reader);                                // C = X_w A, beside the base rows
}


ContextState& Engine::State::context(ContextId id) {
  auto it = contexts.find(id.value());
  if (it == contexts.end()) throw ConfigError("unknown context " + std::to_string(id.value()));
  return it->second;
}
const ContextState& Engine::State::context(ContextId id) const { return const_cast<State*>(this)->context(id); }

ReaderState& Engine::State::reader(ReaderRef ref) {
  ContextState& c = context(ref.context);
  if (ref.index < 0 || ref.index >= static_cast<int32_t>(c.readers.size())) {
    throw ConfigError("context " + std::to_string(ref.context.value()) + " has no reader " + std::to_string(ref.index));
  }
  ReaderState& r = c.readers[static_cast<size_t>(ref.index)];
  if (r.left) {
    throw ConfigError("reader " + std::to_string(ref.index) + " of context " + std::to_string(ref.context.value()) +
                      " has left it (Engine::remove_reader)");
  }
  return r;
}
const ReaderState& Engine::State::reader(ReaderRef ref) const { return const_cast<State*>(this)->reader(ref); }

void Engine::State::grow_rope(const LlamaModel& model, int64_t rows) {
  if (rope_cos.defined() && rope_cos.size(0) >= rows) return;
  int64_t n = 1024;
  while (n < rows) n *= 2;
  std::tie(rope_cos, rope_sin) = model.rope_half_tables(n);
}

cache::StorageDtype Engine::base_kv_dtype(const LlamaModel& model, const EngineOptions& options) {
  return base_dtype(options, model.dtype());
}

int64_t Engine::base_row_bytes(const LlamaModel& model, const EngineOptions& options) {
  return base_row_bytes(model.config(), model.dtype(), options);
}

int64_t Engine::base_row_bytes(const ModelConfig& c, at::ScalarType model_dtype, const EngineOptions& options) {
  const int64_t heads_per_group = options.per_head_token_sets ? 1 : c.num_kv_heads;
  const int64_t lanes = c.num_layers * (c.num_kv_heads / heads_per_group);
  const int64_t head_bytes = head_row_bytes(base_dtype(options, model_dtype), c.head_dim);
  return lanes * (2 * heads_per_group * head_bytes + static_cast<int64_t>(sizeof(int32_t)));
}

// The one place pool sizes come from: rows given, or rows that fit kv_pool_bytes.
static EngineOptions sized_pools(const LlamaModel& model, EngineOptions o) {
  if (o.kv_pool_bytes < 0 || o.residual_rows_per_base_row < 0) {
    throw ConfigError("EngineOptions::kv_pool_bytes and residual_rows_per_base_row cannot be negative");
  }
  if (o.kv_pool_bytes == 0) return o;
  const int64_t row = Engine::base_row_bytes(model, o);
  o.base_rows = o.kv_pool_bytes / row;
  if (o.base_rows < o.block_size) {
    throw ConfigError("the KV pool cannot hold one block",
                      {"", "EngineOptions::kv_pool_bytes", "at least " + std::to_string(row * o.block_size) + " bytes",
                       std::to_string(o.kv_pool_bytes), ""});
  }
  const double residual = static_cast<double>(o.base_rows) * o.residual_rows_per_base_row;
  if (residual > 0x1p62) {
    throw ConfigError("the residual pools are too large", {"", "EngineOptions::residual_rows_per_base_row", "", "", ""});
  }
  o.residual_rows = std::max<int64_t>(o.block_size, static_cast<int64_t>(residual));
  return o;
}

Engine::Engine(const LlamaModel& model, EngineOptions options)
    : model_(model), options_(sized_pools(model, options)), state_(std::make_unique<State>()) {
  options = options_;
  const ModelConfig& c = model.config();
  if (c.head_dim % 32 != 0 || c.head_dim > 256) {
    throw ConfigError("the engine's fused attention takes head sizes that are multiples of 32 up to 256",
                      {"", "head_dim", "32, 64, ..., 256", std::to_string(c.head_dim), ""});
  }
  if (options.base_rows <= 0 || options.residual_rows <= 0 || options.block_size <= 0 || options.prefill_chunk <= 0) {
    throw ConfigError("engine pool sizes, block size and prefill chunk must be positive");
  }
  if (options.rerotate && options.per_head_token_sets) {
    throw ConfigError("rerotate takes one token set per layer",
                      {"", "rerotate", "per_head_token_sets false", "per_head_token_sets true",
                       "rows are rotated by their index in the lane, which per-head sets make differ between heads"});
  }
  const cache::CacheConfig config = cache_config(c, options, model.dtype());
  residual_pool_blocks(config.layout, options.residual_rows);  // refused here, not at the first adapter
  cache_ = std::make_unique<cache::PagedKvCache>(config);
}

Engine::~Engine() = default;

void check_context_options(const ContextOptions& context, const EngineOptions& engine, const ModelConfig& model) {
  (void)cache::eviction::make_policy(context.eviction);  // ConfigError naming the key
  if (engine.rerotate && context.eviction.enabled() && context.eviction.policy != "streaming_llm") {
    throw ConfigError("rerotate keeps streaming_llm contexts only",
                      {"", "eviction.policy", "streaming_llm (or none)", context.eviction.policy,
                       "a scoring policy keeps scattered rows, whose indices would jump as rows go; turn rerotate "
                       "off for it"});
  }
  check_eviction_fits(context.eviction, cache_layout(model, engine));
}

ContextId Engine::create_context(ContextOptions options,
                                 const std::vector<std::shared_ptr<const adapters::Adapter>>& readers) {
  const ContextId id(state_->next_context);
  ContextState c;
  c.options = options;
  check_context_options(options, options_, model_.config());
  c.policy = cache::eviction::make_policy(options.eviction);
  state_->contexts.emplace(id.value(), std::move(c));
  ++state_->next_context;
  try {
    for (const auto& r : readers) add_reader(id, r);
  } catch (...) {
    release_context(id);
    throw;
  }
  return id;
}

int32_t Engine::add_reader(ContextId context, std::shared_ptr<const adapters::Adapter> adapter) {
  ContextState& c = state_->context(context);
  // The context adapters (null for the base model and aLoRA readers, whose context is the
  // base model's) are what a mode must serve: an aLoRA's private rows are full rows.
  std::vector<const adapters::Adapter*> others;
  for (const ReaderState& r : c.readers) {
    if (!r.left) others.push_back(r.context_adapter());
  }
  if (adapter) model_.check_adapter(*adapter, /*activation_applied=*/true);  // engine_step.cpp applies it

  const ModelConfig& mc = model_.config();
  const cache::StorageDtype dtype = cache_->manager().config().residual_dtype;
  ReaderState r;
  r.adapter = adapter;
  r.identity = adapter ? adapter->identity() : AdapterIdentity::base_model();
  check_reader(c.options.mode, r.context_adapter(), others);
  // The adapter whose residual rows the reader reads (none for an aLoRA reader).
  const adapters::Adapter* residual = r.context_adapter();
  if (c.options.mode == SharingMode::kBaseShared && residual) {
    for (adapters::ModuleId m : kCachedModules) {
      if (!adapts(residual, m)) continue;
      r.streams.push_back(make_stream(mc, m, *residual, cache::ContentKey::residual(stream_kind(m), dtype, r.identity),
                                      residual));
    }
  }
  if (c.options.mode == SharingMode::kBaseLrShared && residual) {
    for (adapters::ModuleId m : kCachedModules) {
      if (!adapts(residual, m)) continue;
      const cache::ContentKey key = cache::ContentKey::residual(stream_kind(m), dtype, group_identity(m, *residual));
      const bool known = std::any_of(c.group_streams.begin(), c.group_streams.end(),
                                     [&](const ReaderStream& g) { return g.key == key; });
      if (!known) c.group_streams.push_back(make_stream(mc, m, *residual, key, nullptr));
      r.streams.push_back(make_stream(mc, m, *residual, key, residual));
    }
  }
  for (const ReaderStream& s : r.streams) {
    for (int64_t rank : s.ranks) {
      if (rank > 0) cache_->ensure_residual_pool(rank, residual_pool_blocks(cache_->layout(), options_.residual_rows));
    }
  }
  c.readers.push_back(std::move(r));
  return static_cast<int32_t>(c.readers.size() - 1);
}

void Engine::release_context(ContextId context) {
  ContextState& c = state_->context(context);
  if (c.shared_seq.valid()) cache_->release(c.shared_seq);
  for (ReaderState& r : c.readers) {
    if (r.own_seq.valid()) cache_->release(r.own_seq);
    if (r.private_seq.valid()) cache_->release(r.private_seq);
  }
  state_->contexts.erase(context.value());
}

ContextId Engine::fork_context(ContextId source) {
  const ContextState& c = state_->context(source);
  for (size_t i = 0; i < c.readers.size(); ++i) {
    if (c.readers[i].private_seq.valid()) {
      throw ConfigError("cannot fork a context while a reader has private rows",
                        {"", "context " + std::to_string(source.value()) + " reader " + std::to_string(i), "", "",
                         "fork after the reply is committed or dropped"});
    }
  }
  ContextState copy = c;  // options, tokens, readers (adapter pins, B copies, streams), group streams
  std::vector<std::pair<SeqId, SeqId>> forks;  // (source, copy)
  // Each new id in a statement of its own: the order of evaluation of arguments is unspecified.
  auto fork_into = [&](SeqId& seq) {
    const SeqId from = seq;
    seq = state_->new_seq();
    forks.emplace_back(from, seq);
  };
  if (c.shared_seq.valid()) fork_into(copy.shared_seq);
  for (ReaderState& r : copy.readers) {
    if (r.own_seq.valid()) fork_into(r.own_seq);
  }
  for (const auto& [from, to] : forks) cache_->fork(from, to);  // needs no free blocks; cannot fail for capacity
  const ContextId id(state_->next_context++);
  state_->contexts.emplace(id.value(), std::move(copy));
  return id;
}

void Engine::append(ContextId context, const std::vector<int32_t>& tokens) {
  ContextState& c = state_->context(context);
  const int64_t vocab = model_.config().vocab_size;
  for (int32_t t : tokens) {
    if (t < 0 || t >= vocab) {
      throw ConfigError("token id out of range", {"", "context " + std::to_string(context.value()),
                                                  "0.." + std::to_string(vocab - 1), std::to_string(t), ""});
    }
  }
  c.tokens.insert(c.tokens.end(), tokens.begin(), tokens.end());
  c.output_tokens = 0;
}

void Engine::remove_reader(ReaderRef ref) {
  ContextState& c = state_->context(ref.context);
  ReaderState& r = state_->reader(ref);  // throws for an unknown reader or one that left
  if (r.own_seq.valid()) cache_->release(r.own_seq);
  if (r.private_seq.valid()) cache_->release(r.private_seq);
  // Residual streams no remaining reader reads: base_shared keys a stream by its adapter (two
  // readers with one adapter read one stream), base_lr_shared by its shared-A group.
  auto still_read = [&](const cache::ContentKey& key) {
    for (const ReaderState& other : c.readers) {
      if (&other == &r || other.left) continue;
      for (const ReaderStream& s : other.streams) {
        if (s.key == key) return true;
      }
    }
    return false;
  };
  for (const ReaderStream& s : r.streams) {
    if (still_read(s.key)) continue;
    if (c.shared_seq.valid()) {
      const cache::SequenceState& seq = cache_->manager().sequence(c.shared_seq);
      const bool attached = std::any_of(seq.residuals.begin(), seq.residuals.end(),
                                        [&](const cache::ResidualStream& x) { return x.key == s.key; });
      if (attached) cache_->detach_residual(c.shared_seq, s.key);
    }
    c.group_streams.erase(std::remove_if(c.group_streams.begin(), c.group_streams.end(),
                                         [&](const ReaderStream& g) { return g.key == s.key; }),
                          c.group_streams.end());
  }
  r = ReaderState{};  // drops the adapter's pin and the B copies
  r.left = true;
}

const std::vector<int32_t>& Engine::private_tokens(ReaderRef reader) const { return state_->reader(reader).private_tokens; }

// The sequence whose rows the reader's private rows can become at commit: rows equal to
// what processing the reply as context would write (docs/sharing_modes.md, "Commit"):
// `full` (the reader's own rows) and `full_shared` with writer `first` (the shared rows are
// whoever processes first's full rows). Only when nothing was appended since the reply began
// and the rows before it are all there. Invalid otherwise: the reply is processed again.
SeqId Engine::adoption_target(const ContextState& c, const ReaderState& r) const {
  SeqId target;
  if (c.options.mode == SharingMode::kFull) target = r.own_seq;
  if (c.options.mode == SharingMode::kFullShared && c.options.writer == SharedWriter::kFirst) target = c.shared_seq;
  const auto n = static_cast<int64_t>(c.tokens.size());
  if (!target.valid() || !r.private_seq.valid() || r.private_after != n) return SeqId();
  // An aLoRA reader's private rows hold the adapter's K/V; its context rows are base rows.
  if (r.activated()) return SeqId();
  const cache::SequenceState& t = cache_->manager().sequence(target);
  if (t.num_positions != n || !t.residuals.empty()) return SeqId();
  return target;
}

int64_t Engine::commit_private(ReaderRef reader) {
  ContextState& c = state_->context(reader.context);
  ReaderState& r = state_->reader(reader);
  const std::vector<int32_t> tokens = r.private_tokens;
  const int64_t output_tokens = c.output_tokens + static_cast<int64_t>(tokens.size());
  const SeqId target = adoption_target(c, r);
  if (target.valid() && cache_->adopt_suffix(target, r.private_seq)) {
    c.tokens.insert(c.tokens.end(), tokens.begin(), tokens.end());
    c.output_tokens = output_tokens;
    r.private_seq = SeqId();  // released by adopt_suffix
    r.private_tokens.clear();
    r.private_after = 0;
    r.active_from = -1;
    ++state_->adopted_commits;
    return static_cast<int64_t>(tokens.size());
  }
  drop_private(reader);
  append(reader.context, tokens);
  c.output_tokens = output_tokens;  // append starts a new run of text; this one is a reply
  return static_cast<int64_t>(tokens.size());
}

void Engine::drop_private(ReaderRef reader) {
  ReaderState& r = state_->reader(reader);
  if (r.private_seq.valid()) cache_->release(r.private_seq);
  r.private_seq = SeqId();
  r.private_tokens.clear();
  r.private_after = 0;
  r.active_from = -1;
}

const std::vector<int32_t>& Engine::context_tokens(ContextId context) const { return state_->context(context).tokens; }
ContextOptions Engine::context_options(ContextId context) const { return state_->context(context).options; }
bool Engine::has_left(ReaderRef reader) const {
  const ContextState& c = state_->context(reader.context);
  return reader.index >= 0 && reader.index < static_cast<int32_t>(c.readers.size()) &&
         c.readers[static_cast<size_t>(reader.index)].left;
}

int64_t Engine::adopted_commits() const { return state_->adopted_commits; }

int32_t Engine::num_readers(ContextId context) const {
  return static_cast<int32_t>(state_->context(context).readers.size());
}

EngineMemory Engine::memory() const {
  EngineMemory m;
  m.cache = cache_->stats();
  m.model_weight_bytes = model_.weights().num_bytes;
  std::vector<const adapters::Adapter*> seen;
  for (const auto& [id, c] : state_->contexts) {
    m.trajectory_bytes += static_cast<int64_t>(c.tokens.capacity() * sizeof(int32_t));
    for (const ReaderState& r : c.readers) {
      if (r.adapter && std::find(seen.begin(), seen.end(), r.adapter.get()) == seen.end()) {
        seen.push_back(r.adapter.get());
        m.adapter_bytes += r.adapter->num_bytes();
      }
    }
  }
  return m;
}

namespace {

// The distinct (pool, block) pairs of a sequence's tables: base lanes, and its residual
// streams when `residuals`.
void collect_blocks(const cache::SequenceState& seq, std::set<std::pair<int32_t, int64_t>>& base,
                    std::set<std::pair<int32_t, int64_t>>& residual) {
  for (const cache::BaseLane& lane : seq.lanes) {
    for (BlockId b : lane.table.blocks) base.emplace(0, b.value());
  }
  for (const cache::ResidualStream& stream : seq.residuals) {
    const size_t lanes_per_layer = stream.pools.empty() ? 1 : stream.lanes.size() / stream.pools.size();
    for (size_t lane = 0; lane < stream.lanes.size(); ++lane) {
      const int32_t pool = stream.pools[lane / lanes_per_layer];
      if (pool < 0) continue;
      for (BlockId b : stream.lanes[lane].blocks) residual.emplace(pool, b.value());
    }
  }
}

int64_t bytes_of(const std::set<std::pair<int32_t, int64_t>>& blocks, const std::vector<int64_t>& block_bytes) {
  int64_t total = 0;
  for (const auto& [pool, block] : blocks) total += block_bytes[static_cast<size_t>(pool)];
  return total;
}

}  // namespace

ContextMemory Engine::context_memory(ContextId context) const {
  const ContextState& c = state_->context(context);
  const cache::CacheStats stats = cache_->stats();
  std::vector<int64_t> block_bytes;
  for (const cache::PoolUsage& p : stats.pools) block_bytes.push_back(p.block_bytes);
  using Blocks = std::set<std::pair<int32_t, int64_t>>;
  Blocks shared, own, residual, priv, unused;
  const cache::CacheManager& m = cache_->manager();
  if (c.shared_seq.valid()) collect_blocks(m.sequence(c.shared_seq), shared, residual);
  for (const ReaderState& r : c.readers) {
    if (r.own_seq.valid()) collect_blocks(m.sequence(r.own_seq), own, residual);
    if (r.private_seq.valid()) collect_blocks(m.sequence(r.private_seq), priv, unused);
  }
  return {bytes_of(shared, block_bytes), bytes_of(own, block_bytes), bytes_of(residual, block_bytes),
          bytes_of(priv, block_bytes)};
}

ContextFootprint Engine::context_footprint(ContextId context) const {
  const ContextState& c = state_->context(context);
  ContextFootprint f;
  std::vector<const ReaderStream*> streams;  // distinct by key: readers of one A group share one
  auto add = [&](const ReaderStream& s) {
    const bool known = std::any_of(streams.begin(), streams.end(), [&](const ReaderStream* o) { return o->key == s.key; });
    if (!known) streams.push_back(&s);
  };
  for (const ReaderState& r : c.readers) {
    if (r.left) continue;
    if (c.options.mode == SharingMode::kFull) ++f.base_row_sets;
    for (const ReaderStream& s : r.streams) add(s);
  }
  for (const ReaderStream& s : c.group_streams) add(s);
  if (c.options.mode != SharingMode::kFull) f.base_row_sets = 1;
  for (const ReaderStream* s : streams) {
    const std::set<int64_t> ranks(s->ranks.begin(), s->ranks.end());
    for (int64_t rank : ranks) {
      if (rank > 0) ++f.residual_streams_by_rank[rank];
    }
  }
  return f;
}

int64_t Engine::max_context_tokens() const { return model_.config().context_length; }

int64_t Engine::context_limit(ContextId context) const {
  const cache::eviction::EvictionConfig& e = state_->context(context).options.eviction;
  const bool endless = options_.rerotate && e.policy == "streaming_llm" && e.budget_tokens > 0 &&
                       e.budget_tokens + options_.prefill_chunk + 2 * options_.block_size <= max_context_tokens();  // row indices stay below it
  return endless ? std::numeric_limits<int64_t>::max() / 4 : max_context_tokens();
}

}  // namespace lorakv::runtime
