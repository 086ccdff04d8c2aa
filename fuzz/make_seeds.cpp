// fuzz/make_seeds.cpp: writes small valid GGUF and safetensors files with the tests'
// builders (tests/support/), as seed inputs for the fuzz targets.
//   make_fuzz_seeds <folder>   writes <folder>/gguf/*.gguf and <folder>/safetensors/*
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/gguf_builder.h"
#include "tests/support/safetensors_builder.h"

namespace {

namespace fs = std::filesystem;
using lorakv::testing::GgufBuilder;
using lorakv::testing::SafetensorsBuilder;

template <typename T>
std::vector<uint8_t> le(T v) {
  std::vector<uint8_t> out(sizeof(T));
  std::memcpy(out.data(), &v, sizeof(T));
  return out;
}

void append(std::vector<uint8_t>& out, const std::vector<uint8_t>& part) { out.insert(out.end(), part.begin(), part.end()); }

// A tiny llama-like file: every common metadata kind and two F32 tensors.
GgufBuilder small_model() {
  GgufBuilder b;
  b.add_string("general.architecture", "llama");
  b.add_u32("llama.block_count", 2);
  b.add_f32("llama.rope.freq_base", 10000.0f);
  b.add_bool("tokenizer.ggml.add_bos_token", false);
  b.add_string_array("tokenizer.ggml.tokens", {"a", "b", "ab"});
  b.add_i32_array("tokenizer.ggml.token_type", {1, 1, 3});
  b.add_f32_tensor("w", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  b.add_f32_tensor("v", {3}, {9, 10, 11});
  return b;
}

// Every scalar type, a nested array, a custom alignment and quantised tensors.
GgufBuilder all_types() {
  GgufBuilder b;
  b.alignment = 64;
  b.add_u32("general.alignment", 64);
  b.add_raw("u8", 0, le<uint8_t>(250));
  b.add_raw("i8", 1, le<int8_t>(-100));
  b.add_raw("u16", 2, le<uint16_t>(65000));
  b.add_raw("i16", 3, le<int16_t>(-30000));
  b.add_raw("i32", 5, le<int32_t>(-2000000000));
  b.add_raw("u64", 10, le<uint64_t>(uint64_t{1} << 40));
  b.add_raw("i64", 11, le<int64_t>(-(int64_t{1} << 50)));
  b.add_raw("f64", 12, le<double>(0.1));
  std::vector<uint8_t> nested = le<uint32_t>(9);  // array<array<u16>> = [[1, 2], [3]]
  for (const auto& part : {le<uint64_t>(2), le<uint32_t>(2), le<uint64_t>(2), le<uint16_t>(1), le<uint16_t>(2),
                           le<uint32_t>(2), le<uint64_t>(1), le<uint16_t>(3)}) {
    append(nested, part);
  }
  b.add_raw("nested", 9, nested);
  const auto block = [](uint32_t type, size_t bytes) {
    std::vector<uint8_t> d(bytes);
    for (size_t k = 0; k < bytes; ++k) d[k] = static_cast<uint8_t>(k * 37 + 11);
    d[0] = 0x00;
    d[1] = 0x3c;  // fp16 scale 1.0
    return GgufBuilder::Tensor{"q" + std::to_string(type), {32, 1}, type, d};
  };
  b.tensors.push_back(block(2, 18));   // Q4_0
  b.tensors.push_back(block(3, 20));   // Q4_1
  b.tensors.push_back(block(8, 34));   // Q8_0
  b.tensors.push_back(GgufBuilder::Tensor{"h16", {2}, 1, {0x00, 0x3c, 0x00, 0xc0}});   // F16
  b.tensors.push_back(GgufBuilder::Tensor{"b16", {2}, 30, {0x80, 0x3f, 0x00, 0x40}});  // BF16
  return b;
}

SafetensorsBuilder small_checkpoint() {
  SafetensorsBuilder b;
  b.metadata["format"] = "pt";
  b.add_f32("model.embed_tokens.weight", {2, 3}, {1, 2, 3, 4, 5, 6});
  b.add_f16("model.norm.weight", {2}, {0x3c00, 0xc000});
  b.add_bf16("lm_head.weight", {1, 2}, {0x3f80, 0x4000});
  b.add("scalar", "I64", {}, SafetensorsBuilder::raw(std::vector<int64_t>{7}));
  b.add("empty", "F32", {0, 4}, {});
  return b;
}

// A PEFT adapter's weights: the key layout the loader expects.
SafetensorsBuilder lora_weights() {
  SafetensorsBuilder b;
  b.add_f32("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", {1, 2}, {0.5f, -0.5f});
  b.add_f32("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", {2, 1}, {1, 2});
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <seed folder>\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  fs::create_directories(root / "gguf");
  fs::create_directories(root / "safetensors");
  small_model().write((root / "gguf" / "small_model.gguf").string());
  all_types().write((root / "gguf" / "all_types.gguf").string());
  small_checkpoint().write((root / "safetensors" / "small_checkpoint.safetensors").string());
  lora_weights().write((root / "safetensors" / "lora_weights.safetensors").string());
  return 0;
}
