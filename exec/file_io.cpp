#include "exec/file_io.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <new>
#include <system_error>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "schedules/input.h"

namespace trainsim::exec {

namespace {

std::string error_text(int err) { return std::strerror(err); }

// What a file of this mode is, for "is not a regular file (a FIFO)".
std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

// Closes a descriptor at the end of a scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string byte_size_text(std::size_t bytes) {
  if (bytes >= (std::size_t{1} << 30) && bytes % (std::size_t{1} << 30) == 0) return fmt::format("{} GiB", bytes >> 30);
  if (bytes >= (std::size_t{1} << 20) && bytes % (std::size_t{1} << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  return fmt::format("{} bytes", bytes);
}

std::size_t append_regular_file(const std::string& path, std::size_t limit, std::string& out, std::string_view what) {
  const std::string name = fmt::format("{} '{}'", what, shown(path, 4096));
  auto not_regular = [&](mode_t mode) {
    return FileError(fmt::format("{} is not a regular file (it is {})", name, kind_of(mode)));
  };
  // A first look by name, so that a device is never opened (opening some has effects) ...
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw FileError(fmt::format("cannot read {}: {}", name, error_text(errno)));
  if (!S_ISREG(st.st_mode)) throw not_regular(st.st_mode);
  // ... then the check that counts, on what was opened. O_NONBLOCK: a FIFO put there in between is opened
  // at once rather than waiting for a writer, and refused below.
  Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)};
  if (f.fd < 0) throw FileError(fmt::format("cannot read {}: {}", name, error_text(errno)));
  if (::fstat(f.fd, &st) != 0) throw FileError(fmt::format("cannot read {}: {}", name, error_text(errno)));
  if (!S_ISREG(st.st_mode)) throw not_regular(st.st_mode);
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size > limit)
    throw FileTooLargeError(fmt::format("{} holds {} bytes, more than the limit of {}", name, size, byte_size_text(limit)),
                            size);
  const std::size_t start = out.size();
  try {
    out.resize(start + size);
  } catch (const std::bad_alloc&) {
    throw FileError(fmt::format("cannot hold {} in memory ({} bytes)", name, size));
  } catch (const std::length_error&) {
    throw FileError(fmt::format("cannot hold {} in memory ({} bytes)", name, size));
  }
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(f.fd, out.data() + start + got, std::min<std::size_t>(size - got, std::size_t{1} << 24));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      out.resize(start);
      throw FileError(fmt::format("cannot read {}: {}", name, error_text(err)));
    }
    if (n == 0) {
      out.resize(start);
      throw FileError(fmt::format("{} shrank while it was read ({} of its {} bytes were there)", name, got, size));
    }
    got += static_cast<std::size_t>(n);
  }
  // One more byte: a file that grew since fstat (or one that reports a size it does not have, as /proc's
  // files report 0) is not what its size said.
  char extra = 0;
  ssize_t n = 0;
  do n = ::read(f.fd, &extra, 1);
  while (n < 0 && errno == EINTR);
  if (n != 0) {
    const int err = errno;
    out.resize(start);
    if (n < 0) throw FileError(fmt::format("cannot read {}: {}", name, error_text(err)));
    throw FileError(fmt::format("{} holds more than the {} bytes its size says (it grew while it was read, or is "
                                "not an ordinary file)",
                                name, size));
  }
  return size;
}

DirectoryWriter::DirectoryWriter(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw FileError(fmt::format("cannot create the directory '{}': {}", shown(dir_, 4096), ec.message()));
  fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) throw FileError(fmt::format("cannot open the directory '{}': {}", shown(dir_, 4096), error_text(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      ::close(fd_);
      throw FileError(fmt::format("another process is writing into '{}' (it holds the directory's lock): wait for it "
                                  "to finish, or write elsewhere",
                                  shown(dir_, 4096)));
    }
    // A file system without locks (ENOLCK, EOPNOTSUPP on some network file systems): go on unlocked.
  }
}

DirectoryWriter::~DirectoryWriter() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

std::string DirectoryWriter::path(const std::string& name) const {
  return shown((std::filesystem::path(dir_) / name).string(), 4096);
}

void DirectoryWriter::write_atomically(const std::string& temp, const std::string& name, std::string_view bytes) {
  if (::unlinkat(fd_, temp.c_str(), 0) != 0 && errno != ENOENT)
    throw FileError(fmt::format("cannot remove the stale temporary file '{}': {}", path(temp), error_text(errno)));
  // O_EXCL | O_NOFOLLOW: a file or link someone put there since is not written through.
  Fd f{::openat(fd_, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)};
  if (f.fd < 0) throw FileError(fmt::format("cannot create '{}': {}", path(temp), error_text(errno)));
  auto fail = [&](const std::string& doing, int err) {
    ::unlinkat(fd_, temp.c_str(), 0);
    return FileError(fmt::format("cannot {} '{}': {}", doing, path(temp), error_text(err)));
  };
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(f.fd, bytes.data() + done, std::min<std::size_t>(bytes.size() - done, std::size_t{1} << 24));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw fail("write", n < 0 ? errno : EIO);
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(f.fd) != 0) throw fail("sync", errno);
  const int fd = f.fd;
  f.fd = -1;
  if (::close(fd) != 0) throw fail("close", errno);
  if (::renameat(fd_, temp.c_str(), fd_, name.c_str()) != 0) {
    const int err = errno;
    ::unlinkat(fd_, temp.c_str(), 0);
    throw FileError(fmt::format("cannot rename '{}' to '{}': {}", path(temp), path(name), error_text(err)));
  }
}

void DirectoryWriter::sync() {
  if (::fsync(fd_) != 0) throw FileError(fmt::format("cannot sync the directory '{}': {}", shown(dir_, 4096), error_text(errno)));
}

std::vector<std::string> DirectoryWriter::names() const noexcept {
  std::vector<std::string> out;
  try {
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec))
      out.push_back(it->path().filename().string());
    std::sort(out.begin(), out.end());
  } catch (...) {  // out of memory: what was listed
  }
  return out;
}

bool DirectoryWriter::remove(const std::string& name) noexcept {
  return ::unlinkat(fd_, name.c_str(), 0) == 0 || errno == ENOENT;
}

}  // namespace trainsim::exec
