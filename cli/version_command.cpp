// cli/version_command.cpp: `lorakv --version` / `lorakv version`: what this binary is and
// what it will run on: version, git commit, libtorch, CPU model and vector path.
#include <torch/version.h>

#include <cstdio>
#include <cstdlib>

#include "lorakv/cli/build_info.h"
#include "lorakv/cli/cli_args.h"
#include "lorakv/cli/commands.h"
#include "lorakv/common/cpu_features.h"
#include "lorakv/common/errors.h"

namespace lorakv::cli {
namespace {

const char* kVersionHelp = R"(usage: lorakv version   (or lorakv --version)

Prints the lorakv version, the git commit it was built from, the libtorch version, the CPU
model and the vector code path CPU kernels take (the best the CPU and OS support, or the
lower one LORAKV_CPU_PATH=scalar|avx2|avx512 asks for).
)";

void row(std::ostream& out, const char* label, const std::string& value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "  %-13s ", label);
  out << buf << value << "\n";
}

// "avx512 (the best here)" or "avx2 (forced by LORAKV_CPU_PATH; best here: avx512)".
std::string path_text(cpu::VectorPath chosen, cpu::VectorPath best) {
  std::string text = cpu::vector_path_name(chosen);
  const char* forced = std::getenv(cpu::kCpuPathVariable);
  if (forced && *forced) {
    return text + " (set by " + cpu::kCpuPathVariable + "; best here: " + cpu::vector_path_name(best) + ")";
  }
  return text + " (the best here)";
}

}  // namespace

int run_version(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CliArgs a(args, {}, {"--help"}, "version");
  if (a.has("--help")) {
    out << kVersionHelp;
    return 0;
  }
  if (!a.positional().empty()) {
    throw UsageError("unexpected argument", {"", a.positional().front(), "no arguments", "", a.help_hint()});
  }
  const cpu::CpuFeatures& features = cpu::detected_cpu_features();
  // Read now, not cached: --version reports the variable as it is set for this run.
  const cpu::VectorPath chosen = cpu::vector_path_from_environment();
  out << "lorakv " << lorakv_version() << "\n";
  row(out, "commit", lorakv_git_commit());
  row(out, "torch", TORCH_VERSION);
  row(out, "cpu", features.model_name);
  row(out, "vector path", path_text(chosen, cpu::best_vector_path(features)));
  row(out, "cpu features", cpu::describe_features(features));
  return 0;
}

}  // namespace lorakv::cli
