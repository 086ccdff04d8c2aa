// runtime/layer_attention.cpp: plain views of the contiguous cache for the fused kernel.
#include "lorakv/runtime/layer_attention.h"

#include "lorakv/common/errors.h"
#include "lorakv/kernels/attention.h"
#include "lorakv/kernels/lora_attention.h"

namespace lorakv::runtime {

namespace {

kernels::ElementType element_type(const at::Tensor& t) {
  LORAKV_ASSERT(t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16,
                "attention runs in float32 or bfloat16, got " << c10::toString(t.scalar_type()));
  return t.scalar_type() == at::kFloat ? kernels::ElementType::kFloat32 : kernels::ElementType::kBFloat16;
}

}  // namespace

void attend_sequences(const std::vector<SequenceAttention>& seqs, int64_t num_heads, int64_t num_kv_heads,
                      int64_t head_dim, double scale, int64_t window) {
  if (head_dim % 32 != 0 || head_dim > 256) {
    for (const SequenceAttention& s : seqs) {
      s.out.copy_(kernels::causal_attention({s.q, s.kv.k, s.kv.v, s.q_positions, s.kv.positions, scale, window}));
    }
    return;
  }
  const size_t n = seqs.size();
  // The views the kernel reads; they point into these vectors, sized once.
  std::vector<kernels::PagedStorage> storage(n);
  std::vector<kernels::LaneRows> lanes(n * static_cast<size_t>(num_kv_heads));
  std::vector<int32_t> head_blocks(static_cast<size_t>(num_kv_heads));  // KV head h is block h
  for (int64_t h = 0; h < num_kv_heads; ++h) head_blocks[static_cast<size_t>(h)] = static_cast<int32_t>(h);
  std::vector<kernels::SharedBase> bases(n);
  std::vector<kernels::AgentAttention> agents(n);
  for (size_t i = 0; i < n; ++i) {
    const SequenceAttention& s = seqs[i];
    const KvView& kv = s.kv;
    const int64_t rows = kv.k.size(1);
    const int64_t capacity = kv.k.stride(0) / std::max<int64_t>(kv.k.stride(1), 1);
    LORAKV_ASSERT(kv.k.stride(2) == 1 && kv.k.stride(1) == head_dim && kv.v.strides() == kv.k.strides() &&
                      kv.positions_i32.stride(0) == capacity && kv.positions_i32.stride(1) == 1,
                  "cache rows must be [kv_heads, capacity, head_dim] with positions [kv_heads, capacity]");
    // Each KV head's rows are one block of `capacity` rows (block h starts at h * stride(0)),
    // read as a lane of its own.
    storage[i] = {kv.k.data_ptr(), kv.v.data_ptr(), element_type(kv.k), num_kv_heads, capacity, kv.k.stride(0),
                  head_dim, 0, kv.positions_i32.data_ptr<int32_t>(), nullptr, false};
    for (int64_t h = 0; h < num_kv_heads; ++h) {
      lanes[i * static_cast<size_t>(num_kv_heads) + static_cast<size_t>(h)] = {&head_blocks[static_cast<size_t>(h)], rows};
    }
    bases[i].rows = {&storage[i], &lanes[i * static_cast<size_t>(num_kv_heads)], 1};
    bases[i].first_agent = static_cast<int64_t>(i);
    bases[i].num_agents = 1;
    kernels::AgentAttention& a = agents[i];
    a.num_queries = s.q.size(0);
    a.q = s.q.data_ptr();
    a.q_dtype = element_type(s.q);
    a.q_row_stride = s.q.stride(0);
    a.q_head_stride = s.q.stride(1);
    a.q_positions = s.q_positions.data_ptr<int64_t>();
    a.out = s.out.data_ptr();
    a.out_dtype = element_type(s.out);
    a.out_row_stride = s.out.stride(0);
    a.out_head_stride = s.out.stride(1);
  }
  kernels::LoraAttentionParams p;
  p.num_heads = num_heads;
  p.num_kv_heads = num_kv_heads;
  p.head_dim = head_dim;
  p.scale = static_cast<float>(scale);
  p.window = window;
  p.bases = bases.data();
  p.num_bases = static_cast<int64_t>(n);
  p.agents = agents.data();
  p.num_agents = static_cast<int64_t>(n);
  kernels::lora_attention(p);
}

}  // namespace lorakv::runtime
