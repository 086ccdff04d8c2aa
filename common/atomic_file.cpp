// common/atomic_file.cpp: temporary file, fsync, rename, fsync of the folder.
#include "lorakv/common/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "lorakv/common/errors.h"

namespace lorakv {

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw Error(ErrorCode::kSystem, "file error", what + ": " + std::strerror(errno), {path});
}

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

void write_all(int fd, const std::vector<uint8_t>& bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot write", path);
    done += static_cast<size_t>(n);
  }
}

}  // namespace

void write_file_atomically(const std::string& path, const std::vector<uint8_t>& bytes,
                           const std::function<void()>& before_rename) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create", tmp);
  bool open = true;
  try {
    write_all(fd, bytes, tmp);
    if (::fsync(fd) != 0) fail("cannot sync", tmp);
    open = false;  // closed (or lost) by the call below either way
    if (::close(fd) != 0) fail("cannot close", tmp);
  } catch (...) {
    if (open) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  try {
    if (before_rename) before_rename();
    if (::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename " + tmp + " to", path);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  // The rename itself is durable once the folder's entry is synced.
  const int dir = ::open(folder_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

}  // namespace lorakv
