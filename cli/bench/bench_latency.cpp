// cli/bench/bench_latency.cpp: what sharing buys in time, as ratios against `full` measured in
// one run with the modes alternated per repetition:
//   - time to first token of an agent joining a context of real text another agent has
//     processed: it processes what its mode needs of the context, then its header as
//     private tokens, and has the logits of its first token (each repetition, another agent
//     with an adapter of its own joins the same context, so nothing of an earlier joiner
//     is reused);
//   - aggregate decode tokens/s of 8 agents (the shared-A role adapters and synthetic ones)
//     on one shared context, every agent's next token in one engine step.
// Each also with the adapters' aLoRA twins (invoked by the header they run) in `full` and
// base_lr_shared: a joiner reads the base rows as they are, or adopts them from the prefix index.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <utility>

#include "lorakv/cli/bench/bench_report.h"
#include "lorakv/cli/bench/bench_memory.h"
#include "lorakv/common/errors.h"
#include "lorakv/runtime/driver.h"

namespace lorakv::cli {

namespace {

using runtime::SharedWriter;
using runtime::SharingMode;

// A mode with standard adapters, or with their aLoRA twins (exact sharing: no residual rows,
// base rows shared; in `full` through the prefix index).
struct Variant {
  SharingMode mode;
  bool alora;
  std::string name() const { return std::string(runtime::sharing_mode_name(mode)) + (alora ? " (aLoRA)" : ""); }
  bool operator<(const Variant& o) const { return std::make_pair(mode, alora) < std::make_pair(o.mode, o.alora); }
};
const std::vector<Variant> kVariants = {{SharingMode::kFull, false},        {SharingMode::kFullShared, false},
                                        {SharingMode::kBaseShared, false},  {SharingMode::kBaseLrShared, false},
                                        {SharingMode::kFull, true},         {SharingMode::kBaseLrShared, true}};
const Variant kFullStandard{SharingMode::kFull, false};

runtime::EngineOptions sized(int64_t base_rows, int64_t residual_rows) {
  runtime::EngineOptions eo;
  eo.base_rows = base_rows;
  eo.residual_rows = residual_rows;
  return eo;
}

double now() { return bench_seconds(); }

// The writer and the one agent joining (time_to_first_token removes each joiner again).
constexpr int64_t kAgentsAtJoin = 2;

// One context of real text another agent has processed; each joining agent is added to it,
// timed, and removed.
struct JoinSide {
  std::unique_ptr<runtime::Engine> engine;
  runtime::ContextId ctx;
};

JoinSide prepare_join(BenchWorkload& w, Variant v, const std::vector<int32_t>& text, int64_t joins) {
  JoinSide s;
  const int64_t rows = (joins + 1) * (static_cast<int64_t>(text.size()) + 64);
  s.engine = std::make_unique<runtime::Engine>(w.model(), sized(rows, rows));
  s.ctx = s.engine->create_context({v.mode, SharedWriter::kFirst}, {v.alora ? w.alora_agents(1, "actor")[0] : w.shared_a[0]});
  s.engine->append(s.ctx, text);
  runtime::prefill(*s.engine, {s.ctx, 0});  // another agent processed the context (not timed)
  return s;
}

// Seconds from a new agent's joining to its first token's logits: it processes what its
// mode needs of the context, then its header as private tokens (one driver run).
double time_to_first_token(BenchWorkload& w, JoinSide& s, const AdapterPtr& joiner) {
  const double start = now();
  const int32_t r = s.engine->add_reader(s.ctx, joiner);
  std::vector<runtime::DriverJob> jobs(1);
  jobs[0].reader = {s.ctx, r};
  jobs[0].suffix = w.encode("<|im_start|>actor\n");
  runtime::Driver(*s.engine).run(jobs);
  (void)jobs[0].logits.argmax().item<int64_t>();
  const double seconds = now() - start;
  // It leaves again (not timed): every repetition joins a context of two agents, the writer
  // and itself, as latency.csv's agents column says.
  s.engine->remove_reader({s.ctx, r});
  return seconds;
}

// A context of `agents` agents that each processed it (not timed): the decode runs from there.
struct DecodeSide {
  std::unique_ptr<runtime::Engine> engine;
  runtime::ContextId ctx;
  std::vector<int32_t> header;  // each agent's private turn header before its reply
};

DecodeSide prepare_decode(BenchWorkload& w, Variant v, const std::vector<int32_t>& text, int64_t agents) {
  DecodeSide s;
  const SharingMode mode = v.mode;
  const std::vector<AdapterPtr> readers = v.alora ? w.alora_agents(agents, "planner") : w.shared_a_agents(agents);
  const int64_t rows = static_cast<int64_t>(text.size()) + 512;
  const int64_t base_copies = mode == SharingMode::kFull ? agents : 1;
  const int64_t residual_copies = mode == SharingMode::kBaseShared ? agents : 1;
  s.engine = std::make_unique<runtime::Engine>(w.model(), sized(base_copies * rows + agents * 512, residual_copies * rows));
  s.ctx = s.engine->create_context({mode, SharedWriter::kFirst}, readers);
  s.engine->append(s.ctx, text);
  for (int32_t r = 0; r < static_cast<int32_t>(agents); ++r) {
    std::fprintf(stderr, "[%7.1f s] decode setup: %s, agent %d prefills %zu tokens ...\n", bench_seconds(),
                 runtime::sharing_mode_name(mode), r, text.size());
    runtime::prefill(*s.engine, {s.ctx, r});
  }
  s.header = w.encode("<|im_start|>planner\n");
  return s;
}

// One repetition of the decode: its wall seconds, and per decode step the host time the
// engine spent writing rows, building the kernel's views and in the kernel, and the whole step.
struct DecodeTimes {
  double seconds = 0;
  double write = 0, views = 0, kernel = 0, step = 0;
  double plans = 0;  // the kernel's work plans made per step (1: once per step)
};

// `steps` steps of every agent's next token (greedy), timed from the end of the step that
// ran their headers; one driver run. The agents' replies are dropped after.
DecodeTimes decode_steps(DecodeSide& s, int64_t steps) {
  const auto agents = static_cast<int32_t>(s.engine->num_readers(s.ctx));
  std::vector<runtime::DriverJob> jobs(static_cast<size_t>(agents));
  for (int32_t r = 0; r < agents; ++r) {
    jobs[static_cast<size_t>(r)].reader = {s.ctx, r};
    jobs[static_cast<size_t>(r)].suffix = s.header;
    jobs[static_cast<size_t>(r)].next = [steps, taken = int64_t{0}](const at::Tensor& logits) mutable -> std::optional<int32_t> {
      if (taken++ == steps) return std::nullopt;
      return static_cast<int32_t>(logits.argmax().item<int64_t>());
    };
  }
  double start = 0;
  int64_t step = 0;
  DecodeTimes t;
  runtime::Driver driver(*s.engine, [&](runtime::Engine&, const runtime::StepResult& res) {
    LORAKV_CHECK(res.ok, InternalError, "decode benchmark ran out of cache");
    if (step++ == 0) {
      start = now();
      return;
    }
    const runtime::StepStats& st = res.stats;
    t.write += st.write_seconds;
    t.views += st.views_seconds;
    t.kernel += st.kernel_seconds;
    t.plans += static_cast<double>(st.kernel_plans);
    t.step += st.admit_seconds + st.run_seconds + st.commit_seconds;
  });
  driver.run(jobs);
  t.seconds = now() - start;
  for (double* x : {&t.write, &t.views, &t.kernel, &t.step, &t.plans}) *x /= static_cast<double>(std::max<int64_t>(1, step - 1));
  for (int32_t r = 0; r < agents; ++r) s.engine->drop_private({s.ctx, r});
  return t;
}


// A decode side: a variant with `agents` agents on the context.
struct DecodeVariant {
  Variant v;
  int64_t agents;
  std::string name() const { return agents == 1 ? "one agent alone" : v.name(); }
  bool operator<(const DecodeVariant& o) const { return std::make_pair(v, agents) < std::make_pair(o.v, o.agents); }
};

// `agents` agents decoding together on one `t`-token context in every variant, and one agent
// alone; tokens/s against `full` and against the one agent, and the host time of a step's phases.
void run_decode(BenchWorkload& w, const MemoryBenchOptions& o, int64_t t, std::ofstream& csv, std::ostream& out) {
  const int64_t agents = 8, steps = 8;
  std::vector<DecodeVariant> variants;
  for (const Variant& v : kVariants) variants.push_back({v, agents});
  const DecodeVariant alone{kFullStandard, 1}, full{kFullStandard, agents};
  variants.push_back(alone);
  const std::vector<int32_t> text = w.real_text(t);
  std::map<DecodeVariant, DecodeSide> sides;
  for (const DecodeVariant& d : variants) sides.emplace(d, prepare_decode(w, d.v, text, d.agents));
  std::map<DecodeVariant, std::vector<DecodeTimes>> times;
  for (int64_t rep = 0; rep < o.repetitions; ++rep) {
    for (size_t k = 0; k < variants.size(); ++k) {
      const DecodeVariant& d = variants[(k + static_cast<size_t>(rep)) % variants.size()];
      std::fprintf(stderr, "[%7.1f s] decode %lld tokens: repetition %lld, %s ...\n", bench_seconds(),
                   static_cast<long long>(t), static_cast<long long>(rep + 1), d.name().c_str());
      times[d].push_back(decode_steps(sides.at(d), steps));
    }
  }
  auto med = [&](const DecodeVariant& d, double DecodeTimes::*field) {
    std::vector<double> v;
    for (const DecodeTimes& x : times[d]) v.push_back(x.*field);
    return median(v);
  };
  auto tokens_per_second = [&](const DecodeVariant& d) {
    return static_cast<double>(d.agents * steps) / med(d, &DecodeTimes::seconds);
  };
  out << "\nAggregate decode, " << agents << " agents on one " << t << "-token context (" << steps
      << " steps per repetition, median of " << o.repetitions << ", sides alternated), against `full` and against "
      << "one agent alone on the same context\n"
      << "| mode | tokens/s | ratio vs full | ratio vs one agent |\n| --- | ---: | ---: | ---: |\n";
  const double full_tps = tokens_per_second(full), alone_tps = tokens_per_second(alone);
  for (const DecodeVariant& d : variants) {
    const double s = med(d, &DecodeTimes::seconds), tps = tokens_per_second(d);
    csv << "decode_aggregate," << t << "," << d.agents << "," << d.name() << "," << s << "," << tps << ","
        << tps / full_tps << "," << o.repetitions << "\n";
    csv << "decode_vs_one_agent," << t << "," << d.agents << "," << d.name() << "," << s << "," << tps << ","
        << tps / alone_tps << "," << o.repetitions << "\n";
    char line[200];
    std::snprintf(line, sizeof line, "| %s | %.1f | %.2fx | %.2fx |\n", d.name().c_str(), tps, tps / full_tps,
                  tps / alone_tps);
    out << line;
  }
  out << "\nHost time per decode step (ms, median over repetitions of the per-step mean): rows written, the "
         "kernel's views and arguments built, the fused kernel, the rest (projections, sampling, bookkeeping), "
         "the whole step; and the kernel's work plans made per step\n"
      << "| mode | write | views | kernel | rest | step | plans |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const DecodeVariant& d : variants) {
    const double write = med(d, &DecodeTimes::write), views = med(d, &DecodeTimes::views),
                 kernel = med(d, &DecodeTimes::kernel), step = med(d, &DecodeTimes::step);
    const double rest = step - write - views - kernel;
    for (const auto& [name, value] : {std::pair<const char*, double>{"decode_step_write", write},
                                      {"decode_step_views", views},
                                      {"decode_step_kernel", kernel},
                                      {"decode_step_rest", rest},
                                      {"decode_step_total", step},
                                      {"decode_step_kernel_plans", med(d, &DecodeTimes::plans)}}) {
      csv << name << "," << t << "," << d.agents << "," << d.name() << "," << value << ",,," << o.repetitions << "\n";
    }
    char line[200];
    std::snprintf(line, sizeof line, "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f |\n", d.name().c_str(),
                  1e3 * write, 1e3 * views, 1e3 * kernel, 1e3 * rest, 1e3 * step, med(d, &DecodeTimes::plans));
    out << line;
  }
}

}  // namespace

void run_latency(BenchWorkload& w, const MemoryBenchOptions& o, std::ostream& out) {
  const std::string path = o.out_dir + "/latency.csv";
  std::ofstream csv(path);
  csv << "metric,context_tokens,agents,mode,median_seconds,tokens_per_second,ratio_vs_full,repetitions\n";

  // Time to first token of a joining agent, 2K context; the modes rotate per repetition.
  const std::vector<int32_t> text2k = w.real_text(2048);
  // Joiners invoked by the suffix time_to_first_token runs ("<|im_start|>actor\n").
  const std::vector<AdapterPtr> joiners = w.shared_a_agents(o.repetitions + 1);
  const std::vector<AdapterPtr> alora_joiners = w.alora_agents(o.repetitions + 1, "actor");
  std::map<Variant, JoinSide> joins;
  for (const Variant& v : kVariants) joins.emplace(v, prepare_join(w, v, text2k, o.repetitions));
  std::map<Variant, std::vector<double>> ttft;
  for (int64_t rep = 0; rep < o.repetitions; ++rep) {
    for (size_t k = 0; k < kVariants.size(); ++k) {
      const Variant& v = kVariants[(k + static_cast<size_t>(rep)) % kVariants.size()];
      std::fprintf(stderr, "[%7.1f s] time to first token: repetition %lld, %s ...\n", bench_seconds(),
                   static_cast<long long>(rep + 1), v.name().c_str());
      const AdapterPtr& joiner = (v.alora ? alora_joiners : joiners)[static_cast<size_t>(rep) + 1];
      ttft[v].push_back(time_to_first_token(w, joins.at(v), joiner));
    }
  }
  out << "\nTime to first token of an agent joining a 2048-token context another agent processed (median of "
      << o.repetitions << ", modes alternated)\n| mode | seconds | ratio vs full | aim |\n| --- | ---: | ---: | --- |\n";
  const double full_ttft = median(ttft[kFullStandard]);
  for (const Variant& v : kVariants) {
    const double s = median(ttft[v]), ratio = s / full_ttft;
    csv << "ttft_join," << text2k.size() << "," << kAgentsAtJoin << "," << v.name() << "," << s << ",," << ratio << ","
        << o.repetitions << "\n";
    char line[200];
    std::snprintf(line, sizeof line, "| %s | %.3f | %.3fx | %s |\n", v.name().c_str(), s, ratio,
                  v.mode == SharingMode::kBaseLrShared && !v.alora ? (ratio <= 0.1 ? "<= 0.1x: met" : "<= 0.1x: missed") : "");
    out << line;
  }

  // Aggregate decode of 8 agents on one context, and of one agent alone on it (in `full`: the
  // same for every mode), all alternated per repetition.
  for (int64_t t : o.decode_lengths) run_decode(w, o, t, csv, out);
  out << "wrote " << path << "\n";
}

}  // namespace lorakv::cli
