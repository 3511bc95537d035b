// Generating text from a trained model (`trainsim sample`): the whole model (exec/whole_model.h) run one token
// at a time on the host with the CPU kernels, keeping each block's keys and values (a KV cache), so that a new
// token costs one token's work, not the whole context's again. The arithmetic is the training forward's
// (exec/model.cpp), for one row: its logits agree with the batched forward's to fp32 rounding (tested).
//
// The context holds at most `seq` tokens (the rotary tables and the training cover positions 0 .. seq-1): when it
// is full, the cache is rebuilt from the last seq/2 tokens, which restart at position 0 (nanoGPT crops its context
// likewise, without a cache).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "exec/layout.h"

namespace trainsim::exec {

/// How to pick tokens.
struct SampleOptions {
  std::string prompt;         ///< bytes the generation continues ("" : it starts from a newline)
  int tokens = 200;           ///< bytes to generate, at least 1
  double temperature = 1.0;   ///< logits are divided by it; 0: always the most likely token (greedy)
  int top_k = 0;              ///< draw among the k most likely tokens only (0: all)
  std::uint64_t seed = 1;     ///< the random stream: the same seed, model and options give the same text
};

/// The model with its KV cache.
class Generator {
 public:
  /// `flat` is the whole model's buffer (flatten_parameters). Throws std::invalid_argument when its size is not
  /// the model's.
  Generator(const ModelConfig& model, std::vector<float> flat);
  /// Runs token `token` (0 .. vocab-1) at the next position and returns the logits of the token after it.
  /// Throws std::invalid_argument for a token out of range, std::logic_error when the context is full
  /// (position() == seq: reset() first).
  const std::vector<float>& feed(int token);
  /// Tokens in the cache (the next token's position).
  int position() const { return pos_; }
  /// Empties the cache.
  void reset() { pos_ = 0; }

 private:
  ModelConfig model_;
  LayerLayout layout_;
  std::vector<float> w_, cos_, sin_;
  std::vector<float> k_cache_, v_cache_;  // [block][head][position][head_dim]
  std::vector<float> x_, xn_, qkv_, q_, k_, v_, att_, h_, gu_, act_, y_, scores_, logits_;
  std::vector<float> router_, gates_;  // MoE blocks: the router's logits and the chosen experts' gates
  std::vector<int> idx_;               // and which experts
  float rstd_ = 0;
  int pos_ = 0;
};

/// The index of the next token given `logits`: the largest with temperature 0 (the first of equals); else a draw
/// from softmax(logits / temperature) over the top_k largest (all when 0), using one number of the stream `seed`
/// at `counter` (SplitMix64).
int pick_token(const std::vector<float>& logits, double temperature, int top_k, std::uint64_t seed,
               std::uint64_t counter);

/// The bytes generated after options.prompt (the prompt itself not included). Throws std::invalid_argument for
/// options out of range (tokens < 1, a negative or non-finite temperature, top_k < 0).
std::string generate_text(const ModelConfig& model, const std::vector<float>& flat, const SampleOptions& options);

}  // namespace trainsim::exec
