// common/cpu_features.cpp: cpuid/xgetbv feature detection and the vector path choice.
#include "lorakv/common/cpu_features.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "lorakv/common/errors.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define LORAKV_X86 1
#endif

namespace lorakv::cpu {
namespace {

bool bit(uint32_t word, int index) { return (word >> index) & 1u; }

std::string trimmed(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t") - begin + 1);
}

// /proc/cpuinfo's first "model name" line (Linux; absent elsewhere).
std::string proc_cpuinfo_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) return trimmed(line.substr(colon + 1));
  }
  return "";
}

#ifdef LORAKV_X86
// The 48-byte brand string of leaves 0x80000002..4, or "" when the CPU has none.
std::string cpuid_brand_string() {
  uint32_t regs[4];
  if (!__get_cpuid(0x80000000u, &regs[0], &regs[1], &regs[2], &regs[3]) || regs[0] < 0x80000004u) return "";
  char brand[49] = {};
  for (uint32_t leaf = 0; leaf < 3; ++leaf) {
    __get_cpuid(0x80000002u + leaf, &regs[0], &regs[1], &regs[2], &regs[3]);
    std::memcpy(brand + 16 * leaf, regs, sizeof regs);
  }
  return trimmed(brand);
}

// XCR0: which register state the OS saves on context switch. Only readable when
// CPUID.1:ECX.OSXSAVE says the OS enabled xgetbv.
uint64_t read_xcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

void read_cpuid(CpuFeatures& f) {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return;
  f.fma = bit(ecx, 12);
  f.f16c = bit(ecx, 29);
  const bool osxsave = bit(ecx, 27);
  const bool avx = bit(ecx, 28);
  if (osxsave) {
    const uint64_t xcr0 = read_xcr0();
    f.os_saves_avx = avx && (xcr0 & 0x6) == 0x6;
    f.os_saves_avx512 = f.os_saves_avx && (xcr0 & 0xe0) == 0xe0;
    f.os_saves_amx = (xcr0 & 0x60000) == 0x60000;
  }
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return;
  const uint32_t max_subleaf = eax;
  f.avx2 = bit(ebx, 5);
  f.avx512f = bit(ebx, 16);
  f.avx512bw = bit(ebx, 30);
  f.avx512vl = bit(ebx, 31);
  f.avx512_vnni = bit(ecx, 11);
  f.amx_bf16 = bit(edx, 22);
  f.amx_tile = bit(edx, 24);
  f.amx_int8 = bit(edx, 25);
  if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) {
    f.avx_vnni = bit(eax, 4);
    f.avx512_bf16 = bit(eax, 5);
  }
}
#endif

CpuFeatures detect() {
  CpuFeatures f;
#ifdef LORAKV_X86
  read_cpuid(f);
  f.model_name = cpuid_brand_string();
#endif
  if (f.model_name.empty()) f.model_name = proc_cpuinfo_model_name();
  if (f.model_name.empty()) f.model_name = "unknown";
  return f;
}

std::string join(const std::vector<std::string>& words, const char* separator) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : separator) + w;
  return out;
}

std::string path_list(const std::vector<VectorPath>& paths) {
  std::vector<std::string> names;
  for (VectorPath p : paths) names.emplace_back(vector_path_name(p));
  return join(names, ", ");
}

// What `features` lacks for `path`, by feature name.
std::vector<std::string> missing_for(const CpuFeatures& f, VectorPath path) {
  std::vector<std::string> missing;
  auto need = [&](bool have, const char* name) {
    if (!have) missing.emplace_back(name);
  };
  if (path >= VectorPath::kAvx2) {
    need(f.avx2, "avx2");
    need(f.fma, "fma");
    need(f.f16c, "f16c");
    need(f.os_saves_avx, "OS-enabled AVX state");
  }
  if (path >= VectorPath::kAvx512) {
    need(f.avx512f, "avx512f");
    need(f.avx512bw, "avx512bw");
    need(f.avx512vl, "avx512vl");
    need(f.os_saves_avx512, "OS-enabled AVX-512 state");
  }
  return missing;
}

}  // namespace

const CpuFeatures& detected_cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

const std::string& cpu_model_name() { return detected_cpu_features().model_name; }

std::string describe_features(const CpuFeatures& f) {
  std::vector<std::string> present, os;
  const std::pair<bool, const char*> isa[] = {
      {f.avx2, "avx2"},         {f.fma, "fma"},           {f.f16c, "f16c"},         {f.avx512f, "avx512f"},          {f.avx512bw, "avx512bw"},
      {f.avx512vl, "avx512vl"}, {f.avx512_vnni, "avx512_vnni"}, {f.avx_vnni, "avx_vnni"}, {f.avx512_bf16, "avx512_bf16"}, {f.amx_tile, "amx_tile"},
      {f.amx_bf16, "amx_bf16"}, {f.amx_int8, "amx_int8"}};
  for (const auto& [have, name] : isa) {
    if (have) present.emplace_back(name);
  }
  for (const auto& [have, name] : {std::pair<bool, const char*>{f.os_saves_avx, "avx"},
                                   {f.os_saves_avx512, "avx512"}, {f.os_saves_amx, "amx"}}) {
    if (have) os.emplace_back(name);
  }
  return (present.empty() ? "none" : join(present, " ")) + "; os state: " + (os.empty() ? "none" : join(os, " "));
}

bool supports(const CpuFeatures& features, VectorPath path) { return missing_for(features, path).empty(); }

bool has_vnni(const CpuFeatures& features, VectorPath path) {
  if (!supports(features, path)) return false;
  switch (path) {
    case VectorPath::kAvx512: return features.avx512_vnni;
    case VectorPath::kAvx2: return features.avx_vnni;
    case VectorPath::kScalar: break;
  }
  return false;
}

std::vector<VectorPath> supported_vector_paths(const CpuFeatures& features) {
  std::vector<VectorPath> paths;
  for (VectorPath p : {VectorPath::kScalar, VectorPath::kAvx2, VectorPath::kAvx512}) {
    if (supports(features, p)) paths.push_back(p);
  }
  return paths;
}

VectorPath best_vector_path(const CpuFeatures& features) { return supported_vector_paths(features).back(); }

const char* vector_path_name(VectorPath path) {
  switch (path) {
    case VectorPath::kScalar: return "scalar";
    case VectorPath::kAvx2: return "avx2";
    case VectorPath::kAvx512: return "avx512";
  }
  return "?";
}

std::optional<VectorPath> parse_vector_path(const std::string& name) {
  for (VectorPath p : {VectorPath::kScalar, VectorPath::kAvx2, VectorPath::kAvx512}) {
    if (name == vector_path_name(p)) return p;
  }
  return std::nullopt;
}

VectorPath choose_vector_path(const CpuFeatures& features, const std::optional<std::string>& requested) {
  const VectorPath best = best_vector_path(features);
  if (!requested || requested->empty()) return best;
  const std::string supported = path_list(supported_vector_paths(features));
  const std::optional<VectorPath> path = parse_vector_path(*requested);
  if (!path) {
    throw ConfigError("unknown CPU vector path", {"", kCpuPathVariable, "scalar, avx2 or avx512", "'" + *requested + "'",
                                                  "this CPU supports " + supported + "; unset " +
                                                      kCpuPathVariable + " to use the best (" +
                                                      vector_path_name(best) + ")"});
  }
  if (*path > best) {
    throw ConfigError("this CPU cannot run the requested vector path",
                      {"", kCpuPathVariable, "one of " + supported + " (" + features.model_name + ")",
                       "'" + *requested + "', which needs " + join(missing_for(features, *path), ", "),
                       "set it to a supported path or unset it to use " + std::string(vector_path_name(best))});
  }
  return *path;
}

VectorPath vector_path_from_environment() {
  const char* value = std::getenv(kCpuPathVariable);
  return choose_vector_path(detected_cpu_features(),
                            value ? std::optional<std::string>(value) : std::nullopt);
}

VectorPath selected_vector_path() {
  static const VectorPath path = vector_path_from_environment();  // a throw leaves it unset: retried
  return path;
}

}  // namespace lorakv::cpu
