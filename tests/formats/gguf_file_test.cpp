// tests/formats/gguf_file_test.cpp: the GGUF reader on hand-made files (every metadata
// type, alignment, each corruption class) and on the real SmolLM2 file's header.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "tests/support/fuzz_corpus.h"
#include "tests/support/test_settings.h"
#include "lorakv/common/errors.h"
#include "lorakv/formats/gguf_file.h"
#include "tests/support/gguf_builder.h"

namespace lorakv::formats {
namespace {

using lorakv::testing::GgufBuilder;
using lorakv::testing::temp_path;

GgufBuilder small_valid_file() {
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

// Expects opening `path` to throw ModelLoadError whose message contains `needle`.
void expect_load_error(const std::string& path, const std::string& needle) {
  try {
    GgufFile::open(path);
    FAIL() << "expected a ModelLoadError containing '" << needle << "'";
  } catch (const ModelLoadError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(needle), std::string::npos) << what;
    EXPECT_NE(what.find(path), std::string::npos) << "message should name the file: " << what;
  }
}

TEST(GgufFile, ReadsEveryPartOfAHandMadeFile) {
  const std::string path = temp_path("valid.gguf");
  small_valid_file().write(path);
  auto f = GgufFile::open(path);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_int("llama.block_count"), 2);
  EXPECT_FLOAT_EQ(static_cast<float>(f->get_float("llama.rope.freq_base")), 10000.0f);
  EXPECT_FALSE(f->get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "b", "ab"}));
  EXPECT_EQ(f->get_int_array("tokenizer.ggml.token_type"), (std::vector<int64_t>{1, 1, 3}));
  ASSERT_EQ(f->tensors().size(), 2u);
  const GgufTensorInfo& w = f->tensor("w");
  EXPECT_EQ(w.dims, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(w.torch_shape(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(w.num_bytes, 32);
  float out[8];
  dequantize_to_f32(w.type(), w.data, out, 8);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[7], 8.0f);
  const GgufTensorInfo& v = f->tensor("v");
  EXPECT_EQ(v.offset % 32, 0u);
  dequantize_to_f32(v.type(), v.data, out, 3);
  EXPECT_EQ(out[2], 11.0f);
}

// Little-endian bytes of a value, for add_raw.
template <typename T>
std::vector<uint8_t> le_bytes(T v) {
  std::vector<uint8_t> out(sizeof(T));
  std::memcpy(out.data(), &v, sizeof(T));
  return out;
}

TEST(GgufFile, ReadsEveryScalarTypeAndNestedArrays) {
  GgufBuilder b;
  b.add_raw("u8", 0, le_bytes<uint8_t>(250));
  b.add_raw("i8", 1, le_bytes<int8_t>(-100));
  b.add_raw("u16", 2, le_bytes<uint16_t>(65000));
  b.add_raw("i16", 3, le_bytes<int16_t>(-30000));
  b.add_raw("i32", 5, le_bytes<int32_t>(-2000000000));
  b.add_raw("u64", 10, le_bytes<uint64_t>(uint64_t{1} << 40));
  b.add_raw("i64", 11, le_bytes<int64_t>(-(int64_t{1} << 50)));
  b.add_raw("f64", 12, le_bytes<double>(0.1));
  // array<array<u16>> = [[1, 2], [3]]
  std::vector<uint8_t> nested = le_bytes<uint32_t>(9);
  for (auto part : {le_bytes<uint64_t>(2), le_bytes<uint32_t>(2), le_bytes<uint64_t>(2), le_bytes<uint16_t>(1),
                    le_bytes<uint16_t>(2), le_bytes<uint32_t>(2), le_bytes<uint64_t>(1), le_bytes<uint16_t>(3)}) {
    nested.insert(nested.end(), part.begin(), part.end());
  }
  b.add_raw("nested", 9, nested);
  const std::string path = temp_path("alltypes.gguf");
  b.write(path);
  auto f = GgufFile::open(path);
  EXPECT_EQ(f->get_int("u8"), 250);
  EXPECT_EQ(f->get_int("i8"), -100);
  EXPECT_EQ(f->get_int("u16"), 65000);
  EXPECT_EQ(f->get_int("i16"), -30000);
  EXPECT_EQ(f->get_int("i32"), -2000000000);
  EXPECT_EQ(f->get_int("u64"), int64_t{1} << 40);
  EXPECT_EQ(f->get_int("i64"), -(int64_t{1} << 50));
  EXPECT_EQ(f->get_float("f64"), 0.1);
  EXPECT_EQ(f->get_float("u8"), 250.0);  // numbers widen to float on request
  const GgufValue* n = f->find("nested");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->describe(), "array<array>[2]");
  ASSERT_EQ(n->array.size(), 2u);
  EXPECT_EQ(n->array[0].array.size(), 2u);
  EXPECT_EQ(n->array[1].array[0].u, 3u);
  EXPECT_THROW(f->get_int_array("nested"), ModelLoadError);  // elements are arrays, not integers
}

TEST(GgufFile, HonoursACustomAlignment) {
  GgufBuilder b = small_valid_file();
  b.alignment = 64;
  b.add_u32("general.alignment", 64);
  const std::string path = temp_path("align64.gguf");
  b.write(path);
  auto f = GgufFile::open(path);
  EXPECT_EQ(f->alignment(), 64u);
  float out[3];
  dequantize_to_f32(GgmlType::kF32, f->tensor("v").data, out, 3);
  EXPECT_EQ(out[0], 9.0f);
}

TEST(GgufFile, TypedGettersReportKeyAndTypes) {
  const std::string path = temp_path("getters.gguf");
  small_valid_file().write(path);
  auto f = GgufFile::open(path);
  try {
    f->get_int("general.architecture");
    FAIL();
  } catch (const ModelLoadError& e) {
    EXPECT_NE(std::string(e.what()).find("general.architecture"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("found string"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f->get_string("no.such.key"), ModelLoadError);
  EXPECT_FALSE(f->find_int("no.such.key").has_value());
  try {
    f->tensor("missing.weight");
    FAIL();
  } catch (const ModelLoadError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.weight"), std::string::npos);
  }
}

TEST(GgufFile, RejectsWrongMagic) {
  GgufBuilder b = small_valid_file();
  b.magic = 0x04034b50;  // a zip file's magic
  const std::string path = temp_path("magic.gguf");
  b.write(path);
  expect_load_error(path, "bad magic");
  // Exactly the four bytes, unprintable ones as '?' (the text once ran on past them).
  expect_load_error(path, "found 'PK?" "?' (hint");  // split: "??'" is a trigraph
}

TEST(GgufFile, RejectsUnsupportedVersion) {
  GgufBuilder b = small_valid_file();
  b.version = 7;
  const std::string path = temp_path("version.gguf");
  b.write(path);
  expect_load_error(path, "unsupported GGUF version");
}

TEST(GgufFile, RejectsTruncationAnywhere) {
  const GgufBuilder b = small_valid_file();
  const size_t full = b.bytes().size();
  // Cut the file at many points: inside the header, the metadata, the tensor infos and
  // the data. Each must be a clean ModelLoadError, never a crash.
  for (size_t cut : {size_t{0}, size_t{3}, size_t{10}, size_t{30}, size_t{60}, size_t{120}, size_t{200},
                     full / 2, full - 40, full - 21}) {
    const std::string path = temp_path("trunc.gguf");
    b.write(path, cut);
    EXPECT_THROW(GgufFile::open(path), ModelLoadError) << "cut at " << cut << " of " << full;
  }
  // The last tensor holds 12 bytes followed by 20 bytes of alignment padding; dropping
  // the padding is harmless, dropping a byte of data is not.
  const std::string path = temp_path("trunc-data.gguf");
  b.write(path, full - 20);
  EXPECT_NO_THROW(GgufFile::open(path));
  b.write(path, full - 24);
  expect_load_error(path, "out of bounds");
}

TEST(GgufFile, RejectsUnknownTensorType) {
  GgufBuilder b = small_valid_file();
  b.tensors[0].type = 12;  // Q4_K: real, but not implemented
  const std::string path = temp_path("qtype.gguf");
  b.write(path);
  expect_load_error(path, "unsupported tensor type");
  expect_load_error(path, "unknown(12)");
}

TEST(GgufFile, RejectsDataOutOfBounds) {
  GgufBuilder b = small_valid_file();
  b.offset_override = {-1, 1 << 20};
  const std::string path = temp_path("oob.gguf");
  b.write(path);
  expect_load_error(path, "tensor data out of bounds");
}

TEST(GgufFile, RejectsMisalignedOffset) {
  GgufBuilder b = small_valid_file();
  b.offset_override = {-1, 4};
  const std::string path = temp_path("misaligned.gguf");
  b.write(path);
  expect_load_error(path, "misaligned");
}

TEST(GgufFile, RejectsUnknownValueTypeAndBadBool) {
  GgufBuilder b = small_valid_file();
  b.add_raw("weird.key", 13, {0, 0, 0, 0});
  std::string path = temp_path("vtype.gguf");
  b.write(path);
  expect_load_error(path, "unknown metadata value type");

  GgufBuilder c = small_valid_file();
  c.add_raw("bad.bool", 7, {2});
  path = temp_path("bool.gguf");
  c.write(path);
  expect_load_error(path, "invalid bool");
}

TEST(GgufFile, RejectsHugeCountsWithoutAllocating) {
  GgufBuilder b;
  // An array claiming 2^60 elements in a tiny file must fail fast, not allocate.
  std::vector<uint8_t> payload = {8, 0, 0, 0};
  for (int i = 0; i < 7; ++i) payload.push_back(0);
  payload.push_back(0x10);
  b.add_raw("huge.array", 9, payload);
  const std::string path = temp_path("huge.gguf");
  b.write(path);
  expect_load_error(path, "array length out of bounds");
}

std::vector<uint8_t> concat(std::initializer_list<std::vector<uint8_t>> parts) {
  std::vector<uint8_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Expects opening `path` to throw ModelLoadError naming the file, `key` and a byte offset,
// with `needle` in its message. Any other exception (std::bad_alloc...) fails the test.
void expect_count_error(const std::string& path, const std::string& key, const std::string& needle) {
  try {
    GgufFile::open(path);
    ADD_FAILURE() << "expected a ModelLoadError containing '" << needle << "'";
  } catch (const ModelLoadError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.context().file, path);
    EXPECT_EQ(e.context().key, key);
    EXPECT_NE(what.find(needle), std::string::npos) << what;
    EXPECT_NE(what.find("at byte "), std::string::npos) << "message should give the offset: " << what;
  }
}

// A 1 GiB file, sparse (its hole reads as zeros and takes no disk), whose only array
// claims almost as many string elements as the file has bytes. Each string needs at
// least its 8-byte length, so the count cannot be right; reserving it (about 100 bytes
// per element in memory) once asked for ~100 GB and died with std::bad_alloc.
TEST(GgufFile, ArrayCountBeyondWhatItsElementsCanFitIsATypedError) {
  constexpr uint64_t kFileBytes = uint64_t{1} << 30;
  GgufBuilder b;
  b.add_raw("tokenizer.ggml.tokens", 9, concat({le_bytes<uint32_t>(8), le_bytes<uint64_t>(kFileBytes - 128)}));
  const std::string path = temp_path("sparse-array.gguf");
  b.write(path);
  std::filesystem::resize_file(path, kFileBytes);
  expect_count_error(path, "tokenizer.ggml.tokens", "array length out of bounds");
  expect_count_error(path, "tokenizer.ggml.tokens", "string elements (");
  std::filesystem::remove(path);
}

// The same for the tensor infos: a count the bytes could hold one byte each, but not one
// 32-byte info each, once reserved ~120 GB.
TEST(GgufFile, TensorCountBeyondWhatTheInfosCanFitIsATypedError) {
  constexpr uint64_t kFileBytes = uint64_t{1} << 30;
  std::vector<uint8_t> header = concat({le_bytes<uint32_t>(0x46554747), le_bytes<uint32_t>(3),
                                        le_bytes<int64_t>(static_cast<int64_t>(kFileBytes - 64)), le_bytes<int64_t>(0)});
  const std::string path = temp_path("sparse-tensors.gguf");
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(header.data()), static_cast<std::streamsize>(header.size()));
  }
  std::filesystem::resize_file(path, kFileBytes);
  expect_count_error(path, "", "tensor count out of bounds");
  std::filesystem::remove(path);
}

// For every element type, the count check is tight: exactly as many smallest elements as
// the bytes hold parse; one more is refused before anything is read or reserved.
TEST(GgufFile, ArrayCountIsBoundedByTheSmallestEncodingOfItsElementType) {
  struct Case {
    uint32_t type;
    std::vector<uint8_t> element;  // the smallest valid encoding of one element
  };
  const std::vector<uint8_t> empty_u8_array = concat({le_bytes<uint32_t>(0), le_bytes<uint64_t>(0)});
  const Case cases[] = {
      {0, {0}}, {1, {0}}, {7, {0}}, {2, std::vector<uint8_t>(2)}, {3, std::vector<uint8_t>(2)},
      {4, std::vector<uint8_t>(4)}, {5, std::vector<uint8_t>(4)}, {6, std::vector<uint8_t>(4)},
      {10, std::vector<uint8_t>(8)}, {11, std::vector<uint8_t>(8)}, {12, std::vector<uint8_t>(8)},
      {8, le_bytes<uint64_t>(0)},  // an empty string
      {9, empty_u8_array},         // an empty array<uint8>
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("element type " + std::to_string(c.type));
    constexpr uint64_t kElements = 3;
    for (uint64_t claimed : {kElements, kElements + 1}) {
      std::vector<uint8_t> payload = concat({le_bytes<uint32_t>(c.type), le_bytes<uint64_t>(claimed)});
      for (uint64_t k = 0; k < kElements; ++k) payload.insert(payload.end(), c.element.begin(), c.element.end());
      GgufBuilder b;
      b.alignment = 1;  // no padding: the array's elements end the file
      b.add_raw("the.array", 9, payload);
      const std::string path = temp_path("tight.gguf");
      b.write(path);
      if (claimed == kElements) {
        auto f = GgufFile::open(path);
        EXPECT_EQ(f->find("the.array")->array.size(), kElements);
      } else {
        expect_count_error(path, "the.array", "array length");
      }
    }
  }
}

TEST(GgufFile, MetadataCountBeyondWhatThePairsCanFitIsATypedError) {
  GgufBuilder b;
  b.alignment = 1;
  b.add_u32("only.key", 1);  // 8 + 8 + 4 + 4 = 24 bytes: room for one pair of 13 or more
  std::vector<uint8_t> bytes = b.bytes();
  const int64_t claimed = 2;
  std::memcpy(bytes.data() + 16, &claimed, sizeof claimed);  // the metadata count
  const std::string path = temp_path("kv-count.gguf");
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  expect_count_error(path, "", "metadata count out of bounds");
}

// 2^62 float32 elements take 2^64 bytes: the size must be refused, not wrap to zero and
// pass the bounds check.
TEST(GgufFile, RejectsTensorByteSizeOverflow) {
  GgufBuilder b;
  b.tensors.push_back(GgufBuilder::Tensor{"huge", {int64_t{1} << 62}, 0, {}});
  const std::string path = temp_path("overflow.gguf");
  b.write(path);
  expect_load_error(path, "tensor byte size overflows");
}

TEST(GgufFile, ParsesBytesInMemoryAsAFile) {
  const std::vector<uint8_t> bytes = small_valid_file().bytes();
  auto f = GgufFile::parse_bytes(bytes, "in-memory.gguf");
  EXPECT_EQ(f->path(), "in-memory.gguf");
  EXPECT_EQ(f->file_size(), bytes.size());
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "b", "ab"}));
  float out[3];
  dequantize_to_f32(GgmlType::kF32, f->tensor("v").data, out, 3);
  EXPECT_EQ(out[1], 10.0f);
  try {
    GgufFile::parse_bytes(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 30), "cut.gguf");
    FAIL() << "expected a ModelLoadError";
  } catch (const ModelLoadError& e) {
    EXPECT_EQ(e.context().file, "cut.gguf");
  }
}

using lorakv::testing::fuzz_corpus;

TEST(GgufFile, ReplaysTheFuzzCorpusWithTypedErrorsOnly) {
  const auto files = fuzz_corpus("gguf");
  ASSERT_FALSE(files.empty()) << "no fuzz/corpus/gguf inputs found";
  for (const auto& f : files) {
    SCOPED_TRACE(f.filename().string());
    try {
      GgufFile::open(f.string());
    } catch (const lorakv::Error&) {
      // a typed refusal is an accepted outcome
    }
  }
}

TEST(GgufFile, MissingFileNamesThePath) {
  expect_load_error("/nonexistent/dir/model.gguf", "cannot open file");
}

// The real model's header, as documented in shared/reference/gguf-and-smollm2.md 3.9.
TEST(GgufFile, RealSmolLM2Header) {
  const std::string model = lorakv::testing::test_setting("LORAKV_MODEL");
  ASSERT_FALSE(model.empty()) << "set LORAKV_MODEL to the SmolLM2 GGUF (tools/fetch_model.sh)";
  auto f = GgufFile::open(model);
  EXPECT_EQ(f->file_size(), 98362432u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_int("general.file_type"), 3);
  EXPECT_EQ(f->get_float("llama.rope.freq_base"), 100000.0);
  EXPECT_EQ(f->get_int("llama.context_length"), 8192);
  EXPECT_EQ(f->get_int("llama.block_count"), 30);
  EXPECT_EQ(f->get_int("llama.attention.head_count"), 9);
  EXPECT_EQ(f->get_int("llama.attention.head_count_kv"), 3);
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f->get_string("tokenizer.ggml.pre"), "smollm");
  EXPECT_EQ(f->alignment(), 32u);
  int f32 = 0, q8 = 0, q41 = 0;
  for (const auto& t : f->tensors()) {
    f32 += t.type() == GgmlType::kF32;
    q8 += t.type() == GgmlType::kQ8_0;
    q41 += t.type() == GgmlType::kQ4_1;
  }
  EXPECT_EQ(f->tensors().size(), 272u);
  EXPECT_EQ(f32, 61);
  EXPECT_EQ(q8, 1);
  EXPECT_EQ(q41, 210);
  EXPECT_EQ(f->tensor("token_embd.weight").type(), GgmlType::kQ8_0);
  EXPECT_EQ(f->tensor("token_embd.weight").dims, (std::vector<int64_t>{576, 49152}));
  EXPECT_EQ(f->tensor("blk.0.attn_k.weight").dims, (std::vector<int64_t>{576, 192}));
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);  // tied embeddings
}

}  // namespace
}  // namespace lorakv::formats
