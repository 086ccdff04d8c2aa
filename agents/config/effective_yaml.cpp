// agents/config/effective_yaml.cpp: the loaded configuration printed back as YAML, every
// default written out, for `lorakv run --check`. Texts are double-quoted so that none
// reads back as another type (a system text "null", a name "123").
#include <yaml-cpp/emitter.h>
#include <yaml-cpp/emittermanip.h>

#include <cstdio>
#include <cstdlib>

#include "lorakv/agents/config/load_session_config.h"
#include "lorakv/common/errors.h"

namespace lorakv::agents::config {
namespace {

// The shortest decimal form that reads back as the same double.
std::string number_text(double value) {
  char buffer[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", digits, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

std::string size_text(int64_t bytes) {
  for (const auto& [unit, scale] : {std::pair<const char*, int64_t>{"GiB", int64_t{1} << 30}, {"MiB", int64_t{1} << 20},
                                    {"KiB", int64_t{1} << 10}}) {
    if (bytes % scale == 0) return std::to_string(bytes / scale) + unit;
  }
  return std::to_string(bytes);
}

// A comment's text on one line.
std::string one_line(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out;
}

bool is_plain_name(const std::string& name) {
  if (name.empty() || name == "null" || name == "true" || name == "false" || name == "~") return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return !(name[0] >= '0' && name[0] <= '9');
}

class Printer {
 public:
  YAML::Emitter& out() { return out_; }

  void key(const std::string& name) {
    out_ << YAML::Key;
    if (is_plain_name(name)) {
      out_ << name;
    } else {
      out_ << YAML::DoubleQuoted << name;
    }
    out_ << YAML::Value;
  }
  void text(const std::string& name, const std::string& value) {
    key(name);
    out_ << YAML::DoubleQuoted << value;
  }
  void plain(const std::string& name, const std::string& value) {
    key(name);
    out_ << value;
  }
  void number(const std::string& name, int64_t value) { plain(name, std::to_string(value)); }
  void list(const std::string& name, const std::vector<std::string>& values) {
    key(name);
    out_ << YAML::Flow << YAML::BeginSeq;
    for (const std::string& v : values) out_ << YAML::DoubleQuoted << v;
    out_ << YAML::EndSeq;
  }
  void begin(const std::string& name, bool empty = false) {
    key(name);
    if (empty) out_ << YAML::Flow;  // `tools: {}` rather than a lone {} on the next line
    out_ << YAML::BeginMap;
  }
  void end() { out_ << YAML::EndMap; }

 private:
  YAML::Emitter out_;
};

void print_runtime(Printer& p, const SessionConfig& c) {
  p.begin("model");
  p.text("path", c.model.path);
  p.plain("dtype", c.model.dtype);
  p.number("threads", c.model.threads);
  p.end();
  p.begin("adapters", c.adapters.empty());
  for (const AdapterSection& a : c.adapters) p.text(a.name, a.path);
  p.end();
  p.begin("cache");
  p.plain("mode", c.cache.mode);
  p.plain("writer", c.cache.writer);
  p.number("block_size", c.cache.block_size);
  p.plain("pool_bytes", size_text(c.cache.pool_bytes));
  p.plain("kv_dtype", c.cache.kv_dtype.empty() ? c.model.dtype : c.cache.kv_dtype);
  p.plain("rerotate", c.cache.rerotate ? "true" : "false");
  p.plain("per_head_token_sets", c.cache.per_head_token_sets ? "true" : "false");
  p.plain("residual_dtype", c.cache.residual_dtype.empty() ? c.model.dtype : c.cache.residual_dtype);
  p.plain("residual_rows_per_base_row", number_text(c.cache.residual_rows_per_base_row));
  p.number("prefill_chunk", c.cache.prefill_chunk);
  p.number("step_token_budget", c.cache.step_token_budget);
  const cache::eviction::EvictionConfig& e = c.cache.eviction;
  p.begin("eviction");
  p.plain("policy", e.policy);
  if (e.budget_fraction > 0) {
    std::string share = number_text(e.budget_fraction);
    if (share.find('.') == std::string::npos) share += ".0";  // 1 would read back as one token
    p.plain("budget", share);
  }
  if (e.budget_tokens > 0) p.number("budget", e.budget_tokens);  // none: no budget to print
  p.number("sinks", e.sinks);
  p.number("window", e.window);
  p.plain("window_growth", number_text(e.window_growth));
  p.plain("scoring", e.scoring);
  if (e.layer_budgets == "list") {
    p.key("layer_budgets");
    p.out() << YAML::Flow << YAML::BeginSeq;
    for (double w : e.layer_weights) p.out() << number_text(w);
    p.out() << YAML::EndSeq;
  } else {
    p.plain("layer_budgets", e.layer_budgets);
  }
  p.plain("pyramid_beta", number_text(e.pyramid_beta));
  p.plain("head_floor", number_text(e.head_floor));
  p.number("leverage_rank", e.leverage_rank);
  p.plain("capkv_tau", number_text(e.capkv_tau));
  p.number("capkv_future_positions", e.capkv_future_positions);
  p.plain("loss_bound", e.loss_bound ? "true" : "false");
  p.end();
  p.end();
}

void print_agent(Printer& p, const AgentSection& a) {
  p.begin(a.name);
  p.key("adapter");
  if (a.adapter.empty()) {
    p.out() << YAML::Null << YAML::Comment("the base model");
  } else {
    p.out() << YAML::DoubleQuoted << a.adapter;
  }
  if (a.role.empty() && a.goal.empty() && a.backstory.empty()) {
    p.text("instruction", a.instruction);
  } else {
    p.text("role", a.role);
    p.text("goal", a.goal);
    p.text("backstory", a.backstory);
    p.out() << YAML::Comment("private instruction: " + one_line(a.private_instruction()));
  }
  p.number("max_tokens", a.max_tokens);
  p.key("sampling");
  p.out() << YAML::Flow << YAML::BeginMap;
  p.plain("temperature", number_text(a.sampling.temperature));
  p.number("top_k", a.sampling.top_k);
  p.plain("top_p", number_text(a.sampling.top_p));
  p.plain("repetition_penalty", number_text(a.sampling.repetition_penalty));
  p.plain("seed", std::to_string(a.sampling.seed));
  p.end();
  p.list("stop", a.stop);
  p.list("allowed_prefixes", a.allowed_prefixes);
  p.end();
}

void print_tool(Printer& p, const ToolSection& t) {
  p.begin(t.name);
  p.plain("type", t.type);
  p.text("description", t.description);
  if (t.type == "lookup") {
    if (!t.documents.empty()) p.list("documents", t.documents);
    if (!t.documents_file.empty()) p.text("documents_file", t.documents_file);
    p.out() << YAML::Comment(std::to_string(t.entries.size()) + " documents");
  } else {
    p.number("timeout_ms", t.timeout_ms);
  }
  p.end();
}

void print_tasks(Printer& p, const std::vector<TaskSection>& tasks) {
  p.key("tasks");
  p.out() << YAML::BeginSeq;
  for (const TaskSection& t : tasks) {
    p.out() << YAML::BeginMap;
    p.text("name", t.name);
    p.text("description", t.description);
    p.text("expected_output", t.expected_output);
    p.text("agent", t.agent);
    p.list("context", t.context);
    p.out() << YAML::EndMap;
  }
  p.out() << YAML::EndSeq;
}

void print_workflow(Printer& p, const WorkflowSection& w) {
  p.begin("workflow");
  p.plain("type", w.type);
  p.text("system", w.system);
  p.text("input", w.input);
  if (w.type == "react") {
    p.text("planner", w.planner);
    p.text("actor", w.actor);
    p.key("reflector");
    if (w.reflector.empty()) {
      p.out() << YAML::Null << YAML::Comment("none");
    } else {
      p.out() << YAML::DoubleQuoted << w.reflector;
    }
    p.number("max_steps", w.max_steps);
    p.list("tools", w.tools);
  } else if (w.type == "round_robin") {
    p.list("agents", w.agents);
    p.number("rounds", w.rounds);
  } else {
    print_tasks(p, w.tasks);
  }
  p.end();
}

}  // namespace

std::string effective_config_yaml(const SessionConfig& config) {
  Printer p;
  p.out() << YAML::Comment("effective configuration of " + one_line(config.source) + ": defaults filled in, paths resolved");
  p.out() << YAML::BeginMap;
  print_runtime(p, config);
  p.begin("agents");
  for (const AgentSection& a : config.agents) print_agent(p, a);
  p.end();
  p.begin("tools", config.tools.empty());
  for (const ToolSection& t : config.tools) print_tool(p, t);
  p.end();
  print_workflow(p, config.workflow);
  p.begin("output", config.output.transcript.empty());
  if (!config.output.transcript.empty()) p.text("transcript", config.output.transcript);
  p.end();
  p.out() << YAML::EndMap;
  LORAKV_ASSERT(p.out().good(), "the YAML emitter failed: " << p.out().GetLastError());
  return std::string(p.out().c_str()) + "\n";
}

}  // namespace lorakv::agents::config
