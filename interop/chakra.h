// Chakra execution traces (MLCommons Chakra ET, schema 0.0.4; issue 36, docs/chakra.md): a schedule as one
// protobuf file per rank, the workload format of ASTRA-sim and SimAI, and such files read back.
//
// Out: every op of rank r is one node of PREFIX.r.et, in program order (node id = its index among the rank's
// nodes). Forward, backward, loss and update ops are COMP_NODEs with their FLOPs (`num_ops`, with the hardware
// cost model) and tensor bytes (`tensor_size`); load, free and accumulate, which take no time in trainsim, are
// COMP_NODEs of duration 0. Sends and receives are COMM_SEND_NODE / COMM_RECV_NODE (`comm_src`, `comm_dst`,
// `comm_tag`: the k-th message from src to dst has tag k, as sends and receives pair in order; `comm_size`
// bytes); collectives COMM_COLL_NODEs (`comm_type`, `comm_size`, `pg_name` = the group id). Durations and start
// times come from simulating the schedule with its cost model. data_deps: the nodes of the rank that last wrote
// each tensor the node reads; ctrl_deps: the node before it on its stream. Every node carries `trainsim_op`,
// its .sched line, and the metadata `trainsim_header`, the schedule's header: what reading the files back needs.
// Sizes are bytes with the hardware cost model and the cost model's memory units otherwise (docs/chakra.md).
//
// In: files trainsim wrote, read back to the same schedule. A node without `trainsim_op` (a trace from another
// tool) is refused naming the file, the node and its type: a foreign trace names no tensors, which every check
// of trainsim needs.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "interop/chakra_et.pb.h"
#include "schedules/schedule.h"

namespace trainsim {

/// The Chakra schema version written in every file's GlobalMetadata.
inline constexpr const char* kChakraSchemaVersion = "0.0.4";

/// A Chakra trace that cannot be read back: what() names the file (and node) and what is wrong.
struct ChakraError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/// One rank's trace: its metadata and its nodes in program order.
struct ChakraRank {
  ChakraProtoMsg::GlobalMetadata metadata;
  std::vector<ChakraProtoMsg::Node> nodes;
};

/// Every rank's trace of `schedule` (size world_size). Simulates the schedule with its cost model for the
/// durations. Throws std::invalid_argument when the schedule does not validate (its error), or has a receive from
/// any source (Chakra names the peer of every receive).
std::vector<ChakraRank> chakra_trace(const Schedule& schedule);

/// One rank's file: the metadata, then the nodes, each as a varint length and the message (protobuf's delimited
/// form, as Chakra's encode_message writes them).
std::string chakra_file_bytes(const ChakraRank& rank);

/// The communicator groups as ASTRA-sim's --comm-group-configuration reads them: {"0": [every rank], "1":
/// [members of group 1], ...}, keys being the pg_name of the collectives.
std::string chakra_comm_groups_json(const ScheduleHeader& header);

/// PREFIX.r.et for a prefix given as "PREFIX.et" or "PREFIX" ("out/3d.et", 2 -> "out/3d.2.et").
std::string chakra_rank_path(const std::string& prefix, int rank);

/// PREFIX.comm_groups.json beside the ranks' files ("out/3d.et" -> "out/3d.comm_groups.json").
std::string chakra_comm_groups_path(const std::string& prefix);

/// Parses one rank's file (`name` in errors). Throws ChakraError for bytes that are not delimited Chakra
/// messages, more than `max_nodes` nodes, or no metadata.
ChakraRank parse_chakra_file(const std::string& bytes, const std::string& name, std::size_t max_nodes);

/// The ranks' traces as JSON, for reading and for other tools: {"ranks": [{"file": NAME, "global_metadata": {...},
/// "nodes": [{...}, ...]}, ...]}, each message as protobuf's JSON mapping prints it (lowerCamelCase field names,
/// 64-bit integers as strings), the form of Chakra's chakra_jsonizer. Throws std::runtime_error when protobuf
/// cannot print a message.
std::string chakra_json(const std::vector<ChakraRank>& ranks, const std::vector<std::string>& names);

/// The world size the header of rank 0's trace states (its `world_size` line), so that a reader knows how many
/// files to read. Throws ChakraError naming `name` when the metadata has no trainsim_header or the line is
/// missing or out of range (1 .. kMaxWorldSize).
int chakra_world_size(const ChakraRank& rank0, const std::string& name);

/// The schedule the ranks' traces hold (`names[r]` names rank r's file in errors; each op's `where` becomes
/// "NAME node ID"). Throws ChakraError for a node without trainsim_op, metadata that disagrees between the
/// ranks, node ids that repeat or dependencies on nodes that do not come before, a node whose type, peer or
/// group disagree with its op, and ParseError's cases of the .sched text, naming the file and node.
Schedule schedule_from_chakra(const std::vector<ChakraRank>& ranks, const std::vector<std::string>& names);

}  // namespace trainsim
