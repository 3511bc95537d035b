// A schedule as Chakra execution traces (interop/chakra.h): the nodes, their attributes and dependencies.
#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include <fmt/format.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/delimited_message_util.h>
#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include "hardware/cost_model.h"
#include "interop/chakra.h"
#include "schedules/cost_models.h"
#include "schedules/replay.h"
#include "schedules/text_format.h"

namespace trainsim {

namespace {

using ChakraProtoMsg::AttributeProto;
using ChakraProtoMsg::Node;

ChakraProtoMsg::CollectiveCommType comm_type(OpKind k) {
  switch (k) {
    case OpKind::AllReduce: return ChakraProtoMsg::ALL_REDUCE;
    case OpKind::AllGather: return ChakraProtoMsg::ALL_GATHER;
    case OpKind::ReduceScatter: return ChakraProtoMsg::REDUCE_SCATTER;
    case OpKind::Broadcast: return ChakraProtoMsg::BROADCAST;
    case OpKind::Reduce: return ChakraProtoMsg::REDUCE;
    case OpKind::AllToAll: return ChakraProtoMsg::ALL_TO_ALL;
    default: return ChakraProtoMsg::BARRIER;
  }
}

AttributeProto* attr(Node& n, const char* name) {
  AttributeProto* a = n.add_attr();
  a->set_name(name);
  return a;
}

// Whole microseconds of a simulated time (nanoseconds), rounded; never negative.
std::uint64_t micros(Time t) { return t <= 0 ? 0 : static_cast<std::uint64_t>((t + 500) / 1000); }

std::string tensor_list(const TensorList& ts) {
  nlohmann::json j = nlohmann::json::array();
  for (const Tensor& t : ts) j.push_back(t.str());
  return j.dump();
}

// The header's text as print_schedule writes it (everything before the first rank).
std::string header_text(const ScheduleHeader& h) {
  Schedule empty;
  empty.header = h;
  return print_schedule(empty);
}

// PREFIX of "PREFIX.et" or "PREFIX".
std::string chakra_base(const std::string& prefix) {
  if (prefix.size() > 3 && prefix.compare(prefix.size() - 3, 3, ".et") == 0) return prefix.substr(0, prefix.size() - 3);
  return prefix;
}

}  // namespace

std::string chakra_rank_path(const std::string& prefix, int rank) {
  return fmt::format("{}.{}.et", chakra_base(prefix), rank);
}

std::string chakra_comm_groups_path(const std::string& prefix) { return chakra_base(prefix) + ".comm_groups.json"; }

std::vector<ChakraRank> chakra_trace(const Schedule& s) {
  // One cost model for the simulation's times and the nodes' sizes and FLOPs (built once: for the hardware model
  // that prepares every rank).
  std::unique_ptr<CostModel> cost;
  try {
    cost = make_schedule_cost_model(s);
  } catch (const std::invalid_argument& e) {  // (a header the cost model cannot price: as simulate() reports it)
    throw std::invalid_argument(fmt::format("the schedule does not validate: {}", e.what()));
  }
  SimOptions options;
  options.cost = cost.get();
  const SimResult sim = simulate(s, options);
  if (!sim.ok) throw std::invalid_argument(fmt::format("the schedule does not validate: {}", sim.error));
  const auto* hardware = dynamic_cast<const hw::HardwareCostModel*>(cost.get());
  const std::string header = header_text(s.header);
  std::vector<ChakraRank> out(s.header.world_size);
  // The k-th message from src to dst carries tag k on both sides (sends and receives pair in order per pair).
  std::map<std::pair<int, int>, int> sent, received;
  for (int r = 0; r < s.header.world_size; ++r) {
    ChakraRank& rank = out[r];
    rank.metadata.set_version(kChakraSchemaVersion);
    auto meta = [&](const char* name) {
      AttributeProto* a = rank.metadata.add_attr();
      a->set_name(name);
      return a;
    };
    meta("trainsim_header")->set_string_val(header);
    meta("rank")->set_int32_val(r);
    meta("world_size")->set_int32_val(s.header.world_size);
    meta("size_unit")->set_string_val(cost->memory_unit());
    const std::vector<OpRun>& runs = sim.trace.ranks[r];
    std::size_t next_run = 0;
    std::map<Tensor, std::uint64_t> writer;       // the node that last wrote each tensor
    std::map<int, std::uint64_t> last_on_stream;  // the last node of each stream
    Time clock = 0;                               // the end of the rank's last timed op so far
    for (const Op& op : s.ranks[r]) {
      Node& n = rank.nodes.emplace_back();
      const std::uint64_t id = rank.nodes.size() - 1;
      n.set_id(id);
      const std::string line = print_op(op, s.header);
      n.set_name(line);
      Op timed = op;
      Time start = clock, end = clock;
      if (is_timed(op.kind)) {
        if (next_run >= runs.size()) throw std::logic_error(fmt::format("rank {}: the simulation lost an op", r));
        timed = runs[next_run].op;  // (a receive from any source: its matched peer)
        start = runs[next_run].start, end = runs[next_run].end;
        ++next_run;
        clock = std::max(clock, end);
      }
      n.set_start_time_micros(micros(start));
      n.set_duration_micros(micros(end) - micros(start));
      // Sizes on the wire (CostModel::memory without a rank: a layer's input without what its forward saves).
      double bytes = 0;
      for (const Tensor& t : op.reads) bytes += cost->memory(t);
      double written = 0;
      for (const Tensor& t : op.writes) written += cost->memory(t);
      auto size = [](double b) { return static_cast<std::int64_t>(std::llround(std::min(b, 9.0e18))); };
      attr(n, "is_cpu_op")->set_bool_val(false);
      if (is_p2p(op.kind)) {
        const bool send = op.kind == OpKind::Send;
        n.set_type(send ? ChakraProtoMsg::COMM_SEND_NODE : ChakraProtoMsg::COMM_RECV_NODE);
        const int src = send ? r : timed.peer, dst = send ? op.peer : r;
        int& k = (send ? sent : received)[{src, dst}];
        attr(n, "comm_src")->set_int32_val(src);
        attr(n, "comm_dst")->set_int32_val(dst);
        attr(n, "comm_tag")->set_int32_val(k++);
        attr(n, "comm_size")->set_int64_val(size(send ? bytes : written));
      } else if (is_collective(op.kind)) {
        n.set_type(ChakraProtoMsg::COMM_COLL_NODE);
        attr(n, "comm_type")->set_int64_val(comm_type(op.kind));
        // The whole buffer, the same on every member: an all-gather's output, a reduce-scatter's input, the
        // tensor of the others (which a broadcast's root reads and the others write, a reduce's the reverse).
        const double whole = std::max(bytes, written);
        attr(n, "comm_size")->set_int64_val(size(whole));
        attr(n, "pg_name")->set_string_val(std::to_string(op.group));
        if (is_rooted(op.kind)) attr(n, "root")->set_int32_val(op.peer);
      } else {
        n.set_type(ChakraProtoMsg::COMP_NODE);
        const double flops = hardware && is_compute(op.kind) ? hardware->op_work(op).flops() : 0;
        attr(n, "num_ops")->set_int64_val(size(flops));
        // (load, free and accumulate take no time in trainsim: no bytes either, so that a roofline model of the
        // nodes, ASTRA-sim's, does not give them time)
        attr(n, "tensor_size")->set_uint64_val(is_timed(op.kind) ? static_cast<std::uint64_t>(size(bytes + written)) : 0);
      }
      attr(n, "trainsim_op")->set_string_val(line);
      n.mutable_inputs()->set_values(tensor_list(op.reads));
      n.mutable_outputs()->set_values(tensor_list(op.writes));
      // Dependencies: the writers of what it reads (data), the node before it on its stream (control).
      std::vector<std::uint64_t> data;
      for (const Tensor& t : op.reads)
        if (auto it = writer.find(t); it != writer.end()) data.push_back(it->second);
      std::sort(data.begin(), data.end());
      data.erase(std::unique(data.begin(), data.end()), data.end());
      for (std::uint64_t d : data) n.add_data_deps(d);
      if (auto it = last_on_stream.find(op.stream); it != last_on_stream.end()) n.add_ctrl_deps(it->second);
      last_on_stream[op.stream] = id;
      for (const Tensor& t : op.writes) writer[t] = id;
    }
  }
  return out;
}

std::string chakra_file_bytes(const ChakraRank& rank) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    bool ok = google::protobuf::util::SerializeDelimitedToZeroCopyStream(rank.metadata, &stream);
    for (const Node& n : rank.nodes) ok = ok && google::protobuf::util::SerializeDelimitedToZeroCopyStream(n, &stream);
    if (!ok) throw std::runtime_error("protobuf could not serialise a Chakra message");
  }
  return out;
}

std::string chakra_json(const std::vector<ChakraRank>& ranks, const std::vector<std::string>& names) {
  auto json = [](const google::protobuf::Message& m) {
    std::string text;
    if (!google::protobuf::util::MessageToJsonString(m, &text).ok())
      throw std::runtime_error("protobuf could not print a Chakra message as JSON");
    return nlohmann::ordered_json::parse(text);
  };
  nlohmann::ordered_json out = {{"ranks", nlohmann::ordered_json::array()}};
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    nlohmann::ordered_json nodes = nlohmann::ordered_json::array();
    for (const Node& n : ranks[r].nodes) nodes.push_back(json(n));
    out["ranks"].push_back({{"file", r < names.size() ? names[r] : ""}, {"global_metadata", json(ranks[r].metadata)},
                            {"nodes", std::move(nodes)}});
  }
  return out.dump(1) + "\n";
}

std::string chakra_comm_groups_json(const ScheduleHeader& h) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  std::vector<int> all(h.world_size);
  for (int r = 0; r < h.world_size; ++r) all[r] = r;
  j["0"] = all;
  for (std::size_t g = 0; g < h.groups.size(); ++g) j[std::to_string(g + 1)] = h.groups[g];
  return j.dump() + "\n";
}

}  // namespace trainsim
