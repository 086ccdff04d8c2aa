// runtime/kv_cache.cpp: the contiguous per-sequence KV cache.
#include "lorakv/runtime/kv_cache.h"

#include <cstdint>

#include "lorakv/common/errors.h"

namespace lorakv::runtime {

ContiguousKvCache::ContiguousKvCache(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim, at::ScalarType dtype)
    : num_layers_(num_layers), num_kv_heads_(num_kv_heads), head_dim_(head_dim), dtype_(dtype) {}

int64_t ContiguousKvCache::length(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.committed;
}

void ContiguousKvCache::grow(LayerRows& rows, int64_t needed) const {
  const int64_t capacity = rows.k.defined() ? rows.k.size(1) : 0;
  if (needed <= capacity) return;
  int64_t new_capacity = std::max<int64_t>(64, capacity);
  while (new_capacity < needed) new_capacity *= 2;
  auto opts = at::TensorOptions().dtype(dtype_);
  at::Tensor k = at::empty({num_kv_heads_, new_capacity, head_dim_}, opts);
  at::Tensor v = at::empty({num_kv_heads_, new_capacity, head_dim_}, opts);
  at::Tensor pos = at::empty({new_capacity}, at::kLong);
  at::Tensor pos32 = at::empty({num_kv_heads_, new_capacity}, at::kInt);
  if (rows.size > 0) {
    k.narrow(1, 0, rows.size).copy_(rows.k.narrow(1, 0, rows.size));
    v.narrow(1, 0, rows.size).copy_(rows.v.narrow(1, 0, rows.size));
    pos.narrow(0, 0, rows.size).copy_(rows.positions.narrow(0, 0, rows.size));
    pos32.narrow(1, 0, rows.size).copy_(rows.positions_i32.narrow(1, 0, rows.size));
  }
  rows.k = k;
  rows.v = v;
  rows.positions = pos;
  rows.positions_i32 = pos32;
}

void ContiguousKvCache::append(SeqId seq, int64_t layer, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& positions) {
  LORAKV_ASSERT(layer >= 0 && layer < num_layers_, "layer " << layer << " out of range");
  LORAKV_ASSERT(k.dim() == 3 && k.size(1) == num_kv_heads_ && k.size(2) == head_dim_, "k must be [T, Hkv, D]");
  SeqRows& s = seqs_[seq];
  if (s.layers.empty()) s.layers.resize(static_cast<size_t>(num_layers_));
  LayerRows& rows = s.layers[static_cast<size_t>(layer)];
  const int64_t t = k.size(0);
  grow(rows, rows.size + t);
  rows.k.narrow(1, rows.size, t).copy_(k.transpose(0, 1));
  rows.v.narrow(1, rows.size, t).copy_(v.transpose(0, 1));
  rows.positions.narrow(0, rows.size, t).copy_(positions);
  const at::Tensor p = positions.contiguous();
  const int64_t capacity = rows.positions_i32.size(1);
  for (int64_t i = 0; i < t; ++i) {
    const int64_t value = p.data_ptr<int64_t>()[i];
    LORAKV_ASSERT(value >= 0 && value <= INT32_MAX, "position " << value << " does not fit int32");
    for (int64_t h = 0; h < num_kv_heads_; ++h) {
      rows.positions_i32.data_ptr<int32_t>()[h * capacity + rows.size + i] = static_cast<int32_t>(value);
    }
  }
  rows.size += t;
}

KvView ContiguousKvCache::view(SeqId seq, int64_t layer) const {
  auto it = seqs_.find(seq);
  LORAKV_ASSERT(it != seqs_.end() && !it->second.layers.empty(), "no rows for sequence " << seq.value());
  const LayerRows& rows = it->second.layers[static_cast<size_t>(layer)];
  return {rows.k.narrow(1, 0, rows.size), rows.v.narrow(1, 0, rows.size), rows.positions.narrow(0, 0, rows.size),
          rows.positions_i32.narrow(1, 0, rows.size)};
}

void ContiguousKvCache::commit(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || it->second.layers.empty()) return;
  const int64_t size = it->second.layers[0].size;
  for (const LayerRows& rows : it->second.layers) {
    LORAKV_ASSERT(rows.size == size, "layers of sequence " << seq.value() << " hold different row counts");
  }
  it->second.committed = size;
}

void ContiguousKvCache::release(SeqId seq) { seqs_.erase(seq); }

int64_t ContiguousKvCache::allocated_bytes() const {
  int64_t bytes = 0;
  for (const auto& [id, s] : seqs_) {
    for (const LayerRows& rows : s.layers) {
      if (rows.k.defined()) bytes += static_cast<int64_t>(rows.k.nbytes() + rows.v.nbytes() + rows.positions.nbytes());
    }
  }
  return bytes;
}

}  // namespace lorakv::runtime
