#include "exec/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <cerrno>
#include <cstring>
#include <sstream>

#include <fmt/format.h>

#include "schedules/text_format.h"

namespace trainsim::exec {

namespace fs = std::filesystem;

std::string fnv1a_hex(const std::string& text) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  return fmt::format("{:016x}", h);
}

namespace {

std::string rank_file(int r) { return fmt::format("rank{}.bin", r); }

std::string serialize(const HostState& s) {
  std::string out = "trainsim-state 1\n";
  for (const auto& [t, v] : s) {
    out += fmt::format("{} {}\n", t.str(), v.size() * sizeof(float));
    out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
  return out;
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
  f.close();
  if (!f) throw CheckpointError(fmt::format("cannot write '{}': {}", path.string(), std::strerror(errno)));
}

std::string read_file(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw CheckpointError(fmt::format("cannot read '{}': {}", path.string(), std::strerror(errno)));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

HostState deserialize(const std::string& bytes, const std::string& name) {
  auto bad = [&](const std::string& what) { return CheckpointError(fmt::format("{}: {}", name, what)); };
  const std::string magic = "trainsim-state 1\n";
  if (bytes.compare(0, magic.size(), magic) != 0) throw bad("not a trainsim state file");
  HostState s;
  std::size_t pos = magic.size();
  while (pos < bytes.size()) {
    std::size_t nl = bytes.find('\n', pos);
    if (nl == std::string::npos || nl - pos > 200) throw bad("malformed tensor header");
    std::string line = bytes.substr(pos, nl - pos);
    std::size_t sp = line.rfind(' ');
    if (sp == std::string::npos) throw bad("malformed tensor header '" + line + "'");
    Tensor t;
    std::size_t n = 0;
    try {
      t = parse_tensor(line.substr(0, sp));
      n = std::stoul(line.substr(sp + 1));
    } catch (const std::exception& e) {
      throw bad(fmt::format("malformed tensor header '{}': {}", line, e.what()));
    }
    pos = nl + 1;
    if (n % sizeof(float) != 0 || n > bytes.size() - pos) throw bad(fmt::format("{} is truncated", t.str()));
    std::vector<float> v(n / sizeof(float));
    std::memcpy(v.data(), bytes.data() + pos, n);
    pos += n;
    s[t] = std::move(v);
  }
  return s;
}

}  // namespace

void save_checkpoint(const std::string& dir, const CheckpointInfo& info, const std::vector<HostState>& ranks) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw CheckpointError(fmt::format("cannot create '{}': {}", dir, ec.message()));
  nlohmann::ordered_json m;
  m["format"] = "trainsim-checkpoint";
  m["version"] = 1;
  m["step"] = info.step;
  m["total_steps"] = info.total_steps;
  m["schedule_hash"] = info.schedule_hash;
  m["schedule"] = info.schedule_name;
  m["world_size"] = info.world_size;
  m["seed"] = info.seed;
  m["model"] = info.model;
  m["optimizer"] = info.optimizer;
  m["data"] = info.data;
  m["data_position"] = info.step;  // microbatch b of step s is a function of (s, b): the step is the position
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    std::string bytes = serialize(ranks[r]);
    write_file(fs::path(dir) / rank_file(static_cast<int>(r)), bytes);
    files.push_back({{"file", rank_file(static_cast<int>(r))}, {"fnv1a", fnv1a_hex(bytes)}});
  }
  m["ranks"] = files;
  write_file(fs::path(dir) / "manifest.json", m.dump(2) + "\n");
}

CheckpointInfo read_checkpoint_info(const std::string& dir) {
  const fs::path path = fs::path(dir) / "manifest.json";
  std::string text = read_file(path);
  CheckpointInfo info;
  try {
    nlohmann::json m = nlohmann::json::parse(text);
    if (m.at("format") != "trainsim-checkpoint" || m.at("version") != 1)
      throw CheckpointError(fmt::format("{}: not a trainsim checkpoint (version 1)", path.string()));
    info.step = m.at("step").get<int>();
    info.total_steps = m.at("total_steps").get<int>();
    info.schedule_hash = m.at("schedule_hash").get<std::string>();
    info.schedule_name = m.at("schedule").get<std::string>();
    info.world_size = m.at("world_size").get<int>();
    info.seed = m.at("seed").get<std::uint64_t>();
    info.model = m.at("model");
    info.optimizer = m.at("optimizer");
    info.data = m.at("data");
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(fmt::format("{}: {}", path.string(), e.what()));
  }
  return info;
}

std::vector<HostState> read_checkpoint_states(const std::string& dir, int world_size) {
  const fs::path mpath = fs::path(dir) / "manifest.json";
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(read_file(mpath));
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(fmt::format("{}: {}", mpath.string(), e.what()));
  }
  std::vector<HostState> out;
  for (int r = 0; r < world_size; ++r) {
    const fs::path path = fs::path(dir) / rank_file(r);
    std::string bytes = read_file(path);
    std::string want;
    try {
      want = m.at("ranks").at(r).at("fnv1a").get<std::string>();
    } catch (const nlohmann::json::exception& e) {
      throw CheckpointError(fmt::format("{}: no hash for rank {}: {}", mpath.string(), r, e.what()));
    }
    if (fnv1a_hex(bytes) != want)
      throw CheckpointError(fmt::format("{}: the file is corrupt (its hash differs from the manifest's)", path.string()));
    out.push_back(deserialize(bytes, path.string()));
  }
  return out;
}

std::string checkpoint_mismatch(const CheckpointInfo& saved, const CheckpointInfo& now) {
  if (saved.schedule_hash != now.schedule_hash)
    return fmt::format("it was made with another schedule ('{}', hash {}; this one is '{}', hash {})",
                       saved.schedule_name, saved.schedule_hash, now.schedule_name, now.schedule_hash);
  if (saved.world_size != now.world_size)
    return fmt::format("it has {} ranks, the schedule {}", saved.world_size, now.world_size);
  if (saved.model != now.model) return fmt::format("it was made with another model ({})", saved.model.dump());
  if (saved.optimizer != now.optimizer)
    return fmt::format("it was made with other optimizer settings ({})", saved.optimizer.dump());
  if (saved.seed != now.seed) return fmt::format("it was made with seed {}, not {}", saved.seed, now.seed);
  if (saved.data != now.data) return fmt::format("it was made on other data ({})", saved.data.dump());
  if (saved.total_steps != now.total_steps)
    return fmt::format("it was made for a {}-step run (the learning-rate schedule); pass --steps {}", saved.total_steps,
                       saved.total_steps);
  if (saved.step >= now.total_steps) return fmt::format("it is already at step {} of {}", saved.step, now.total_steps);
  return "";
}

}  // namespace trainsim::exec
