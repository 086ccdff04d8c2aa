// cli/bench/bench_episodes.cpp: `lorakv bench episodes`: the agentic QA task through
// lorakv's own react workflow (agents/workflow_react.h), greedy, in each sharing mode and
// writer, for an adapter set: every held-out question is one session, run C at a time from
// C threads through the scheduler, each mode on a runtime of its own (episode_runs.h). Per
// mode: success rate with a 95% Wilson interval, McNemar's exact test against `full` on the
// same questions (discordant pairs listed), KV bytes per episode against N full caches, wall
// time; in `full`, the trajectories against the Python runner's
// (assets/role_adapters/eval/episodes.csv). Each episode's row is appended to the CSV as it
// ends; --resume runs only the episodes the file lacks.
#include <ATen/Parallel.h>

#include <algorithm>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "lorakv/agents/builtin_tools.h"
#include "lorakv/agents/runtime.h"
#include "lorakv/agents/workflow_types.h"
#include "lorakv/cli/bench/episode_rows.h"
#include "lorakv/cli/bench/episode_runs.h"
#include "lorakv/cli/bench/episode_stats.h"
#include "lorakv/cli/bench/bench_defaults.h"
#include "lorakv/cli/cli_args.h"
#include "lorakv/cli/commands.h"
#include "lorakv/common/cpu_features.h"
#include "lorakv/common/errors.h"

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
Python runner's. Each mode runs on a runtime of its own (the model and adapters loaded
again), so no mode adopts rows another mode left in the cache. Writes
episodes_by_mode_SET.csv (a row per episode, appended as each ends) and
episodes_summary_SET.md under --out. An evaluation, not part of make test; run it with
nothing else on the machine.

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
  --resume          keep the episodes the CSV already holds (same set, mode and question)
                    and run only the others; a mode's wall time is summed over its runs
  --fresh           replace an existing CSV (without either flag, an existing CSV is an error)
)";

using Episode = EpisodeResult;

// id -> transcript of the set's reference episodes.
std::map<std::string, std::string> reference_transcripts(const std::string& path, const std::string& set) {
  const auto rows = read_csv_records(path);
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
      throw UsageError("bad mode", {"", "--modes", "mode[:writer], e.g. full,base_lr_shared:first", item, ""});
    }
    out.push_back({*mode, *writer});
  }
  if (out.empty() || out.front().mode != SharingMode::kFull) {
    throw UsageError("the first mode must be full: the others are compared with it", {"", "--modes", "", text, ""});
  }
  return out;
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

// One mode's episodes on the questions, in question order (questions it lacks are left out),
// and its wall time: over the runs that measured them, each run's last end, summed.
struct ModeEpisodes {
  std::vector<size_t> question;  // index into the questions
  std::vector<Episode> episodes;
  double wall_s = 0;
  int64_t runs = 0;
};

ModeEpisodes mode_episodes(const std::vector<EpisodeRow>& rows, const std::string& set, const std::string& mode,
                           const std::vector<Question>& qs) {
  std::map<std::string, const EpisodeRow*> by_id;
  for (const EpisodeRow& r : rows) {
    if (r.set == set && r.mode == mode) by_id[r.id] = &r;
  }
  ModeEpisodes out;
  std::map<std::string, double> run_end;
  for (size_t i = 0; i < qs.size(); ++i) {
    const auto it = by_id.find(qs[i].id);
    if (it == by_id.end()) continue;
    out.question.push_back(i);
    out.episodes.push_back(it->second->result);
    double& end = run_end[it->second->result.run];
    end = std::max(end, it->second->result.elapsed_s);
  }
  for (const auto& [run, end] : run_end) out.wall_s += end;
  out.runs = static_cast<int64_t>(run_end.size());
  return out;
}

// Rows in the modes' order, then each mode's in question order; rows of other sets, modes
// or questions after them, as they were.
std::vector<EpisodeRow> sorted_rows(std::vector<EpisodeRow> rows, const std::vector<ModeSpec>& modes,
                                    const std::vector<Question>& qs) {
  std::map<std::string, size_t> mode_rank, question_rank;
  for (size_t i = 0; i < modes.size(); ++i) mode_rank.emplace(modes[i].name(), i);
  for (size_t i = 0; i < qs.size(); ++i) question_rank.emplace(qs[i].id, i);
  const auto rank = [&](const std::map<std::string, size_t>& m, const std::string& k) {
    const auto it = m.find(k);
    return it == m.end() ? m.size() : it->second;
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const EpisodeRow& a, const EpisodeRow& b) {
    return std::pair(rank(mode_rank, a.mode), rank(question_rank, a.id)) <
           std::pair(rank(mode_rank, b.mode), rank(question_rank, b.id));
  });
  return rows;
}

// The summary table, the divergence lines and full against the Python runner, printed and
// written to episodes_summary_SET.md.
void write_summary(const std::vector<EpisodeRow>& rows, const std::string& set, const std::vector<ModeSpec>& modes,
                   const std::vector<Question>& qs, const std::map<std::string, std::string>& reference,
                   const std::string& summary_path, std::ostream& out) {
  std::ostringstream md, divergence;
  md << "| set | mode | success | 95% CI | vs full: b / c | McNemar p | KV bytes per episode | vs 3 full caches | wall s |\n"
     << "|---|---|---|---|---|---|---|---|---|\n";
  const ModeEpisodes full = mode_episodes(rows, set, modes.front().name(), qs);
  std::map<size_t, const Episode*> full_by_question;
  for (size_t k = 0; k < full.question.size(); ++k) full_by_question[full.question[k]] = &full.episodes[k];
  for (const ModeSpec& m : modes) {
    const ModeEpisodes me = mode_episodes(rows, set, m.name(), qs);
    if (me.episodes.empty()) continue;
    int64_t wins = 0, kv = 0, caches = 0, b = 0, c = 0;  // b: right in full only, c: right here only
    std::string discordant;
    std::vector<Episode> paired_full, paired_mode;
    for (size_t k = 0; k < me.episodes.size(); ++k) {
      const Episode& e = me.episodes[k];
      wins += e.success;
      kv += e.kv_bytes;
      caches += e.full_caches_bytes;
      const auto f = full_by_question.find(me.question[k]);
      if (f == full_by_question.end()) continue;  // McNemar pairs questions both modes ran
      paired_full.push_back(*f->second);
      paired_mode.push_back(e);
      if (f->second->success == e.success) continue;
      (f->second->success ? b : c) += 1;
      discordant += (discordant.empty() ? "" : " ") + qs[me.question[k]].id + (f->second->success ? "(-)" : "(+)");
    }
    const auto n = static_cast<int64_t>(me.episodes.size());
    const auto [lo, hi] = wilson_interval(wins, n);
    char row[360];
    std::snprintf(row, sizeof row, "| %s | %s | %lld/%lld = %.3f | [%.3f, %.3f] | %lld / %lld | %.3g | %.0f | %.2fx | %.0f |\n",
                  set.c_str(), m.name().c_str(), static_cast<long long>(wins), static_cast<long long>(n),
                  static_cast<double>(wins) / static_cast<double>(n), lo, hi, static_cast<long long>(b),
                  static_cast<long long>(c), mcnemar_exact_p(b, c), static_cast<double>(kv) / static_cast<double>(n),
                  static_cast<double>(caches) / static_cast<double>(kv), me.wall_s);
    md << row;
    out << row;
    if (!discordant.empty()) {
      out << "  discordant (- right in full only, + right here only): " << discordant << "\n";
      divergence << "- " << set << " " << m.name() << ": discordant (- right in full only, + right here only): " << discordant
                 << "\n";
    }
    if (m.mode != SharingMode::kFull) {
      std::string where;
      for (const auto& [role, count] : first_divergence(paired_full, paired_mode)) where += " " + role + " " + std::to_string(count);
      divergence << "- " << set << " " << m.name() << ": first turn that differs from full:" << where << "\n";
      out << "  first turn that differs from full:" << where << "\n";
    }
  }
  // Full against the Python runner, question by question.
  int64_t compared = 0, identical = 0;
  std::ostringstream differences;
  for (size_t k = 0; k < full.question.size(); ++k) {
    const Question& q = qs[full.question[k]];
    const Episode& e = full.episodes[k];
    const auto ref = reference.find(q.id);
    if (ref == reference.end()) continue;
    ++compared;
    if (ref->second == e.transcript) {
      ++identical;
      continue;
    }
    const std::vector<std::string> theirs = agents::transcript_turns(ref->second);
    const std::vector<std::string> ours = agents::transcript_turns(e.transcript);
    size_t t = 0;
    while (t < theirs.size() && t < ours.size() && theirs[t] == ours[t]) ++t;
    differences << "  " << q.id << ": first difference at turn " << t;
    if (t < e.turn_margins.size()) {
      differences << " (" << e.turn_margins[t].first << ", smallest top-1 margin in that turn " << e.turn_margins[t].second << ")";
    } else {
      differences << " (smallest top-1 margin in the episode " << e.min_margin << ")";
    }
    differences << "\n    python: " << (t < theirs.size() ? theirs[t] : "(ended)")
                << "\n    lorakv: " << (t < ours.size() ? ours[t] : "(ended)") << "\n";
  }
  char line[200];
  std::snprintf(line, sizeof line, "full against the Python runner: %lld of %lld trajectories identical\n",
                static_cast<long long>(identical), static_cast<long long>(compared));
  out << line << differences.str();
  std::ofstream summary(summary_path);
  summary << md.str() << "\n"
          << "wall s: per mode, over the runs that measured its episodes (--resume), each run's time to its last "
             "episode, summed.\n\n"
          << divergence.str() << "\n" << line << differences.str();
}

}  // namespace

int run_episodes_bench(const std::vector<std::string>& args, std::ostream& out) {
  const CliArgs a(args, {"--model", "--assets", "--set", "--modes", "--n", "--concurrency", "--max-rounds", "--out"},
                  {"--help", "--resume", "--fresh"}, "bench episodes");
  if (a.has("--help")) {
    out << kHelp;
    return 0;
  }
  const std::string model = a.get("--model").value_or(default_bench_model());
  const std::string assets = a.get("--assets").value_or(default_bench_assets());
  const std::string set = a.get("--set").value_or("qv_shared_a");
  if (set != "qv_shared_a" && set != "all_linear" && set != "alora") {
    throw UsageError("unknown adapter set", {"", "--set", "qv_shared_a, all_linear or alora", set, ""});
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
  const bool resume = a.has("--resume");
  if (resume && a.has("--fresh")) throw UsageError("--resume and --fresh exclude each other", {"", "--fresh"});
  const std::string csv_path = out_dir + "/episodes_by_mode_" + set + ".csv";
  if (std::filesystem::exists(csv_path) && !resume && !a.has("--fresh")) {
    throw ConfigError("the episodes file exists", {csv_path, "", "", "", "--resume runs only the episodes it lacks, --fresh replaces it"});
  }
  // Read before the model loads: a damaged file is refused at once.
  std::vector<EpisodeRow> rows = resume ? read_episode_rows(csv_path) : std::vector<EpisodeRow>{};
  std::filesystem::create_directories(out_dir);

  const std::vector<Question> qs = read_questions(assets + "/agentic_qa/test.jsonl", n);
  const auto reference = reference_transcripts(assets + "/role_adapters/eval/episodes.csv", set);
  auto store = std::make_shared<agents::DocumentStore>(agents::DocumentStore::from_jsonl(assets + "/agentic_qa/kb_test.jsonl"));
  agents::ToolRegistry tools;
  tools.add(agents::lookup_tool(store));
  tools.add(agents::calculator_tool());

  EpisodeSetup setup;
  setup.model = model;
  setup.adapters = assets + "/role_adapters/" + set;
  setup.tools = &tools;
  setup.concurrency = concurrency;
  setup.max_rounds = max_rounds;
  out << "machine: " << cpu::cpu_model_name() << ", " << at::get_num_threads() << " threads; device: CPU, float32\n"
      << "set " << set << ", " << qs.size() << " questions, " << concurrency << " sessions at once, greedy, "
      << max_rounds << " rounds at most\n";

  // The file in today's columns with what it held, then a row appended per episode as it ends.
  write_episode_rows(csv_path, sorted_rows(rows, modes, qs));
  std::ofstream csv(csv_path, std::ios::binary | std::ios::app);
  const std::string run = std::to_string(static_cast<long long>(std::time(nullptr)));
  for (const ModeSpec& m : modes) {
    std::set<std::string> have;
    for (const EpisodeRow& r : rows) {
      if (r.set == set && r.mode == m.name()) have.insert(r.id);
    }
    std::vector<Question> todo;
    for (const Question& q : qs) {
      if (!have.count(q.id)) todo.push_back(q);
    }
    out << m.name() << ": " << qs.size() - todo.size() << " episodes from earlier runs, " << todo.size() << " to run\n";
    const std::unique_ptr<agents::Runtime> rt = open_episode_runtime(setup);
    const Clock::time_point start = Clock::now();
    run_mode(*rt, m, todo, setup, start,
             [&](const Question& q, Episode e) {
               e.run = run;
               EpisodeRow row{set, m.name(), q.id, q.answer, q.kind, std::move(e)};
               csv << episode_csv_line(row) << std::flush;
               rows.push_back(std::move(row));
             },
             out);
  }
  csv.close();
  write_episode_rows(csv_path, sorted_rows(rows, modes, qs));
  const std::string summary_path = out_dir + "/episodes_summary_" + set + ".md";
  write_summary(rows, set, modes, qs, reference, summary_path, out);
  out << "wrote " << csv_path << " and " << summary_path << "\n";
  return 0;
}

}  // namespace lorakv::cli
