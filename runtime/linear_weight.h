// runtime/linear_weight.h: one linear projection's weight in the form it is kept in memory:
// a dense ATen tensor (float32 or bfloat16), or quantised blocks read directly by the
// kernels (kernels/quant_matrix.h). The forward pass only calls linear().
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "lorakv/kernels/quant_matrix.h"

namespace lorakv::runtime {

// How a model's weights are kept (`--weights`).
enum class WeightForm {
  kNative,    // a GGUF file's quantised tensors stay in their blocks; float tensors (and HF
              // checkpoints) are dense in the model dtype. The default: about a sixth of
              // float32's bytes per decode step for a 4-bit file.
  kBFloat16,  // every weight dequantised to dense bfloat16
  kFloat32,   // every weight dequantised to dense float32 (exact against transformers' float32)
};
const char* weight_form_name(WeightForm form);  // "native", "bfloat16", "float32"
// Parses "native" / "bfloat16" / "float32" (also "bf16", "f32"); throws ConfigError
// listing the choices.
WeightForm parse_weight_form(const std::string& name);

struct LinearWeight {
  at::Tensor dense;            // [out, in], float32 or bfloat16; undefined when quantised
  kernels::QuantMatrix quant;  // the blocks; empty when dense
  at::Tensor bias;             // [out] in the model dtype, or undefined

  bool defined() const { return dense.defined() || quant.defined(); }
  int64_t out_features() const { return dense.defined() ? dense.size(0) : quant.rows(); }
  int64_t in_features() const { return dense.defined() ? dense.size(1) : quant.cols(); }
  // Bytes of the weight and bias.
  int64_t nbytes() const;
  // "q4", "q8", "float32", "bfloat16".
  std::string form_name() const;

  // x [T, in] (float32 or bfloat16) -> x · W^T + bias, [T, out] in x's dtype. A dense
  // weight of another dtype than x is multiplied in the weight's dtype.
  at::Tensor linear(const at::Tensor& x) const;
};

}  // namespace lorakv::runtime
