#include "apps/training_log.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/schedule_input.h"

namespace trainsim::apps {

namespace {

// A number as a CSV row writes it: the shortest text that reads back to the same double; "nan", "inf" or "-inf"
// when it is not finite (as pandas and spreadsheets read them).
std::string number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return nlohmann::json(v).dump();
}

}  // namespace

TrainingLog::TrainingLog(const std::string& path, int ranks) : path_(path), csv_(extension(path) == ".csv"), ranks_(ranks) {
  errno = 0;
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) throw std::runtime_error(fmt::format("cannot write '{}': {}", path, std::strerror(errno ? errno : EIO)));
  if (csv_) {
    std::string head = "step,loss,lr,grad_norm,clip_coef,step_seconds,tokens_per_s,val_loss";
    for (int r = 0; r < ranks; ++r) head += fmt::format(",peak_bytes_rank{}", r);
    put(head);
  }
}

TrainingLog::~TrainingLog() {
  if (file_) std::fclose(file_);
}

void TrainingLog::put(const std::string& line) {
  const std::string text = line + "\n";
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0)
    throw std::runtime_error(fmt::format("cannot write '{}': {}", path_, std::strerror(errno ? errno : EIO)));
}

void TrainingLog::step(const exec::StepReport& rep) {
  if (csv_) {
    std::string line = fmt::format("{},{},{},{},{},{},{},{}", rep.step + 1, number(rep.loss), number(rep.learning_rate),
                                   number(rep.grad_norm), number(rep.clip_coefficient), number(rep.seconds),
                                   number(rep.tokens_per_s), rep.evaluated ? number(rep.validation_loss) : "");
    for (int r = 0; r < ranks_; ++r)
      line += fmt::format(",{}", r < static_cast<int>(rep.peak_bytes.size()) ? rep.peak_bytes[r] : 0);
    put(line);
    return;
  }
  nlohmann::ordered_json j;
  j["step"] = rep.step + 1;
  j["loss"] = rep.loss;
  j["lr"] = rep.learning_rate;
  j["grad_norm"] = rep.grad_norm;
  j["clip_coef"] = rep.clip_coefficient;
  j["step_seconds"] = rep.seconds;
  j["tokens_per_s"] = rep.tokens_per_s;
  if (rep.evaluated) j["val_loss"] = rep.validation_loss;
  j["peak_bytes"] = rep.peak_bytes;
  put(j.dump());
}

void TrainingLog::error(const std::string& what) {
  if (csv_ || !file_) return;
  try {
    put(nlohmann::json{{"error", what}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } catch (const std::exception&) {
    // (the run's error is reported anyway)
  }
}

void TrainingLog::close() {
  if (!file_) return;
  std::FILE* f = file_;
  file_ = nullptr;
  errno = 0;
  if (std::fclose(f) != 0)
    throw std::runtime_error(fmt::format("cannot write '{}': {}", path_, std::strerror(errno ? errno : EIO)));
}

}  // namespace trainsim::apps
