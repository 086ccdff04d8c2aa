// cli/bench/bench_episodes.cpp: `lorakv bench episodes`: the agentic QA task through
// lorakv's own react workflow (agents/workflow_react.h), greedy, in each sharing mode and
// writer, for an adapter set: every held-out question is one session, run C at a time from
// C threads through the scheduler. Per mode: success rate with a 95% Wilson interval,
// McNemar's exact test against `full` on the same questions (discordant pairs listed), KV
// bytes per episode against N full caches, wall time; in `full`, the trajectories against
// the Python runner's (assets/role_adapters/eval/episodes.csv).
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "lorakv/agents/builtin_tools.h"
#include "lorakv/agents/runtime.h"
#include "lorakv/agents/workflow_react.h"
#include "lorakv/agents/workflow_types.h"
#include "lorakv/cli/bench/episode_stats.h"
#include "lorakv/cli/cli_args.h"
#include "lorakv/cli/commands.h"
#include "lorakv/common/cpu_features.h"
#include "lorakv/common/errors.h"
#include "lorakv/formats/json.h"

namespace lorakv::cli {

namespace {

using runtime::SharingMode;
using runtime::SharedWriter;
using Clock = std::chrono::steady_clock;

const char* kHelp = R"(usage: lorakv bench episodes [flags]

The agentic QA task (tools/agentic_qa/README.md) through lorakv's react workflow, greedy,
one session per held-out question, in each sharing mode and writer: success rate with a
95% Wilson interval, McNemar's exact test against full (discordant pairs listed), KV bytes
per episode against 3 full caches, wall time; in full, trajectories compared with the
Python runner's. Writes episodes_by_mode_SET.csv and episodes_summary_SET.md under --out. An
evaluation, not part of make test; run it with nothing else on the machine.

flags:
  --model FILE      GGUF model (default models/SmolLM2-135M-Instruct.Q4_1.gguf)
  --assets DIR      data, role adapters, reference episodes (default assets)
  --set NAME        qv_shared_a, all_linear or alora (activated LoRA roles; default
                    qv_shared_a)
  --modes LIST      mode[:writer] list (default: full, full_shared, base_shared with
                    writers first and base, and base_lr_shared for qv_shared_a and alora)
  --n N             first N test questions (default 360)
  --concurrency C   sessions at once (default 16)
  --max-rounds N    planner+actor rounds per episode (default 6, as the Python runner)
  --out DIR         default bench/results/agentic_qa
)";

struct Question {
  std::string id, question, answer;
  int64_t kind = 0;
};

struct ModeSpec {
  SharingMode mode = SharingMode::kFull;
  SharedWriter writer = SharedWriter::kFirst;
  std::string name() const {
    return std::string(runtime::sharing_mode_name(mode)) +
           (mode == SharingMode::kFull ? "" : std::string(":") + runtime::shared_writer_name(writer));
  }
};

struct Episode {
  std::string answer, verdict, transcript;
  bool success = false, finished = false, consistent = true;
  int64_t rounds = 0, tokens = 0, kv_bytes = 0, full_caches_bytes = 0;
  double min_margin = 1e9;  // smallest top-1 margin over every generated token (logprobs)
  // Per transcript turn (agents' and tools'), its smallest top-1 margin; tools: none (-1).
  std::vector<std::pair<std::string, double>> turn_margins;
};

std::vector<Question> read_questions(const std::string& path, int64_t n) {
  std::ifstream in(path);
  if (!in) throw ConfigError("cannot read the questions", {path});
  std::vector<Question> out;
  for (std::string line; std::getline(in, line) && static_cast<int64_t>(out.size()) < n;) {
    if (line.empty()) continue;
    const formats::JsonValue r = formats::parse_json(line);
    out.push_back({r.at("id").as_string(), r.at("question").as_string(), r.at("answer").as_string(), r.at("kind").as_int()});
  }
  return out;
}

// RFC 4180 fields (quotes, doubled quotes, newlines inside quotes).
std::vector<std::vector<std::string>> read_csv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("cannot read the reference episodes", {path});
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::vector<std::vector<std::string>> rows(1);
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (quoted) {
      if (ch == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (ch == '"') {
        quoted = false;
      } else {
        field += ch;
      }
    } else if (ch == '"') {
      quoted = true;
    } else if (ch == ',') {
      rows.back().push_back(std::move(field));
      field.clear();
    } else if (ch == '\n') {
      rows.back().push_back(std::move(field));
      field.clear();
      rows.emplace_back();
    } else if (ch != '\r') {
      field += ch;
    }
  }
  if (!field.empty() || !rows.back().empty()) rows.back().push_back(field);
  if (rows.back().empty()) rows.pop_back();
  return rows;
}

// id -> transcript of the set's reference episodes.
std::map<std::string, std::string> reference_transcripts(const std::string& path, const std::string& set) {
  const auto rows = read_csv(path);
  std::map<std::string, std::string> out;
  if (rows.empty()) return out;
  const std::vector<std::string>& header = rows.front();
  auto column = [&](const std::string& name) {
    const auto it = std::find(header.begin(), header.end(), name);
    if (it == header.end()) throw ConfigError("the reference episodes lack a column", {path, name});
    return static_cast<size_t>(it - header.begin());
  };
  const size_t set_col = column("set"), id_col = column("id"), tr_col = column("transcript");
  for (size_t r = 1; r < rows.size(); ++r) {
    if (rows[r].size() == header.size() && rows[r][set_col] == set) out[rows[r][id_col]] = rows[r][tr_col];
  }
  return out;
}

std::vector<ModeSpec> parse_modes(const std::string& text) {
  std::vector<ModeSpec> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    const size_t colon = item.find(':');
    const std::optional<SharingMode> mode = runtime::parse_sharing_mode(item.substr(0, colon));
    const std::optional<SharedWriter> writer =
        colon == std::string::npos ? std::optional<SharedWriter>(SharedWriter::kFirst)
                                   : runtime::parse_shared_writer(item.substr(colon + 1));
    if (!mode || !writer) {
      throw ConfigError("bad mode", {"", "--modes", "mode[:writer], e.g. full,base_lr_shared:first", item, ""});
    }
    out.push_back({*mode, *writer});
  }
  if (out.empty() || out.front().mode != SharingMode::kFull) {
    throw ConfigError("the first mode must be full: the others are compared with it", {"", "--modes", "", text, ""});
  }
  return out;
}

Episode run_episode(agents::Runtime& rt, const ModeSpec& m, const Question& q, const agents::ToolRegistry& tools,
                    int max_rounds, int64_t row_bytes, int64_t block_size) {
  auto session = rt.open_session({m.mode, m.writer});
  for (const char* role : {"planner", "actor", "reflector"}) session->add_agent({role, role, ""});
  agents::ReactSpec spec;
  spec.max_steps = max_rounds;
  for (agents::WorkflowAgent* a : {&spec.planner, &spec.actor, &*spec.reflector}) a->options.logprobs = true;
  const agents::ReactResult r = agents::run_react(*session, spec, q.question, tools);
  Episode e;
  e.answer = r.answer.value_or("");
  e.finished = r.finished;
  e.success = r.answer && *r.answer == q.answer;
  e.verdict = r.verdict;
  e.consistent = r.planner_actor_consistent;
  e.rounds = r.steps;
  e.transcript = agents::transcript(r);
  for (const agents::WorkflowTurn& t : r.turns) {
    if (t.kind == agents::WorkflowTurn::Kind::kTool) e.turn_margins.emplace_back(t.role, -1.0);
    if (t.kind != agents::WorkflowTurn::Kind::kAgent) continue;
    double smallest = 1e9;
    for (size_t i = 0; i < t.reply.logprobs.size(); ++i) {
      smallest = std::min(smallest, t.reply.logprobs[i] - t.reply.runner_up_logprobs[i]);
    }
    e.turn_margins.emplace_back(t.role, smallest);
    e.min_margin = std::min(e.min_margin, smallest);
  }
  const agents::SessionStats s = session->stats();
  e.tokens = s.trajectory_tokens;
  e.kv_bytes = s.shared_kv_bytes + s.own_kv_bytes + s.residual_kv_bytes + s.private_kv_bytes;
  e.full_caches_bytes = 3 * ((s.trajectory_tokens + block_size - 1) / block_size * block_size) * row_bytes;
  session->close();
  return e;
}

// Every question in one mode, `concurrency` sessions at once.
std::vector<Episode> run_mode(agents::Runtime& rt, const ModeSpec& m, const std::vector<Question>& qs,
                              const agents::ToolRegistry& tools, int64_t concurrency, int max_rounds, double* wall_s,
                              std::ostream& out) {
  const agents::RuntimeStats st = rt.stats();
  std::vector<Episode> episodes(qs.size());
  std::atomic<size_t> next{0}, done{0};
  std::mutex print;
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> workers;
  for (int64_t w = 0; w < concurrency; ++w) {
    workers.emplace_back([&] {
      for (size_t i = next++; i < qs.size(); i = next++) {
        episodes[i] = run_episode(rt, m, qs[i], tools, max_rounds, st.base_row_bytes, rt.options().block_size);
        const size_t finished = ++done;
        if (finished % 20 == 0 || finished == qs.size()) {
          std::lock_guard<std::mutex> lock(print);
          out << "  " << m.name() << ": " << finished << "/" << qs.size() << " episodes\n" << std::flush;
        }
      }
    });
  }
  for (std::thread& t : workers) t.join();
  *wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  return episodes;
}

// The role of a transcript turn ("[actor] Lookup[X]" -> "actor").
std::string turn_role(const std::string& turn) {
  const size_t end = turn.find(']');
  return turn.size() > 1 && turn[0] == '[' && end != std::string::npos ? turn.substr(1, end - 1) : "?";
}

// Per question, where this mode's trajectory first leaves full's: the role of its first
// differing turn ("none" when equal, "ended" when it stopped first), counted.
std::map<std::string, int64_t> first_divergence(const std::vector<Episode>& full, const std::vector<Episode>& mode) {
  std::map<std::string, int64_t> counts;
  for (size_t i = 0; i < full.size() && i < mode.size(); ++i) {
    const std::vector<std::string> a = agents::transcript_turns(full[i].transcript);
    const std::vector<std::string> b = agents::transcript_turns(mode[i].transcript);
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    ++counts[k == a.size() && k == b.size() ? "none" : k < b.size() ? turn_role(b[k]) : "ended"];
  }
  return counts;
}

std::string csv_field(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

}  // namespace

int run_episodes_bench(const std::vector<std::string>& args, std::ostream& out) {
  const CliArgs a(args, {"--model", "--assets", "--set", "--modes", "--n", "--concurrency", "--max-rounds", "--out"},
                  {"--help"}, "bench episodes");
  if (a.has("--help")) {
    out << kHelp;
    return 0;
  }
  const std::string model = a.get("--model").value_or("models/SmolLM2-135M-Instruct.Q4_1.gguf");
  const std::string assets = a.get("--assets").value_or("assets");
  const std::string set = a.get("--set").value_or("qv_shared_a");
  if (set != "qv_shared_a" && set != "all_linear" && set != "alora") {
    throw ConfigError("unknown adapter set", {"", "--set", "qv_shared_a, all_linear or alora", set, ""});
  }
  // base_lr_shared serves adapters with one A (the shared-A set) or none cached (aLoRA).
  const bool serves_base_lr = set == "qv_shared_a" || set == "alora";
  const std::string default_modes = std::string("full,full_shared:first,full_shared:base,base_shared:first,base_shared:base") +
                                    (serves_base_lr ? ",base_lr_shared:first,base_lr_shared:base" : "");
  const std::vector<ModeSpec> modes = parse_modes(a.get("--modes").value_or(default_modes));
  const int64_t n = a.get_int("--n", 360, 1, 360);
  const int64_t concurrency = a.get_int("--concurrency", 16, 1, 256);
  const int max_rounds = static_cast<int>(a.get_int("--max-rounds", 6, 1, 64));
  const std::string out_dir = a.get("--out").value_or("bench/results/agentic_qa");
  std::filesystem::create_directories(out_dir);

  const std::vector<Question> qs = read_questions(assets + "/agentic_qa/test.jsonl", n);
  const auto reference = reference_transcripts(assets + "/role_adapters/eval/episodes.csv", set);
  auto store = std::make_shared<agents::DocumentStore>(agents::DocumentStore::from_jsonl(assets + "/agentic_qa/kb_test.jsonl"));
  agents::ToolRegistry tools;
  tools.add(agents::lookup_tool(store));
  tools.add(agents::calculator_tool());

  agents::RuntimeOptions ro;
  ro.model = model;
  agents::Runtime rt(ro);
  for (const char* role : {"planner", "actor", "reflector"}) rt.load_adapter(role, assets + "/role_adapters/" + set + "/" + role);
  out << "machine: " << cpu::cpu_model_name() << ", " << at::get_num_threads() << " threads; device: CPU, float32\n"
      << "set " << set << ", " << qs.size() << " questions, " << concurrency << " sessions at once, greedy, "
      << max_rounds << " rounds at most\n";

  const std::string csv_path = out_dir + "/episodes_by_mode_" + set + ".csv";
  std::ofstream csv(csv_path);
  csv << "set,mode,id,kind,gold,answer,success,finished,rounds,verdict,planner_actor_consistent,tokens,kv_bytes,"
         "full_caches_bytes,min_margin,transcript\n";
  std::ostringstream md;
  md << "| set | mode | success | 95% CI | vs full: b / c | McNemar p | KV bytes per episode | vs 3 full caches | wall s |\n"
     << "|---|---|---|---|---|---|---|---|---|\n";
  std::vector<Episode> full;
  std::ostringstream divergence;
  for (const ModeSpec& m : modes) {
    double wall = 0;
    const std::vector<Episode> eps = run_mode(rt, m, qs, tools, concurrency, max_rounds, &wall, out);
    int64_t wins = 0, kv = 0, caches = 0;
    for (size_t i = 0; i < eps.size(); ++i) {
      const Episode& e = eps[i];
      wins += e.success;
      kv += e.kv_bytes;
      caches += e.full_caches_bytes;
      csv << set << "," << m.name() << "," << qs[i].id << "," << qs[i].kind << "," << csv_field(qs[i].answer) << ","
          << csv_field(e.answer) << "," << e.success << "," << e.finished << "," << e.rounds << "," << csv_field(e.verdict)
          << "," << e.consistent << "," << e.tokens << "," << e.kv_bytes << "," << e.full_caches_bytes << ","
          << e.min_margin << "," << csv_field(e.transcript) << "\n";
    }
    csv.flush();
    if (m.mode == SharingMode::kFull) full = eps;
    int64_t b = 0, c = 0;  // right in full only, right in this mode only
    std::string discordant;
    for (size_t i = 0; i < eps.size(); ++i) {
      if (full[i].success == eps[i].success) continue;
      (full[i].success ? b : c) += 1;
      discordant += (discordant.empty() ? "" : " ") + qs[i].id + (full[i].success ? "(-)" : "(+)");
    }
    const auto [lo, hi] = wilson_interval(wins, static_cast<int64_t>(eps.size()));
    char row[320];
    std::snprintf(row, sizeof row, "| %s | %s | %lld/%zu = %.3f | [%.3f, %.3f] | %lld / %lld | %.3g | %.0f | %.2fx | %.0f |\n",
                  set.c_str(), m.name().c_str(), static_cast<long long>(wins), eps.size(),
                  static_cast<double>(wins) / static_cast<double>(eps.size()), lo, hi, static_cast<long long>(b),
                  static_cast<long long>(c), mcnemar_exact_p(b, c), static_cast<double>(kv) / static_cast<double>(eps.size()),
                  static_cast<double>(caches) / static_cast<double>(kv), wall);
    md << row;
    out << row;
    if (!discordant.empty()) out << "  discordant (- right in full only, + right here only): " << discordant << "\n";
    if (m.mode != SharingMode::kFull) {
      std::string where;
      for (const auto& [role, count] : first_divergence(full, eps)) where += " " + role + " " + std::to_string(count);
      divergence << "- " << set << " " << m.name() << ": first turn that differs from full:" << where << "\n";
      out << "  first turn that differs from full:" << where << "\n";
    }
  }
  // Full against the Python runner, question by question.
  int64_t compared = 0, identical = 0;
  std::ostringstream differences;
  for (size_t i = 0; i < qs.size() && !full.empty(); ++i) {
    const auto ref = reference.find(qs[i].id);
    if (ref == reference.end()) continue;
    ++compared;
    if (ref->second == full[i].transcript) {
      ++identical;
      continue;
    }
    const std::vector<std::string> theirs = agents::transcript_turns(ref->second);
    const std::vector<std::string> ours = agents::transcript_turns(full[i].transcript);
    size_t k = 0;
    while (k < theirs.size() && k < ours.size() && theirs[k] == ours[k]) ++k;
    differences << "  " << qs[i].id << ": first difference at turn " << k;
    if (k < full[i].turn_margins.size()) {
      differences << " (" << full[i].turn_margins[k].first << ", smallest top-1 margin in that turn "
                  << full[i].turn_margins[k].second << ")";
    }
    differences << "\n    python: " << (k < theirs.size() ? theirs[k] : "(ended)")
                << "\n    lorakv: " << (k < ours.size() ? ours[k] : "(ended)") << "\n";
  }
  char line[200];
  std::snprintf(line, sizeof line, "full against the Python runner: %lld of %lld trajectories identical\n",
                static_cast<long long>(identical), static_cast<long long>(compared));
  out << line << differences.str();
  std::ofstream summary(out_dir + "/episodes_summary_" + set + ".md");
  summary << md.str() << "\n" << divergence.str() << "\n" << line << differences.str();
  out << "wrote " << csv_path << " and " << out_dir << "/episodes_summary_" << set << ".md\n";
  return 0;
}

}  // namespace lorakv::cli
