// cli/bench/bench_report.h: what every benchmark reports with: order statistics of its
// repetitions, and the PNG its plot script draws from its CSV.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace lorakv::cli {

// The p-quantile (0..1) of `v`, nearest rank; 0 for no values.
double percentile(std::vector<double> v, double p);
double median(std::vector<double> v);

// Runs `python script --dir dir` (script: a path inside the checkout, tools/plot_*.py) and
// says on `out` whether dir/png was written, or the command that failed and why.
void draw_plot(const std::string& python, const std::string& script, const std::string& dir, const std::string& png,
               std::ostream& out);

}  // namespace lorakv::cli
