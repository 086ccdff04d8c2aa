// cli/bench/bench_defaults.h: the benchmarks' default model file and assets folder, found
// in the current folder when it is a checkout, else in the checkout lorakv was built from,
// so a benchmark started from any folder finds them (and the plot scripts beside assets/).
#pragma once

#include <string>

namespace lorakv::cli {

// `relative` (a path inside a checkout) as it is when it exists from the current folder,
// else under the source folder of this build (build_info.h) when it exists there, else as
// given (the error that follows names it).
std::string checkout_path(const std::string& relative);

// models/SmolLM2-135M-Instruct.Q4_1.gguf and assets/, through checkout_path.
std::string default_bench_model();
std::string default_bench_assets();
// The Python that draws the PNGs: the checkout's .venv-bench (it has matplotlib), else its
// .venv, else python3 from PATH.
std::string default_bench_python();

}  // namespace lorakv::cli
