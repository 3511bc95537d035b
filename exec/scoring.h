// Scoring a text with a trained model (`trainsim score`, issue 38): the loss of every byte given the bytes before
// it, so that a checkpoint's quality can be measured and compared with another implementation's (PyTorch's
// cross-entropy on the same text, the exported model's perplexity).
//
// The text is cut into windows of `seq` bytes, as training and evaluation cut their sequences (nanoGPT's
// x = tokens[i : i+seq], y = tokens[i+1 : i+seq+1]): in each window every byte but the first is predicted from
// the ones before it in the window; the first byte of the text is never predicted. The forward is sampling's
// (exec/sampling.h: one token at a time with a KV cache, equal to the batched forward to fp32 rounding).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "exec/model_config.h"

namespace trainsim::exec {

/// One predicted byte.
struct TokenScore {
  int position = 0;            ///< its index in the text
  int token = 0;               ///< the byte, 0 .. 255
  double log_prob = 0;         ///< ln p(token | the window's bytes before it), nats
  std::vector<float> logits;   ///< the vocab logits it was predicted from (with keep_logits only)
};

/// A text's score.
struct TextScore {
  long long predicted = 0;     ///< bytes predicted (the text's length less the first byte)
  double loss = 0;             ///< mean -ln p over them, nats per byte (the training loss's unit)
  double perplexity = 0;       ///< exp(loss)
  double bits_per_byte = 0;    ///< loss / ln 2
  std::vector<TokenScore> tokens;  ///< every predicted byte, in order (with keep_tokens only)
};

/// Scores `text` (at least 2 bytes) with the model `flat` (flatten_parameters). `keep_tokens` keeps each byte's
/// log-probability, `keep_logits` its logits too. Throws std::invalid_argument for a text under 2 bytes, or a model
/// whose vocabulary is not the 256 byte values.
TextScore score_text(const ModelConfig& model, const std::vector<float>& flat, const std::string& text,
                     bool keep_tokens = false, bool keep_logits = false);

}  // namespace trainsim::exec
