// cli/bench/bench_eviction_retrieval.cpp: the retrieval part's pure pieces: facts, where a
// fact goes, the grid and its flags, the CSV's keys. The engine runs in
// bench_eviction_retrieval_run.cpp.
#include "lorakv/cli/bench/bench_eviction_retrieval.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "lorakv/cache/eviction/eviction_policy.h"
#include "lorakv/cli/cli_args.h"
#include "lorakv/common/errors.h"

namespace lorakv::cli {
namespace {

const char* const kFirstNames[] = {"Ada",    "Bruno", "Clara", "Dmitri", "Elena", "Farid",  "Greta", "Hiro",
                                   "Ingrid", "Jonas", "Kira",  "Luis",   "Maya",  "Nils",   "Olga",  "Pavel",
                                   "Quinn",  "Rosa",  "Sven",  "Tara",   "Umar",  "Vera",   "Walt",  "Yusuf"};
const char* const kLastNames[] = {"Lindqvist", "Moreau",  "Okafor", "Petrov", "Quintero", "Rasmussen",
                                  "Schneider", "Takahashi", "Ulrich", "Varga",  "Whitaker", "Yamamoto",
                                  "Abernathy", "Brennan",   "Castell", "Delacroix", "Eriksen", "Fontaine"};

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, sep);) out.push_back(item);
  return out;
}

std::vector<double> parse_depths(const std::string& text) {
  const char* expected = "fractions of the haystack in [0, 1], comma-separated (e.g. 0.1,0.5,0.9)";
  std::vector<double> depths;
  for (const std::string& item : split(text, ',')) {
    size_t used = 0;
    double d = -1;
    try {
      d = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || !(d >= 0 && d <= 1)) {
      throw UsageError("a depth outside [0, 1]", {"", "--depths", expected, "'" + item + "'", ""});
    }
    depths.push_back(d);
  }
  if (depths.empty()) throw UsageError("no depths", {"", "--depths", expected, "'" + text + "'", ""});
  return depths;
}

}  // namespace

RetrievalFact make_fact(uint64_t seed, int64_t index) {
  const uint64_t a = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(index)));
  const uint64_t b = splitmix64(a);
  const uint64_t c = splitmix64(b);
  RetrievalFact f;
  f.name = std::string(kFirstNames[a % std::size(kFirstNames)]) + " " + kLastNames[b % std::size(kLastNames)];
  f.code = std::to_string(1000 + c % 9000);
  return f;
}

RetrievalTexts retrieval_texts(const RetrievalFact& fact) {
  RetrievalTexts t;
  t.fact = "The access code for " + fact.name + " is " + fact.code + ".\n";
  t.question = "\nQuestion: What is the access code for " + fact.name + "?\nAnswer: The access code for " + fact.name + " is";
  t.answer = " " + fact.code;
  return t;
}

int64_t fact_position(const std::vector<bool>& starts_line, double depth) {
  const auto n = static_cast<int64_t>(starts_line.size());
  const double target = depth * static_cast<double>(n);
  auto is_start = [&](int64_t i) { return i == 0 || i == n || starts_line[static_cast<size_t>(i)]; };
  int64_t best = 0;
  for (int64_t i = 1; i <= n; ++i) {
    if (is_start(i) && std::fabs(static_cast<double>(i) - target) < std::fabs(static_cast<double>(best) - target)) best = i;
  }
  return best;
}

std::vector<int32_t> insert_fact(const std::vector<int32_t>& filler, const std::vector<int32_t>& fact, int64_t position) {
  LORAKV_ASSERT(position >= 0 && position <= static_cast<int64_t>(filler.size()),
                "fact position " << position << " outside a filler of " << filler.size());
  std::vector<int32_t> out(filler.begin(), filler.begin() + position);
  out.insert(out.end(), fact.begin(), fact.end());
  out.insert(out.end(), filler.begin() + position, filler.end());
  return out;
}

int64_t RetrievalGrid::windows() const {
  const auto d = static_cast<int64_t>(depths.size());
  return (cases + d - 1) / d;
}

std::string RetrievalGrid::depths_text() const {
  std::string out;
  char buf[32];
  for (double d : depths) {
    std::snprintf(buf, sizeof buf, "%g", d);
    out += (out.empty() ? "" : ";") + std::string(buf);
  }
  return out;
}

RetrievalGrid default_retrieval_grid() { return RetrievalGrid{}; }

RetrievalGrid full_retrieval_grid() {
  RetrievalGrid g;
  g.depths = {0.1, 0.3, 0.5, 0.7, 0.9};
  g.cases = 100;
  return g;
}

const std::set<std::string>& retrieval_value_flags() {
  static const std::set<std::string> flags = {"--cases", "--depths", "--haystack", "--seed"};
  return flags;
}

const std::set<std::string>& retrieval_bool_flags() {
  static const std::set<std::string> flags = {"--full"};
  return flags;
}

RetrievalGrid parse_retrieval_grid(const CliArgs& args) {
  RetrievalGrid g = args.has("--full") ? full_retrieval_grid() : default_retrieval_grid();
  if (const auto depths = args.get("--depths")) g.depths = parse_depths(*depths);
  g.cases = args.get_int("--cases", g.cases, 1, 100000);
  g.haystack_tokens = args.get_int("--haystack", g.haystack_tokens, 64, 1 << 20);
  g.seed = static_cast<uint64_t>(args.get_int("--seed", static_cast<int64_t>(g.seed), 0, int64_t{1} << 62));
  return g;
}

bool needs_per_head_lanes(const cache::eviction::EvictionConfig& config) {
  const auto policy = cache::eviction::make_policy(config);
  return policy != nullptr && policy->budget_shared_by_layer_lanes();
}

std::string retrieval_csv_header() {
  return "policy,budget,cases,depths,haystack_tokens,seed,successes,success_rate,answer_logprob_mean,"
         "kv_bytes_peak,kv_bytes_after_step,success_by_depth,seconds";
}

std::string retrieval_row_key(const std::string& policy, const std::string& budget, const RetrievalGrid& grid) {
  return policy + "," + budget + "," + std::to_string(grid.cases) + "," + grid.depths_text() + "," +
         std::to_string(grid.haystack_tokens) + "," + std::to_string(grid.seed);
}

std::set<std::string> finished_retrieval_rows(const std::string& csv_path) {
  const size_t fields = split(retrieval_csv_header(), ',').size();
  std::set<std::string> done;
  std::ifstream in(csv_path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    const std::vector<std::string> f = split(line, ',');
    if (f.size() != fields) continue;  // a row cut short by a stopped run
    done.insert(f[0] + "," + f[1] + "," + f[2] + "," + f[3] + "," + f[4] + "," + f[5]);
  }
  return done;
}

}  // namespace lorakv::cli
