// cli/bench/bench_sessions.cpp: `lorakv bench sessions`: S concurrent sessions of three role
// agents (the shared-A role adapters) taking turns in the agentic QA layout, in `full` and
// `base_lr_shared`, three ways, alternated per repetition in one run:
//   - scheduler:  the sessions API, the sessions driven from up to 4 caller threads, every
//                 session's turn started together (the engine thread batches them);
//   - sequential: the same sessions through the same API, one after another;
//   - driver:     the engine's driver stepping the same batches directly (no engine thread,
//                 no futures): what the scheduler costs on top of the engine.
// Aggregate tokens/s is every generated token over the wall time of all turns (prefill of
// each turn's new text included); time to first token is per reply, from the call.
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <sstream>
#include <thread>

#include "lorakv/adapters/adapter_registry.h"
#include "lorakv/agents/chat_layout.h"
#include "lorakv/agents/runtime.h"
#include "lorakv/cli/bench/bench_report.h"
#include "lorakv/cli/bench/bench_memory.h"
#include "lorakv/cli/bench/bench_sessions_capacity.h"
#include "lorakv/cli/bench/bench_defaults.h"
#include "lorakv/cli/cli_args.h"
#include "lorakv/cli/commands.h"
#include "lorakv/common/cpu_features.h"
#include "lorakv/common/errors.h"
#include "lorakv/common/subprocess.h"
#include "lorakv/formats/json.h"
#include "lorakv/runtime/driver.h"
#include "lorakv/runtime/loaded_model.h"

namespace lorakv::cli {

namespace {

using runtime::SharingMode;
using Clock = std::chrono::steady_clock;

const char* kHelp = R"(usage: lorakv bench sessions [flags]

S concurrent sessions of three role agents (planner, actor, reflector with the shared-A
role adapters) taking turns on held-out agentic QA questions, in full and base_lr_shared:
aggregate tokens/s, time to first token p50/p95 and KV bytes on three sides, as ratios
measured in one run with the sides alternated per repetition: scheduler (the sessions API,
sessions driven from up to 4 threads), sequential (the same sessions one after another),
driver (the engine's driver stepping the same batches directly). Writes sessions.csv and
sessions.png under --out. Run it with nothing else on the machine.

flags:
  --model FILE        GGUF model (default models/SmolLM2-135M-Instruct.Q4_1.gguf)
  --assets DIR        role adapters and held-out questions (default assets)
  --out DIR           where the CSV and the PNG go (default bench_results/sessions)
  --sessions LIST     session counts S (default 1,4,16; --full: 1,4,16,64)
  --turns N           turns per session: planner, actor, planner, ... (default 4)
  --tokens N          most tokens per turn (default 16)
  --repetitions N     repetitions per (S, mode) (default 3)
  --full              S up to 64
  --decode-agents N   agents decoding together on one shared context of real text
                      (generate_all), base_lr_shared against full (default 8; 0: skip)
  --decode-length N   that context's length in tokens (default 2048)
  --capacity-sessions N
                      a pool that just fits N base_lr_shared sessions' reservations
                      (SessionOptions::reserve_tokens) and N sessions started at once in
                      it, full against base_lr_shared: sessions admitted at once and
                      aggregate tokens/s (default 16; 0: skip)
  --python FILE       Python with matplotlib for the PNG (default the checkout's
                      .venv-bench/bin/python, else .venv/bin/python, else python3)
)";

const char* kSystem = "Answer with tools: Lookup[name], Calculate[a - b], Finish[answer].";
const char* kRoles[] = {"planner", "actor", "reflector"};

struct Options {
  std::string model, assets, out, python;
  std::vector<int64_t> sessions;
  int64_t turns = 4, tokens = 16, repetitions = 3;
  int64_t decode_agents = 8, decode_length = 2048;
  int64_t capacity_sessions = 16;
};

struct Measure {
  double wall_s = 0;
  int64_t generated = 0;
  std::vector<double> ttft;  // per reply
  int64_t kv_bytes = 0;      // with every session of the run open, after its last turn
};

std::vector<std::string> questions(const std::string& assets) {
  std::vector<std::string> out;
  std::ifstream in(assets + "/agentic_qa/test.jsonl");
  if (!in) throw ConfigError("cannot read the held-out questions", {assets + "/agentic_qa/test.jsonl"});
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(formats::parse_json(line).at("question").as_string());
  }
  return out;
}

const char* agent_of_turn(int64_t t) { return t % 2 == 0 ? "planner" : "actor"; }

agents::GenerateOptions turn_options(const Options& o) {
  agents::GenerateOptions g;
  g.max_tokens = o.tokens;
  return g;
}

std::shared_ptr<agents::Session> open(agents::Runtime& rt, SharingMode mode, const std::string& question) {
  auto s = rt.open_session({mode, runtime::SharedWriter::kFirst});
  for (const char* role : kRoles) s->add_agent({role, role, ""});
  s->append("system", kSystem);
  s->append("user", question);
  return s;
}

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Through the scheduler: up to 4 caller threads, each starting its sessions' turn together.
Measure run_scheduler(agents::Runtime& rt, SharingMode mode, const std::vector<std::string>& qs, int64_t n,
                      const Options& o) {
  std::vector<std::shared_ptr<agents::Session>> sessions;
  for (int64_t i = 0; i < n; ++i) sessions.push_back(open(rt, mode, qs[static_cast<size_t>(i) % qs.size()]));
  const int64_t callers = std::min<int64_t>(4, n);
  std::vector<std::vector<agents::Reply>> replies(static_cast<size_t>(callers));
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> threads;
  for (int64_t c = 0; c < callers; ++c) {
    threads.emplace_back([&, c] {
      for (int64_t t = 0; t < o.turns; ++t) {
        std::vector<std::future<agents::Reply>> pending;
        for (int64_t i = c; i < n; i += callers) {
          pending.push_back(sessions[static_cast<size_t>(i)]->generate_async(agent_of_turn(t), turn_options(o)));
        }
        for (auto& p : pending) replies[static_cast<size_t>(c)].push_back(p.get());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  Measure m;
  m.wall_s = since(start);
  for (const auto& per_caller : replies) {
    for (const agents::Reply& r : per_caller) {
      m.generated += static_cast<int64_t>(r.tokens.size());
      m.ttft.push_back(r.time_to_first_token_s);
    }
  }
  m.kv_bytes = rt.stats().kv_bytes_in_use;
  for (auto& s : sessions) s->close();
  return m;
}

// The same sessions through the same API, one after another.
Measure run_sequential(agents::Runtime& rt, SharingMode mode, const std::vector<std::string>& qs, int64_t n,
                       const Options& o) {
  Measure m;
  std::vector<std::shared_ptr<agents::Session>> sessions;
  for (int64_t i = 0; i < n; ++i) sessions.push_back(open(rt, mode, qs[static_cast<size_t>(i) % qs.size()]));
  const Clock::time_point start = Clock::now();
  for (auto& s : sessions) {
    for (int64_t t = 0; t < o.turns; ++t) {
      const agents::Reply r = s->generate(agent_of_turn(t), turn_options(o));
      m.generated += static_cast<int64_t>(r.tokens.size());
      m.ttft.push_back(r.time_to_first_token_s);
    }
  }
  m.wall_s = since(start);
  m.kv_bytes = rt.stats().kv_bytes_in_use;
  for (auto& s : sessions) s->close();
  return m;
}

// The engine's driver over the same batches: per turn, one job per session (its agent's
// header as the suffix, greedy tokens until <|im_end|>), then the turns appended as the
// sessions append them.
struct DirectSide {
  runtime::LoadedModel loaded;
  std::unique_ptr<adapters::AdapterRegistry> registry;
  std::map<std::string, std::shared_ptr<const adapters::Adapter>> roles;
};

Measure run_driver(DirectSide& d, SharingMode mode, const std::vector<std::string>& qs, int64_t n, const Options& o,
                   int64_t pool_bytes) {
  const agents::ChatLayout layout(*d.loaded.tokenizer);
  runtime::EngineOptions eo;
  eo.kv_pool_bytes = pool_bytes;
  eo.residual_rows_per_base_row = 2.0;
  runtime::Engine engine(*d.loaded.model, eo);
  std::vector<runtime::ContextId> contexts;
  for (int64_t i = 0; i < n; ++i) {
    contexts.push_back(engine.create_context({mode, runtime::SharedWriter::kFirst},
                                             {d.roles.at("planner"), d.roles.at("actor"), d.roles.at("reflector")}));
    std::vector<int32_t> ids = layout.turn("system", kSystem);
    const std::vector<int32_t> user = layout.turn("user", qs[static_cast<size_t>(i) % qs.size()]);
    ids.insert(ids.end(), user.begin(), user.end());
    engine.append(contexts.back(), ids);
  }
  Measure m;
  runtime::Driver driver(engine);
  const Clock::time_point start = Clock::now();
  for (int64_t t = 0; t < o.turns; ++t) {
    const int32_t reader = t % 2 == 0 ? 0 : 1;
    std::vector<std::vector<int32_t>> generated(static_cast<size_t>(n));
    std::vector<runtime::DriverJob> jobs(static_cast<size_t>(n));
    const Clock::time_point turn_start = Clock::now();
    for (int64_t i = 0; i < n; ++i) {
      runtime::DriverJob& job = jobs[static_cast<size_t>(i)];
      job.reader = {contexts[static_cast<size_t>(i)], reader};
      job.suffix = layout.header(agent_of_turn(t));
      std::vector<int32_t>& out = generated[static_cast<size_t>(i)];
      job.next = [&out, &m, &o, turn_start, end_id = layout.end_id()](const at::Tensor& logits) -> std::optional<int32_t> {
        if (out.empty()) m.ttft.push_back(since(turn_start));
        out.push_back(static_cast<int32_t>(logits.argmax().item<int64_t>()));
        if (out.back() == end_id || static_cast<int64_t>(out.size()) >= o.tokens) return std::nullopt;
        return out.back();
      };
    }
    driver.run(jobs);
    for (int64_t i = 0; i < n; ++i) {
      const runtime::ReaderRef r{contexts[static_cast<size_t>(i)], reader};
      const std::vector<int32_t>& out = generated[static_cast<size_t>(i)];
      m.generated += static_cast<int64_t>(out.size());
      engine.commit_private(r);
      std::vector<int32_t> tail = {out.back()};
      if (out.back() != layout.end_id()) tail.push_back(layout.end_id());
      tail.insert(tail.end(), layout.newline().begin(), layout.newline().end());
      engine.append(contexts[static_cast<size_t>(i)], tail);
    }
  }
  m.wall_s = since(start);
  m.kv_bytes = engine.memory().cache.bytes_in_use;
  return m;
}


// N agents (the shared-A role adapters, then synthetic ones with the same A) on one shared
// context of real text reply together (generate_all), in base_lr_shared and full, the modes
// alternated per repetition. Aggregate decode tokens/s: every reply's tokens after its first,
// over the longest reply's time from its first token to its last (prefill excluded).
void run_decode_together(agents::Runtime& rt, const Options& o, std::ostream& out) {
  MemoryBenchOptions mo;
  mo.model_path = o.model;
  mo.assets_dir = o.assets;
  std::ostringstream quiet;
  BenchWorkload w = load_workload(mo, quiet);
  std::vector<std::string> names;
  for (const AdapterPtr& a : w.shared_a_agents(o.decode_agents)) {
    rt.add_adapter(a);
    names.push_back(a->name());
  }
  const std::string text = w.loaded.tokenizer->decode(w.real_text(o.decode_length));
  std::ofstream csv(o.out + "/decode_together.csv");
  csv << "mode,agents,context_tokens,repetition,decode_tokens,decode_s,tokens_per_s\n";
  std::map<SharingMode, std::vector<double>> rates;
  for (int64_t rep = 0; rep < o.repetitions; ++rep) {
    std::vector<SharingMode> order = {SharingMode::kFull, SharingMode::kBaseLrShared};
    if (rep % 2 == 1) std::reverse(order.begin(), order.end());
    for (SharingMode mode : order) {
      auto s = rt.open_session({mode, runtime::SharedWriter::kFirst});
      std::vector<std::string> agents;
      for (size_t i = 0; i < names.size(); ++i) {
        agents.push_back("agent" + std::to_string(i));
        s->add_agent({agents.back(), names[i], ""});
      }
      s->append_text(text);
      agents::GenerateOptions g;
      g.max_tokens = 32;
      int64_t decoded = 0;
      double longest = 0;
      for (const agents::Reply& r : s->generate_all(agents, g)) {
        decoded += std::max<int64_t>(static_cast<int64_t>(r.tokens.size()) - 1, 0);
        longest = std::max(longest, r.decode_seconds);
      }
      s->close();
      rates[mode].push_back(static_cast<double>(decoded) / longest);
      char row[160];
      std::snprintf(row, sizeof row, "%s,%zu,%lld,%lld,%lld,%.4f,%.2f\n", runtime::sharing_mode_name(mode), names.size(),
                    static_cast<long long>(o.decode_length), static_cast<long long>(rep), static_cast<long long>(decoded),
                    longest, static_cast<double>(decoded) / longest);
      csv << row << std::flush;
    }
  }
  char line[200];
  std::snprintf(line, sizeof line,
                "%zu agents decoding together on one %lld-token context (generate_all): full %.1f tokens/s, "
                "base_lr_shared %.1f tokens/s: %.2fx\n",
                names.size(), static_cast<long long>(o.decode_length), median(rates[SharingMode::kFull]),
                median(rates[SharingMode::kBaseLrShared]),
                median(rates[SharingMode::kBaseLrShared]) / median(rates[SharingMode::kFull]));
  out << line;
}


std::vector<int64_t> int_list(const std::string& text, const char* flag) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (end == item.c_str() || *end != '\0' || v < 1 || v > 256) {
      throw UsageError("bad list entry", {"", flag, "integers in 1..256, comma-separated", item, ""});
    }
    out.push_back(v);
  }
  if (out.empty()) throw UsageError("empty list", {"", flag, "at least one integer", text, ""});
  return out;
}


}  // namespace

int run_sessions_bench(const std::vector<std::string>& args, std::ostream& out) {
  const CliArgs a(args, {"--model", "--assets", "--out", "--sessions", "--turns", "--tokens", "--repetitions", "--python",
                         "--decode-agents", "--decode-length", "--capacity-sessions"},
                  {"--full", "--help"}, "bench sessions");
  if (a.has("--help")) {
    out << kHelp;
    return 0;
  }
  Options o;
  o.model = a.get("--model").value_or(default_bench_model());
  o.assets = a.get("--assets").value_or(default_bench_assets());
  o.out = a.get("--out").value_or("bench_results/sessions");
  o.python = a.get("--python").value_or(default_bench_python());
  o.sessions = int_list(a.get("--sessions").value_or(a.has("--full") ? "1,4,16,64" : "1,4,16"), "--sessions");
  o.turns = a.get_int("--turns", 4, 1, 64);
  o.tokens = a.get_int("--tokens", 16, 1, 1024);
  o.repetitions = a.get_int("--repetitions", 3, 1, 100);
  o.decode_agents = a.get_int("--decode-agents", 8, 0, 64);
  o.decode_length = a.get_int("--decode-length", 2048, 16, 8000);
  o.capacity_sessions = a.get_int("--capacity-sessions", 16, 0, 256);
  std::filesystem::create_directories(o.out);
  const std::vector<std::string> qs = questions(o.assets);

  DirectSide direct;
  direct.loaded = runtime::load_model(o.model);
  direct.registry = std::make_unique<adapters::AdapterRegistry>(direct.loaded.model->adapter_shape(),
                                                                direct.loaded.model->dtype());
  // Rows for every session open at once (its text and turns, three agents' own rows in
  // full, whole blocks), and for the agents decoding together with their own rows in full.
  const int64_t row_bytes = runtime::Engine::base_row_bytes(*direct.loaded.model);
  const int64_t max_sessions = *std::max_element(o.sessions.begin(), o.sessions.end());
  const int64_t pool_bytes = std::max({int64_t{256} << 20, max_sessions * 700 * row_bytes,
                                       (o.decode_agents + 1) * (o.decode_length + 128) * row_bytes});
  agents::RuntimeOptions ro;
  ro.model = o.model;
  ro.kv_pool_bytes = pool_bytes;
  agents::Runtime rt(ro);
  for (const char* role : kRoles) {
    const std::string path = o.assets + "/role_adapters/qv_shared_a/" + role;
    rt.load_adapter(role, path);
    direct.roles[role] = direct.registry->load(role, path);
  }
  const cpu::CpuFeatures& f = cpu::detected_cpu_features();
  out << "machine: " << cpu::cpu_model_name() << ", " << at::get_num_threads() << " threads, vector path "
      << cpu::vector_path_name(cpu::selected_vector_path()) << " (" << cpu::describe_features(f) << ")\n"
      << "device: CPU; model " << o.model << " (weights as stored, activations and cache float32); "
      << "3 agents per session (qv_shared_a role adapters), " << o.turns << " turns of at most " << o.tokens
      << " tokens; KV pool " << (pool_bytes >> 20) << " MiB\n";

  const std::string csv_path = o.out + "/sessions.csv";
  std::ofstream csv(csv_path);
  csv << "mode,sessions,side,repetition,wall_s,generated_tokens,tokens_per_s,ttft_p50_s,ttft_p95_s,kv_bytes\n";
  out << "mode            S  side        tokens/s  ttft p50   ttft p95   KV MiB  vs sequential  vs driver\n";
  for (SharingMode mode : {SharingMode::kFull, SharingMode::kBaseLrShared}) {
    for (int64_t n : o.sessions) {
      std::map<std::string, std::vector<Measure>> runs;
      for (int64_t rep = 0; rep < o.repetitions; ++rep) {
        std::vector<std::string> order = {"scheduler", "sequential", "driver"};
        if (rep % 2 == 1) std::reverse(order.begin(), order.end());
        for (const std::string& side : order) {
          Measure m = side == "scheduler"    ? run_scheduler(rt, mode, qs, n, o)
                      : side == "sequential" ? run_sequential(rt, mode, qs, n, o)
                                             : run_driver(direct, mode, qs, n, o, pool_bytes);
          char row[256];
          std::snprintf(row, sizeof row, "%s,%lld,%s,%lld,%.4f,%lld,%.2f,%.4f,%.4f,%lld\n",
                        runtime::sharing_mode_name(mode), static_cast<long long>(n), side.c_str(),
                        static_cast<long long>(rep), m.wall_s, static_cast<long long>(m.generated),
                        static_cast<double>(m.generated) / m.wall_s, percentile(m.ttft, 0.5), percentile(m.ttft, 0.95),
                        static_cast<long long>(m.kv_bytes));
          csv << row << std::flush;
          runs[side].push_back(std::move(m));
        }
      }
      auto rate = [&](const std::string& side) {
        std::vector<double> v;
        for (const Measure& m : runs[side]) v.push_back(static_cast<double>(m.generated) / m.wall_s);
        return median(v);
      };
      for (const std::string side : {"scheduler", "sequential", "driver"}) {
        std::vector<double> ttft;
        for (const Measure& m : runs[side]) ttft.insert(ttft.end(), m.ttft.begin(), m.ttft.end());
        char line[256];
        std::snprintf(line, sizeof line, "%-14s %3lld  %-10s %8.1f  %8.4f  %8.4f  %7.1f", runtime::sharing_mode_name(mode),
                      static_cast<long long>(n), side.c_str(), rate(side), percentile(ttft, 0.5),
                      percentile(ttft, 0.95), static_cast<double>(runs[side].back().kv_bytes) / (1 << 20));
        out << line;
        if (side == "scheduler") {
          std::snprintf(line, sizeof line, "  %12.2fx  %8.2fx", rate("scheduler") / rate("sequential"),
                        rate("scheduler") / rate("driver"));
          out << line;
        }
        out << "\n";
      }
    }
  }
  out << "wrote " << csv_path << "\n";
  if (o.decode_agents > 0) {
    run_decode_together(rt, o, out);
    out << "wrote " << o.out << "/decode_together.csv\n";
  }
  if (o.capacity_sessions > 0) {
    CapacityBenchOptions c;
    c.model = o.model;
    c.assets = o.assets;
    c.out = o.out;
    c.sessions = o.capacity_sessions;
    c.turns = o.turns;
    c.tokens = o.tokens;
    c.repetitions = o.repetitions;
    run_capacity_bench(c, qs, out);
  }
  if (!o.python.empty()) draw_plot(o.python, "tools/plot_sessions_bench.py", o.out, "sessions.png", out);
  return 0;
}

}  // namespace lorakv::cli
