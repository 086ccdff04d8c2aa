// kernels/rope.cpp: RoPE on ATen ops, matching transformers' float32 arithmetic order.
#include "kernels/rope.h"

#include <cmath>

#include "common/errors.h"

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

}  // namespace lorakv::kernels
