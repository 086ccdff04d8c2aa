// kernels/lora.cpp: segment-wise LoRA shrink/expand with ATen matmuls (CPU and CUDA alike:
// the work is two GEMMs per segment, so the dispatch is ATen's).
#include "lorakv/kernels/lora.h"

#include <ATen/Parallel.h>

#include "lorakv/common/errors.h"
#include "lorakv/kernels/cpu/lora_rows.h"

namespace lorakv::kernels {

namespace {
// An undefined tensor prints as [].
at::IntArrayRef sizes_of(const at::Tensor& t) { return t.defined() ? t.sizes() : at::IntArrayRef{}; }


// Rows of one segment as indices.
void append_rows(const LoraRows& r, std::vector<int64_t>& rows) {
  if (r.rows.defined()) {
    const at::Tensor idx = r.rows.to(at::kCPU).contiguous();
    const int64_t* p = idx.data_ptr<int64_t>();
    rows.insert(rows.end(), p, p + idx.numel());
  } else {
    for (int64_t i = 0; i < r.length; ++i) rows.push_back(r.begin + i);
  }
}

// Decode-shaped batches (many adapters, a few rows each, one rank): gather each row's A
// and B and run two batched matmuls for the whole batch (Punica's BGMV) instead of two
// small GEMMs per adapter; the per-op overhead dominates at these sizes.
LoraStackCache::Stack stack_factors(const std::vector<LoraSegment>& segments) {
  std::vector<at::Tensor> as, bs;
  for (const LoraSegment& s : segments) {
    as.push_back(s.a);
    bs.push_back(s.b);
  }
  LoraStackCache::Stack stack{at::stack(as), at::stack(bs), {}, {}};
  if (stack.a.scalar_type() == at::kFloat && stack.a.device().is_cpu()) {
    stack.a_t = stack.a.transpose(1, 2).contiguous();
    stack.b_t = stack.b.transpose(1, 2).contiguous();
  }
  return stack;
}

// One row per segment, float32 on the CPU: plain loops over the cached transposed factors
// (kernels/cpu/lora_rows.h), no ATen op per projection.
void lora_add_rows(at::Tensor& out, const at::Tensor& x, const std::vector<int64_t>& rows,
                   const LoraStackCache::Stack& stack) {
  const cpu::LoraRowsArgs args{x.data_ptr<float>(), x.stride(0), x.size(1), out.data_ptr<float>(), out.stride(0),
                               out.size(1), stack.a.size(1), rows.data(), stack.a_t.data_ptr<float>(),
                               stack.b_t.data_ptr<float>()};
  const int64_t n = static_cast<int64_t>(rows.size());
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) { cpu::lora_rows_update(args, begin, end); });
}

void lora_add_gathered(at::Tensor& out, const at::Tensor& x, const std::vector<LoraSegment>& segments,
                       LoraStackCache* stacks) {
  std::vector<int64_t> rows, group;
  bool one_row_each = true;  // then the stacked A/B are already in row order
  for (size_t g = 0; g < segments.size(); ++g) {
    const size_t before = rows.size();
    append_rows(segments[g].rows, rows);
    one_row_each = one_row_each && rows.size() == before + 1;
    group.insert(group.end(), rows.size() - before, static_cast<int64_t>(g));
  }
  if (rows.empty()) return;
  // The whole batch in order (a plain decode step): no gather of x, no scatter into out.
  bool whole_batch = static_cast<int64_t>(rows.size()) == x.size(0);
  for (size_t i = 0; whole_batch && i < rows.size(); ++i) whole_batch = rows[i] == static_cast<int64_t>(i);
  const LoraStackCache::Stack stack = stacks ? stacks->get(segments) : stack_factors(segments);
  if (one_row_each && stack.a_t.defined() && x.scalar_type() == at::kFloat && x.stride(1) == 1 &&
      out.stride(1) == 1) {
    lora_add_rows(out, x, rows, stack);
    return;
  }
  at::Tensor a = stack.a;  // [segments, r, in]
  at::Tensor b = stack.b;  // [segments, out, r]
  if (!one_row_each) {
    const at::Tensor group_idx = at::tensor(group, at::kLong).to(x.device());
    a = a.index_select(0, group_idx);  // [n, r, in]
    b = b.index_select(0, group_idx);  // [n, out, r]
  }
  const at::Tensor row_idx = whole_batch ? at::Tensor() : at::tensor(rows, at::kLong).to(x.device());
  const at::Tensor xs = (whole_batch ? x : x.index_select(0, row_idx)).unsqueeze(2);  // [n, in, 1]
  const at::Tensor delta = at::bmm(b, at::bmm(a, xs)).squeeze(2);                       // [n, out]
  if (whole_batch) {
    out.add_(delta);
  } else {
    out.index_add_(0, row_idx, delta);
  }
}

// Row indices of a segment: int64 [n], each inside the batch of `batch_rows`. Index values
// are checked on host tensors only (a device tensor would need a sync per projection).
void check_rows(const LoraRows& r, int64_t batch_rows) {
  if (!r.rows.defined()) {
    LORAKV_CHECK(r.begin >= 0 && r.length >= 0 && r.begin + r.length <= batch_rows, InvalidArgumentError,
                 "lora_add: rows [" << r.begin << ", " << r.begin + r.length << ") outside the batch of " << batch_rows);
    return;
  }
  LORAKV_CHECK(r.rows.dim() == 1 && r.rows.scalar_type() == at::kLong, InvalidArgumentError,
               "lora_add: row indices must be int64 [n], got " << r.rows.scalar_type() << " " << r.rows.sizes());
  if (!r.rows.is_cpu()) return;
  const at::Tensor idx = r.rows.contiguous();
  const int64_t* p = idx.data_ptr<int64_t>();
  for (int64_t i = 0; i < idx.numel(); ++i) {
    LORAKV_CHECK(p[i] >= 0 && p[i] < batch_rows, InvalidArgumentError,
                 "lora_add: row index " << p[i] << " outside the batch of " << batch_rows);
  }
}

// One segment's factors against the activations: A [r, in], B [out, r], x's dtype and device.
void check_segment(const LoraSegment& s, const at::Tensor& x, const at::Tensor& out) {
  LORAKV_CHECK(s.a.defined() && s.b.defined() && s.a.dim() == 2 && s.b.dim() == 2 && s.a.size(1) == x.size(1) &&
                   s.b.size(0) == out.size(1) && s.a.size(0) == s.b.size(1),
               InvalidArgumentError,
               "lora_add: A [r, " << x.size(1) << "] and B [" << out.size(1) << ", r] expected, got "
                                  << sizes_of(s.a) << " and "
                                  << sizes_of(s.b));
  LORAKV_CHECK(s.a.scalar_type() == x.scalar_type() && s.b.scalar_type() == x.scalar_type(), InvalidArgumentError,
               "lora_add: adapter dtype " << s.a.scalar_type() << "/" << s.b.scalar_type()
                                          << " differs from the activations' " << x.scalar_type());
  LORAKV_CHECK(s.a.device() == x.device() && s.b.device() == x.device(), InvalidArgumentError,
               "lora_add: adapter on " << s.a.device() << ", activations on " << x.device());
  check_rows(s.rows, x.size(0));
}

}  // namespace

LoraStackCache::Stack LoraStackCache::get(const std::vector<LoraSegment>& segments) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    bool same = it->factors.size() == 2 * segments.size();
    for (size_t i = 0; same && i < segments.size(); ++i) {
      same = it->factors[2 * i].unsafeGetTensorImpl() == segments[i].a.unsafeGetTensorImpl() &&
             it->factors[2 * i + 1].unsafeGetTensorImpl() == segments[i].b.unsafeGetTensorImpl();
    }
    if (!same) continue;
    Entry hit = std::move(*it);
    entries_.erase(it);
    entries_.push_back(std::move(hit));
    return entries_.back().stack;
  }
  Entry entry;
  for (const LoraSegment& s : segments) {
    entry.factors.push_back(s.a);
    entry.factors.push_back(s.b);
  }
  entry.stack = stack_factors(segments);
  ++builds_;
  if (entries_.size() >= kEntries) entries_.erase(entries_.begin());
  entries_.push_back(std::move(entry));
  return entries_.back().stack;
}

void LoraStackCache::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.clear();
}

void lora_add(at::Tensor& out, const at::Tensor& x, const std::vector<LoraSegment>& segments,
              LoraStackCache* stacks) {
  LORAKV_CHECK(x.defined() && out.defined() && x.dim() == 2 && out.dim() == 2 && x.size(0) == out.size(0),
               InvalidArgumentError,
               "lora_add: x [T, in] and out [T, out] expected, got " << sizes_of(x)
                                                                    << " and "
                                                                    << sizes_of(out));
  LORAKV_CHECK(out.scalar_type() == x.scalar_type() && out.device() == x.device(), InvalidArgumentError,
               "lora_add: out (" << out.scalar_type() << ", " << out.device() << ") must match x (" << x.scalar_type()
                                 << ", " << x.device() << ")");
  for (const LoraSegment& s : segments) check_segment(s, x, out);
  bool same_rank = segments.size() >= 3;
  int64_t covered = 0;
  for (const LoraSegment& s : segments) {
    same_rank = same_rank && s.a.size(0) == segments[0].a.size(0);
    covered += s.rows.rows.defined() ? s.rows.rows.numel() : s.rows.length;
  }
  if (same_rank && covered <= 2 * static_cast<int64_t>(segments.size())) {
    lora_add_gathered(out, x, segments, stacks);
    return;
  }
  for (const LoraSegment& s : segments) {
    if (s.rows.rows.defined()) {
      const at::Tensor& idx = s.rows.rows;
      if (idx.numel() == 0) continue;
      const at::Tensor xs = x.index_select(0, idx);                 // [n, in]
      const at::Tensor delta = at::matmul(at::matmul(xs, s.a.t()), s.b.t());  // [n, out]
      out.index_add_(0, idx, delta);
    } else {
      if (s.rows.length == 0) continue;
      const at::Tensor xs = x.narrow(0, s.rows.begin, s.rows.length);  // [n, in]
      at::Tensor dst = out.narrow(0, s.rows.begin, s.rows.length);     // [n, out], a view
      dst.addmm_(at::matmul(xs, s.a.t()), s.b.t());
    }
  }
}

}  // namespace lorakv::kernels
