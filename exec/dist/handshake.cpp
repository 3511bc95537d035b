#include "exec/dist/handshake.h"

#include <stdexcept>

// libsodium (libsodium-dev): HMAC-SHA-256, keyed BLAKE2b, the operating system's random bytes and
// constant-time comparison; cryptography is not ours to write.
#include <sodium.h>

namespace trainsim::exec::dist {

namespace {

// The labels that keep every use of the token apart (NUL-terminated on the wire: none is a prefix of another).
constexpr const char* kLabelProofRank0 = "trainsim rendezvous 2: rank 0 proves the token";
constexpr const char* kLabelProofPeer = "trainsim rendezvous 2: a peer proves the token";
constexpr const char* kLabelKeyRank0 = "trainsim rendezvous 2: key of frames from rank 0";
constexpr const char* kLabelKeyPeer = "trainsim rendezvous 2: key of frames to rank 0";

std::array<unsigned char, 32> hmac(const std::string& token, const char* label, const Nonce& peer_nonce,
                                   const Nonce& rank0_nonce, int peer_rank) {
  require_sodium();
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, reinterpret_cast<const unsigned char*>(token.data()), token.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(label), std::char_traits<char>::length(label) + 1);
  crypto_auth_hmacsha256_update(&st, peer_nonce.data(), peer_nonce.size());
  crypto_auth_hmacsha256_update(&st, rank0_nonce.data(), rank0_nonce.size());
  const auto r = static_cast<std::uint32_t>(peer_rank);
  const unsigned char rank_bytes[4] = {static_cast<unsigned char>(r >> 24), static_cast<unsigned char>(r >> 16),
                                       static_cast<unsigned char>(r >> 8), static_cast<unsigned char>(r)};
  crypto_auth_hmacsha256_update(&st, rank_bytes, sizeof rank_bytes);
  std::array<unsigned char, 32> out{};
  crypto_auth_hmacsha256_final(&st, out.data());
  sodium_memzero(&st, sizeof st);
  return out;
}

}  // namespace

void require_sodium() {
  static const bool ok = sodium_init() >= 0;
  if (!ok) throw std::runtime_error("libsodium cannot be initialised (sodium_init failed): no secure random source");
}

Nonce fresh_nonce() {
  require_sodium();
  Nonce n;
  randombytes_buf(n.data(), n.size());
  return n;
}

void random_bytes(unsigned char* out, std::size_t size) {
  require_sodium();
  randombytes_buf(out, size);
}

Proof make_proof(const std::string& token, Role who, const Nonce& peer_nonce, const Nonce& rank0_nonce, int peer_rank) {
  return hmac(token, who == Role::rank0 ? kLabelProofRank0 : kLabelProofPeer, peer_nonce, rank0_nonce, peer_rank);
}

bool proof_matches(const Proof& expected, const unsigned char* got, std::size_t size) {
  require_sodium();
  return size == expected.size() && sodium_memcmp(expected.data(), got, expected.size()) == 0;
}

SessionKeys session_keys(const std::string& token, Role me, const Nonce& peer_nonce, const Nonce& rank0_nonce,
                         int peer_rank) {
  const Key from_rank0 = hmac(token, kLabelKeyRank0, peer_nonce, rank0_nonce, peer_rank);
  const Key to_rank0 = hmac(token, kLabelKeyPeer, peer_nonce, rank0_nonce, peer_rank);
  return me == Role::rank0 ? SessionKeys{from_rank0, to_rank0} : SessionKeys{to_rank0, from_rank0};
}

Mac frame_mac(const Key& key, std::uint64_t counter, const unsigned char* header, std::size_t header_size,
              const unsigned char* tag, std::size_t tag_size, const unsigned char* data, std::size_t data_size) {
  require_sodium();
  crypto_generichash_state st;
  crypto_generichash_init(&st, key.data(), key.size(), kMacBytes);
  unsigned char c[8];
  for (int i = 0; i < 8; ++i) c[i] = static_cast<unsigned char>(counter >> (8 * i));
  crypto_generichash_update(&st, c, sizeof c);
  crypto_generichash_update(&st, header, header_size);
  if (tag_size) crypto_generichash_update(&st, tag, tag_size);
  if (data_size) crypto_generichash_update(&st, data, data_size);
  Mac m{};
  crypto_generichash_final(&st, m.data(), m.size());
  return m;
}

bool mac_matches(const Mac& expected, const unsigned char* got, std::size_t size) {
  require_sodium();
  return size == expected.size() && sodium_memcmp(expected.data(), got, expected.size()) == 0;
}

std::string to_hex(const unsigned char* bytes, std::size_t size) {
  std::string out(2 * size + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), bytes, size);
  out.pop_back();
  return out;
}

bool from_hex(const std::string& hex, unsigned char* out, std::size_t size) {
  if (hex.size() != 2 * size) return false;
  std::size_t len = 0;
  const char* end = nullptr;
  return sodium_hex2bin(out, size, hex.data(), hex.size(), nullptr, &len, &end) == 0 && len == size &&
         end == hex.data() + hex.size();
}

}  // namespace trainsim::exec::dist
