// agents/session_file.h: what a saved session holds, and its file (internal to the agents
// layer; Session::save and Runtime::restore_session are the API). One safetensors file:
// the rows as tensors ("shared.k.<layer>", "own<i>.v.<layer>", "shared.r<j>.<layer>"), and
// under the metadata key "lorakv.session" a JSON header: format name and version, the
// model's identity, the session's options, its agents with their adapters' identities, the
// trajectory, each sequence's content key and writers, and a SHA-256 per tensor. Version 2
// adds the eviction section (agents/session_file_eviction.h): the eviction keys, and per
// sequence its rows lane by lane with their positions, masks and scores. A session without
// a policy is written as version 1, which older readers take. Version 3 adds int8 base rows:
// "<seq>.ks.<i>" and "<seq>.vs.<i>" hold their float32 scales. Version 4 adds base keys
// stored before RoPE (a rerotating engine): "keys_before_rope": true. Version 5 adds, for a
// session with writer `author`, "authors": each token's author (runtime::ContextRows::authors)
// as indices into its own "writer_table". Every version is read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lorakv/agents/session_types.h"
#include "lorakv/common/adapter_identity.h"
#include "lorakv/runtime/engine.h"

namespace lorakv::agents {

// The newest version read and written. Version 1 has no eviction section (policy none),
// version 2 adds it, version 3 adds int8 rows with their scales, version 4 keys stored
// before RoPE, version 5 the writer `author` with the tokens' authors. A file is written in
// the oldest version that holds it.
inline constexpr int64_t kSessionFormatVersion = 5;
inline constexpr int64_t kSessionFormatVersionWithAuthors = 5;
inline constexpr int64_t kSessionFormatVersionWithKeysBeforeRope = 4;
inline constexpr int64_t kSessionFormatVersionWithInt8 = 3;
inline constexpr int64_t kSessionFormatVersionWithEviction = 2;
inline constexpr int64_t kSessionFormatVersionWithoutEviction = 1;

struct SavedAgent {
  AgentOptions options;
  AdapterIdentity adapter;  // base_model() for none
};

struct SessionFile {
  std::string model_sha256;  // RuntimeCore::model_identity()
  SessionOptions options;
  std::vector<SavedAgent> agents;  // reader i of rows is agents[i]
  runtime::ContextRows rows;
};

std::vector<uint8_t> encode_session(const SessionFile& file);
// Throws SessionFileError naming the file and what is wrong with it.
SessionFile read_session(const std::string& path);

// The identity of a model's files, not their path: SHA-256 over a GGUF file's bytes, or over
// the names and bytes of an HF checkpoint folder's files, in name order.
std::string model_files_sha256(const std::string& path);

}  // namespace lorakv::agents
