// cache/eviction/streaming_llm.cpp: the newest candidates.
#include "lorakv/cache/eviction/policies.h"

namespace lorakv::cache::eviction {

std::vector<int64_t> StreamingLlmPolicy::choose(const LaneCandidates&, const std::vector<int64_t>& candidates,
                                                int64_t room) const {
  return {candidates.end() - room, candidates.end()};
}

}  // namespace lorakv::cache::eviction
