// agents/session_file_eviction.h: the eviction section of a session file (version 2,
// internal to agents/session_file.cpp): the session's eviction keys in the JSON header, and
// per sequence its lanes (each lane's row positions, which rows are masked, the scores) as
// tensors beside its rows, with their row counts in the header.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lorakv/cache/eviction/eviction_config.h"
#include "lorakv/formats/json.h"
#include "lorakv/formats/safetensors_file.h"
#include "lorakv/runtime/engine.h"

namespace lorakv::agents {

// Every key of the config (docs/sessions.md lists them).
formats::JsonValue eviction_json(const cache::eviction::EvictionConfig& config);
// Every key required and checked (EvictionConfig::check); throws SessionFileError naming
// `path` and the key.
cache::eviction::EvictionConfig eviction_from_json(const std::string& path, const formats::JsonValue& json);

// The lanes' tensors through `add`: <prefix>.lanes.positions (int32, every lane's rows in
// lane order), <prefix>.lanes.live (uint8, 0: masked) and <prefix>.lanes.scores (float32, the
// rows of the lanes with scores). Returns the header part: rows and scored (0/1) per lane.
formats::JsonValue encode_lanes(const std::string& prefix, const std::vector<runtime::SequenceRows::Lane>& lanes,
                                const std::function<void(const std::string&, const at::Tensor&)>& add);

// `tensor(name)`: a tensor of the file, present and matching its checksum. Throws
// SessionFileError naming `path` and the field for counts that disagree with the tensors,
// tensors of another dtype or size, positions that do not ascend within the sequence's
// `tokens`, masks other than 0 and 1, and scores that are not finite.
using CheckedTensor = std::function<const formats::SafetensorsTensorInfo&(const std::string& name)>;
std::vector<runtime::SequenceRows::Lane> decode_lanes(const std::string& path, const std::string& prefix,
                                                      const formats::JsonValue& json, int64_t tokens,
                                                      const CheckedTensor& tensor);

}  // namespace lorakv::agents
