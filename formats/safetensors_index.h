// formats/safetensors_index.h: a sharded safetensors checkpoint, as Hugging Face writes
// it: model.safetensors.index.json ({"metadata": {...}, "weight_map": {tensor: shard}})
// beside the shard files. Opens every shard the index names (relative to the index's
// folder) and answers tensor lookups across them. Torch-free.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "lorakv/formats/json.h"
#include "lorakv/formats/safetensors_file.h"

namespace lorakv::formats {

class SafetensorsIndex {
 public:
  // Reads the index and opens its shards. Throws ModelLoadError for a malformed index, a
  // shard name that leaves the folder, a missing or corrupt shard, or a tensor that the
  // index places in a shard that lacks it.
  static std::unique_ptr<SafetensorsIndex> open(const std::string& index_path);

  const std::string& path() const { return path_; }
  // The index's "metadata" object (e.g. total_size); an empty object when absent.
  const JsonValue& metadata() const { return metadata_; }
  // Shards in the order the weight map first names them.
  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }
  // Tensor names in weight-map order.
  const std::vector<std::string>& tensor_names() const { return names_; }

  const SafetensorsTensorInfo* find_tensor(const std::string& name) const;
  // Throws ModelLoadError naming the missing tensor.
  const SafetensorsTensorInfo& tensor(const std::string& name) const;

 private:
  std::string path_;
  JsonValue metadata_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, const SafetensorsTensorInfo*> tensors_;
};

}  // namespace lorakv::formats
