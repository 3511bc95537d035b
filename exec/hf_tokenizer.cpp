#include "exec/hf_tokenizer.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace trainsim::exec {

namespace {

// Whether GPT-2's alphabet writes `byte` as itself: '!'..'~', U+00A1..U+00AC, U+00AE..U+00FF.
bool printable(int byte) { return (byte >= 0x21 && byte <= 0x7e) || (byte >= 0xa1 && byte <= 0xac) || byte >= 0xae; }

std::string utf8(unsigned code) {  // (code < 0x800 here: one or two bytes)
  if (code < 0x80) return std::string(1, static_cast<char>(code));
  return {static_cast<char>(0xc0 | (code >> 6)), static_cast<char>(0x80 | (code & 0x3f))};
}

}  // namespace

std::string byte_level_symbol(int byte) {
  if (printable(byte)) return utf8(static_cast<unsigned>(byte));
  unsigned n = 0;  // the byte's place among the bytes that are not written as themselves
  for (int b = 0; b < byte; ++b) n += !printable(b);
  return utf8(256 + n);
}

std::string hf_byte_tokenizer_json(const ModelConfig& model) {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (int b = 0; b < std::min(model.vocab, 256); ++b) vocab[byte_level_symbol(b)] = b;
  // The ByteLevel pre-tokenizer without its regex split keeps the text whole; a BPE without merges then cuts it
  // into one token per byte symbol. The decoder maps the symbols back to bytes.
  const nlohmann::ordered_json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = nlohmann::ordered_json::array();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = byte_level;
  j["post_processor"] = nullptr;
  j["decoder"] = byte_level;
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"vocab", vocab},
                {"merges", nlohmann::ordered_json::array()}};
  return j.dump(2) + "\n";
}

std::string hf_tokenizer_config(const ModelConfig& model) {
  nlohmann::ordered_json j;
  j["tokenizer_class"] = "PreTrainedTokenizerFast";
  j["model_max_length"] = model.seq;
  j["add_bos_token"] = false;
  j["add_eos_token"] = false;
  j["clean_up_tokenization_spaces"] = false;
  j["trainsim_tokens"] = "one token per byte (id = byte value), as trainsim trains";
  return j.dump(2) + "\n";
}

std::string hf_generation_config(const ModelConfig& model) {
  nlohmann::ordered_json j;
  j["do_sample"] = true;
  j["temperature"] = 1.0;
  j["top_k"] = 0;
  j["max_length"] = model.seq;
  return j.dump(2) + "\n";
}

}  // namespace trainsim::exec
