// tests/support/test_settings.h: paths the tests need (the real model, the oracle output
// folder, the Python with the oracles). The environment wins; otherwise the values CMake
// compiled in for this build tree apply, so a test binary also runs by hand.
#pragma once

#include <string>

namespace lorakv::testing {

// name: "LORAKV_MODEL", "LORAKV_ORACLE_DIR", "LORAKV_PYTHON", "LORAKV_SOURCE_DIR" or
// "LORAKV_TEST_WEIGHTS" (the weight form the parity suites load the model in: "float32"
// unless CTest's second run of a suite sets "native").
// Returns "" when neither the environment nor the build sets it.
std::string test_setting(const char* name);

}  // namespace lorakv::testing
