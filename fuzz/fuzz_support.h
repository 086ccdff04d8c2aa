// fuzz/fuzz_support.h: what a fuzz target may and may not do with hostile input. A
// lorakv::Error (ModelLoadError, ConfigError, AdapterLoadError...) is the expected answer
// to bad input; any other exception (std::bad_alloc, std::length_error, InternalError...)
// is a finding, reported and turned into a crash so libFuzzer saves the input.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <typeinfo>
#include <vector>

#include "lorakv/common/errors.h"

namespace lorakv::fuzz {

template <typename Fn>
void expect_only_typed_errors(const char* target, Fn&& fn) {
  try {
    fn();
  } catch (const lorakv::InternalError& e) {  // an Error, but a bug: before the catch of Error
    std::fprintf(stderr, "%s: FINDING: internal error: %s\n", target, e.what());
    std::abort();
  } catch (const lorakv::Error&) {
    // Bad input refused the documented way.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: FINDING: untyped exception %s: %s\n", target, typeid(e).name(), e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "%s: FINDING: exception of unknown type\n", target);
    std::abort();
  }
}

// A copy of the input sized exactly, so ASan flags any read past its end.
inline std::vector<uint8_t> exact_copy(const uint8_t* data, size_t size) { return {data, data + size}; }

}  // namespace lorakv::fuzz
