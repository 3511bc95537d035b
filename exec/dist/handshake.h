// The cryptography of the rendezvous (protocol 2, docs/executor.md "Security and failure model"), with
// libsodium: rank 0 and a peer each prove that they hold the job's token (TRAINSIM_TOKEN) without revealing
// it, and derive the keys that authenticate every later frame of their connection.
//
//   proof  = HMAC-SHA-256(key = token, label || peer nonce || rank 0 nonce || peer rank)
//   keys   = HMAC-SHA-256(key = token, key label || the same), one per direction
//   frame  = keyed BLAKE2b-256(key = the direction's key, frame counter || header || tag || data)
//
// The labels differ by role and use, so no value computed for one purpose (a proof by rank 0, a proof by a
// peer, a key) can stand for another; both nonces are fresh random 32-byte values, so no proof can be
// replayed on another connection; the peer's claimed rank is bound into everything, so a proof for rank 2
// cannot be used to join as rank 3. Proofs are compared in constant time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace trainsim::exec::dist {

inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kProofBytes = 32;  ///< HMAC-SHA-256
inline constexpr std::size_t kKeyBytes = 32;
inline constexpr std::size_t kMacBytes = 32;    ///< keyed BLAKE2b-256 of a frame

using Nonce = std::array<unsigned char, kNonceBytes>;
using Proof = std::array<unsigned char, kProofBytes>;
using Key = std::array<unsigned char, kKeyBytes>;
using Mac = std::array<unsigned char, kMacBytes>;

/// Who computes or checks a proof.
enum class Role { rank0, peer };

/// libsodium initialised (once, thread-safe). Throws std::runtime_error when it cannot be.
void require_sodium();

/// 32 bytes from the operating system's random source (randombytes_buf).
Nonce fresh_nonce();
/// `size` bytes from the same source.
void random_bytes(unsigned char* out, std::size_t size);

/// What `who` sends to prove that it holds `token`, on the connection of the peer claiming `peer_rank`
/// whose nonces are `peer_nonce` (sent in its hello) and `rank0_nonce` (sent in rank 0's challenge).
Proof make_proof(const std::string& token, Role who, const Nonce& peer_nonce, const Nonce& rank0_nonce, int peer_rank);

/// True when the `size` bytes at `got` are `expected`; constant time in the bytes' values (sodium_memcmp).
bool proof_matches(const Proof& expected, const unsigned char* got, std::size_t size);

/// The two keys of a connection, seen from `me`: `send` authenticates the frames `me` sends, `recv` those it
/// receives (the other end's `send`).
struct SessionKeys {
  Key send{}, recv{};
};
SessionKeys session_keys(const std::string& token, Role me, const Nonce& peer_nonce, const Nonce& rank0_nonce,
                         int peer_rank);

/// The MAC of frame number `counter` (0, 1, ... in each direction) whose encoded header is `header` and whose
/// body is `tag` then `data`.
Mac frame_mac(const Key& key, std::uint64_t counter, const unsigned char* header, std::size_t header_size,
              const unsigned char* tag, std::size_t tag_size, const unsigned char* data, std::size_t data_size);

/// True when the `size` bytes at `got` equal `expected`, in constant time.
bool mac_matches(const Mac& expected, const unsigned char* got, std::size_t size);

/// Lowercase hexadecimal of `bytes`, and back: nullopt-like failure as false when `hex` is not exactly
/// 2 * N hexadecimal digits.
std::string to_hex(const unsigned char* bytes, std::size_t size);
bool from_hex(const std::string& hex, unsigned char* out, std::size_t size);

}  // namespace trainsim::exec::dist
