// fuzz/peft_config_fuzzer.cpp: a PEFT adapter_config.json as the PEFT loader reads it:
// parsed, turned into target rules, then asked about every module of a small base model
// (targets, rank and alpha patterns), as load_peft_adapter does before it reads weights.
#include <cstddef>
#include <cstdint>
#include <string>

#include "lorakv/adapters/peft_config_rules.h"
#include "lorakv/formats/json.h"
#include "fuzz/fuzz_support.h"

namespace {

constexpr int64_t kNumLayers = 2;
constexpr const char* kModules[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lorakv::adapters;
  const std::string text(reinterpret_cast<const char*>(data), size);
  lorakv::fuzz::expect_only_typed_errors("peft_config", [&] {
    lorakv::formats::JsonParseOptions options;
    options.source = "adapter_config.json";
    const PeftRules rules = parse_peft_rules(options.source, lorakv::formats::parse_json(text, options), kNumLayers);
    for (int64_t layer = 0; layer < kNumLayers; ++layer) {
      for (const char* module : kModules) {
        const std::string path = "model.layers." + std::to_string(layer) + "." + module;
        (void)is_targeted(rules, path, layer);
        (void)pattern_rank(rules, path);
        (void)pattern_alpha(rules, path);
      }
    }
  });
  return 0;
}
