// The byte-level tokenizer trainsim trains with (exec/data.h: token = byte, vocabulary 256) in the Hugging Face
// files `trainsim export` writes next to the weights, so that `AutoTokenizer.from_pretrained(DIR)` and
// `model.generate` work with the usual two lines:
//
//   tokenizer.json           the `tokenizers` library's format: a BPE model with no merges over the 256 byte
//                            symbols of GPT-2's byte-level alphabet (bytes_to_unicode: printable Latin-1 bytes
//                            stand for themselves, the others for U+0100 onwards), the ByteLevel pre-tokenizer
//                            (no regex split, no prefix space) and decoder; token id = byte value, no special tokens.
//   tokenizer_config.json    PreTrainedTokenizerFast, model_max_length = the model's seq, no BOS/EOS added.
//   generation_config.json   sampling as `trainsim sample` does by default (temperature 1, all tokens).
//
// Source: GPT-2's encoder.py (bytes_to_unicode), huggingface/tokenizers (tokenizer.json's serialisation of BPE,
// ByteLevel), transformers' GenerationConfig. Text that is not UTF-8 still round-trips byte for byte.
#pragma once

#include <string>

#include "exec/model_config.h"

namespace trainsim::exec {

/// The character GPT-2's byte-level alphabet writes for `byte` (0-255), UTF-8 encoded: the byte itself for
/// '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF, else U+0100 + n for the n-th other byte in increasing order
/// (so ' ' is "Ġ" U+0120 and '\n' "Ċ" U+010A).
std::string byte_level_symbol(int byte);

/// tokenizer.json of the byte-level tokenizer (above) for `model`: bytes 0 .. min(vocab, 256) - 1 (a custom
/// model of a smaller vocabulary gets only the bytes it has ids for).
std::string hf_byte_tokenizer_json(const ModelConfig& model);

/// tokenizer_config.json for `model` (model_max_length = model.seq).
std::string hf_tokenizer_config(const ModelConfig& model);

/// generation_config.json for `model` (do_sample, temperature 1, top_k 0, max_length = model.seq).
std::string hf_generation_config(const ModelConfig& model);

}  // namespace trainsim::exec
