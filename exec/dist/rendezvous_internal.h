// What rank 0's side (rendezvous_serve.cpp) and the other ranks' side (rendezvous_join.cpp) of the rendezvous
// share. Internal to exec/dist.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <nlohmann/json.hpp>

#include "exec/dist/link.h"
#include "exec/dist/rendezvous.h"

namespace trainsim::exec::dist {

using Clock = std::chrono::steady_clock;

/// Rank 0's side: listens, authenticates, checks, welcomes.
std::unique_ptr<ProcessGroup> serve(const RankEnv& env, const JobIdentity& id, const RendezvousOptions& o);
/// Every other rank's side: connects, authenticates rank 0, introduces itself, waits for the welcome.
std::unique_ptr<ProcessGroup> join(const RankEnv& env, const JobIdentity& id, const RendezvousOptions& o);

/// "ADDRESS:PORT" of the socket's other end, or "an unknown peer".
std::string endpoint_name(const tcp::socket& s);
/// This machine's host name, or "?".
std::string host_name();
/// MASTER_ADDR:MASTER_PORT resolved; RendezvousError when it cannot be.
tcp::endpoint resolve(asio::io_context& io, const RankEnv& env);
/// Runs `io` until `done`: the caller's timers guarantee progress.
void run_until(asio::io_context& io, const bool& done);
/// Gives queued frames (an error, a refusal) up to a second to leave.
void flush(asio::io_context& io, const std::vector<std::shared_ptr<Link>>& links);

/// Text that came from another process, fit for one line of output: control bytes, DEL and bytes above
/// 0x7e written as \xNN (no escape sequence, no line break, no invalid UTF-8 reaches a terminal), cut after
/// `max` bytes with "... (N bytes in all)".
std::string peer_text(const std::string& text, std::size_t max = 200);

/// The rendezvous-relevant fields of a JSON object from a peer, read without exceptions: nullopt when the
/// key is missing or holds another type (a string where a number belongs, a number out of int's range).
std::optional<int> json_int(const nlohmann::json& j, const char* key);
std::optional<std::string> json_string(const nlohmann::json& j, const char* key);
/// `text` parsed as a JSON object; nullopt when it is not one.
std::optional<nlohmann::json> json_object(const std::vector<unsigned char>& text);

/// What differs between two JSON objects' top-level fields, as "seed 5 against 1, steps 3 against 2" (the
/// whole texts when they are not objects); every value quoted with peer_text.
std::string json_diff(const std::string& theirs, const std::string& ours);

}  // namespace trainsim::exec::dist
