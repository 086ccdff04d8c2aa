// cli/bench/bench_defaults.cpp: where the benchmarks' default files are.
#include "lorakv/cli/bench/bench_defaults.h"

#include <filesystem>

#include "lorakv/cli/build_info.h"

namespace lorakv::cli {

std::string checkout_path(const std::string& relative) {
  std::error_code ec;
  if (std::filesystem::exists(relative, ec)) return relative;
  const std::filesystem::path built = std::filesystem::path(lorakv_source_dir()) / relative;
  if (std::filesystem::exists(built, ec)) return built.string();
  return relative;
}

std::string default_bench_model() { return checkout_path("models/SmolLM2-135M-Instruct.Q4_1.gguf"); }
std::string default_bench_assets() { return checkout_path("assets"); }

std::string default_bench_python() {
  std::error_code ec;
  for (const char* p : {".venv-bench/bin/python", ".venv/bin/python"}) {
    const std::string found = checkout_path(p);
    if (std::filesystem::exists(found, ec)) return found;
  }
  return "python3";
}

}  // namespace lorakv::cli
