// SHA-256 (FIPS 180-4) of bytes, as lowercase hex: the hashes of checkpoints (exec/checkpoint.h) and of the
// corpus (exec/data.h). The arithmetic is libsodium's (crypto_hash_sha256), never our own.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace trainsim::exec {

/// Incremental SHA-256: update() with the bytes in order, then hex(). Not copyable.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  /// Adds `bytes` to what is hashed.
  void update(std::string_view bytes);
  /// The 64 lowercase hex digits of the hash of everything added; the object is spent afterwards.
  std::string hex();

 private:
  struct State;  // libsodium's crypto_hash_sha256_state
  std::unique_ptr<State> state_;
};

/// The 64 lowercase hex digits of SHA-256 over `bytes`.
std::string sha256_hex(std::string_view bytes);

/// True when `text` is 64 lowercase hex digits (what sha256_hex() returns).
bool is_sha256_hex(std::string_view text);

}  // namespace trainsim::exec
