// kernels/rope.cpp: RoPE on ATen ops, matching transformers' float32 arithmetic order.
#include "lorakv/kernels/rope.h"

#include <c10/util/BFloat16.h>

#include <cmath>

#include "lorakv/common/errors.h"

namespace lorakv::kernels {
namespace {
// An undefined tensor prints as [].
at::IntArrayRef sizes_of(const at::Tensor& t) { return t.defined() ? t.sizes() : at::IntArrayRef{}; }
}  // namespace


at::Tensor rope_inv_freq(int64_t rotary_dim, double theta) {
  LORAKV_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0, InvalidArgumentError,
               "rope_inv_freq: rotary_dim must be positive and even, got " << rotary_dim);
  // transformers: 1 / (base ** (arange(0, dim, 2).float() / dim)), all float32.
  at::Tensor exponents = at::arange(0, rotary_dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(rotary_dim);
  return 1.0 / at::pow(theta, exponents);
}

at::Tensor rope_llama3_scaling(const at::Tensor& inv_freq, double factor, double low_freq_factor,
                               double high_freq_factor, double original_max_position) {
  const double low_freq_wavelen = original_max_position / low_freq_factor;
  const double high_freq_wavelen = original_max_position / high_freq_factor;
  at::Tensor wavelen = 2 * M_PI / inv_freq;
  at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq);
  at::Tensor smooth = (original_max_position / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
  at::Tensor smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
  at::Tensor medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return at::where(medium, smoothed, scaled);
}

std::pair<at::Tensor, at::Tensor> rope_cos_sin(const at::Tensor& positions, const at::Tensor& inv_freq) {
  LORAKV_CHECK(positions.defined() && inv_freq.defined() && positions.dim() == 1 && inv_freq.dim() == 1,
               InvalidArgumentError,
               "rope_cos_sin: positions [T] and inv_freq [D/2] expected, got "
                   << sizes_of(positions) << " and "
                   << sizes_of(inv_freq));
  at::Tensor freqs = positions.to(at::kFloat).unsqueeze(1) * inv_freq.unsqueeze(0);  // [T, D/2]
  at::Tensor emb = at::cat({freqs, freqs}, 1);                                        // [T, D]
  return {emb.cos(), emb.sin()};
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  LORAKV_CHECK(x.defined() && cos.defined() && sin.defined() && x.dim() == 3 && x.size(2) % 2 == 0 &&
                   cos.dim() == 2 && cos.size(0) == x.size(0) && cos.size(1) == x.size(2) && sin.sizes() == cos.sizes(),
               InvalidArgumentError,
               "apply_rope: x [T, H, D] (D even) and cos, sin [T, D] expected, got "
                   << sizes_of(x) << ", "
                   << sizes_of(cos) << " and "
                   << sizes_of(sin));
  const int64_t half = x.size(2) / 2;
  at::Tensor x1 = x.narrow(2, 0, half);
  at::Tensor x2 = x.narrow(2, half, half);
  at::Tensor rotated = at::cat({-x2, x1}, 2);  // rotate_half
  at::Tensor c = cos.unsqueeze(1).to(x.scalar_type());
  at::Tensor s = sin.unsqueeze(1).to(x.scalar_type());
  return x * c + rotated * s;
}

namespace {

// One row of D = 2 * half elements: out_j = x_j cos_j - x_{j+h} sin_j,
// out_{j+h} = x_{j+h} cos_{j+h} + x_j sin_{j+h}; each product and sum rounded to T.
template <typename T>
void rotate_row(T* x, const float* c, const float* s, int64_t half) {
  for (int64_t j = 0; j < half; ++j) {
    const float x1 = static_cast<float>(x[j]), x2 = static_cast<float>(x[j + half]);
    // apply_rope casts cos and sin to x's dtype first.
    auto in_t = [](float v) { return static_cast<float>(static_cast<T>(v)); };
    const T a = static_cast<T>(x1 * in_t(c[j])), b = static_cast<T>(-x2 * in_t(s[j]));
    const T e = static_cast<T>(x2 * in_t(c[j + half])), f = static_cast<T>(x1 * in_t(s[j + half]));
    x[j] = static_cast<T>(static_cast<float>(a) + static_cast<float>(b));
    x[j + half] = static_cast<T>(static_cast<float>(e) + static_cast<float>(f));
  }
}

template <typename T>
void rotate_all(const at::Tensor& x, const float* cos, const float* sin) {
  const int64_t t = x.size(0), heads = x.size(1), d = x.size(2);
  T* base = x.data_ptr<T>();
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t h = 0; h < heads; ++h) rotate_row(base + i * x.stride(0) + h * x.stride(1), cos + i * d, sin + i * d, d / 2);
  }
}

}  // namespace

void apply_rope_(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  LORAKV_CHECK(x.defined() && cos.defined() && sin.defined() && x.dim() == 3 && x.size(2) % 2 == 0 &&
                   x.stride(2) == 1 && cos.dim() == 2 && cos.size(0) == x.size(0) && cos.size(1) == x.size(2) &&
                   sin.sizes() == cos.sizes() && cos.scalar_type() == at::kFloat && sin.scalar_type() == at::kFloat &&
                   cos.is_contiguous() && sin.is_contiguous() &&
                   (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16),
               InvalidArgumentError,
               "apply_rope_: float32/bfloat16 x [T, H, D] (unit stride in D) and contiguous float32 cos, sin [T, D] "
               "expected, got "
                   << sizes_of(x) << ", " << sizes_of(cos) << " and " << sizes_of(sin));
  if (x.scalar_type() == at::kFloat) {
    rotate_all<float>(x, cos.data_ptr<float>(), sin.data_ptr<float>());
  } else {
    rotate_all<c10::BFloat16>(x, cos.data_ptr<float>(), sin.data_ptr<float>());
  }
}

}  // namespace lorakv::kernels
