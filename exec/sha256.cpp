#include "exec/sha256.h"

#include <fmt/format.h>
// libsodium (libsodium-dev, linked privately into trainsim_exec): the hash function itself.
#include <sodium.h>

namespace trainsim::exec {

namespace {

void init_sodium() {
  // Thread-safe and idempotent; -1 only when the library cannot start (no entropy source), which the hash
  // functions do not need, but libsodium asks for the call before any other.
  static const int ok = sodium_init();
  (void)ok;
}

}  // namespace

struct Sha256::State {
  crypto_hash_sha256_state s;
};

Sha256::Sha256() : state_(std::make_unique<State>()) {
  init_sodium();
  crypto_hash_sha256_init(&state_->s);
}

Sha256::~Sha256() = default;

void Sha256::update(std::string_view bytes) {
  crypto_hash_sha256_update(&state_->s, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

std::string Sha256::hex() {
  unsigned char out[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final(&state_->s, out);
  std::string s;
  for (unsigned char c : out) s += fmt::format("{:02x}", c);
  return s;
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 h;
  h.update(bytes);
  return h.hex();
}

bool is_sha256_hex(std::string_view text) {
  if (text.size() != 2 * crypto_hash_sha256_BYTES) return false;
  for (char c : text)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace trainsim::exec
