// Files the executor reads and writes whole: the corpus (exec/data.h) and checkpoints (exec/checkpoint.h).
//
// Reading takes regular files only, opened without blocking (a FIFO in place of a file does not wait for a
// writer; a device is refused before it is opened), and never reads more than a bound given by the caller
// (a link to /dev/zero is refused, a file larger than the bound is refused before anything is read). The
// bytes are copied into memory, so a file that changes afterwards cannot change or end the run (a memory
// map of a file truncated under it raises SIGBUS).
//
// Writing into a directory is atomic per file: the bytes go to a temporary name, are fsync'd, and the
// temporary is renamed over the final name, so the name holds the old bytes or the new ones, never part of
// either. The writer holds an exclusive lock on the directory (flock), so that two processes writing into
// it at once are refused instead of mixed.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace trainsim::exec {

/// A file that cannot be read or written; the message names the file and the reason.
struct FileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A file that holds more bytes than the bound it is read with.
struct FileTooLargeError : FileError {
  FileTooLargeError(const std::string& what, std::size_t file_bytes) : FileError(what), bytes(file_bytes) {}
  std::size_t bytes;  ///< the file's size
};

/// "4 GiB", "16 MiB" or "1,234 bytes".
std::string byte_size_text(std::size_t bytes);

/// Appends the bytes of the regular file `path` to `out` and returns how many there were. `what` names the
/// file in messages ("the corpus file"). Throws FileError when the file cannot be opened or read, is not a
/// regular file (a directory, FIFO, device or socket; a symbolic link counts as what it points to), changes
/// size while it is read, or cannot be held in memory; FileTooLargeError when it holds more than `limit`
/// bytes (nothing is read then).
std::size_t append_regular_file(const std::string& path, std::size_t limit, std::string& out,
                                std::string_view what = "the file");

/// A directory being written: created when missing, opened and locked (flock, exclusive) for the object's
/// life. Not copyable.
class DirectoryWriter {
 public:
  /// Creates `dir` (and its parents) when missing, opens it and takes its lock. Throws FileError when it
  /// cannot, or when another process holds the lock (it is writing into the directory).
  explicit DirectoryWriter(std::string dir);
  ~DirectoryWriter();
  DirectoryWriter(const DirectoryWriter&) = delete;
  DirectoryWriter& operator=(const DirectoryWriter&) = delete;

  /// Writes `bytes` to the entry `name` atomically: into the new file `temp` (a stale file of that name is
  /// removed first), fsync'd and closed, then renamed over `name`. The rename is not yet durable: call
  /// sync(). Throws FileError naming the file; the temporary is removed then, and `name` is unchanged.
  void write_atomically(const std::string& temp, const std::string& name, std::string_view bytes);
  /// fsync of the directory, so that the renames so far survive a crash. Throws FileError.
  void sync();
  /// The names of the directory's entries (not "." and ".."), sorted; those listed before an error when
  /// the listing fails. Never throws.
  std::vector<std::string> names() const noexcept;
  /// Removes the file `name` when it is there; false when it could not be removed (it is then left as it
  /// is). Never throws: for clean-up.
  bool remove(const std::string& name) noexcept;
  /// `dir/name`, for messages.
  std::string path(const std::string& name) const;

 private:
  std::string dir_;
  int fd_ = -1;
};

}  // namespace trainsim::exec
