// formats/mapped_file.h: a read-only memory map of a whole file (POSIX mmap). Readers
// (GGUF, safetensors) parse from it with bounds-checked cursors; nothing is copied.
// A buffer already in memory can stand in for a file (tests, fuzzers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lorakv::formats {

class MappedFile {
 public:
  // Maps `path` read-only. Throws ModelLoadError (with the path and errno text) when the
  // file cannot be opened or mapped. An empty file maps to size() == 0.
  explicit MappedFile(const std::string& path);
  // Holds `bytes` (no file is read); `name` stands for the path in error messages.
  MappedFile(std::string name, std::vector<uint8_t> bytes);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::vector<uint8_t> owned_;  // the bytes when built from memory; data_ points into it
  bool mapped_ = false;         // data_ came from mmap
};

}  // namespace lorakv::formats
