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
#include "lorakv/runtime/sharing_rules.h"

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
  // A pool that cannot be made (bad_alloc) leaves the context as it was.
  const std::vector<ReaderStream> group_streams = c.group_streams;
  const std::map<cache::ContentKey, ContextState::StreamUse> streams = c.streams;
  try {
    add_reader_streams(mc, dtype, c, r);
    for (const ReaderStream& s : r.streams) {
      for (int64_t rank : s.ranks) {
        if (rank > 0) cache_->ensure_residual_pool(rank, residual_pool_blocks(cache_->layout(), options_.residual_rows));
      }
    }
  } catch (...) {
    c.group_streams = group_streams;
    c.streams = streams;
    throw;
  }
  c.readers.push_back(std::move(r));
  return static_cast<int32_t>(c.readers.size() - 1);
}

void Engine::release_context(ContextId context) {
  ContextState& c = state_->context(context);
  if (c.shared_seq.valid()) cache_->release(c.shared_seq);
  for (size_t i = 0; i < c.readers.size(); ++i) {
    if (c.readers[i].own_seq.valid()) cache_->release(c.readers[i].own_seq);
    if (!c.readers[i].left) drop_private({context, static_cast<int32_t>(i)});  // a reader that left has none
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

void Engine::append(ContextId context, const std::vector<int32_t>& tokens, std::optional<int32_t> author) {
  ContextState& c = state_->context(context);
  const int64_t vocab = model_.config().vocab_size;
  for (int32_t t : tokens) {
    if (t < 0 || t >= vocab) {
      throw ConfigError("token id out of range", {"", "context " + std::to_string(context.value()),
                                                  "0.." + std::to_string(vocab - 1), std::to_string(t), ""});
    }
  }
  // The author's identity as it reads the context (throws for an unknown reader or one that left).
  const AdapterIdentity by = author ? state_->reader({context, *author}).context_identity() : AdapterIdentity::base_model();
  c.tokens.insert(c.tokens.end(), tokens.begin(), tokens.end());
  c.authors.append(static_cast<int64_t>(tokens.size()), by);
  c.output_tokens = 0;
}

void Engine::remove_reader(ReaderRef ref) {
  ContextState& c = state_->context(ref.context);
  ReaderState& r = state_->reader(ref);  // throws for an unknown reader or one that left
  if (r.own_seq.valid()) cache_->release(r.own_seq);
  drop_private(ref);
  // Streams no remaining reader reads go (ContextState::streams counts the readers).
  for (const ReaderStream& s : r.streams) {
    if (--c.streams.at(s.key).readers > 0) continue;
    c.streams.erase(s.key);
    if (c.shared_seq.valid() && cache_->manager().sequence(c.shared_seq).find_residual(s.key) != nullptr) {
      cache_->detach_residual(c.shared_seq, s.key);
    }
    c.group_streams.erase(std::remove_if(c.group_streams.begin(), c.group_streams.end(),
                                         [&](const ReaderStream& g) { return g.key == s.key; }),
                          c.group_streams.end());
  }
  r = ReaderState{};  // drops the adapter's pin and the B copies
  r.left = true;
}

const std::vector<int32_t>& Engine::private_tokens(ReaderRef reader) const { return state_->reader(reader).private_tokens; }

int64_t Engine::commit_private(ReaderRef reader) {
  ContextState& c = state_->context(reader.context);
  ReaderState& r = state_->reader(reader);
  const std::vector<int32_t> tokens = r.private_tokens;
  const int64_t output_tokens = c.output_tokens + static_cast<int64_t>(tokens.size());
  const Adoption adopt = adoption(*cache_, c, r);
  if (adopt.target.valid() && cache_->adopt_suffix(adopt.target, adopt.rows)) {
    c.tokens.insert(c.tokens.end(), tokens.begin(), tokens.end());
    c.authors.append(static_cast<int64_t>(tokens.size()), r.context_identity());
    c.output_tokens = output_tokens;
    if (adopt.rows == r.private_seq) r.private_seq = SeqId();  // released by adopt_suffix
    if (adopt.rows == r.author_rows) r.author_rows = SeqId();
    drop_private(reader);  // what was not adopted
    ++state_->adopted_commits;
    return static_cast<int64_t>(tokens.size());
  }
  drop_private(reader);
  append(reader.context, tokens, reader.index);
  state_->committed_tokens_processed_again += static_cast<int64_t>(tokens.size());
  c.output_tokens = output_tokens;  // append starts a new run of text; this one is a reply
  return static_cast<int64_t>(tokens.size());
}

void Engine::drop_private(ReaderRef reader) {
  ReaderState& r = state_->reader(reader);
  if (r.private_seq.valid()) cache_->release(r.private_seq);
  if (r.author_rows.valid()) cache_->release(r.author_rows);
  r.private_seq = r.author_rows = SeqId();
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
int64_t Engine::committed_tokens_processed_again() const { return state_->committed_tokens_processed_again; }

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
    if (r.author_rows.valid()) collect_blocks(m.sequence(r.author_rows), priv, priv);
  }
  return {bytes_of(shared, block_bytes), bytes_of(own, block_bytes), bytes_of(residual, block_bytes),
          bytes_of(priv, block_bytes)};
}

ContextFootprint Engine::context_footprint(ContextId context) const {
  const ContextState& c = state_->context(context);
  ContextFootprint f;
  f.base_row_sets = base_row_sets(c);
  for (const auto& [key, use] : c.streams) {
    const std::set<int64_t> ranks(use.ranks.begin(), use.ranks.end());
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
