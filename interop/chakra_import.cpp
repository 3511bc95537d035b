// Chakra execution traces read back into a schedule (interop/chakra.h).
#include <charconv>
#include <climits>
#include <optional>
#include <regex>
#include <unordered_set>

#include <fmt/format.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/delimited_message_util.h>

#include "interop/chakra.h"
#include "schedules/input.h"  // shown(): names quoted in errors at most 80 bytes
#include "schedules/limits.h"
#include "schedules/text_format.h"

namespace trainsim {

namespace {

using ChakraProtoMsg::AttributeProto;
using ChakraProtoMsg::Node;

const AttributeProto* find_attr(const google::protobuf::RepeatedPtrField<AttributeProto>& attrs, const char* name) {
  for (const AttributeProto& a : attrs)
    if (a.name() == name) return &a;
  return nullptr;
}

// An integer attribute of any of the integer cases Chakra's writers use; nullopt when absent or not an integer.
std::optional<long long> int_attr(const Node& n, const char* name) {
  const AttributeProto* a = find_attr(n.attr(), name);
  if (!a) return std::nullopt;
  switch (a->value_case()) {
    case AttributeProto::kInt32Val: return a->int32_val();
    case AttributeProto::kInt64Val: return a->int64_val();
    case AttributeProto::kUint32Val: return a->uint32_val();
    case AttributeProto::kUint64Val:
      return a->uint64_val() > static_cast<std::uint64_t>(LLONG_MAX) ? std::nullopt
                                                                     : std::optional<long long>(a->uint64_val());
    case AttributeProto::kSint32Val: return a->sint32_val();
    case AttributeProto::kSint64Val: return a->sint64_val();
    default: return std::nullopt;
  }
}

std::string type_name(int type) {
  const std::string& n = ChakraProtoMsg::NodeType_Name(static_cast<ChakraProtoMsg::NodeType>(type));
  return n.empty() ? fmt::format("node type {}", type) : n;
}

// What a node of `op`'s kind must be.
ChakraProtoMsg::NodeType expected_type(OpKind k) {
  if (k == OpKind::Send) return ChakraProtoMsg::COMM_SEND_NODE;
  if (k == OpKind::Recv) return ChakraProtoMsg::COMM_RECV_NODE;
  if (is_collective(k)) return ChakraProtoMsg::COMM_COLL_NODE;
  return ChakraProtoMsg::COMP_NODE;
}

}  // namespace

ChakraRank parse_chakra_file(const std::string& bytes, const std::string& name, std::size_t max_nodes) {
  // (protobuf logs what it refuses, invalid UTF-8 in a string field among it, to stderr: silenced, as the error
  // below says what is wrong)
  google::protobuf::LogSilencer quiet;
  if (bytes.size() > static_cast<std::size_t>(INT_MAX))
    throw ChakraError(fmt::format("{}: {} bytes, more than a protobuf stream reads (2 GiB)", name, bytes.size()));
  google::protobuf::io::ArrayInputStream stream(bytes.data(), static_cast<int>(bytes.size()));
  ChakraRank out;
  bool clean_eof = false;
  if (!google::protobuf::util::ParseDelimitedFromZeroCopyStream(&out.metadata, &stream, &clean_eof))
    throw ChakraError(fmt::format("{}: {}", name, clean_eof ? "the file is empty (a Chakra trace starts with its "
                                                              "GlobalMetadata)"
                                                            : "not a Chakra trace: its first message is not a "
                                                              "GlobalMetadata"));
  if (out.metadata.version().empty())
    throw ChakraError(fmt::format("{}: not a Chakra trace: its GlobalMetadata names no schema version", name));
  while (true) {
    Node n;
    if (!google::protobuf::util::ParseDelimitedFromZeroCopyStream(&n, &stream, &clean_eof)) {
      if (clean_eof) break;
      throw ChakraError(fmt::format("{}: message {} is not a Chakra node (the file is cut or not a trace)", name,
                                    out.nodes.size() + 1));
    }
    if (out.nodes.size() >= max_nodes)
      throw ChakraError(fmt::format("{}: more than {} nodes, the most one rank may hold", name, max_nodes));
    out.nodes.push_back(std::move(n));
  }
  return out;
}

int chakra_world_size(const ChakraRank& rank0, const std::string& name) {
  const AttributeProto* h = find_attr(rank0.metadata.attr(), "trainsim_header");
  if (!h || h->value_case() != AttributeProto::kStringVal)
    throw ChakraError(fmt::format("{}: its metadata has no trainsim_header: only traces trainsim wrote can be read "
                                  "(a foreign trace's nodes name no tensors, which trainsim's checks need)",
                                  name));
  const std::string& text = h->string_val();
  static const std::regex line(R"((^|\n)world_size (\d{1,7})\n)");
  std::smatch m;
  if (std::regex_search(text, m, line)) {
    const int world = std::stoi(m[2]);
    if (world >= 1 && world <= kMaxWorldSize) return world;
  }
  throw ChakraError(fmt::format("{}: its trainsim_header has no world_size line of 1 to {}", name, kMaxWorldSize));
}

Schedule schedule_from_chakra(const std::vector<ChakraRank>& ranks, const std::vector<std::string>& names) {
  if (ranks.empty()) throw ChakraError("no Chakra files to read");
  auto header_of = [&](std::size_t r) -> const std::string& {
    const AttributeProto* h = find_attr(ranks[r].metadata.attr(), "trainsim_header");
    if (!h || h->value_case() != AttributeProto::kStringVal)
      throw ChakraError(fmt::format("{}: its metadata has no trainsim_header: only traces trainsim wrote can be "
                                    "read (a foreign trace's nodes name no tensors, which trainsim's checks need)",
                                    names[r]));
    return h->string_val();
  };
  const std::string& header = header_of(0);
  // The .sched text: the header, then each rank's op lines; where each line came from, for errors.
  std::string text = header;
  std::vector<std::pair<int, std::uint64_t>> origin;  // line - 1 -> (rank, node id); header lines: (-1, 0)
  for (char c : header)
    if (c == '\n') origin.push_back({-1, 0});
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (header_of(r) != header)
      throw ChakraError(fmt::format("{}: its trainsim_header differs from {}'s: the files are of different schedules",
                                    names[r], names[0]));
    if (const AttributeProto* rank_attr = find_attr(ranks[r].metadata.attr(), "rank");
        rank_attr && (rank_attr->value_case() != AttributeProto::kInt32Val || rank_attr->int32_val() != static_cast<int>(r)))
      throw ChakraError(fmt::format("{}: its metadata's rank is not {}, the rank it is read as", names[r], r));
    text += fmt::format("\nrank {}\n", r);
    origin.push_back({-1, 0}), origin.push_back({-1, 0});
    std::unordered_set<std::uint64_t> seen;
    for (const Node& n : ranks[r].nodes) {
      const std::string where = fmt::format("{}: node {} '{}' ({})", names[r], n.id(), shown(n.name()), type_name(n.type()));
      if (!seen.insert(n.id()).second) throw ChakraError(fmt::format("{}: its id repeats an earlier node's", where));
      for (auto deps : {&n.data_deps(), &n.ctrl_deps()})
        for (std::uint64_t d : *deps)
          if (!seen.count(d) || d == n.id())
            throw ChakraError(fmt::format("{}: it depends on node {}, which does not come before it", where, d));
      const AttributeProto* op = find_attr(n.attr(), "trainsim_op");
      if (!op || op->value_case() != AttributeProto::kStringVal)
        throw ChakraError(fmt::format("{}: it has no trainsim_op attribute, so it cannot be mapped to a trainsim op "
                                      "(only traces trainsim wrote can be read)",
                                      where));
      if (op->string_val().find('\n') != std::string::npos || op->string_val().find('#') != std::string::npos)
        throw ChakraError(fmt::format("{}: its trainsim_op is not one op line", where));
      text += "  " + op->string_val() + "\n";
      origin.push_back({static_cast<int>(r), n.id()});
    }
  }
  Schedule s;
  try {
    s = parse_schedule(text, "<chakra>");
  } catch (const ParseError& e) {
    // "<chakra>:LINE:COL: what": the line is a node's (or the header's).
    static const std::regex at(R"(^<chakra>:(\d+):(\d+): )");
    std::smatch m;
    const std::string what = e.what();
    if (std::regex_search(what, m, at)) {
      std::size_t line = 0;
      std::from_chars(what.data() + m.position(1), what.data() + m.position(1) + m.length(1), line);
      const std::string rest = m.suffix();
      if (line >= 1 && line <= origin.size() && origin[line - 1].first >= 0) {
        const auto [r, id] = origin[line - 1];
        throw ChakraError(fmt::format("{}: node {}: its trainsim_op: {}", names[r], id, rest));
      }
      throw ChakraError(fmt::format("{}: its trainsim_header: {}", names[0], rest));
    }
    throw ChakraError(fmt::format("{}: {}", names[0], what));
  }
  if (static_cast<std::size_t>(s.header.world_size) != ranks.size())
    throw ChakraError(fmt::format("{}: the schedule has {} ranks, but {} files were read", names[0],
                                  s.header.world_size, ranks.size()));
  // Each node's type and its peer or group agree with its op; ops name the node they came from.
  for (std::size_t r = 0; r < ranks.size(); ++r)
    for (std::size_t i = 0; i < ranks[r].nodes.size(); ++i) {
      const Node& n = ranks[r].nodes[i];
      Op& op = s.ranks[r][i];
      const std::string where = fmt::format("{}: node {} '{}' ({})", names[r], n.id(), shown(n.name()), type_name(n.type()));
      if (n.type() != expected_type(op.kind))
        throw ChakraError(fmt::format("{}: a {} op is a {}", where, op_name(op.kind), type_name(expected_type(op.kind))));
      if (op.kind == OpKind::Send && int_attr(n, "comm_dst") != op.peer)
        throw ChakraError(fmt::format("{}: its comm_dst is not the op's destination, rank {}", where, op.peer));
      if (op.kind == OpKind::Recv && op.peer >= 0 && int_attr(n, "comm_src") != op.peer)
        throw ChakraError(fmt::format("{}: its comm_src is not the op's source, rank {}", where, op.peer));
      if (is_collective(op.kind)) {
        const AttributeProto* pg = find_attr(n.attr(), "pg_name");
        if (!pg || pg->string_val() != std::to_string(op.group))
          throw ChakraError(fmt::format("{}: its pg_name is not the op's group, {}", where, op.group));
      }
      op.where = fmt::format("{} node {}", names[r], n.id());
    }
  return s;
}

}  // namespace trainsim
