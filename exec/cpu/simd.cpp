#include "exec/cpu/simd.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace trainsim::exec::simd {

namespace {

bool has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}
bool has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

const Table& choose() {
  if (const char* want = std::getenv("TRAINSIM_SIMD"); want && *want) {
    if (const Table* t = table_for(want)) return *t;
    throw std::runtime_error(std::string("TRAINSIM_SIMD=") + want +
                             ": this CPU cannot run it, or it is not one of generic, avx2, avx512");
  }
  if (has_avx512()) return avx512_table();
  if (has_avx2()) return avx2_table();
  return generic_table();
}

}  // namespace

const Table* table_for(const char* name) {
  if (std::strcmp(name, "avx512") == 0) return has_avx512() ? &avx512_table() : nullptr;
  if (std::strcmp(name, "avx2") == 0) return has_avx2() ? &avx2_table() : nullptr;
  if (std::strcmp(name, "generic") == 0) return &generic_table();
  return nullptr;
}

void rope_lanes(const float* cos, const float* sin, int Tn, int hd, float sign, float* C, float* S) {
  const long half = hd / 2;
  for (long t = 0; t < Tn; ++t)
    for (long i = 0; i < hd; ++i) {
      const long pair = t * half + i / 2;
      C[t * hd + i] = cos[pair];
      S[t * hd + i] = (i % 2 == 0 ? -sign : sign) * sin[pair];
    }
}

const Table& table() {
  static const Table& chosen = choose();
  return chosen;
}

}  // namespace trainsim::exec::simd
