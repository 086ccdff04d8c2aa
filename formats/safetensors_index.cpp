// formats/safetensors_index.cpp: reading model.safetensors.index.json and checking it
// against its shards up front, so a bad checkpoint fails at open, not at first lookup.
#include "lorakv/formats/safetensors_index.h"

#include <algorithm>
#include <filesystem>
#include <memory>

#include "lorakv/common/errors.h"

namespace lorakv::formats {
namespace fs = std::filesystem;

std::unique_ptr<SafetensorsIndex> SafetensorsIndex::open(const std::string& index_path) {
  auto index = std::make_unique<SafetensorsIndex>();
  index->path_ = index_path;
  JsonValue root;
  try {
    root = parse_json_file(index_path);
    if (const JsonValue* m = root.find("metadata"); m != nullptr && !m->is_null()) {
      m->as_object();  // type check
      index->metadata_ = *m;
    } else {
      index->metadata_ = JsonValue::make_object({});
    }
    root.at("weight_map").as_object();  // type check
  } catch (const ConfigError& e) {
    throw ModelLoadError("invalid safetensors index: " + e.message(), e.context());
  }

  const fs::path folder = fs::path(index_path).parent_path();
  std::unordered_map<std::string, SafetensorsFile*> by_shard;
  for (const auto& [name, shard_value] : root.at("weight_map").as_object()) {
    if (!shard_value.is_string()) {
      throw ModelLoadError("weight_map entry is not a shard file name",
                           {index_path, "weight_map." + name, "a string", shard_value.describe(), ""});
    }
    const std::string& shard = shard_value.as_string();
    // Shard names are plain file names beside the index; refuse anything that escapes it.
    const fs::path rel(shard);
    const bool escapes = rel.empty() || rel.is_absolute() ||
                         std::any_of(rel.begin(), rel.end(), [](const fs::path& p) { return p == ".."; });
    if (escapes) {
      throw ModelLoadError("weight_map names a shard outside the index's folder",
                           {index_path, name, "a relative file name", "\"" + shard + "\"", ""});
    }
    SafetensorsFile*& file = by_shard[shard];
    if (file == nullptr) {
      const std::string shard_path = (folder / rel).string();
      if (!fs::is_regular_file(shard_path)) {
        throw ModelLoadError("shard file is missing",
                             {index_path, name, "the shard '" + shard_path + "'", "no such file",
                              "the download may be incomplete; fetch every shard the index lists"});
      }
      index->shards_.push_back(SafetensorsFile::open(shard_path));
      file = index->shards_.back().get();
    }
    const SafetensorsTensorInfo* info = file->find_tensor(name);
    if (info == nullptr) {
      throw ModelLoadError("index names a tensor that its shard lacks",
                           {index_path, name, "the tensor in '" + file->path() + "'",
                            "none among its " + std::to_string(file->tensors().size()) + " tensors",
                            "the index and the shards come from different checkpoints"});
    }
    index->names_.push_back(name);
    index->tensors_.emplace(name, info);
  }
  return index;
}

const SafetensorsTensorInfo* SafetensorsIndex::find_tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

const SafetensorsTensorInfo& SafetensorsIndex::tensor(const std::string& name) const {
  const SafetensorsTensorInfo* t = find_tensor(name);
  if (t == nullptr) {
    throw ModelLoadError("required tensor is missing",
                         {path_, name, "a tensor of that name", "none among " + std::to_string(names_.size()) + " tensors",
                          "the checkpoint may be incomplete or of another architecture"});
  }
  return *t;
}

}  // namespace lorakv::formats
