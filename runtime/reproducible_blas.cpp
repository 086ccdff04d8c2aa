// runtime/reproducible_blas.cpp: asks MKL, libtorch's CPU BLAS on x86, for results that do not
// depend on where the operands lie in memory (conditional numerical reproducibility, strict).
// Without it, on Intel CPUs a small GEMM (an adapter's X A, a residual's C = X A^T) over the
// same numbers at other addresses can differ in the last bit, so a session restored from a
// file (its rows at other addresses) did not continue bit for bit: SessionSave's exactness
// test failed on a Xeon with 2 threads and passed with MKL_CBWR=AUTO,STRICT or 1 thread. MKL
// reads the variable when it is first used, so it is set while static objects start, before
// main; a value the user set is kept. The GEMMs lorakv leaves to MKL are small (its
// projections and attention run in its own kernels), so the strict path costs nothing
// measurable.
#include "lorakv/runtime/reproducible_blas.h"

#include <cstdlib>
#include <cstring>

namespace lorakv::runtime {

namespace {

constexpr const char* kVariable = "MKL_CBWR";
constexpr const char* kRequest = "AUTO,STRICT";

const bool kRequested = [] {
  setenv(kVariable, kRequest, /*overwrite=*/0);
  return true;
}();

}  // namespace

bool reproducible_blas_requested() {
  const char* value = std::getenv(kVariable);
  return kRequested && value != nullptr && value[0] != '\0';
}

}  // namespace lorakv::runtime
