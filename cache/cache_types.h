// cache/cache_types.h: the small value types of the cache layer: storage dtypes, the
// content key that decides when a stored block may be reused, and the cache layout
// (layers, KV heads, head groups, block size). Torch-free; shared by the
// tensor-free bookkeeping (block_allocator, prefix_index, cache_manager) and the storage
// (block_pool, paged_kv_cache).
//
// Vocabulary used throughout cache/:
//   stream  the rows of one kind for one sequence: the base stream (K after RoPE, V) or a
//           residual stream (C = X A of one adapted module, v or k before RoPE, for one agent
//           or shared-A group). Each stream has a ContentKey.
//   lane    one (layer, head group) of a stream: its own token set, its own block table.
//           A head group is `heads_per_group` consecutive KV heads that keep the same tokens:
//           heads_per_group == num_kv_heads shares one token set per layer (PyramidKV),
//           heads_per_group == 1 gives every KV head its own (Ada-KV, per-head SnapKV).
//   row     one token's values in one lane; slot = block * block_size + row-in-block.
#pragma once

#include <cstdint>
#include <functional>

#include "lorakv/common/adapter_identity.h"
#include "lorakv/common/errors.h"
#include "lorakv/common/ids.h"

namespace lorakv::cache {

// Rows are keyed by lorakv::AdapterIdentity (common/adapter_identity.h): the SHA-256 that
// adapters/ computes over an adapter's content (Adapter::identity()) or over one shared-A
// group's A (SharedAGroup::identity), or base_model() (all zeros). Equal identity is equal
// content, so equal identities share rows and different ones never do. The cache never
// sees adapter files.

// Element type of stored rows. kInt8 is for the base pool only: BlockPool keeps a float32
// scale per row and KV head beside the rows (block_pool.h).
enum class StorageDtype : uint8_t { kFloat32, kBFloat16, kInt8 };

inline int64_t storage_element_bytes(StorageDtype dtype) {
  switch (dtype) {
    case StorageDtype::kFloat32: return 4;
    case StorageDtype::kBFloat16: return 2;
    case StorageDtype::kInt8: return 1;
  }
  return 0;
}

enum class StreamKind : uint8_t {
  kBase,       // base K (after RoPE) and V
  kResidualV,  // C_v = X A_v
  kResidualK,  // C_k = X A_k, before RoPE
};

// Everything besides the token prefix, the per-row writers and the rows it was computed
// against that determines a block's content. Blocks are reused only when
// the whole key is equal. The per-row writer (whose hidden states X filled the row) is the
// rest of the prefix index's key, row by row (see prefix_index.h), since one block can mix
// writers.
//   base_shared / base_lr_shared base rows:  base(dtype)                  adapter = none
//   full / full_shared base rows:            base_with_adapter(dtype, a)  rows include a's output
//   base_shared residual rows:               residual(kind, dtype, agent adapter)
//   base_lr_shared residual rows:            residual(kind, dtype, shared-A group identity)
// A residual stream's ranks per layer follow from the adapter (or group) identity.
struct ContentKey {
  StreamKind kind = StreamKind::kBase;
  StorageDtype dtype = StorageDtype::kFloat32;
  AdapterIdentity adapter;  // see above; base_model() for pure base rows

  static ContentKey base(StorageDtype dtype) { return {StreamKind::kBase, dtype, AdapterIdentity::base_model()}; }
  static ContentKey base_with_adapter(StorageDtype dtype, AdapterIdentity agent) {
    return {StreamKind::kBase, dtype, agent};
  }
  static ContentKey residual(StreamKind kind, StorageDtype dtype, AdapterIdentity adapter_or_group) {
    return {kind, dtype, adapter_or_group};
  }
  friend bool operator==(const ContentKey& a, const ContentKey& b) {
    return a.kind == b.kind && a.dtype == b.dtype && a.adapter == b.adapter;
  }
  friend bool operator!=(const ContentKey& a, const ContentKey& b) { return !(a == b); }
  friend bool operator<(const ContentKey& a, const ContentKey& b) {  // any strict order, for maps
    if (a.kind != b.kind) return a.kind < b.kind;
    if (a.dtype != b.dtype) return a.dtype < b.dtype;
    return a.adapter < b.adapter;
  }
};

inline uint64_t hash_mix(uint64_t seed, uint64_t value) {
  // splitmix64-style combine: cheap and well distributed for chained keys.
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL + value;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

inline uint64_t hash_key(const ContentKey& key) {
  uint64_t h = hash_mix(static_cast<uint64_t>(key.kind), static_cast<uint64_t>(key.dtype));
  return hash_mix(h, std::hash<AdapterIdentity>()(key.adapter));
}

// Shape of the cache, fixed at construction.
struct CacheLayout {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_size = 16;       // rows per block
  int64_t heads_per_group = 1;   // KV heads sharing one token set; divides num_kv_heads

  int64_t num_groups() const { return num_kv_heads / heads_per_group; }
  int64_t num_lanes() const { return num_layers * num_groups(); }
  // Lanes are layer-major: lane = layer * num_groups + group.
  int64_t lane(int64_t layer, int64_t group) const { return layer * num_groups() + group; }
  int64_t layer_of(int64_t lane) const { return lane / num_groups(); }
  int64_t blocks_for(int64_t rows) const { return (rows + block_size - 1) / block_size; }
  void check() const {
    LORAKV_ASSERT(num_layers > 0 && num_kv_heads > 0 && head_dim > 0 && block_size > 0, "bad cache layout");
    LORAKV_ASSERT(heads_per_group > 0 && num_kv_heads % heads_per_group == 0,
                  "heads_per_group " << heads_per_group << " must divide num_kv_heads " << num_kv_heads);
  }
};

// A block in one pool. Pool 0 holds base rows; the others hold residual rows of one rank.
struct BlockRef {
  int32_t pool = -1;
  BlockId block;
  friend bool operator==(BlockRef a, BlockRef b) { return a.pool == b.pool && a.block == b.block; }
  friend bool operator<(BlockRef a, BlockRef b) { return a.pool != b.pool ? a.pool < b.pool : a.block < b.block; }
};

struct BlockRefHash {
  size_t operator()(BlockRef r) const noexcept {
    return static_cast<size_t>(hash_mix(static_cast<uint64_t>(r.pool), static_cast<uint64_t>(r.block.value())));
  }
};

}  // namespace lorakv::cache
