// cli/bench/bench_report.cpp: order statistics and the plot step of the benchmarks.
#include "lorakv/cli/bench/bench_report.h"

#include <algorithm>
#include <filesystem>

#include "lorakv/cli/bench/bench_defaults.h"
#include "lorakv/common/errors.h"
#include "lorakv/common/subprocess.h"

namespace lorakv::cli {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

double median(std::vector<double> v) { return percentile(std::move(v), 0.5); }

void draw_plot(const std::string& python, const std::string& script, const std::string& dir, const std::string& png,
               std::ostream& out) {
  const std::string path = checkout_path(script);
  const std::vector<std::string> cmd = {python, path, "--dir", dir};
  if (python.empty() || !std::filesystem::exists(path)) {
    out << "plot: " << describe_command(cmd) << " (from the repository, after bash tools/setup_python.sh bench)\n";
    return;
  }
  int rc = -1;
  try {
    rc = run_process(cmd).exit_code;
  } catch (const InternalError&) {  // a bug stays one
    throw;
  } catch (const Error& e) {
    out << e.what() << "\n";
  }
  out << (rc == 0 ? "wrote " + dir + "/" + png + "\n"
                  : png + " not written: " + describe_command(cmd) + " failed (matplotlib missing? pass --python)\n");
}

}  // namespace lorakv::cli
