#include "exec/data.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "exec/file_io.h"
#include "exec/sha256.h"
#include "schedules/input.h"

namespace trainsim::exec {

namespace {

// `text` with every byte sequence that is not UTF-8 replaced by U+FFFD (nlohmann::json's own check), so
// that a path can go into JSON.
std::string valid_utf8(const std::string& text) {
  return nlohmann::json::parse(nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))
      .get<std::string>();
}

}  // namespace

TokenData::TokenData(std::vector<std::string> files, std::size_t limit) : files_(std::move(files)) {
  Sha256 stream;
  for (const std::string& path : files_) {
    const std::size_t before = bytes_.size();
    try {
      // What is left of the limit for this file: the files together hold at most `limit` bytes.
      append_regular_file(path, limit - before, bytes_, "the corpus file");
    } catch (const FileTooLargeError& e) {
      throw DataError(fmt::format("the corpus is too large: with the corpus file '{}' ({} bytes) it holds {} bytes, "
                                  "more than the limit of {} (the corpus is read into memory)",
                                  shown(path, 4096), e.bytes, before + e.bytes, byte_size_text(limit)));
    } catch (const FileError& e) {
      throw DataError(e.what());
    }
    const std::string_view added(bytes_.data() + before, bytes_.size() - before);
    file_bytes_.push_back(added.size());
    file_sha256_.push_back(sha256_hex(added));
    stream.update(added);
  }
  sha256_ = stream.hex();
  size_ = static_cast<long>(bytes_.size());
  if (size_ == 0) throw DataError("the corpus is empty (no bytes in the data files)");
  train_ = size_ - size_ / 10;
}

std::vector<std::string> TokenData::default_files() {
  const std::filesystem::path dir = "/usr/share/games/fortunes";
  std::vector<std::string> files;
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec))
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file() && !e.is_symlink() && ext != ".dat" && ext != ".u8") files.push_back(e.path().string());
    }
  std::sort(files.begin(), files.end());
  if (files.empty())
    throw DataError(
        "no default corpus: /usr/share/games/fortunes has no text files (install the Debian package 'fortunes', "
        "as scripts/install-deps.sh does, or pass --data FILE)");
  return files;
}

int TokenData::token(long i) const { return static_cast<unsigned char>(bytes_[static_cast<std::size_t>(i)]); }

void TokenData::check_fits(const ModelConfig& m) const {
  if (train_ < m.seq + 2 || size_ - train_ < m.seq + 2)
    throw DataError(fmt::format("the corpus is too short: {} bytes give {} training and {} validation tokens, but a "
                                "sequence needs {} in each split",
                                size_, train_, size_ - train_, m.seq + 2));
}

void TokenData::sequence(long start, int len, int* tokens, int* targets) const {
  for (int t = 0; t < len; ++t) {
    tokens[t] = token(start + t);
    targets[t] = token(start + t + 1);
  }
}

void TokenData::microbatch(const ModelConfig& m, long step, int microbatches, int b, int* tokens, int* targets) const {
  const long span = train_ - m.seq - 1;  // starts in [0, span) keep seq+1 tokens inside the split
  for (int i = 0; i < m.microbatch_size; ++i) {
    long g = (step * microbatches + b) * m.microbatch_size + i;
    long start = static_cast<long>((static_cast<unsigned long>(g) * static_cast<unsigned long>(m.seq)) %
                                   static_cast<unsigned long>(span));
    sequence(start, m.seq, tokens + static_cast<long>(i) * m.seq, targets + static_cast<long>(i) * m.seq);
  }
}

void TokenData::validation_sequences(const ModelConfig& m, long first, int count, int* tokens, int* targets) const {
  const long span = size_ - train_ - m.seq - 1;
  for (int i = 0; i < count; ++i) {
    const long g = first + i;
    long start = train_ + static_cast<long>((static_cast<unsigned long>(g) * static_cast<unsigned long>(m.seq)) %
                                            static_cast<unsigned long>(span));
    sequence(start, m.seq, tokens + static_cast<long>(i) * m.seq, targets + static_cast<long>(i) * m.seq);
  }
}

std::string TokenData::describe() const {
  return fmt::format("{:L} bytes from {} file{} ({:L} training, {:L} validation)", size_, files_.size(),
                     files_.size() == 1 ? "" : "s", train_, size_ - train_);
}

nlohmann::json TokenData::identity() const {
  nlohmann::json files = nlohmann::json::array();
  for (std::size_t i = 0; i < files_.size(); ++i)
    files.push_back({{"path", valid_utf8(files_[i])}, {"bytes", file_bytes_[i]}, {"sha256", file_sha256_[i]}});
  return {{"bytes", size_}, {"sha256", sha256_}, {"files", files}};
}

}  // namespace trainsim::exec
