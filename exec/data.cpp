#include "exec/data.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

// Boost.Interprocess (header-only, libboost-dev): portable read-only memory mapping of the corpus files.
#include <boost/interprocess/file_mapping.hpp>
#include <boost/interprocess/mapped_region.hpp>

namespace trainsim::exec {

namespace bip = boost::interprocess;

struct TokenData::Mapping {
  bip::file_mapping file;
  bip::mapped_region region;
  const unsigned char* bytes = nullptr;
  long size = 0;
};

TokenData::TokenData(std::vector<std::string> files) : files_(std::move(files)) {
  for (const std::string& path : files_) {
    std::error_code ec;
    auto size = std::filesystem::file_size(path, ec);
    if (ec) throw DataError(fmt::format("cannot read the corpus file '{}': {}", path, ec.message()));
    offsets_.push_back(size_);
    if (size == 0) {
      maps_.push_back(std::make_unique<Mapping>());
      continue;
    }
    auto m = std::make_unique<Mapping>();
    try {
      m->file = bip::file_mapping(path.c_str(), bip::read_only);
      m->region = bip::mapped_region(m->file, bip::read_only);
    } catch (const bip::interprocess_exception& e) {
      throw DataError(fmt::format("cannot map the corpus file '{}': {}", path, e.what()));
    }
    m->bytes = static_cast<const unsigned char*>(m->region.get_address());
    m->size = static_cast<long>(m->region.get_size());
    size_ += m->size;
    maps_.push_back(std::move(m));
  }
  if (size_ == 0) throw DataError("the corpus is empty (no bytes in the data files)");
  train_ = size_ - size_ / 10;
}

TokenData::TokenData(TokenData&&) noexcept = default;
TokenData& TokenData::operator=(TokenData&&) noexcept = default;
TokenData::~TokenData() = default;

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

int TokenData::token(long i) const {
  auto it = std::upper_bound(offsets_.begin(), offsets_.end(), i);
  std::size_t f = static_cast<std::size_t>(it - offsets_.begin()) - 1;
  while (maps_[f]->size == 0 || i - offsets_[f] >= maps_[f]->size) ++f;  // skip empty files
  return maps_[f]->bytes[i - offsets_[f]];
}

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

void TokenData::validation_batch(const ModelConfig& m, long index, int* tokens, int* targets) const {
  const long span = size_ - train_ - m.seq - 1;
  for (int i = 0; i < m.microbatch_size; ++i) {
    long g = index * m.microbatch_size + i;
    long start = train_ + static_cast<long>((static_cast<unsigned long>(g) * static_cast<unsigned long>(m.seq)) %
                                            static_cast<unsigned long>(span));
    sequence(start, m.seq, tokens + static_cast<long>(i) * m.seq, targets + static_cast<long>(i) * m.seq);
  }
}

std::string TokenData::describe() const {
  return fmt::format("{:L} bytes from {} file{} ({:L} training, {:L} validation)", size_, files_.size(),
                     files_.size() == 1 ? "" : "s", train_, size_ - train_);
}

}  // namespace trainsim::exec
