// cli/bench/bench_eviction_agents.cpp: eviction on a base shared by three agents. Several
// held-out agentic QA episodes are appended into one long trajectory and replayed
// teacher-forced with the trained role adapters (qv_shared_a: planner, actor, reflector) as
// the readers of one base_lr_shared context; each role turn runs as its agent's private
// tokens, then joins the trajectory. The same replay runs with the shared base compressed
// (every policy at the budgets asked) and the role turns' logits are compared with the
// uncompressed replay's: per-token KL(uncompressed || compressed) and top-1 agreement.
// For the attention-scored policies the rows are scored three ways (`scoring`): every
// agent's mass summed, the max over agents, and the rows' writer alone (what a
// single-model engine sees), to measure what scoring across agents buys.
#include "lorakv/cli/bench/bench_eviction_agents.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "lorakv/cli/bench/bench_memory.h"
#include "lorakv/common/errors.h"

namespace lorakv::cli {

namespace {

struct AgentsCase {
  std::string policy, scoring;
  double budget = 0;
};

std::vector<AgentsCase> agents_cases(const EvictionAgentsOptions& o) {
  std::vector<AgentsCase> cases;
  for (double budget : o.budgets) {
    for (const std::string& policy : o.policies) {
      const bool scored = policy == "h2o" || policy == "snapkv" || policy == "pyramidkv" || policy == "adakv";
      for (const char* scoring : {"sum", "max", "writer"}) {
        if (scored || std::string(scoring) == "sum") cases.push_back({policy, scored ? scoring : "auto", budget});
      }
    }
  }
  return cases;
}

runtime::ContextOptions compressed(const AgentsCase& c) {
  runtime::ContextOptions options{runtime::SharingMode::kBaseLrShared, runtime::SharedWriter::kFirst};
  options.eviction.policy = c.policy;
  options.eviction.budget_fraction = c.budget;
  options.eviction.scoring = c.scoring;
  return options;
}

}  // namespace

void run_eviction_agents(const EvictionAgentsOptions& o, std::ostream& out) {
  MemoryBenchOptions mo;
  mo.model_path = o.model_path;
  mo.assets_dir = o.assets_dir;
  BenchWorkload w = load_workload(mo, out);
  const std::vector<const BenchTrajectory*> trajectory = long_trajectory(w, o.context_tokens);
  std::fprintf(stderr, "[%7.1f s] agents: %zu episodes, about %lld tokens, uncompressed ...\n", bench_seconds(), trajectory.size(),
               static_cast<long long>(o.context_tokens));
  const at::Tensor reference =
      replay_role_turns(w, w.shared_a, {runtime::SharingMode::kBaseLrShared, runtime::SharedWriter::kFirst}, trajectory,
                        false, o.every_agent_reads);
  const std::string path = o.out_dir + (o.every_agent_reads ? "/eviction_agents_together.csv" : "/eviction_agents.csv");
  std::filesystem::create_directories(o.out_dir);
  std::ofstream csv(path);
  LORAKV_CHECK(csv.good(), ConfigError, "cannot write " << path);
  csv << "policy,scoring,budget,context_tokens,episodes,role_tokens,mean_kl,max_kl,top1_agreement\n";
  out << "\nEviction on a base shared by three role adapters (base_lr_shared, qv_shared_a; " << trajectory.size()
      << " held-out episodes in one trajectory; teacher-forced role turns against the uncompressed cache"
      << (o.every_agent_reads ? "; every agent reads each turn in its step" : "") << ")\n"
         "| policy | scoring | budget | role tokens | mean KL | max KL | top-1 agreement |\n"
         "| --- | --- | ---: | ---: | ---: | ---: | ---: |\n";
  for (const AgentsCase& c : agents_cases(o)) {
    std::fprintf(stderr, "[%7.1f s] agents: %s, scoring %s, budget %g ...\n", bench_seconds(), c.policy.c_str(), c.scoring.c_str(),
                 c.budget);
    Fidelity f;
    compare_logits(reference,
                   replay_role_turns(w, w.shared_a, compressed(c), trajectory, c.policy == "adakv", o.every_agent_reads), f);
    const double mean = f.kl_sum / static_cast<double>(f.tokens), agree = static_cast<double>(f.agree) / static_cast<double>(f.tokens);
    csv << c.policy << "," << c.scoring << "," << c.budget << "," << o.context_tokens << "," << trajectory.size() << ","
        << f.tokens << "," << mean << "," << f.kl_max << "," << agree << "\n";
    csv.flush();
    char line[256];
    std::snprintf(line, sizeof line, "| %s | %s | %g | %lld | %.4f | %.3f | %.4f |\n", c.policy.c_str(), c.scoring.c_str(), c.budget,
                  static_cast<long long>(f.tokens), mean, f.kl_max, agree);
    out << line << std::flush;
  }
  out << "wrote " << path << "\n";
}

}  // namespace lorakv::cli
