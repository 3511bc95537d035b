#include "apps/training_log.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
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

namespace {

double csv_number(const std::string& cell) {
  if (cell.empty()) return 0;
  try {
    return std::stod(cell);
  } catch (const std::exception&) {
    return std::nan("");
  }
}

std::vector<std::string> csv_cells(const std::string& line) {
  std::vector<std::string> out(1);
  for (char c : line) {
    if (c == ',') out.emplace_back();
    else out.back() += c;
  }
  return out;
}

// The lines of the log at `path` to keep for a run resumed after step `last` (and the rows they hold): a CSV
// with this run's header, or JSON lines, rows of steps 1 .. last in order. Empty when the file is missing, is
// not such a log, or is over 64 MiB (replaced rather than read whole).
std::vector<std::string> kept_lines(const std::string& path, bool csv, const std::string& head, int last,
                                    std::vector<LoggedStep>& rows) {
  std::vector<std::string> keep;
  std::ifstream in(path, std::ios::binary);
  if (!in) return keep;
  in.seekg(0, std::ios::end);
  if (!in || in.tellg() > (std::streamoff{64} << 20)) return keep;
  in.seekg(0);
  std::string line;
  int expected = 1;
  if (csv) {
    if (!std::getline(in, line) || line != head) return keep;
    keep.push_back(line);
  }
  while (std::getline(in, line) && expected <= last) {
    LoggedStep row;
    if (csv) {
      const std::vector<std::string> cells = csv_cells(line);
      if (cells.size() < 8) break;
      try {
        row.step = std::stoi(cells[0]);
      } catch (const std::exception&) {
        break;
      }
      row.loss = csv_number(cells[1]), row.learning_rate = csv_number(cells[2]);
      row.evaluated = !cells[7].empty(), row.validation_loss = csv_number(cells[7]);
    } else {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) break;  // (an error row ends it)
      row.step = j["step"].get<int>();
      row.loss = j.value("loss", std::nan("")), row.learning_rate = j.value("lr", std::nan(""));
      row.evaluated = j.contains("val_loss"), row.validation_loss = j.value("val_loss", 0.0);
    }
    if (row.step != expected) break;  // steps in order from 1; anything else is not this run's log
    keep.push_back(line);
    rows.push_back(row);
    ++expected;
  }
  if (csv && keep.size() == 1 && rows.empty()) keep.clear();
  return keep;
}

}  // namespace

TrainingLog::TrainingLog(const std::string& path, int ranks, int resumed_after)
    : path_(path), csv_(extension(path) == ".csv"), ranks_(ranks) {
  std::string head = "step,loss,lr,grad_norm,clip_coef,step_seconds,tokens_per_s,val_loss";
  for (int r = 0; r < ranks; ++r) head += fmt::format(",peak_bytes_rank{}", r);
  const std::vector<std::string> keep =
      resumed_after > 0 ? kept_lines(path, csv_, head, resumed_after, earlier_) : std::vector<std::string>{};
  errno = 0;
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) throw std::runtime_error(fmt::format("cannot write '{}': {}", path, std::strerror(errno ? errno : EIO)));
  if (!keep.empty()) {
    for (const std::string& line : keep) put(line);
  } else {
    earlier_.clear();
    if (csv_) put(head);
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
