// Reading and rewriting checkpoints in tests (exec/checkpoint.h): the rank files a manifest names, and a
// damaged rank file or manifest "re-sealed" with the right hashes, so that a test reaches the checks behind
// the hash (sizes, tensors, ranges) as a deliberate forgery would.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "exec/sha256.h"

namespace trainsim::testing {

/// A fresh empty directory (fresh_dir()) removed with everything in it at the end of the scope.
struct ScopedDir {
  std::filesystem::path path;
  explicit ScopedDir(const std::string& name) : path(fresh_dir(name)) {}
  ~ScopedDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  ScopedDir(const ScopedDir&) = delete;
  ScopedDir& operator=(const ScopedDir&) = delete;
};

/// While it lives, opens the FIFO `path` for writing and closes it again whenever a reader has it open, so
/// that code which (wrongly) opens a FIFO and waits for a writer reads an empty file instead of hanging the
/// test: the test then fails on its message, not on a time-out.
class FifoUnblocker {
 public:
  explicit FifoUnblocker(std::filesystem::path path)
      : path_(std::move(path)), thread_([this] {
          while (!stop_) {
            int fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK);  // fails (ENXIO) while no reader waits
            if (fd >= 0) ::close(fd);
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
          }
        }) {}
  ~FifoUnblocker() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::filesystem::path path_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

/// The manifest of the checkpoint in `dir`, parsed.
inline nlohmann::json checkpoint_manifest(const std::filesystem::path& dir) {
  return nlohmann::json::parse(slurp(dir / "manifest.json"));
}

/// The path of rank `r`'s file in the checkpoint in `dir`, as its manifest names it.
inline std::filesystem::path checkpoint_rank_file(const std::filesystem::path& dir, int r) {
  return dir / checkpoint_manifest(dir).at("ranks").at(r).at("file").get<std::string>();
}

/// Writes `m` as the manifest of `dir` with its "sha256" recomputed (docs/executor.md §5: SHA-256 of the
/// manifest without that field, keys sorted, no spaces).
inline void write_sealed_manifest(const std::filesystem::path& dir, nlohmann::json m) {
  m.erase("sha256");
  m["sha256"] = exec::sha256_hex(m.dump());
  std::ofstream(dir / "manifest.json", std::ios::binary) << m.dump(2) << "\n";
}

/// Replaces rank `r`'s file in `dir` by `bytes`, under the name and with the size and hash a save would
/// give them, and re-seals the manifest.
inline void write_sealed_rank_file(const std::filesystem::path& dir, int r, const std::string& bytes) {
  nlohmann::json m = checkpoint_manifest(dir);
  std::filesystem::remove(dir / m["ranks"][r]["file"].get<std::string>());
  const std::string sha = exec::sha256_hex(bytes);
  const std::string name = "rank" + std::to_string(r) + "-" + sha.substr(0, 16) + ".bin";
  std::ofstream(dir / name, std::ios::binary) << bytes;
  m["ranks"][r] = {{"file", name}, {"bytes", bytes.size()}, {"sha256", sha}};
  write_sealed_manifest(dir, m);
}

}  // namespace trainsim::testing
