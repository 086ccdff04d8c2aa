// common/atomic_file.h: replaces a file so that a reader (or a crash at any moment) sees
// either the old content or the new, never a mix: write a temporary file beside it, fsync
// it, rename it over the target, fsync the folder.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lorakv {

// Throws Error naming the path and the failing call (errno text). `before_rename`, when
// set, runs after the temporary file is complete and synced, before the rename (tests
// inject failures there); if it throws, the temporary file is removed and the target is
// untouched.
void write_file_atomically(const std::string& path, const std::vector<uint8_t>& bytes,
                           const std::function<void()>& before_rename = nullptr);

}  // namespace lorakv
