// tests/support/fuzz_corpus.h: the committed fuzz inputs of one target, for the unit tests
// that replay them (past fuzzer findings among them) on every `make test`.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace lorakv::testing {

// Every file in fuzz/corpus/<target> of the source tree, sorted; empty when there is none.
std::vector<std::filesystem::path> fuzz_corpus(const std::string& target);

}  // namespace lorakv::testing
