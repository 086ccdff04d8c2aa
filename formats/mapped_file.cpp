// formats/mapped_file.cpp: POSIX implementation of MappedFile.
#include "lorakv/formats/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "lorakv/common/errors.h"

namespace lorakv::formats {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw ModelLoadError("cannot open file", {path, "", "a readable file", std::strerror(errno),
                                              "check the path and its permissions"});
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ModelLoadError("not a regular file", {path, "", "a regular file", "something else", ""});
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw ModelLoadError("cannot memory-map file", {path, "", "", std::strerror(err), ""});
    }
    data_ = static_cast<const uint8_t*>(p);
    mapped_ = true;
  }
  ::close(fd);
}

MappedFile::MappedFile(std::string name, std::vector<uint8_t> bytes)
    : path_(std::move(name)), size_(bytes.size()), owned_(std::move(bytes)) {
  data_ = owned_.empty() ? nullptr : owned_.data();
}

MappedFile::~MappedFile() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace lorakv::formats
