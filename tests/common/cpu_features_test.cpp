// tests/common/cpu_features_test.cpp: the vector path choice on synthetic feature sets
// (the LORAKV_CPU_PATH override, its refusals, never above what the CPU and OS support),
// the variable read from the environment, and detection cross-checked with the kernel's
// own reading of this machine (/proc/cpuinfo).
#include "lorakv/common/cpu_features.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>

#include "lorakv/common/errors.h"

namespace lorakv::cpu {
namespace {

CpuFeatures avx2_machine() {
  CpuFeatures f;
  f.model_name = "test avx2 cpu";
  f.avx2 = f.fma = f.f16c = f.os_saves_avx = true;
  return f;
}

CpuFeatures avx512_machine() {
  CpuFeatures f = avx2_machine();
  f.model_name = "test avx512 cpu";
  f.avx512f = f.avx512bw = f.avx512vl = f.os_saves_avx512 = true;
  return f;
}

// The ConfigError's message, or "" when `fn` does not throw one.
template <typename Fn>
std::string config_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(CpuPath, NamesRoundTrip) {
  for (VectorPath p : {VectorPath::kScalar, VectorPath::kAvx2, VectorPath::kAvx512}) {
    EXPECT_EQ(parse_vector_path(vector_path_name(p)), p);
  }
  EXPECT_EQ(parse_vector_path("AVX2"), std::nullopt);  // exact names only
  EXPECT_STREQ(vector_path_name(VectorPath::kAvx512), "avx512");
}

TEST(CpuPath, BestPathNeedsInstructionsAndOsState) {
  EXPECT_EQ(best_vector_path(CpuFeatures{}), VectorPath::kScalar);
  EXPECT_EQ(best_vector_path(avx2_machine()), VectorPath::kAvx2);
  EXPECT_EQ(best_vector_path(avx512_machine()), VectorPath::kAvx512);
  CpuFeatures no_fma = avx2_machine();
  no_fma.fma = false;
  EXPECT_EQ(best_vector_path(no_fma), VectorPath::kScalar);
  CpuFeatures no_f16c = avx2_machine();  // the quantised GEMV converts half scales with F16C
  no_f16c.f16c = false;
  EXPECT_EQ(best_vector_path(no_f16c), VectorPath::kScalar);
  CpuFeatures no_ymm_state = avx512_machine();
  no_ymm_state.os_saves_avx = false;
  EXPECT_EQ(best_vector_path(no_ymm_state), VectorPath::kScalar);
  // AVX-512 instructions the OS does not save ZMM state for (a common VM setting).
  CpuFeatures no_zmm_state = avx512_machine();
  no_zmm_state.os_saves_avx512 = false;
  EXPECT_EQ(best_vector_path(no_zmm_state), VectorPath::kAvx2);
  CpuFeatures no_bw = avx512_machine();
  no_bw.avx512bw = false;
  EXPECT_EQ(best_vector_path(no_bw), VectorPath::kAvx2);
  CpuFeatures no_vl = avx512_machine();
  no_vl.avx512vl = false;
  EXPECT_EQ(best_vector_path(no_vl), VectorPath::kAvx2);
  // AMX is reported, never chosen yet.
  CpuFeatures amx = avx512_machine();
  amx.amx_tile = amx.amx_bf16 = amx.amx_int8 = amx.os_saves_amx = true;
  EXPECT_EQ(best_vector_path(amx), VectorPath::kAvx512);
}

TEST(CpuPath, OverrideForcesALowerPath) {
  const CpuFeatures f = avx512_machine();
  EXPECT_EQ(choose_vector_path(f, std::nullopt), VectorPath::kAvx512);
  EXPECT_EQ(choose_vector_path(f, std::string()), VectorPath::kAvx512);  // set but empty: as unset
  EXPECT_EQ(choose_vector_path(f, std::string("avx512")), VectorPath::kAvx512);
  EXPECT_EQ(choose_vector_path(f, std::string("avx2")), VectorPath::kAvx2);
  EXPECT_EQ(choose_vector_path(f, std::string("scalar")), VectorPath::kScalar);
}

TEST(CpuPath, OverrideAboveTheCpuIsRefusedNamingVariableValueAndSupport) {
  const std::string message = config_error_of([] { choose_vector_path(avx2_machine(), std::string("avx512")); });
  ASSERT_FALSE(message.empty()) << "avx512 on an AVX2-only CPU was accepted";
  EXPECT_NE(message.find("LORAKV_CPU_PATH"), std::string::npos) << message;
  EXPECT_NE(message.find("'avx512'"), std::string::npos) << message;
  EXPECT_NE(message.find("scalar, avx2"), std::string::npos) << message;
  EXPECT_EQ(message.find("scalar, avx2, avx512"), std::string::npos) << message;
  EXPECT_NE(message.find("avx512f"), std::string::npos) << message;  // what is missing
  EXPECT_NE(message.find("test avx2 cpu"), std::string::npos) << message;

  const std::string scalar_only = config_error_of([] { choose_vector_path(CpuFeatures{}, std::string("avx2")); });
  EXPECT_NE(scalar_only.find("one of scalar ("), std::string::npos) << scalar_only;
}

TEST(CpuPath, UnknownValueIsRefusedNamingVariableValueAndSupport) {
  for (const char* bad : {"sse4", "AVX2", "avx-512", "auto", " avx2"}) {
    const std::string message = config_error_of([&] { choose_vector_path(avx512_machine(), std::string(bad)); });
    ASSERT_FALSE(message.empty()) << "'" << bad << "' was accepted";
    EXPECT_NE(message.find("LORAKV_CPU_PATH"), std::string::npos) << message;
    EXPECT_NE(message.find("'" + std::string(bad) + "'"), std::string::npos) << message;
    EXPECT_NE(message.find("scalar, avx2, avx512"), std::string::npos) << message;
  }
}

// Every combination of the bits the paths depend on, every request: the result is a path
// the features support and never above the best; a request above the best is refused.
TEST(CpuPath, ForcedPathNeverExceedsTheDetectedOne) {
  constexpr int kBits = 8;
  int refused = 0, accepted = 0;
  for (int mask = 0; mask < (1 << kBits); ++mask) {
    CpuFeatures f;
    bool* bits[kBits] = {&f.avx2, &f.fma, &f.f16c, &f.os_saves_avx, &f.avx512f, &f.avx512bw, &f.avx512vl, &f.os_saves_avx512};
    for (int b = 0; b < kBits; ++b) *bits[b] = (mask >> b) & 1;
    const VectorPath best = best_vector_path(f);
    EXPECT_TRUE(supports(f, best));
    for (VectorPath p : {VectorPath::kScalar, VectorPath::kAvx2, VectorPath::kAvx512}) {
      EXPECT_EQ(supports(f, p), p <= best) << "mask " << mask << " path " << vector_path_name(p);
      bool threw = false;
      VectorPath chosen = VectorPath::kScalar;
      try {
        chosen = choose_vector_path(f, std::string(vector_path_name(p)));
      } catch (const ConfigError&) {
        threw = true;
      }
      EXPECT_EQ(threw, p > best) << "mask " << mask << " path " << vector_path_name(p);
      if (!threw) {
        EXPECT_EQ(chosen, p);
        EXPECT_LE(chosen, best);
        EXPECT_TRUE(supports(f, chosen));
      }
      (threw ? refused : accepted) += 1;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(accepted, 0);
}

// Sets LORAKV_CPU_PATH for one scope and restores what was there.
class ScopedCpuPath {
 public:
  explicit ScopedCpuPath(const char* value) {
    if (const char* old = std::getenv(kCpuPathVariable)) old_ = old;
    if (value) {
      setenv(kCpuPathVariable, value, 1);
    } else {
      unsetenv(kCpuPathVariable);
    }
  }
  ~ScopedCpuPath() {
    if (old_) {
      setenv(kCpuPathVariable, old_->c_str(), 1);
    } else {
      unsetenv(kCpuPathVariable);
    }
  }

 private:
  std::optional<std::string> old_;
};

TEST(CpuPath, EnvironmentVariableIsReadForThisMachine) {
  const VectorPath best = best_vector_path(detected_cpu_features());
  {
    ScopedCpuPath unset(nullptr);
    EXPECT_EQ(vector_path_from_environment(), best);
  }
  {
    ScopedCpuPath scalar("scalar");
    EXPECT_EQ(vector_path_from_environment(), VectorPath::kScalar);
  }
  {
    ScopedCpuPath bogus("bogus");
    const std::string message = config_error_of([] { vector_path_from_environment(); });
    EXPECT_NE(message.find("LORAKV_CPU_PATH"), std::string::npos) << message;
    EXPECT_NE(message.find("'bogus'"), std::string::npos) << message;
  }
  EXPECT_LE(selected_vector_path(), best);
}

TEST(CpuFeatures, DescriptionListsPresentFeaturesAndOsState) {
  CpuFeatures f = avx2_machine();
  f.amx_tile = true;
  EXPECT_EQ(describe_features(f), "avx2 fma f16c amx_tile; os state: avx");
  EXPECT_EQ(describe_features(CpuFeatures{}), "none; os state: none");
}

// The fused dot product goes with a path only where the CPU has it at that path's width:
// AVX-512 VNNI alone gives no AVX-VNNI to the avx2 path, and neither reaches a path the
// CPU (or its OS state) cannot run.
TEST(CpuFeatures, VnniIsAPropertyOfEachPath) {
  CpuFeatures f = avx512_machine();
  EXPECT_FALSE(has_vnni(f, VectorPath::kAvx512));
  f.avx512_vnni = true;
  EXPECT_TRUE(has_vnni(f, VectorPath::kAvx512));
  EXPECT_FALSE(has_vnni(f, VectorPath::kAvx2));
  EXPECT_FALSE(has_vnni(f, VectorPath::kScalar));
  f.avx_vnni = true;
  EXPECT_TRUE(has_vnni(f, VectorPath::kAvx2));
  EXPECT_FALSE(has_vnni(f, VectorPath::kScalar));
  f.os_saves_avx512 = false;
  EXPECT_FALSE(has_vnni(f, VectorPath::kAvx512));
  EXPECT_TRUE(has_vnni(f, VectorPath::kAvx2));
  CpuFeatures client = avx2_machine();  // AVX-VNNI without AVX-512, as on Alder Lake
  client.avx_vnni = true;
  EXPECT_TRUE(has_vnni(client, VectorPath::kAvx2));
  EXPECT_FALSE(has_vnni(client, VectorPath::kAvx512));
  EXPECT_EQ(describe_features(client), "avx2 fma f16c avx_vnni; os state: avx");
}

// The first line of /proc/cpuinfo starting with `key`, after its colon.
std::string cpuinfo_value(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) != 0) continue;
    std::string value = line.substr(line.find(':') + 1);
    const size_t begin = value.find_first_not_of(" \t");
    return begin == std::string::npos ? "" : value.substr(begin);
  }
  return "";
}

// cpuid and XCR0 as read here against the kernel's flags: Linux lists a feature only when
// the CPU has it and the kernel enabled its register state (it clears AVX-512 flags when
// ZMM state is off), so each flag must equal "instruction bit AND OS state" here. A wrong
// bit index or XCR0 mask shows up as a mismatch.
TEST(CpuFeatures, DetectionAgreesWithProcCpuinfo) {
#if !(defined(__x86_64__) || defined(__i386__))
  GTEST_SKIP() << "cpuid detection exists only on x86; this machine is not x86";
#endif
  const std::string flags_line = cpuinfo_value("flags");
  if (flags_line.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags line to compare with (not Linux?)";
  std::set<std::string> flags;
  std::istringstream words(flags_line);
  for (std::string w; words >> w;) flags.insert(w);
  const CpuFeatures& f = detected_cpu_features();
  auto expect_flag = [&](bool have, const char* name) { EXPECT_EQ(have, flags.count(name) > 0) << name; };
  expect_flag(f.os_saves_avx, "avx");
  expect_flag(f.avx2 && f.os_saves_avx, "avx2");
  expect_flag(f.fma && f.os_saves_avx, "fma");
  expect_flag(f.f16c && f.os_saves_avx, "f16c");
  expect_flag(f.avx512f && f.os_saves_avx512, "avx512f");
  expect_flag(f.avx512bw && f.os_saves_avx512, "avx512bw");
  expect_flag(f.avx512vl && f.os_saves_avx512, "avx512vl");
  expect_flag(f.avx512_vnni && f.os_saves_avx512, "avx512_vnni");
  expect_flag(f.avx512_bf16 && f.os_saves_avx512, "avx512_bf16");
  expect_flag(f.avx_vnni && f.os_saves_avx, "avx_vnni");
  expect_flag(f.amx_tile && f.os_saves_amx, "amx_tile");
  expect_flag(f.amx_bf16 && f.os_saves_amx, "amx_bf16");
  expect_flag(f.amx_int8 && f.os_saves_amx, "amx_int8");
  EXPECT_EQ(cpu_model_name(), cpuinfo_value("model name"));
  std::cout << "this machine: " << cpu_model_name() << "; " << describe_features(f) << "; best path "
            << vector_path_name(best_vector_path(f)) << "\n";
}

}  // namespace
}  // namespace lorakv::cpu
