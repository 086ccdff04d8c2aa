// common/cpu_features.h: what this CPU can run, read once, and the one run-time choice of
// vector code (scalar, AVX2, AVX-512) that every CPU kernel dispatches on. Torch-free.
//
// A path is usable only when the CPU has its instructions AND the OS saves their register
// state (XCR0, read with xgetbv): a kernel or hypervisor may leave AVX-512 off on a CPU
// that has it. LORAKV_CPU_PATH=scalar|avx2|avx512 forces a lower path (to compare paths or
// work around a bad one); asking for more than the CPU offers is a ConfigError.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace lorakv::cpu {

// Ordered: a higher path needs everything a lower one needs.
enum class VectorPath {
  kScalar,
  kAvx2,    // AVX2 + FMA + F16C, 256-bit
  kAvx512,  // AVX-512 F/BW/VL, 512-bit
  // kAvx512Amx goes here: AMX tiles (amx_tile + amx_bf16, XCR0 tile state) and, on Linux,
  // arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) granted before first use. AMX is
  // only reported (CpuFeatures) until a kernel uses it.
};

// The environment variable that forces a path.
inline constexpr const char* kCpuPathVariable = "LORAKV_CPU_PATH";

// Instruction-set bits from cpuid plus the OS-enabled register state from XCR0. All false
// on non-x86 machines.
struct CpuFeatures {
  std::string model_name;  // cpuid brand string, else /proc/cpuinfo's "model name", else "unknown"
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;  // half <-> float conversions (quantised weights' scales)
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512_vnni = false;
  bool avx_vnni = false;  // vpdpbusd on 256-bit registers, VEX-encoded (CPUs with AVX2 and no AVX-512)
  bool avx512_bf16 = false;
  bool amx_tile = false;
  bool amx_bf16 = false;
  bool amx_int8 = false;
  bool os_saves_avx = false;     // XCR0 bits 1-2: XMM and YMM state
  bool os_saves_avx512 = false;  // XCR0 bits 5-7: opmask and ZMM state
  bool os_saves_amx = false;     // XCR0 bits 17-18: tile config and data (Linux still needs a permission)
};

// This machine's features, read on first call and cached.
const CpuFeatures& detected_cpu_features();
const std::string& cpu_model_name();

// The present instruction-set features by name ("avx2 fma avx512f ..."), then the OS
// register state ("; os state: avx avx512 amx"); "none" when nothing is present.
std::string describe_features(const CpuFeatures& features);

// True when `features` can run `path` (instructions present and their state enabled).
bool supports(const CpuFeatures& features, VectorPath path);
// The highest path `features` can run.
VectorPath best_vector_path(const CpuFeatures& features);
// Every path `features` can run, lowest first.
std::vector<VectorPath> supported_vector_paths(const CpuFeatures& features);

// Whether `path` has the fused integer dot product (vpdpbusd: unsigned x signed bytes, four
// products summed into each int32 lane) at its width: AVX-512 VNNI on kAvx512, AVX-VNNI on
// kAvx2, never on kScalar. A property of a path, not a path of its own: LORAKV_CPU_PATH keeps
// its three values, and the integer GEMV (kernels/quant_matrix.h) takes the fused form on
// the chosen path wherever the CPU has it, the maddubs + madd pair elsewhere.
bool has_vnni(const CpuFeatures& features, VectorPath path);

// "scalar", "avx2", "avx512".
const char* vector_path_name(VectorPath path);
// The path of that name, or nullopt.
std::optional<VectorPath> parse_vector_path(const std::string& name);

// The path to run: the best one, or `requested` (LORAKV_CPU_PATH's value; unset or empty
// means "the best"). Throws ConfigError naming the variable, the value and what the CPU
// supports when the value is unknown or asks for a path `features` cannot run.
VectorPath choose_vector_path(const CpuFeatures& features, const std::optional<std::string>& requested);

// choose_vector_path for this machine and the current value of LORAKV_CPU_PATH, read now.
VectorPath vector_path_from_environment();

// The process's path: vector_path_from_environment() on first successful call, then cached
// (kernels dispatch on it in hot loops). Throws ConfigError as choose_vector_path does.
VectorPath selected_vector_path();

}  // namespace lorakv::cpu
