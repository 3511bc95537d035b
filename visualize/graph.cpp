// Graphviz dependency graph of a schedule: DOT text, and SVG rendered with the Graphviz C library.
//
// DOT conventions (dependency_dot):
// - `digraph trainsim` with newrank=true; one `subgraph cluster_rank<N>` per rank, labelled "rank N".
//   A rank whose ops use more than one stream (`Op::stream`) gets, inside its cluster, one
//   `subgraph cluster_rank<N>_stream<S>` per stream in ascending order (dashed outline), labelled "compute"
//   for stream 0 and "comm S" otherwise, holding that stream's ops; a one-stream rank has no sub-cluster.
// - One node per op, id "r<rank>_<index>" (index in the rank's op list, every kind counted). The label is
//   compact ("F L0 {0}", "B L2 {0-3}", "send -> r1\nA2{0}", "all-gather L1 g0\nW1[0-3/4]", "load\nW0, O0");
//   the tooltip is describe() plus where. Shapes by kind: compute ops are filled boxes (forward light blue,
//   backward light green, loss light red, update light yellow), send/recv grey ellipses, collectives
//   light orange hexagons (tensor-parallel ones, sim/tp_ops.h, light magenta), load/free/accumulate small
//   plain text.
// - Program order on a stream: each op to the next op of the same rank on the same stream (stream order),
//   `style=dashed, color=gray80, constraint=true`; on a one-stream rank that is every consecutive pair.
//   Ops on different streams get no dashed edge: they wait only on data, messages and collectives
//   (docs/design.md §3, stream semantics).
//   Above kLargeSchedule ops in all, the program-order edge of a pair already joined by a data edge is left
//   out (collapsed into the data edge), which keeps big graphs lighter; below, every pair gets one.
// - Data: solid `color=gray40` edges from the op that last wrote a tensor on the same rank to each later
//   op of that rank reading it (one edge per writer/reader pair; tooltip lists the tensors), with
//   `constraint=false` when both ops are on one stream and the reader is not the writer's next op there
//   (stream order already ranks them), `constraint=true` otherwise (the next op on the stream, or another
//   stream: nothing else ranks those). A tensor a load wrote links only to its first reader (not to every
//   use of a weight); a free links from the last op that used the tensor.
// - Messages: `style=bold, color=blue` edges from each Send to its Recv. The k-th send from a to b matches
//   the k-th receive on b whose peer is a (receives from any source, peer -1, stay unmatched: which send
//   they take is only known when the schedule runs).
// - Collectives: the k-th collective call of group g on each member is one call; it gets a small point
//   node "c<g>_<k>" (outside the clusters) and an undirected-looking edge (`dir=none`, dark orange) from
//   each member's op to it. A point per call keeps the members' ops linked without imposing an order
//   between ranks.
// - A `cluster_legend` with one plaintext node says what each edge style means; the dashed edge reads
//   "program order on a stream (next op on the same stream)" when some rank has several streams, else
//   "program order (next op on the rank)".
// Output is a pure function of the schedule (ops in rank order then program order): byte-identical text.
#include "visualize/graph.h"

#include <span>
#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>

#include <dlfcn.h>

#include <cctype>
#include <cstddef>
#include <filesystem>
#include <cstdlib>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "sim/tp_ops.h"

namespace trainsim::visualize {

namespace {

/// Above this many ops, program-order edges duplicated by a data edge are collapsed.
constexpr std::size_t kLargeSchedule = 5000;

/// "No next op on this stream".
constexpr std::size_t kNone = static_cast<std::size_t>(-1);

/// A stream sub-cluster's label: "compute" for stream 0, "comm S" for a communication stream.
std::string stream_label(int stream) { return stream == 0 ? std::string("compute") : fmt::format("comm {}", stream); }

/// A DOT double-quoted string: backslash and quote escaped, newlines as the centred-line escape "\n".
std::string quote(const std::string& s) {
  std::string q;
  q.reserve(s.size() + 2);
  q += '"';
  for (char c : s) {
    switch (c) {
      case '"': q += "\\\""; break;
      case '\\': q += "\\\\"; break;
      case '\n': q += "\\n"; break;
      case '\r': break;
      default: q += c;
    }
  }
  q += '"';
  return q;
}

std::string node_id(int rank, std::size_t index) { return fmt::format("r{}_{}", rank, index); }

const char* short_kind(OpKind k) {
  switch (k) {
    case OpKind::Forward: return "F";
    case OpKind::Backward: return "B";
    case OpKind::BackwardInput: return "I";
    case OpKind::BackwardWeight: return "W";
    case OpKind::Loss: return "loss";
    case OpKind::Update: return "U";
    case OpKind::Accumulate: return "acc";
    default: return op_name(k);
  }
}

/// Up to three tensor names, then "+N more".
std::string tensor_list(std::span<const Tensor> ts) {
  std::string s;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    if (i == 3) {
      s += fmt::format(", +{} more", ts.size() - 3);
      break;
    }
    if (i) s += ", ";
    s += ts[i].str();
  }
  return s;
}

std::string label(const Op& op) {
  std::string s = short_kind(op.kind);
  if (op.kind == OpKind::Send) return s + " -> r" + std::to_string(op.peer) + "\n" + tensor_list(op.reads);
  if (op.kind == OpKind::Recv)
    return s + " <- " + (op.peer < 0 ? std::string("any") : "r" + std::to_string(op.peer)) + "\n" +
           tensor_list(op.writes);
  if (op.layer >= 0) s += " L" + std::to_string(op.layer);
  if (!op.batches.empty()) s += " {" + op.batches.str() + "}";
  if (is_collective(op.kind)) {
    s += " g" + std::to_string(op.group);
    if (is_rooted(op.kind)) s += " root r" + std::to_string(op.peer);
    if (!op.writes.empty()) s += "\n" + tensor_list(op.writes);
  } else if (op.kind == OpKind::Update) {
    if (op.num_shards > 1) s += " [" + op.shards.str() + "/" + std::to_string(op.num_shards) + "]";
  } else if (op.kind == OpKind::Load || op.kind == OpKind::Accumulate) {
    if (!op.writes.empty()) s += "\n" + tensor_list(op.writes);
  } else if (op.kind == OpKind::Free) {
    const auto& ts = op.reads.empty() ? op.writes : op.reads;
    if (!ts.empty()) s += "\n" + tensor_list(ts);
  }
  return s;
}

const char* node_style(const Op& op) {
  // Tensor-parallel collectives (sim/tp_ops.h) in light magenta, as the timeline's magenta sets them apart.
  if (is_tp_collective(op)) return "shape=hexagon, style=filled, fillcolor=\"#f1b6da\"";
  switch (op.kind) {
    case OpKind::Forward: return "shape=box, style=filled, fillcolor=\"#c6dbef\"";
    case OpKind::Backward: return "shape=box, style=filled, fillcolor=\"#c7e9c0\"";
    case OpKind::BackwardInput: return "shape=box, style=filled, fillcolor=\"#a1d99b\"";
    case OpKind::BackwardWeight: return "shape=box, style=filled, fillcolor=\"#e5f5e0\"";
    case OpKind::Loss: return "shape=box, style=filled, fillcolor=\"#fcbba1\"";
    case OpKind::Update: return "shape=box, style=filled, fillcolor=\"#fff3b0\"";
    case OpKind::Send:
    case OpKind::Recv: return "shape=ellipse, style=filled, fillcolor=\"#d9d9d9\"";
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
    case OpKind::AllReduce:
    case OpKind::Barrier:
    case OpKind::Broadcast:
    case OpKind::Reduce: return "shape=hexagon, style=filled, fillcolor=\"#fdd0a2\"";
    case OpKind::AllToAll: return "shape=hexagon, style=filled, fillcolor=\"#bcbddc\"";
    case OpKind::Load:
    case OpKind::Accumulate:
    case OpKind::Free: return "shape=plaintext, fontsize=8, fontcolor=gray35, height=0.2, margin=0.02";
  }
  return "shape=box";
}

}  // namespace

std::string dependency_dot(const Schedule& schedule) {
  const auto& ranks = schedule.ranks;
  const int nranks = static_cast<int>(ranks.size());
  const bool large = schedule.op_count() > kLargeSchedule;

  std::string out;
  out.reserve(1024 + schedule.op_count() * 200);
  auto w = std::back_inserter(out);
  fmt::format_to(w,
                 "// trainsim op dependency graph: {} ranks, {} layers, {} microbatches, {} ops\n"
                 "digraph trainsim {{\n"
                 "  graph [rankdir=TB, newrank=true, compound=true, fontname=\"Helvetica\", fontsize=12, "
                 "nodesep=0.25, ranksep=0.35];\n"
                 "  node [fontname=\"Helvetica\", fontsize=10, height=0.3, margin=\"0.06,0.03\"];\n"
                 "  edge [fontname=\"Helvetica\", fontsize=8, arrowsize=0.6];\n",
                 schedule.header.world_size, schedule.header.layers, schedule.header.microbatches,
                 schedule.op_count());

  // Stream order: per rank, the next op on each op's stream (kNone for the last), and whether the rank uses
  // more than one stream. On a one-stream rank the next op on the stream is simply the next op.
  std::vector<std::vector<std::size_t>> next(ranks.size());
  std::vector<std::map<int, std::vector<std::size_t>>> by_stream(ranks.size());  // stream -> op indices
  bool any_multi = false;
  for (int r = 0; r < nranks; ++r) {
    next[r].assign(ranks[r].size(), kNone);
    std::map<int, std::size_t> last;  // stream -> its latest op so far
    for (std::size_t i = 0; i < ranks[r].size(); ++i) {
      const int stream = ranks[r][i].stream;
      if (auto it = last.find(stream); it != last.end()) next[r][it->second] = i;
      last[stream] = i;
      by_stream[r][stream].push_back(i);
    }
    any_multi = any_multi || by_stream[r].size() > 1;
  }

  // Nodes, clustered by rank; on a rank with several streams, in one sub-cluster per stream (ascending).
  auto write_node = [&](int r, std::size_t i, const char* indent) {
    const Op& op = ranks[r][i];
    std::string tip = op.describe();
    if (!op.where.empty()) tip += " (" + op.where + ")";
    fmt::format_to(w, "{}{} [label={}, tooltip={}, {}];\n", indent, node_id(r, i), quote(label(op)), quote(tip),
                   node_style(op));
  };
  for (int r = 0; r < nranks; ++r) {
    fmt::format_to(w, "  subgraph cluster_rank{} {{\n    label={}; style=rounded; color=gray60;\n", r,
                   quote("rank " + std::to_string(r)));
    if (by_stream[r].size() <= 1) {
      for (std::size_t i = 0; i < ranks[r].size(); ++i) write_node(r, i, "    ");
    } else {
      for (const auto& [stream, ops] : by_stream[r]) {
        // (A stream is never negative in a parsed schedule; one built in code gets a quoted, still valid id.)
        std::string id = fmt::format("cluster_rank{}_stream{}", r, stream);
        fmt::format_to(w,
                       "    subgraph {} {{\n      label={}; style=\"rounded,dashed\"; color=gray75; fontsize=10;\n",
                       stream < 0 ? quote(id) : id, quote(stream_label(stream)));
        for (std::size_t i : ops) write_node(r, i, "      ");
        out += "    }\n";
      }
    }
    out += "  }\n";
  }

  // Data edges: per rank, last writer of each tensor -> later readers. Collected first, so program-order
  // edges can be collapsed into them for big schedules.
  struct DataEdge {
    std::size_t from, to;
    std::string tensors;
  };
  // A loaded tensor (a weight, its optimizer state) links only to its first reader: the later ones follow it
  // in program order, and an edge from the load to each of them is what tangled the layout. A free links
  // from the last op that used the tensor (it takes effect after that op), not from the far-away writer.
  std::vector<std::vector<DataEdge>> data(ranks.size());
  for (int r = 0; r < nranks; ++r) {
    std::map<Tensor, std::size_t> writer, last_use;
    std::set<Tensor> loaded_unread;  // written by a load, not read yet
    for (std::size_t i = 0; i < ranks[r].size(); ++i) {
      const Op& op = ranks[r][i];
      std::map<std::size_t, std::string> from;  // source index -> tensor names, in source order
      for (const Tensor& t : op.reads) {
        const auto& source = op.kind == OpKind::Free ? last_use : writer;
        auto it = source.find(t);
        if (it == source.end()) continue;
        if (op.kind != OpKind::Free && ranks[r][it->second].kind == OpKind::Load && !loaded_unread.erase(t)) continue;
        std::string& names = from[it->second];
        if (!names.empty()) names += ", ";
        names += t.str();
      }
      for (auto& [f, names] : from) data[r].push_back(DataEdge{f, i, std::move(names)});
      for (const Tensor& t : op.reads) last_use[t] = i;
      for (const Tensor& t : op.writes) {
        writer[t] = i;
        last_use[t] = i;
        if (op.kind == OpKind::Load) loaded_unread.insert(t);
        else loaded_unread.erase(t);
      }
    }
  }

  // Program order on a stream: each op to the next op on its stream (on a one-stream rank, the next op).
  // Ops on different streams wait only on data, messages and collectives, so no dashed edge joins them.
  out += "  // program order\n";
  for (int r = 0; r < nranks; ++r) {
    std::set<std::size_t> joined;  // i such that a data edge from i to the next op on its stream exists
    if (large)
      for (const auto& e : data[r])
        if (e.to == next[r][e.from]) joined.insert(e.from);
    for (std::size_t i = 0; i < ranks[r].size(); ++i) {
      if (next[r][i] == kNone || joined.count(i)) continue;
      fmt::format_to(w, "  {} -> {} [style=dashed, color=gray80, constraint=true];\n", node_id(r, i),
                     node_id(r, next[r][i]));
    }
  }

  // Data edges always point forward in program order. Between two ops of one stream, stream order already
  // ranks them: only an edge to the next op on the stream constrains the layout (it may stand in for a
  // collapsed program-order edge). Letting the long ones (a weight's load to each of its uses) constrain it
  // makes dot ten times slower for nothing. Between two streams nothing else ranks the ops, so those edges
  // constrain it (a receive on a communication stream sits above the compute that reads the message).
  out += "  // data\n";
  for (int r = 0; r < nranks; ++r)
    for (const auto& e : data[r]) {
      const bool ranks_layout =
          e.to == next[r][e.from] || ranks[r][e.from].stream != ranks[r][e.to].stream;
      fmt::format_to(w, "  {} -> {} [color=gray40, constraint={}, tooltip={}];\n", node_id(r, e.from),
                     node_id(r, e.to), ranks_layout ? "true" : "false", quote(e.tensors));
    }

  // Messages: the k-th send a -> b to the k-th receive on b naming a.
  out += "  // messages\n";
  {
    std::map<std::pair<int, int>, std::vector<std::size_t>> recvs;  // (src, dst) -> receive indices on dst
    for (int b = 0; b < nranks; ++b)
      for (std::size_t i = 0; i < ranks[b].size(); ++i)
        if (ranks[b][i].kind == OpKind::Recv && ranks[b][i].peer >= 0) recvs[{ranks[b][i].peer, b}].push_back(i);
    std::map<std::pair<int, int>, std::size_t> used;
    for (int a = 0; a < nranks; ++a)
      for (std::size_t i = 0; i < ranks[a].size(); ++i) {
        const Op& op = ranks[a][i];
        if (op.kind != OpKind::Send || op.peer < 0 || op.peer >= nranks) continue;
        std::pair<int, int> key{a, op.peer};
        auto it = recvs.find(key);
        std::size_t& k = used[key];
        if (it == recvs.end() || k >= it->second.size()) continue;
        fmt::format_to(w, "  {} -> {} [style=bold, color=blue, tooltip={}];\n", node_id(a, i),
                       node_id(op.peer, it->second[k]), quote(tensor_list(op.reads)));
        ++k;
      }
  }

  // Collectives: a point per call (k-th call of a group on each member), joined to each member's op.
  out += "  // collectives\n";
  {
    std::map<std::pair<int, std::size_t>, std::vector<std::pair<int, std::size_t>>> calls;
    std::map<std::pair<int, std::size_t>, const Op*> first_op;
    for (int r = 0; r < nranks; ++r) {
      std::map<int, std::size_t> seq;  // group -> calls so far on this rank
      for (std::size_t i = 0; i < ranks[r].size(); ++i) {
        const Op& op = ranks[r][i];
        if (!is_collective(op.kind)) continue;
        std::pair<int, std::size_t> call{op.group, seq[op.group]++};
        calls[call].emplace_back(r, i);
        first_op.emplace(call, &op);
      }
    }
    for (const auto& [call, members] : calls) {
      const Op& op = *first_op.at(call);
      std::string point = fmt::format("c{}_{}", call.first, call.second);
      std::string tip = fmt::format("{} call #{} of group {} ({} members)", op_name(op.kind), call.second,
                                    call.first, members.size());
      fmt::format_to(w, "  {} [shape=point, width=0.09, color=darkorange, tooltip={}];\n", point, quote(tip));
      for (const auto& [r, i] : members)
        fmt::format_to(w, "  {} -> {} [dir=none, color=darkorange, penwidth=1.5];\n", node_id(r, i), point);
    }
  }

  // Legend: what each edge style means (a table of coloured lines of text, in its own cluster).
  out += "  // legend\n";
  out += "  subgraph cluster_legend {\n    label=\"legend\"; style=rounded; color=gray60;\n"
         "    legend [shape=plaintext, fontsize=9, label=<<table border=\"0\" cellpadding=\"2\" cellspacing=\"0\">"
         "<tr><td align=\"left\"><font color=\"gray55\">- - - &#8594;</font></td>"
         "<td align=\"left\">";
  out += any_multi ? "program order on a stream (next op on the same stream)" : "program order (next op on the rank)";
  out += "</td></tr>"
         "<tr><td align=\"left\"><font color=\"gray40\">&#8212;&#8212; &#8594;</font></td>"
         "<td align=\"left\">data: reads what the earlier op wrote (a load: its first reader only; a free: the "
         "last user)</td></tr>"
         "<tr><td align=\"left\"><font color=\"blue\"><b>&#8212;&#8212; &#8594;</b></font></td>"
         "<td align=\"left\">message: send to its receive</td></tr>"
         "<tr><td align=\"left\"><font color=\"darkorange\">&#8212;&#8212; &#8226;</font></td>"
         "<td align=\"left\">collective: each member to one point per call</td></tr>"
         "</table>>];\n  }\n";

  out += "}\n";
  return out;
}

// ---- rendering -------------------------------------------------------------------------------------

namespace {

// Graphviz keeps global state (the error hook, the DOT lexer): one rendering at a time.
std::mutex g_render_mutex;
std::string* g_messages = nullptr;  // where the error hook appends, while a rendering runs

int collect_message(char* msg) {
  if (g_messages && msg) *g_messages += msg;
  return 0;
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

/// True when `gvc` has a plugin `name` of `kind` ("layout" / "dot", "render" / "svg").
bool has_plugin(GVC_t* gvc, const char* kind, const std::string& name) {
  int n = 0;
  char** list = gvPluginList(gvc, kind, &n, nullptr);
  bool found = false;
  for (int i = 0; i < n; ++i) {
    if (list[i] && name == list[i]) found = true;
    std::free(list[i]);
  }
  std::free(list);
  return found;
}

/// The core (svg) and dot-layout plugin libraries, found next to libgvc and loaded once, for contexts whose
/// configuration lists no plugins (no `config6a`: `dot -c` never ran). Empty when they cannot be found.
const lt_symlist_t* builtin_plugins() {
  static std::vector<lt_symlist_t> table;
  static bool tried = false;
  if (tried) return table.empty() ? nullptr : table.data();
  tried = true;
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("GVBINDIR"); env && *env) dirs.emplace_back(env);
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&gvContext), &info) && info.dli_fname) {
    std::string lib = info.dli_fname;
    auto slash = lib.rfind('/');
    if (slash != std::string::npos) dirs.push_back(lib.substr(0, slash) + "/graphviz");
  }
  dirs.emplace_back("");  // the loader's search path
  struct Plugin {
    const char* name;
    const char* symbol;
  };
  static const Plugin kPlugins[] = {{"core", "gvplugin_core_LTX_library"},
                                    {"dot_layout", "gvplugin_dot_layout_LTX_library"}};
  std::vector<lt_symlist_t> found;
  for (const Plugin& plugin : kPlugins) {
    void* sym = nullptr;
    for (const auto& dir : dirs) {
      for (const char* suffix : {".so.6", ".so"}) {
        std::string path = (dir.empty() ? std::string() : dir + "/") + "libgvplugin_" + plugin.name + suffix;
        void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept open for the process
        if (!handle) continue;
        sym = dlsym(handle, plugin.symbol);
        if (sym) break;
      }
      if (sym) break;
    }
    if (!sym) return nullptr;
    found.push_back(lt_symlist_t{plugin.symbol, sym});
  }
  found.push_back(lt_symlist_t{nullptr, nullptr});
  table = std::move(found);
  return table.data();
}

struct ContextDeleter {
  void operator()(GVC_t* gvc) const { gvFreeContext(gvc); }
};
using Context = std::unique_ptr<GVC_t, ContextDeleter>;

/// A Graphviz context that can lay out with "dot" and render "svg": the installed configuration's when it
/// has both, else one made from the plugin libraries loaded directly.
Context make_context() {
  Context gvc(gvContext());
  if (gvc && has_plugin(gvc.get(), "layout", "dot") && has_plugin(gvc.get(), "render", "svg")) return gvc;
  gvc.reset();
  if (const lt_symlist_t* builtins = builtin_plugins()) {
    Context fallback(gvContextPlugins(builtins, 0));
    if (fallback && has_plugin(fallback.get(), "layout", "dot") && has_plugin(fallback.get(), "render", "svg"))
      return fallback;
  }
  throw std::runtime_error(
      "render_dot_svg: Graphviz has no \"dot\" layout or \"svg\" renderer plugin (the plugin configuration "
      "is missing and libgvplugin_core / libgvplugin_dot_layout could not be loaded); run `dot -c` as root "
      "(Debian: `libgvc6-config-update -c`) or set GVBINDIR to the Graphviz plugin directory");
}

/// The context every rendering uses, made on first use and kept for the process (Graphviz 2.42's gvContext
/// leaks its configuration text, so one per rendering would leak a few KiB each time). Call with
/// g_render_mutex held.
GVC_t* shared_context() {
  static GVC_t* const gvc = make_context().release();  // retried on the next call when it throws
  return gvc;
}

}  // namespace

std::string render_dot(const std::string& dot, const std::string& format) {
  if (format != "svg" && format != "png" && format != "pdf")
    throw std::runtime_error("render_dot: Graphviz output is svg, png or pdf here, not '" + format + "'");
  std::lock_guard lock(g_render_mutex);
  std::string messages;
  g_messages = &messages;
  agusererrf previous = agseterrf(collect_message);
  struct Restore {
    agusererrf previous;
    ~Restore() {
      agseterrf(previous);
      g_messages = nullptr;
    }
  } restore{previous};

  GVC_t* gvc = shared_context();
  Agraph_t* g = agmemread(dot.c_str());
  if (!g) {
    std::string why = trimmed(messages);
    throw std::runtime_error("render_dot: the DOT text does not parse" +
                             (why.empty() ? std::string(" (no graph in it)") : ": " + why));
  }
  struct GraphGuard {
    GVC_t* gvc;
    Agraph_t* g;
    ~GraphGuard() {
      gvFreeLayout(gvc, g);  // a no-op when no layout was made
      agclose(g);
    }
  } guard{gvc, g};

  if (gvLayout(gvc, g, "dot") != 0) {
    std::string why = trimmed(messages);
    throw std::runtime_error("render_dot: Graphviz \"dot\" layout failed" + (why.empty() ? "" : ": " + why));
  }
  char* data = nullptr;
  unsigned int length = 0;
  // (svg comes with the core plugin; png and pdf are cairo "devices" of the pango plugin.)
  if (!has_plugin(gvc, "device", format) && !has_plugin(gvc, "render", format))
    throw std::runtime_error("render_dot: this Graphviz has no " + format + " renderer (Debian: the libgvplugin-pango or "
                             "graphviz package provides png and pdf); write .svg or .dot instead");
  if (gvRenderData(gvc, g, format.c_str(), &data, &length) != 0 || !data) {
    if (data) gvFreeRenderData(data);
    std::string why = trimmed(messages);
    throw std::runtime_error("render_dot: Graphviz " + format + " rendering failed" + (why.empty() ? "" : ": " + why));
  }
  std::string out(data, length);
  gvFreeRenderData(data);
  return out;
}

std::string render_dot_svg(const std::string& dot) { return render_dot(dot, "svg"); }

std::string graph_format_for(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ext == ".dot" || ext == ".gv") return "dot";
  if (ext == ".svg" || ext == ".png" || ext == ".pdf") return ext.substr(1);
  throw std::invalid_argument("the graph file '" + path + "' " +
                              (ext.empty() ? std::string("has no extension") : "ends in '" + ext + "'") +
                              ": name it .dot or .gv (DOT text), or .svg, .png or .pdf (laid out by Graphviz)");
}

}  // namespace trainsim::visualize
