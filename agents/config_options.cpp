// agents/config_options.cpp: config sections to the sessions API's option structs.
#include "lorakv/agents/config_options.h"

#include "lorakv/common/errors.h"

namespace lorakv::agents {

RuntimeOptions runtime_options(const config::SessionConfig& c) {
  RuntimeOptions o;
  o.model = c.model.path;
  o.dtype = c.model.dtype;
  o.threads = c.model.threads;
  o.kv_pool_bytes = c.cache.pool_bytes;
  o.residual_rows_per_base_row = c.cache.residual_rows_per_base_row;
  o.block_size = c.cache.block_size;
  o.kv_dtype = c.cache.kv_dtype;
  o.residual_dtype = c.cache.residual_dtype;
  o.rerotate = c.cache.rerotate;
  o.per_head_token_sets = c.cache.per_head_token_sets;
  o.prefill_chunk = c.cache.prefill_chunk;
  o.step_token_budget = c.cache.step_token_budget;
  return o;
}

SessionOptions session_options(const config::SessionConfig& c) {
  SessionOptions o;
  const auto mode = runtime::parse_sharing_mode(c.cache.mode);
  const auto writer = runtime::parse_shared_writer(c.cache.writer);
  LORAKV_ASSERT(mode && writer, "the loader admits only known modes and writers");
  o.mode = *mode;
  o.writer = *writer;
  o.eviction = c.cache.eviction;
  return o;
}

AgentOptions agent_options(const config::AgentSection& agent) {
  return {agent.name, agent.adapter, agent.private_instruction()};
}

GenerateOptions generate_options(const config::AgentSection& agent) {
  GenerateOptions o;
  o.max_tokens = agent.max_tokens;
  o.sampling.temperature = agent.sampling.temperature;
  o.sampling.top_k = agent.sampling.top_k;
  o.sampling.top_p = agent.sampling.top_p;
  o.sampling.repetition_penalty = agent.sampling.repetition_penalty;
  o.sampling.seed = agent.sampling.seed;
  o.stop_strings = agent.stop;
  o.allowed_prefixes = agent.allowed_prefixes;
  return o;
}

}  // namespace lorakv::agents
