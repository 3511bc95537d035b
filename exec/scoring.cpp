#include "exec/scoring.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "exec/sampling.h"

namespace trainsim::exec {

TextScore score_text(const ModelConfig& model, const std::vector<float>& flat, const std::string& text,
                     bool keep_tokens, bool keep_logits) {
  if (text.size() < 2)
    throw std::invalid_argument(fmt::format("a text of {} byte{} has nothing to predict (at least 2 bytes)", text.size(),
                                            text.size() == 1 ? "" : "s"));
  if (model.vocab != 256)
    throw std::invalid_argument(fmt::format("the model's vocabulary is {} tokens, not the 256 byte values a text is "
                                            "scored in",
                                            model.vocab));
  Generator g(model, flat);
  TextScore s;
  double sum = 0;  // (in text order: the same text and model give the same bits)
  const std::size_t n = text.size(), seq = static_cast<std::size_t>(model.seq);
  for (std::size_t start = 0; start + 1 < n; start += seq) {
    g.reset();
    for (std::size_t j = start; j < std::min(start + seq, n - 1); ++j) {
      const std::vector<float>& logits = g.feed(static_cast<unsigned char>(text[j]));
      const int next = static_cast<unsigned char>(text[j + 1]);
      // log-softmax in double: the largest logit subtracted first.
      const double top = *std::max_element(logits.begin(), logits.end());
      double z = 0;
      for (float l : logits) z += std::exp(static_cast<double>(l) - top);
      const double log_prob = static_cast<double>(logits[static_cast<std::size_t>(next)]) - top - std::log(z);
      sum -= log_prob;
      ++s.predicted;
      if (keep_tokens || keep_logits) {
        TokenScore t;
        t.position = static_cast<int>(j + 1);
        t.token = next;
        t.log_prob = log_prob;
        if (keep_logits) t.logits = logits;
        s.tokens.push_back(std::move(t));
      }
    }
  }
  s.loss = sum / static_cast<double>(s.predicted);
  s.perplexity = std::exp(s.loss);
  s.bits_per_byte = s.loss / std::log(2.0);
  return s;
}

}  // namespace trainsim::exec
