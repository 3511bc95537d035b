#include "exec/checkpoint.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "exec/file_io.h"
#include "exec/json_fields.h"
#include "exec/sha256.h"
#include "schedules/input.h"
#include "schedules/limits.h"
#include "schedules/text_format.h"

namespace trainsim::exec {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kStateMagic = "trainsim-state 1\n";
constexpr int kMaxManifestDepth = 32;  // a manifest nests 4 levels; model and optimizer settings are flat
const std::string kManifest = "manifest.json";
const std::string kManifestTemp = ".manifest.json.tmp";

std::string rank_file_name(int r, const std::string& sha256) { return fmt::format("rank{}-{}.bin", r, sha256.substr(0, 16)); }
std::string rank_temp_name(int r) { return fmt::format(".rank{}.tmp", r); }

// Whether `name` is one of the files a save writes (or wrote, in format version 1, or left behind when it
// was killed): the names a later save may remove.
bool is_checkpoint_file(const std::string& name) {
  auto digits = [](std::string_view s) {
    return !s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string_view::npos;
  };
  std::string_view s = name;
  if (s == kManifestTemp) return true;
  if (s.size() > 5 && s.substr(0, 5) == ".rank" && s.substr(s.size() - 4) == ".tmp")
    return digits(s.substr(5, s.size() - 9));
  if (s.size() < 8 || s.substr(0, 4) != "rank" || s.substr(s.size() - 4) != ".bin") return false;
  s = s.substr(4, s.size() - 8);  // "<R>-<16 hex>" or "<R>" (version 1)
  const auto dash = s.find('-');
  if (dash == std::string_view::npos) return digits(s);
  const std::string_view hex = s.substr(dash + 1);
  return digits(s.substr(0, dash)) && hex.size() == 16 && hex.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// A value from a checkpoint as an error message shows it: JSON, non-ASCII escaped, cut.
std::string show(const json& v) { return shown(v.dump(-1, ' ', true, json::error_handler_t::replace)); }
// The same, a string without JSON's quotes and escapes (control bytes still escaped).
std::string plain(const json& v) { return v.is_string() ? shown(v.get_ref<const std::string&>(), 4096) : show(v); }

// The canonical text the manifest's hash covers: the manifest without its "sha256", keys sorted, no spaces.
std::string canonical(json manifest) {
  manifest.erase("sha256");
  return manifest.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string serialize(const HostState& s) {
  std::string out = kStateMagic;
  for (const auto& [t, v] : s) {
    out += fmt::format("{} {}\n", t.str(), v.size() * sizeof(float));
    out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
  return out;
}

// The size of serialize() of a state of this layout.
std::size_t serialized_size(const StateLayout& layout) {
  std::size_t n = kStateMagic.size();
  for (const auto& [t, bytes] : layout) n += fmt::formatted_size("{} {}\n", t.str(), bytes) + bytes;
  return n;
}

// Parses a rank file: each tensor once, of the size `expected` says (-1: a tensor this run's rank does not carry).
HostState deserialize(const std::string& bytes, const std::string& name,
                      const std::function<long long(const Tensor&)>& expected) {
  auto bad = [&](const std::string& what) { return CheckpointError(fmt::format("{}: {}", name, what)); };
  if (bytes.compare(0, kStateMagic.size(), kStateMagic) != 0) throw bad("not a trainsim state file");
  HostState s;
  std::size_t pos = kStateMagic.size();
  while (pos < bytes.size()) {
    const std::size_t nl = bytes.find('\n', pos);
    if (nl == std::string::npos || nl - pos > 200)
      throw bad(fmt::format("malformed tensor header at byte {}", pos));
    const std::string line = bytes.substr(pos, nl - pos);
    const std::size_t sp = line.rfind(' ');
    const std::string size_text = sp == std::string::npos ? "" : line.substr(sp + 1);
    if (size_text.empty() || size_text.size() > 18 || size_text.find_first_not_of("0123456789") != std::string::npos)
      throw bad(fmt::format("malformed tensor header '{}' at byte {}", shown(line), pos));
    Tensor t;
    try {
      t = parse_tensor(line.substr(0, sp));
    } catch (const std::exception& e) {
      throw bad(fmt::format("malformed tensor header '{}' at byte {}: {}", shown(line), pos, shown(e.what(), 300)));
    }
    const std::size_t n = std::stoull(size_text);
    pos = nl + 1;
    const long long want = expected(t);
    if (want < 0) throw bad(fmt::format("it holds {}, which this run's rank does not carry", t.str()));
    if (s.count(t)) throw bad(fmt::format("it holds {} twice", t.str()));
    if (n != static_cast<std::size_t>(want))
      throw bad(fmt::format("its {} is {} bytes, this run's is {} bytes", t.str(), n, want));
    if (n > bytes.size() - pos) throw bad(fmt::format("{} is truncated", t.str()));
    std::vector<float> v(n / sizeof(float));
    std::memcpy(v.data(), bytes.data() + pos, n);
    pos += n;
    s.emplace(t, std::move(v));
  }
  return s;
}

// Parses a rank file, which must hold every tensor of `layout` once, of its size, and nothing else.
HostState deserialize(const std::string& bytes, const std::string& name, const StateLayout& layout) {
  HostState s = deserialize(bytes, name, [&](const Tensor& t) -> long long {
    auto it = layout.find(t);
    return it == layout.end() ? -1 : static_cast<long long>(it->second);
  });
  for (const auto& [t, n] : layout)
    if (!s.count(t)) throw CheckpointError(fmt::format("{}: it has no {}", name, t.str()));
  return s;
}

// The manifest's fields, each checked: present, of its type, in range. Messages name the file and field.
struct Fields {
  const json& m;
  std::string file;

  CheckpointError error(const std::string& what) const { return CheckpointError(fmt::format("{}: {}", file, what)); }
  const json& at(const char* field) const {
    if (!m.contains(field)) throw error(fmt::format("the field '{}' is missing", field));
    return m[field];
  }
  long long integer(const char* field, long long lo, long long hi) const {
    const json& v = at(field);
    if (!v.is_number_integer()) throw error(fmt::format("'{}' is {}, not an integer", field, show(v)));
    const std::optional<long long> n = json_integer(v);  // (exec/json_fields.h)
    if (!n || *n < lo || *n > hi)
      throw error(fmt::format("'{}' is {}, out of range (from {} to {})", field, show(v), lo, hi));
    return *n;
  }
  std::string text(const char* field, std::size_t max_bytes) const {
    const json& v = at(field);
    if (!v.is_string()) throw error(fmt::format("'{}' is {}, not a string", field, show(v)));
    if (v.get_ref<const std::string&>().size() > max_bytes)
      throw error(fmt::format("'{}' is longer than {} bytes", field, max_bytes));
    return v.get<std::string>();
  }
  std::string hash(const char* field) const {
    std::string h = text(field, 64);
    if (!is_sha256_hex(h)) throw error(fmt::format("'{}' is '{}', not a SHA-256 (64 lowercase hex digits)", field, shown(h)));
    return h;
  }
  const json& object(const char* field) const {
    const json& v = at(field);
    if (!v.is_object()) throw error(fmt::format("'{}' is {}, not an object", field, show(v)));
    return v;
  }
};

// What differs between two JSON objects (model or optimizer settings): "dim 16 in the checkpoint, 32 now".
std::string object_diff(const json& saved, const json& now) {
  std::string out;
  int listed = 0, more = 0;
  auto add = [&](const std::string& k, const std::string& a, const std::string& b) {
    if (listed++ < 5) out += fmt::format("{}{} {} in the checkpoint, {} now", out.empty() ? "" : "; ", shown(k), a, b);
    else ++more;
  };
  if (!saved.is_object() || !now.is_object()) return fmt::format("{} in the checkpoint, {} now", show(saved), show(now));
  for (const auto& [k, v] : now.items())
    if (!saved.contains(k)) add(k, "nothing", show(v));
    else if (saved[k] != v) add(k, show(saved[k]), show(v));
  for (const auto& [k, v] : saved.items())
    if (!now.contains(k)) add(k, show(v), "nothing");
  if (more > 0) out += fmt::format("; and {} more", more);
  return out;
}

// The corpus files of a TokenData::identity(), as a message lists them.
std::string corpus_files(const json& data) {
  if (!data.is_object() || !data.contains("files") || !data["files"].is_array()) return show(data);
  const json& files = data["files"];
  std::string out;
  for (std::size_t i = 0; i < files.size() && i < 3; ++i)
    out += fmt::format("{}'{}'", i ? ", " : "", files[i].is_object() && files[i].contains("path") ? plain(files[i]["path"]) : show(files[i]));
  if (files.size() > 3) out += fmt::format(" and {} more", files.size() - 3);
  if (data.contains("bytes")) out += fmt::format(" ({} bytes)", plain(data["bytes"]));
  return out;
}

// What differs between the corpus a checkpoint was made on and this run's (TokenData::identity() both).
std::string data_diff(const json& saved, const json& now) {
  auto field = [](const json& j, const char* k) { return j.is_object() && j.contains(k) ? j[k] : json(); };
  const json a = field(saved, "files"), b = field(now, "files");
  bool same_paths = a.is_array() && b.is_array() && a.size() == b.size();
  for (std::size_t i = 0; same_paths && i < a.size(); ++i) same_paths = field(a[i], "path") == field(b[i], "path");
  if (!same_paths)
    return fmt::format("it was made on other data: {}; this run reads {}", corpus_files(saved), corpus_files(now));
  std::string first;
  int differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    if (differ++ == 0)
      first = fmt::format("the corpus differs: '{}' had {} bytes, sha256 {} in the checkpoint; now {} bytes, sha256 {}",
                          plain(field(b[i], "path")), plain(field(a[i], "bytes")), plain(field(a[i], "sha256")),
                          plain(field(b[i], "bytes")), plain(field(b[i], "sha256")));
  }
  if (differ > 1) first += fmt::format(" (and {} more of its files differ)", differ - 1);
  if (differ > 0) return first;
  return fmt::format("the corpus differs: sha256 {} in the checkpoint, now {}", plain(field(saved, "sha256")),
                     plain(field(now, "sha256")));
}

}  // namespace

void save_checkpoint(const std::string& dir, const CheckpointInfo& info, const std::vector<HostState>& ranks) {
  if (info.world_size < 1 || static_cast<int>(ranks.size()) != info.world_size)
    throw CheckpointError(fmt::format("cannot save a checkpoint of {} ranks' states for a world of {}", ranks.size(),
                                      info.world_size));
  auto failed = [&](const std::string& why, const std::string& state) {
    return CheckpointError(fmt::format("cannot save the checkpoint in '{}': {}; {}", shown(dir, 4096), why, state));
  };
  if (std::string where = first_non_finite(ranks); !where.empty())
    throw failed(fmt::format("the state is not finite ({}): the run diverged", where),
                 "the checkpoint that was there (if any) is kept");
  std::unique_ptr<DirectoryWriter> w;
  try {
    w = std::make_unique<DirectoryWriter>(dir);
  } catch (const FileError& e) {
    throw failed(e.what(), "nothing was written");
  }
  const std::vector<std::string> before = w->names();
  const bool had_checkpoint = std::binary_search(before.begin(), before.end(), kManifest);
  std::vector<std::string> created;  // files of this save that were not there before
  std::set<std::string> kept;        // the files of the new checkpoint
  bool committed = false;
  try {
    json files = json::array();
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      const std::string bytes = serialize(ranks[r]);
      const std::string sha = sha256_hex(bytes);
      const std::string name = rank_file_name(static_cast<int>(r), sha);
      // A name already there holds these bytes (the name is their hash): it is rewritten, not removed on failure.
      const bool existed = std::binary_search(before.begin(), before.end(), name);
      w->write_atomically(rank_temp_name(static_cast<int>(r)), name, bytes);
      if (!existed) created.push_back(name);
      kept.insert(name);
      files.push_back({{"file", name}, {"bytes", bytes.size()}, {"sha256", sha}});
    }
    w->sync();  // the rank files' names are durable before the manifest names them
    json m;
    m["format"] = "trainsim-checkpoint";
    m["version"] = kCheckpointVersion;
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
    if (info.layers > 0) {
      m["layers"] = info.layers;
      m["stage_layout"] = info.stage_layout;
    }
    if (!info.expert_parallel.empty()) {  // (a list of [layer, EP degree])
      json ep = json::array();
      for (const auto& [layer, degree] : info.expert_parallel) ep.push_back(json::array({layer, degree}));
      m["expert_parallel"] = ep;
    }
    m["ranks"] = files;
    // The hash is taken over the manifest as it will be read back: strings that are not UTF-8 are written
    // with U+FFFD in their place.
    m = json::parse(m.dump(-1, ' ', false, json::error_handler_t::replace));
    m["sha256"] = sha256_hex(canonical(m));
    w->write_atomically(kManifestTemp, kManifest, m.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
    committed = true;
    w->sync();
  } catch (const std::exception& e) {
    if (committed)  // the new checkpoint is in place, but its last rename may not survive a crash
      throw failed(e.what(), "the new checkpoint is in place but may not survive a crash of the machine");
    for (const std::string& name : created) w->remove(name);
    throw failed(e.what(), had_checkpoint ? "the checkpoint that was there is unchanged" : "no checkpoint was saved");
  }
  // The previous save's files, and what a killed save left behind. Best effort: a file that stays is
  // ignored by readers (only the manifest's files are read) and removed by the next save.
  for (const std::string& name : w->names())
    if (is_checkpoint_file(name) && !kept.count(name)) w->remove(name);
}

CheckpointInfo read_checkpoint_info(const std::string& dir) {
  const std::string path = shown((fs::path(dir) / kManifest).string(), 4096);
  std::string text;
  try {
    append_regular_file((fs::path(dir) / kManifest).string(), kMaxManifestBytes, text, "the checkpoint's manifest");
  } catch (const FileError& e) {
    throw CheckpointError(e.what());
  }
  json m;
  try {
    // A bound on the nesting: nlohmann::json parses without recursion, but dump() and == recurse, so a
    // manifest of a million '[' would overflow the stack when its hash is computed.
    m = json::parse(text, [&](int depth, json::parse_event_t, json&) {
      if (depth > kMaxManifestDepth)
        throw CheckpointError(fmt::format("{}: not a trainsim checkpoint manifest (nested deeper than {} levels)", path,
                                          kMaxManifestDepth));
      return true;
    });
  } catch (const json::exception& e) {
    throw CheckpointError(fmt::format("{}: not a trainsim checkpoint manifest (not JSON: {})", path, e.what()));
  }
  if (!m.is_object() || !m.contains("format") || m["format"] != "trainsim-checkpoint")
    throw CheckpointError(fmt::format("{}: not a trainsim checkpoint manifest (no \"format\": \"trainsim-checkpoint\")", path));
  const Fields f{m, path};
  const long long version = f.integer("version", 0, LLONG_MAX);
  if (version == 1)
    throw CheckpointError(fmt::format("{}: a checkpoint of format version 1, written by an older trainsim, whose manifest "
                                      "has no hash; this trainsim reads version {} only (save the run again)",
                                      path, kCheckpointVersion));
  if (version != kCheckpointVersion)
    throw CheckpointError(fmt::format("{}: a checkpoint of format version {}; this trainsim reads version {}", path,
                                      version, kCheckpointVersion));
  const std::string hash = f.hash("sha256");
  if (sha256_hex(canonical(m)) != hash)
    throw CheckpointError(fmt::format("{}: the manifest does not match its hash: it was edited or damaged", path));

  CheckpointInfo info;
  info.total_steps = static_cast<int>(f.integer("total_steps", 1, INT_MAX));
  info.step = static_cast<int>(f.integer("step", 1, info.total_steps));
  f.integer("data_position", info.step, info.step);  // the step is the position in the data
  info.world_size = static_cast<int>(f.integer("world_size", 1, kMaxWorldSize));
  const json& seed = f.at("seed");
  if (!seed.is_number_unsigned()) throw f.error(fmt::format("'seed' is {}, not an integer from 0 to 2^64-1", show(seed)));
  info.seed = seed.get<std::uint64_t>();
  info.schedule_hash = f.hash("schedule_hash");
  info.schedule_name = f.text("schedule", 4096);
  info.model = f.object("model");
  info.optimizer = f.object("optimizer");
  info.data = f.object("data");
  if (m.contains("layers")) {  // (recorded since issue 21)
    info.layers = static_cast<int>(f.integer("layers", 1, kMaxCount));
    info.stage_layout = f.text("stage_layout", 1 << 16);
  }
  if (m.contains("expert_parallel")) {  // (MoE checkpoints: [[layer, EP degree], ...])
    const json& ep = f.at("expert_parallel");
    if (!ep.is_array() || ep.size() > static_cast<std::size_t>(std::max(info.layers, 0)))
      throw f.error(fmt::format("'expert_parallel' is {}, not a list of at most one [layer, EP degree] per layer",
                                show(ep)));
    for (const json& e : ep) {
      const bool ok = e.is_array() && e.size() == 2 && e[0].is_number_unsigned() && e[1].is_number_unsigned() &&
                      e[0].get<std::uint64_t>() < static_cast<std::uint64_t>(info.layers) &&
                      e[1].get<std::uint64_t>() >= 1 && e[1].get<std::uint64_t>() <= 1024 &&
                      !info.expert_parallel.count(static_cast<int>(e[0].get<std::uint64_t>()));
      if (!ok)
        throw f.error(fmt::format("'expert_parallel' holds {}, not a [layer, EP degree] of a layer below {} (once) and "
                                  "a degree from 1 to 1024",
                                  show(e), info.layers));
      info.expert_parallel[static_cast<int>(e[0].get<std::uint64_t>())] = static_cast<int>(e[1].get<std::uint64_t>());
    }
  }
  const json& ranks = f.at("ranks");
  if (!ranks.is_array() || ranks.size() != static_cast<std::size_t>(info.world_size))
    throw f.error(fmt::format("'ranks' is not a list of {} rank files (one per rank)", info.world_size));
  for (int r = 0; r < info.world_size; ++r) {
    const json& e = ranks[static_cast<std::size_t>(r)];
    if (!e.is_object()) throw f.error(fmt::format("the entry of rank {} in 'ranks' is {}, not an object", r, show(e)));
    const Fields rf{e, fmt::format("{}: rank {}", path, r)};
    RankFile file;
    file.sha256 = rf.hash("sha256");
    file.bytes = static_cast<std::uint64_t>(rf.integer("bytes", 1, LLONG_MAX));
    file.name = rf.text("file", 64);
    if (file.name != rank_file_name(r, file.sha256))
      throw rf.error(fmt::format("the file is named '{}', not '{}' (rank{}-<the first 16 digits of its sha256>.bin)",
                                 shown(file.name), rank_file_name(r, file.sha256), r));
    info.rank_files.push_back(std::move(file));
  }
  return info;
}

namespace {

// "" when every value of `state` is finite, else "W3: NaN (element 17)" for the first that is not.
std::string non_finite_in(const HostState& state) {
  for (const auto& [t, values] : state)
    for (std::size_t i = 0; i < values.size(); ++i)
      if (!std::isfinite(values[i]))
        return fmt::format("{}: {} (element {})", t.str(), std::isnan(values[i]) ? "NaN" : "infinity", i);
  return "";
}

// A state read back holds finite values only: a diverged run's checkpoint is refused by name.
void check_finite(const HostState& state, const std::string& name) {
  if (std::string where = non_finite_in(state); !where.empty())
    throw CheckpointError(fmt::format("{}: a value is not finite ({}): the checkpoint comes from a run that diverged",
                                      name, where));
}

}  // namespace

std::string first_non_finite(const std::vector<HostState>& ranks) {
  for (std::size_t r = 0; r < ranks.size(); ++r)
    if (std::string where = non_finite_in(ranks[r]); !where.empty()) return fmt::format("rank {}'s {}", r, where);
  return "";
}

std::vector<HostState> read_checkpoint_states(const std::string& dir, const CheckpointInfo& info,
                                              const std::vector<StateLayout>& layouts) {
  if (info.rank_files.size() != layouts.size())
    throw CheckpointError(fmt::format("the checkpoint in '{}' has {} ranks, this run {}", shown(dir, 4096),
                                      info.rank_files.size(), layouts.size()));
  std::vector<HostState> out;
  for (std::size_t r = 0; r < layouts.size(); ++r) {
    const RankFile& file = info.rank_files[r];
    const std::string path = (fs::path(dir) / file.name).string(), name = shown(path, 4096);
    const std::size_t want = serialized_size(layouts[r]);
    if (file.bytes != want)
      throw CheckpointError(fmt::format("{}: the manifest says it holds {} bytes, but rank {}'s state in this run takes "
                                        "{} bytes",
                                        name, file.bytes, r, want));
    std::string bytes;
    try {
      append_regular_file(path, want, bytes, "the checkpoint file");
    } catch (const FileError& e) {
      throw CheckpointError(e.what());
    }
    if (bytes.size() != want)
      throw CheckpointError(fmt::format("{}: the file holds {} bytes, the manifest says {}", name, bytes.size(), want));
    if (sha256_hex(bytes) != file.sha256)
      throw CheckpointError(fmt::format("{}: the file is corrupt (its SHA-256 differs from the manifest's)", name));
    out.push_back(deserialize(bytes, name, layouts[r]));
    check_finite(out.back(), name);
  }
  return out;
}

std::vector<HostState> read_checkpoint_tensors(const std::string& dir, const CheckpointInfo& info,
                                               const std::function<std::size_t(const Tensor&)>& bytes_of) {
  std::vector<HostState> out;
  for (std::size_t r = 0; r < info.rank_files.size(); ++r) {
    const RankFile& file = info.rank_files[r];
    const std::string path = (fs::path(dir) / file.name).string(), name = shown(path, 4096);
    std::string bytes;
    try {
      append_regular_file(path, static_cast<std::size_t>(file.bytes), bytes, "the checkpoint file");
    } catch (const FileError& e) {
      throw CheckpointError(e.what());
    }
    if (bytes.size() != file.bytes)
      throw CheckpointError(fmt::format("{}: the file holds {} bytes, the manifest says {}", name, bytes.size(), file.bytes));
    if (sha256_hex(bytes) != file.sha256)
      throw CheckpointError(fmt::format("{}: the file is corrupt (its SHA-256 differs from the manifest's)", name));
    out.push_back(deserialize(bytes, name, [&](const Tensor& t) -> long long {
      try {
        return static_cast<long long>(bytes_of(t));
      } catch (const std::exception& e) {
        throw CheckpointError(fmt::format("{}: {} does not fit the checkpoint's model: {}", name, t.str(), e.what()));
      }
    }));
    check_finite(out.back(), name);
  }
  return out;
}

std::string checkpoint_mismatch(const CheckpointInfo& saved, const CheckpointInfo& now) {
  if (saved.schedule_hash != now.schedule_hash)
    return fmt::format("it was made with another schedule ('{}', hash {}; this one is '{}', hash {})",
                       shown(saved.schedule_name, 4096), saved.schedule_hash, shown(now.schedule_name, 4096),
                       now.schedule_hash);
  if (saved.world_size != now.world_size)
    return fmt::format("it has {} ranks, the schedule {}", saved.world_size, now.world_size);
  if (saved.model != now.model) return fmt::format("it was made with another model ({})", object_diff(saved.model, now.model));
  if (saved.optimizer != now.optimizer)
    return fmt::format("it was made with other optimizer settings ({})", object_diff(saved.optimizer, now.optimizer));
  if (saved.seed != now.seed) return fmt::format("it was made with seed {}, not {}", saved.seed, now.seed);
  if (saved.data != now.data) return data_diff(saved.data, now.data);
  if (saved.total_steps != now.total_steps)
    return fmt::format("it was made for a {}-step run (the learning-rate schedule); pass --steps {}", saved.total_steps,
                       saved.total_steps);
  if (saved.step >= now.total_steps) return fmt::format("it is already at step {} of {}", saved.step, now.total_steps);
  return "";
}

}  // namespace trainsim::exec
