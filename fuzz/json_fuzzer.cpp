// fuzz/json_fuzzer.cpp: the strict JSON parser on arbitrary text, with and without
// duplicate keys allowed; a parsed document must print back to text that parses to the
// same printed form.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "lorakv/formats/json.h"
#include "fuzz/fuzz_support.h"

namespace {

using lorakv::formats::JsonValue;

// Walks every value as a reader would: paths, descriptions and typed accessors.
void visit(const JsonValue& v) {
  (void)v.path();
  (void)v.describe();
  lorakv::fuzz::expect_only_typed_errors("json", [&] { (void)v.as_int(); });
  if (v.is_array()) {
    for (const JsonValue& e : v.as_array()) visit(e);
    lorakv::fuzz::expect_only_typed_errors("json", [&] { (void)v.at(v.size()); });
  } else if (v.is_object()) {
    for (const auto& [key, member] : v.as_object()) {
      if (v.find(key) == nullptr) std::abort();  // every member can be found by its key
      visit(member);
    }
    lorakv::fuzz::expect_only_typed_errors("json", [&] { (void)v.at("\x01missing"); });
  }
}

void round_trip(const JsonValue& v) {
  const std::string printed = v.to_string();
  const std::string again = lorakv::formats::parse_json(printed).to_string();
  if (again != printed) {
    std::fprintf(stderr, "json: FINDING: print/parse round trip differs:\n%s\n%s\n", printed.c_str(), again.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string owned(text);  // exactly sized, so ASan flags reads past the end
  for (bool duplicates : {false, true}) {
    lorakv::fuzz::expect_only_typed_errors("json", [&] {
      lorakv::formats::JsonParseOptions options;
      options.source = "fuzz.json";
      options.allow_duplicate_keys = duplicates;
      options.max_depth = 64;
      const JsonValue v = lorakv::formats::parse_json(owned, options);
      visit(v);
      round_trip(v);
    });
  }
  return 0;
}
