// runtime/linear_weight.cpp: dispatch of one projection to ATen's GEMM or the quantised kernels.
#include "lorakv/runtime/linear_weight.h"

#include "lorakv/common/errors.h"

namespace lorakv::runtime {

const char* weight_form_name(WeightForm form) {
  switch (form) {
    case WeightForm::kNative: return "native";
    case WeightForm::kBFloat16: return "bfloat16";
    case WeightForm::kFloat32: return "float32";
  }
  return "native";
}

WeightForm parse_weight_form(const std::string& name) {
  if (name == "native") return WeightForm::kNative;
  if (name == "bfloat16" || name == "bf16") return WeightForm::kBFloat16;
  if (name == "float32" || name == "f32") return WeightForm::kFloat32;
  throw ConfigError("unknown weight form",
                    {"", "weights", "native, bfloat16 or float32", "'" + name + "'",
                     "native keeps a GGUF file's quantised blocks (fastest); float32 is exact"});
}

int64_t LinearWeight::nbytes() const {
  int64_t n = dense.defined() ? static_cast<int64_t>(dense.nbytes()) : quant.nbytes();
  return n + (bias.defined() ? static_cast<int64_t>(bias.nbytes()) : 0);
}

std::string LinearWeight::form_name() const {
  if (quant.defined()) return kernels::quant_format_name(quant.format());
  return dense.scalar_type() == at::kBFloat16 ? "bfloat16" : "float32";
}

at::Tensor LinearWeight::linear(const at::Tensor& x) const {
  if (quant.defined()) {
    at::Tensor y = quant.linear(x);
    if (bias.defined()) y.add_(bias);
    return y;
  }
  LORAKV_ASSERT(dense.defined(), "linear() on an empty weight");
  // bfloat16 GEMMs of many rows without bfloat16 hardware: multiply in float32 instead
  // (kernels::QuantMatrix::bf16_gemm_is_native() says why).
  if (dense.scalar_type() == at::kBFloat16 && x.size(0) > kernels::QuantMatrix::kDirectMaxRows &&
      !kernels::QuantMatrix::bf16_gemm_is_native()) {
    const at::Tensor xf = x.to(at::kFloat);
    at::Tensor y = at::linear(xf, dense.to(at::kFloat), bias.defined() ? bias.to(at::kFloat) : at::Tensor());
    return y.to(x.scalar_type());
  }
  if (dense.scalar_type() == x.scalar_type()) {
    return bias.defined() ? at::linear(x, dense, bias) : at::linear(x, dense);
  }
  const at::Tensor xw = x.to(dense.scalar_type());
  const at::Tensor y = bias.defined() ? at::linear(xw, dense, bias.to(dense.scalar_type())) : at::linear(xw, dense);
  return y.to(x.scalar_type());
}

}  // namespace lorakv::runtime
