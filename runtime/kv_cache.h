// runtime/kv_cache.h: a simple per-sequence contiguous K/V cache, the reference path of the
// tests (LlamaModel::forward(batch, KvCache&) and generate's use_cache = false), and what
// bench/lora_decode_bench.cpp decodes over to time LoRA without the engine. Generation runs
// on the engine and the paged, shared cache (runtime/engine.h, cache/). Not thread-safe: one
// step at a time.
#pragma once

#include <ATen/ATen.h>

#include <unordered_map>
#include <vector>

#include "lorakv/common/ids.h"

namespace lorakv::runtime {

// One layer's rows of one sequence, as views into cache storage.
struct KvView {
  at::Tensor k;          // float [num_kv_heads, N, head_dim], after RoPE
  at::Tensor v;          // float [num_kv_heads, N, head_dim]
  at::Tensor positions;  // int64 [N]: each row's token position
  // int32 [num_kv_heads, N] (a view of [num_kv_heads, capacity]): the same positions once
  // per KV head, laid out as the fused attention kernel reads a block's positions.
  at::Tensor positions_i32;
};

class KvCache {
 public:
  virtual ~KvCache() = default;
  // Rows already stored for `seq` (0 for an unknown sequence). The model places new
  // tokens at positions length..length+T-1.
  virtual int64_t length(SeqId seq) const = 0;
  // Appends T rows at `layer`. k, v: float [T, num_kv_heads, head_dim]; positions: int64 [T].
  virtual void append(SeqId seq, int64_t layer, const at::Tensor& k, const at::Tensor& v,
                      const at::Tensor& positions) = 0;
  // All rows of `seq` at `layer`, including those appended in the current step.
  virtual KvView view(SeqId seq, int64_t layer) const = 0;
  // Marks the step finished: length(seq) grows by the T rows appended to every layer.
  virtual void commit(SeqId seq) = 0;
  // Frees everything held for `seq`.
  virtual void release(SeqId seq) = 0;
};

// Per sequence and layer, one growing [num_kv_heads, capacity, head_dim] buffer for K and
// for V (capacity doubles), plus the rows' positions.
class ContiguousKvCache final : public KvCache {
 public:
  ContiguousKvCache(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim, at::ScalarType dtype = at::kFloat);

  int64_t length(SeqId seq) const override;
  void append(SeqId seq, int64_t layer, const at::Tensor& k, const at::Tensor& v, const at::Tensor& positions) override;
  KvView view(SeqId seq, int64_t layer) const override;
  void commit(SeqId seq) override;
  void release(SeqId seq) override;

  // Bytes of K/V storage allocated (capacity, not just rows in use).
  int64_t allocated_bytes() const;

 private:
  struct LayerRows {
    at::Tensor k, v;       // [num_kv_heads, capacity, head_dim]
    at::Tensor positions;      // int64 [capacity]
    at::Tensor positions_i32;  // int32 [num_kv_heads, capacity]
    int64_t size = 0;      // rows written, committed or not
  };
  struct SeqRows {
    std::vector<LayerRows> layers;
    int64_t committed = 0;
  };
  void grow(LayerRows& rows, int64_t needed) const;

  int64_t num_layers_, num_kv_heads_, head_dim_;
  at::ScalarType dtype_;
  std::unordered_map<SeqId, SeqRows> seqs_;
};

}  // namespace lorakv::runtime
