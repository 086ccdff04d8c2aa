// cache/block_pool.h: the storage of one pool: preallocated tensors of fixed-size blocks
// that the tensor-free CacheManager hands out by id. Pool 0 holds base rows (K after RoPE, V
// and each row's position); the others hold residual rows C = X A of one rank. Rows are
// addressed by slot = block * block_size + row. The pool only copies, moves, writes and
// gathers rows; it never decides which. Its byte counts come from its tensors, so stats are
// measured, not computed. Not thread-safe: mutated only through PagedKvCache.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "lorakv/cache/cache_manager.h"

namespace lorakv::cache {

at::ScalarType to_scalar_type(StorageDtype dtype);

// The orthonormal Walsh-Hadamard matrix of size n (a power of two): float32 [n, n].
at::Tensor hadamard_matrix(int64_t n);

// Rows [T, heads, D] as an int8 pool holds them: symmetric int8 with a float32 scale per row
// and head (max |x| / 127; 0 for an all-zero row), rounded to nearest even.
struct Int8Rows {
  at::Tensor values;  // int8 [T, heads, D]
  at::Tensor scales;  // float32 [T, heads]
};
Int8Rows quantize_int8(const at::Tensor& rows);
// float32 [T, heads, D]: values times scales, one float32 product each, as the fused kernel
// reads them.
at::Tensor dequantize_int8(const at::Tensor& values, const at::Tensor& scales);

struct BlockPoolSpec {
  int32_t id = 0;                  // pool id in CacheManager (0 = base)
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  std::vector<int64_t> row_shape;  // base: {heads_per_group, head_dim}; residual: {rank}
  // kInt8: base pools only; the pool then also holds a float32 scale per row and KV head
  // for K and for V ([num_blocks, block_size, heads_per_group]), which move with their rows.
  StorageDtype dtype = StorageDtype::kFloat32;
  // int8 pools: rows are rotated by the orthonormal Walsh-Hadamard matrix H of head_dim (a
  // power of two) before they are quantised, which spreads a row's outlier channels over
  // all of it; the kernel reads them in that frame (kernels::PagedStorage::hadamard).
  bool hadamard = false;
  bool base = false;               // base pools also hold V and positions
  at::Device device = at::kCPU;
};

class BlockPool {
 public:
  explicit BlockPool(const BlockPoolSpec& spec);

  const BlockPoolSpec& spec() const { return spec_; }
  // Writes rows at slots. slots: int64 [T]; a (and b for base pools): [T, *row_shape], any
  // floating dtype (converted to the storage dtype; quantised per row and head for int8).
  void write(const at::Tensor& slots, const at::Tensor& a, const at::Tensor& b = {});
  // int8 pools: rows as stored elsewhere (a save), written unchanged: int8 [T, *row_shape]
  // and float32 scales [T, heads_per_group] for K (a) and V (b).
  void write_int8(const at::Tensor& slots, const Int8Rows& a, const Int8Rows& b);
  // positions: integer [T]; base pools only.
  void write_positions(const at::Tensor& slots, const at::Tensor& positions);
  // Applies this pool's part of `ops`: block copies first, then the slot moves (all sources
  // read before any destination is written).
  void apply(const StorageOps& ops);
  // apply() in two phases: prepare reads every source row (it may throw and writes nothing),
  // write puts them in place: on CPU pools plain copies that allocate nothing and cannot
  // fail, so a compaction is prepared whole before its tables change (PagedKvCache::compact).
  struct PreparedRows {
    struct Part {
      at::Tensor rows;            // the source rows, read before any write: [n, row elements]
      char* storage = nullptr;    // the pool tensor's first byte (CPU)
      int64_t row_bytes = 0;      // one row of it (a block for copies, a slot for moves)
      std::vector<int64_t> dst;   // destination rows
      at::Tensor target, index;   // where the tensor is not on the CPU: index_copy_ there
    };
    std::vector<Part> parts;
  };
  PreparedRows prepare(const StorageOps& ops) const;
  void write(const PreparedRows& rows);
  // Rows at slots (int64 [N]): [N, *row_shape] in the storage dtype, or for int8 float32:
  // int8 times scale, rotated back with H when the pool rotates.
  at::Tensor gather_a(const at::Tensor& slots) const;
  at::Tensor gather_b(const at::Tensor& slots) const;
  // int8 pools: the stored rows and scales at slots (rotated rows stay rotated), for a save.
  Int8Rows gather_a_int8(const at::Tensor& slots) const;
  Int8Rows gather_b_int8(const at::Tensor& slots) const;
  // int64 [N]; base pools only.
  at::Tensor gather_positions(const at::Tensor& slots) const;

  // Bytes of one block of each tensor, measured from the allocations (an int8 pool's
  // scales counted with their rows).
  int64_t a_bytes_per_block() const { return bytes_per_block(a_) + bytes_per_block(a_scales_); }
  int64_t b_bytes_per_block() const { return bytes_per_block(b_) + bytes_per_block(b_scales_); }
  int64_t positions_bytes_per_block() const {
    return positions_.defined() ? static_cast<int64_t>(positions_.nbytes()) / spec_.num_blocks : 0;
  }
  int64_t block_bytes() const { return a_bytes_per_block() + b_bytes_per_block() + positions_bytes_per_block(); }
  int64_t reserved_bytes() const { return block_bytes() * spec_.num_blocks; }

  // The raw storage, for kernels: a_ is K (base) or C (residual), b_ is V.
  const at::Tensor& a() const { return a_; }  // dtype [num_blocks, block_size, *row_shape]
  const at::Tensor& b() const { return b_; }  // dtype [num_blocks, block_size, *row_shape]; base only
  const at::Tensor& positions() const { return positions_; }  // int32 [num_blocks, block_size]; base only
  // int8 pools: float32 [num_blocks, block_size, heads_per_group]; undefined otherwise.
  const at::Tensor& a_scales() const { return a_scales_; }
  const at::Tensor& b_scales() const { return b_scales_; }

 private:
  at::Tensor flat(const at::Tensor& t) const;  // [num_blocks * block_size, ...] view
  int64_t bytes_per_block(const at::Tensor& t) const {
    return t.defined() ? static_cast<int64_t>(t.nbytes()) / spec_.num_blocks : 0;
  }
  void write_rows(const at::Tensor& idx, const at::Tensor& rows, const at::Tensor& stored, const at::Tensor& scales);
  bool int8() const { return spec_.dtype == StorageDtype::kInt8; }
  at::Tensor rotated(const at::Tensor& rows) const;  // rows [.., head_dim] times H; unchanged without hadamard

  BlockPoolSpec spec_;
  at::Tensor a_, b_, positions_;
  at::Tensor a_scales_, b_scales_;
  at::Tensor hadamard_;  // float32 [head_dim, head_dim], symmetric: H = H^T = H^-1
};

}  // namespace lorakv::cache
