// tests/runtime/reproducible_blas_test.cpp: a program that links the runtime's model asks MKL
// for strict reproducibility before main (SessionSave's exactness rests on it on Intel CPUs).
#include "lorakv/runtime/reproducible_blas.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace lorakv::runtime {
namespace {

TEST(ReproducibleBlas, MklCbwrIsSetBeforeMain) {
  EXPECT_TRUE(reproducible_blas_requested());
  const char* value = std::getenv("MKL_CBWR");
  ASSERT_NE(value, nullptr);
  // lorakv's request, unless whoever ran the test set their own.
  EXPECT_NE(std::string(value).find("STRICT"), std::string::npos) << value;
}

}  // namespace
}  // namespace lorakv::runtime
