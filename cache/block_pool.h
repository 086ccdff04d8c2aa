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

struct BlockPoolSpec {
  int32_t id = 0;                  // pool id in CacheManager (0 = base)
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  std::vector<int64_t> row_shape;  // base: {heads_per_group, head_dim}; residual: {rank}
  StorageDtype dtype = StorageDtype::kFloat32;
  bool base = false;               // base pools also hold V and positions
  at::Device device = at::kCPU;
};

class BlockPool {
 public:
  explicit BlockPool(const BlockPoolSpec& spec);

  const BlockPoolSpec& spec() const { return spec_; }
  // Writes rows at slots. slots: int64 [T]; a (and b for base pools): [T, *row_shape], any
  // floating dtype (converted to the storage dtype).
  void write(const at::Tensor& slots, const at::Tensor& a, const at::Tensor& b = {});
  // positions: integer [T]; base pools only.
  void write_positions(const at::Tensor& slots, const at::Tensor& positions);
  // Applies this pool's part of `ops`: block copies first, then the slot moves (all sources
  // read before any destination is written).
  void apply(const StorageOps& ops);
  // Rows at slots (int64 [N]) in the storage dtype: [N, *row_shape].
  at::Tensor gather_a(const at::Tensor& slots) const;
  at::Tensor gather_b(const at::Tensor& slots) const;
  // int64 [N]; base pools only.
  at::Tensor gather_positions(const at::Tensor& slots) const;

  // Bytes of one block of each tensor, measured from the allocations.
  int64_t a_bytes_per_block() const { return static_cast<int64_t>(a_.nbytes()) / spec_.num_blocks; }
  int64_t b_bytes_per_block() const { return b_.defined() ? static_cast<int64_t>(b_.nbytes()) / spec_.num_blocks : 0; }
  int64_t positions_bytes_per_block() const {
    return positions_.defined() ? static_cast<int64_t>(positions_.nbytes()) / spec_.num_blocks : 0;
  }
  int64_t block_bytes() const { return a_bytes_per_block() + b_bytes_per_block() + positions_bytes_per_block(); }
  int64_t reserved_bytes() const { return block_bytes() * spec_.num_blocks; }

  // The raw storage, for kernels: a_ is K (base) or C (residual), b_ is V.
  const at::Tensor& a() const { return a_; }  // dtype [num_blocks, block_size, *row_shape]
  const at::Tensor& b() const { return b_; }  // dtype [num_blocks, block_size, *row_shape]; base only
  const at::Tensor& positions() const { return positions_; }  // int32 [num_blocks, block_size]; base only

 private:
  at::Tensor flat(const at::Tensor& t) const;  // [num_blocks * block_size, ...] view

  BlockPoolSpec spec_;
  at::Tensor a_, b_, positions_;
};

}  // namespace lorakv::cache
