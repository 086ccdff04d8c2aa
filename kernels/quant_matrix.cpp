// kernels/quant_matrix.cpp: storage checks, quantise / dequantise, and the two ways of
// computing x · W^T (direct block reads for few rows, dequantised panels + GEMM for many).
#include "lorakv/kernels/quant_matrix.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "lorakv/common/errors.h"
#include "lorakv/kernels/cpu/quant_gemv.h"

namespace lorakv::kernels {

namespace features = ::lorakv::cpu;

const char* quant_format_name(QuantFormat format) { return format == QuantFormat::kQ4 ? "q4" : "q8"; }

namespace {

void check_storage(const at::Tensor& t, const char* what, at::ScalarType dtype, int64_t rows, int64_t cols) {
  LORAKV_CHECK(t.defined() && t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == dtype &&
                   t.dim() == 2 && t.size(0) == rows && t.size(1) == cols,
               InvalidArgumentError,
               "QuantMatrix: " << what << " must be a contiguous CPU " << c10::toString(dtype) << " tensor [" << rows
                               << ", " << cols << "], got "
                               << (t.defined() ? c10::toString(t.scalar_type()) : "undefined") << " "
                               << (t.defined() ? t.sizes() : at::IntArrayRef{}));
}

cpu::QuantGemvFn gemv_for(features::VectorPath path) {
  switch (path) {
    case features::VectorPath::kAvx512: return kernels::cpu::avx512::quant_gemv;
    case features::VectorPath::kAvx2: return kernels::cpu::avx2::quant_gemv;
    case features::VectorPath::kScalar: break;
  }
  return kernels::cpu::scalar::quant_gemv;
}

// The integer kernel of `path`, in its fused VNNI form where this CPU has it.
cpu::QuantDotFn dot_gemv_for(features::VectorPath path) {
  const bool vnni = features::has_vnni(features::detected_cpu_features(), path);
  switch (path) {
    case features::VectorPath::kAvx512: return vnni ? cpu::avx512vnni::quant_dot_gemv : cpu::avx512::quant_dot_gemv;
    case features::VectorPath::kAvx2: return vnni ? cpu::avxvnni::quant_dot_gemv : cpu::avx2::quant_dot_gemv;
    case features::VectorPath::kScalar: break;
  }
  return cpu::scalar::quant_dot_gemv;
}

// Rows per parallel work item: enough to amortise the fork, at least two items per thread.
int64_t row_grain(int64_t rows) {
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  return std::max<int64_t>(16, rows / (2 * threads));
}

// The float32 scratch the panel path dequantises into, kept per thread: allocating a few
// MiB per projection would page-fault them in on every call.
float* panel_scratch(int64_t elements) {
  thread_local at::Tensor scratch;
  if (!scratch.defined() || scratch.numel() < elements) scratch = at::empty({elements}, at::kFloat);
  return scratch.data_ptr<float>();
}

}  // namespace

const char* quant_activations_name(QuantActivations a) { return a == QuantActivations::kInt8 ? "int8" : "float32"; }

QuantActivations parse_quant_activations(const std::string& name) {
  if (name.empty()) return kDefaultQuantActivations;
  if (name == "float32") return QuantActivations::kFloat32;
  if (name == "int8") return QuantActivations::kInt8;
  throw ConfigError("unknown activation form for the quantised GEMV",
                    {"", kQuantActivationsVariable, "float32 or int8", "'" + name + "'",
                     std::string("unset it for the default (") + quant_activations_name(kDefaultQuantActivations) +
                         ")"});
}

namespace {
// The process's QuantActivations, or -1 before LORAKV_QUANT_ACTIVATIONS is read.
std::atomic<int> process_activations{-1};
}  // namespace

QuantActivations selected_quant_activations() {
  const int a = process_activations.load(std::memory_order_relaxed);
  if (a >= 0) return static_cast<QuantActivations>(a);
  const char* value = std::getenv(kQuantActivationsVariable);
  const QuantActivations parsed = parse_quant_activations(value ? value : "");
  int expected = -1;
  process_activations.compare_exchange_strong(expected, static_cast<int>(parsed));
  return static_cast<QuantActivations>(process_activations.load());
}

void set_quant_activations(QuantActivations activations) { process_activations.store(static_cast<int>(activations)); }

QuantMatrix::QuantMatrix(QuantFormat format, at::Tensor codes, at::Tensor scales, at::Tensor mins)
    : QuantMatrix(StoredOrder{}, format, std::move(codes), std::move(scales), std::move(mins)) {
  if (format_ != QuantFormat::kQ4) return;
  at::Tensor paired = at::empty_like(codes_);  // uint8 [rows, cols / 2], replaces GGUF's order
  cpu::q4_codes_to_pair_order(codes_.data_ptr<uint8_t>(), rows_, cols_ / kQuantBlock, paired.data_ptr<uint8_t>());
  codes_ = std::move(paired);
}

QuantMatrix::QuantMatrix(StoredOrder, QuantFormat format, at::Tensor codes, at::Tensor scales, at::Tensor mins)
    : format_(format), codes_(std::move(codes)), scales_(std::move(scales)), mins_(std::move(mins)) {
  LORAKV_CHECK(codes_.defined() && codes_.dim() == 2, InvalidArgumentError, "QuantMatrix: codes must be 2-D");
  rows_ = codes_.size(0);
  cols_ = format_ == QuantFormat::kQ4 ? codes_.size(1) * 2 : codes_.size(1);
  LORAKV_CHECK(cols_ > 0 && cols_ % kQuantBlock == 0, InvalidArgumentError,
               "QuantMatrix: columns must be a positive multiple of " << kQuantBlock << ", got " << cols_);
  const int64_t nb = cols_ / kQuantBlock;
  check_storage(codes_, "codes", format_ == QuantFormat::kQ4 ? at::kByte : at::kChar, rows_,
                format_ == QuantFormat::kQ4 ? cols_ / 2 : cols_);
  check_storage(scales_, "scales", at::kShort, rows_, nb);
  if (format_ == QuantFormat::kQ4) {
    check_storage(mins_, "mins", at::kShort, rows_, nb);
  } else {
    LORAKV_CHECK(!mins_.defined(), InvalidArgumentError, "QuantMatrix: q8 has no mins");
  }
}

QuantMatrix QuantMatrix::quantize(const at::Tensor& w, QuantFormat format) {
  LORAKV_CHECK(w.defined() && w.dim() == 2 && w.size(1) % kQuantBlock == 0 && w.size(1) > 0, InvalidArgumentError,
               "QuantMatrix::quantize: a [rows, cols] matrix with cols a multiple of 32 expected");
  const int64_t rows = w.size(0), nb = w.size(1) / kQuantBlock;
  const at::Tensor blocks = w.to(at::kFloat).contiguous().view({rows, nb, kQuantBlock});  // [rows, nb, 32]
  // As ggml's reference quantisers: the codes use the float32 d, the stored d is rounded.
  if (format == QuantFormat::kQ4) {
    const at::Tensor lo = std::get<0>(blocks.min(2, true)), hi = std::get<0>(blocks.max(2, true));
    const at::Tensor d = (hi - lo) / 15.0;
    const at::Tensor inv = at::where(d != 0, 1.0 / d, at::zeros_like(d));
    const at::Tensor q = ((blocks - lo) * inv + 0.5).floor().clamp(0, 15).to(at::kByte);  // [rows, nb, 32]
    const at::Tensor codes =
        q.narrow(2, 0, 16).bitwise_or(q.narrow(2, 16, 16).bitwise_left_shift(4)).reshape({rows, nb * 16});
    return QuantMatrix(format, codes.contiguous(), d.squeeze(2).to(at::kHalf).view(at::kShort).contiguous(),
                       lo.squeeze(2).to(at::kHalf).view(at::kShort).contiguous());
  }
  const at::Tensor d = std::get<0>(blocks.abs().max(2, true)) / 127.0;
  const at::Tensor inv = at::where(d != 0, 1.0 / d, at::zeros_like(d));
  const at::Tensor q = (blocks * inv).round().clamp(-127, 127).to(at::kChar).reshape({rows, nb * kQuantBlock});
  return QuantMatrix(format, q.contiguous(), d.squeeze(2).to(at::kHalf).view(at::kShort).contiguous(), {});
}

QuantMatrixView QuantMatrix::view() const {
  LORAKV_CHECK(defined(), InvalidArgumentError, "QuantMatrix: empty matrix");
  return {format_,
          rows_,
          cols_,
          static_cast<const uint8_t*>(codes_.data_ptr()),
          reinterpret_cast<const uint16_t*>(scales_.data_ptr<int16_t>()),
          mins_.defined() ? reinterpret_cast<const uint16_t*>(mins_.data_ptr<int16_t>()) : nullptr};
}

int64_t QuantMatrix::nbytes() const {
  if (!defined()) return 0;
  return static_cast<int64_t>(codes_.nbytes() + scales_.nbytes() + (mins_.defined() ? mins_.nbytes() : 0));
}

at::Tensor QuantMatrix::dequantize() const {
  at::Tensor out = at::empty({rows_, cols_}, at::kFloat);
  const QuantMatrixView v = view();
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, rows_, 64, [&](int64_t begin, int64_t end) {
    cpu::quant_dequantize_rows(v, begin, end, dst + begin * cols_);
  });
  return out;
}

at::Tensor QuantMatrix::dequantize_rows(const at::Tensor& ids) const {
  LORAKV_CHECK(ids.defined() && ids.dim() == 1 && ids.scalar_type() == at::kLong, InvalidArgumentError,
               "QuantMatrix::dequantize_rows: int64 [n] row ids expected");
  const at::Tensor idx = ids.contiguous();
  const int64_t n = idx.size(0);
  const int64_t* p = idx.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    LORAKV_CHECK(p[i] >= 0 && p[i] < rows_, InvalidArgumentError,
                 "QuantMatrix::dequantize_rows: row " << p[i] << " outside 0.." << rows_ - 1);
  }
  at::Tensor out = at::empty({n, cols_}, at::kFloat);
  const QuantMatrixView v = view();
  float* dst = out.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) cpu::quant_dequantize_rows(v, p[i], p[i] + 1, dst + i * cols_);
  return out;
}

QuantMatrix QuantMatrix::select_rows(const at::Tensor& order) const {
  return QuantMatrix(StoredOrder{}, format_, codes_.index_select(0, order), scales_.index_select(0, order),
                     mins_.defined() ? mins_.index_select(0, order) : at::Tensor());
}

QuantMatrix QuantMatrix::stack_rows(const std::vector<const QuantMatrix*>& parts) {
  LORAKV_CHECK(!parts.empty(), InvalidArgumentError, "QuantMatrix::stack_rows: nothing to stack");
  std::vector<at::Tensor> codes, scales, mins;
  for (const QuantMatrix* p : parts) {
    LORAKV_CHECK(p->format_ == parts[0]->format_ && p->cols_ == parts[0]->cols_, InvalidArgumentError,
                 "QuantMatrix::stack_rows: parts differ in format or width ("
                     << quant_format_name(p->format_) << " x " << p->cols_ << " vs "
                     << quant_format_name(parts[0]->format_) << " x " << parts[0]->cols_ << ")");
    codes.push_back(p->codes_);
    scales.push_back(p->scales_);
    if (p->mins_.defined()) mins.push_back(p->mins_);
  }
  return QuantMatrix(StoredOrder{}, parts[0]->format_, at::cat(codes, 0), at::cat(scales, 0),
                     mins.empty() ? at::Tensor() : at::cat(mins, 0));
}

at::Tensor QuantMatrix::linear(const at::Tensor& x) const {
  return linear(x, features::selected_vector_path(), selected_quant_activations());
}

at::Tensor QuantMatrix::linear(const at::Tensor& x, features::VectorPath path, QuantActivations activations) const {
  LORAKV_CHECK(defined(), InvalidArgumentError, "QuantMatrix::linear: empty matrix");
  LORAKV_CHECK(x.defined() && x.dim() == 2 && x.size(1) == cols_ && x.device().is_cpu() &&
                   (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16),
               InvalidArgumentError,
               "QuantMatrix::linear: x must be a CPU float32 or bfloat16 [M, " << cols_ << "] tensor, got "
                   << (x.defined() ? c10::toString(x.scalar_type()) : "undefined") << " "
                   << (x.defined() ? x.sizes() : at::IntArrayRef{}));
  LORAKV_CHECK(features::supports(features::detected_cpu_features(), path), InvalidArgumentError,
               "QuantMatrix::linear: this CPU cannot run the " << features::vector_path_name(path) << " path");
  if (x.size(0) > kDirectMaxRows) return linear_panels(x);
  const bool int8 = activations == QuantActivations::kInt8 && x.scalar_type() == at::kFloat;
  return int8 ? linear_int8(x, path) : linear_direct(x, path);
}

at::Tensor QuantMatrix::linear_int8(const at::Tensor& x, features::VectorPath path) const {
  const int64_t m = x.size(0), nb = cols_ / kQuantBlock;
  const at::Tensor xf = x.stride(1) == 1 ? x : x.contiguous();  // float32 [M, cols]
  at::Tensor codes = at::empty({m, cols_}, at::kChar);            // int8 [M, cols]
  at::Tensor stats = at::empty({2, m, nb}, at::kFloat);           // float32: scales, then sums [M, nb]
  float* scales = stats.data_ptr<float>();
  cpu::quantize_activations(xf.data_ptr<float>(), m, xf.stride(0), cols_, codes.data_ptr<int8_t>(), scales,
                            scales + m * nb);
  at::Tensor y = at::empty({m, rows_}, at::kFloat);  // float32 [M, rows]
  const cpu::QuantDotArgs args{view(), {codes.data_ptr<int8_t>(), scales, scales + m * nb, m, cols_},
                               y.data_ptr<float>(), rows_};
  const cpu::QuantDotFn gemv = dot_gemv_for(path);
  at::parallel_for(0, rows_, row_grain(rows_), [&](int64_t begin, int64_t end) { gemv(args, begin, end); });
  return y;
}

at::Tensor QuantMatrix::linear_direct(const at::Tensor& x, features::VectorPath path) const {
  const int64_t m = x.size(0);
  const at::Tensor xf = x.scalar_type() == at::kFloat && x.stride(1) == 1 ? x : x.to(at::kFloat).contiguous();  // [M, cols]
  at::Tensor y = at::empty({m, rows_}, at::kFloat);  // float32 [M, rows]
  const cpu::QuantGemvArgs args{view(), xf.data_ptr<float>(), m, xf.stride(0), y.data_ptr<float>(), rows_};
  const cpu::QuantGemvFn gemv = gemv_for(path);
  at::parallel_for(0, rows_, row_grain(rows_), [&](int64_t begin, int64_t end) { gemv(args, begin, end); });
  return x.scalar_type() == at::kFloat ? y : y.to(x.scalar_type());
}

bool QuantMatrix::bf16_gemm_is_native() {
  return features::selected_vector_path() >= features::VectorPath::kAvx512 &&
         features::detected_cpu_features().avx512_bf16;
}

at::Tensor QuantMatrix::linear_panels(const at::Tensor& x) const {
  const QuantMatrixView v = view();
  const bool bf16_native = x.scalar_type() == at::kBFloat16 && bf16_gemm_is_native();
  const at::Tensor xg = x.scalar_type() == at::kFloat || bf16_native ? x : x.to(at::kFloat);  // GEMM input
  // Panels of at most kPanelRows weight rows, so the scratch stays a few MiB even for an
  // output head of 49152 rows (every logit of a prefill).
  const int64_t panel = std::min(rows_, kPanelRows);
  float* w = panel_scratch(panel * cols_);
  at::Tensor y = at::empty({x.size(0), rows_}, xg.options());  // [M, rows] in the GEMM's dtype
  for (int64_t r0 = 0; r0 < rows_; r0 += panel) {
    const int64_t n = std::min(panel, rows_ - r0);
    at::parallel_for(0, n, 64, [&](int64_t begin, int64_t end) {
      cpu::quant_dequantize_rows(v, r0 + begin, r0 + end, w + begin * cols_);
    });
    const at::Tensor wf = at::from_blob(w, {n, cols_}, at::kFloat);  // float32 [n, cols], borrowed
    const at::Tensor part = at::matmul(xg, bf16_native ? wf.to(at::kBFloat16).t() : wf.t());  // [M, n]
    if (n == rows_) return xg.scalar_type() == x.scalar_type() ? part : part.to(x.scalar_type());
    y.narrow(1, r0, n).copy_(part);
  }
  return xg.scalar_type() == x.scalar_type() ? y : y.to(x.scalar_type());
}

}  // namespace lorakv::kernels
