// server/metrics.cpp: the Prometheus exposition.
#include "lorakv/server/metrics.h"

#include <sstream>

namespace lorakv::server {
namespace {

class Exposition {
 public:
  void family(const std::string& name, const char* type, const char* help) {
    out_ << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  }
  template <typename T>
  void sample(const std::string& name, T value, const std::string& labels = "") {
    out_ << name << (labels.empty() ? "" : "{" + labels + "}") << ' ' << value << '\n';
  }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

}  // namespace

std::string metrics_text(ServerState& state) {
  Exposition e;
  ServerCounters& c = state.counters();
  e.family("lorakv_requests_running", "gauge", "Requests being answered now.");
  e.sample("lorakv_requests_running", state.running());
  e.family("lorakv_requests_total", "counter", "Requests answered, by outcome.");
  e.sample("lorakv_requests_total", c.requests.load(), "outcome=\"ok\"");
  e.sample("lorakv_requests_total", c.failed_requests.load(), "outcome=\"error\"");
  e.family("lorakv_client_disconnects_total", "counter", "Requests cancelled because their client left.");
  e.sample("lorakv_client_disconnects_total", c.disconnects.load());
  e.family("lorakv_prompt_tokens_total", "counter", "Prompt tokens of finished requests.");
  e.sample("lorakv_prompt_tokens_total", c.prompt_tokens.load());
  e.family("lorakv_cached_prompt_tokens_total", "counter", "Prompt tokens whose rows were reused, not computed.");
  e.sample("lorakv_cached_prompt_tokens_total", c.cached_tokens.load());
  e.family("lorakv_generation_tokens_total", "counter", "Generated tokens of finished requests.");
  e.sample("lorakv_generation_tokens_total", c.completion_tokens.load());
  if (!state.ready()) return e.text();
  const agents::RuntimeStats s = state.runtime().stats();
  e.family("lorakv_requests_waiting", "gauge", "Replies waiting for room in the KV pools.");
  e.sample("lorakv_requests_waiting", s.waiting_calls);
  e.family("lorakv_kv_bytes", "gauge", "KV cache bytes in use by component, and cached (reusable) blocks.");
  e.sample("lorakv_kv_bytes", s.kv_base_bytes, "component=\"base\"");
  e.sample("lorakv_kv_bytes", s.kv_residual_bytes, "component=\"residual\"");
  e.sample("lorakv_kv_bytes", s.kv_cached_bytes, "component=\"cached\"");
  e.family("lorakv_kv_capacity_bytes", "gauge", "The KV pools' size.");
  e.sample("lorakv_kv_capacity_bytes", s.kv_bytes_capacity);
  e.family("lorakv_adapter_bytes", "gauge", "Bytes of the loaded adapters.");
  e.sample("lorakv_adapter_bytes", s.adapter_bytes);
  e.family("lorakv_engine_steps_total", "counter", "Engine steps run.");
  e.sample("lorakv_engine_steps_total", s.driver.steps);
  e.family("lorakv_engine_step_seconds_total", "counter", "Host time of engine steps (plan, forward, commit, evict).");
  e.sample("lorakv_engine_step_seconds_total",
           s.driver.admit_seconds + s.driver.run_seconds + s.driver.commit_seconds + s.driver.evict_seconds);
  e.family("lorakv_prefix_hit_tokens_total", "counter", "Context tokens whose rows the prefix index supplied.");
  e.sample("lorakv_prefix_hit_tokens_total", s.driver.prefix_hit_tokens);
  return e.text();
}

}  // namespace lorakv::server
