#include "interop/framework_emit.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "hardware/stage_layout.h"

namespace trainsim {

namespace {

bool is_preset(const hw::ModelSpec& m) {
  try {
    return hw::model_preset(m.preset) == m;
  } catch (const std::exception&) {
    return false;
  }
}

int seq_of(const FrameworkPlan& p) { return p.seq > 0 ? p.seq : p.model.seq; }

// The blocks of each stage chunk: chunk_blocks, or the even split of the model's blocks.
std::vector<int> chunk_blocks(const FrameworkPlan& p) {
  const GenOptions& o = p.options;
  if (!o.chunk_blocks.empty()) return o.chunk_blocks;
  const int chunks = o.pp * chunks_per_rank(o.schedule, o.chunks);
  return hw::StageLayout::even(p.model.blocks, chunks).blocks_per_layer();
}

FrameworkLaunch refused(std::string note) { return FrameworkLaunch{"", false, std::move(note)}; }

}  // namespace

std::string gen_command(const FrameworkPlan& p) {
  const GenOptions& o = p.options;
  std::string s = "gen " + p.kind;
  if (p.kind == "3d") s += fmt::format(" --tp {} --pp {} --dp {}{}", o.tp, o.pp, o.dp, o.cp > 1 ? fmt::format(" --cp {}", o.cp) : "");
  else if (p.kind == "fsdp" || p.kind == "ddp") s += fmt::format(" --dp {}", o.dp);
  else s += fmt::format(" --stages {}", o.stages);
  if (o.chunks > 1) s += fmt::format(" --chunks {}", o.chunks);
  if (p.kind == "3d" && o.schedule != "1f1b") s += " --schedule " + o.schedule;
  if (p.kind == "3d" && o.zero != 0) s += fmt::format(" --zero {}", o.zero);
  if (p.kind == "3d" && o.ep > 1) {
    s += fmt::format(" --ep {}", o.ep);
    if (o.etp > 1) s += fmt::format(" --etp {}", o.etp);
    // (per-expert loads as the slices' they give: the same header as the file's, exactly, without the file)
    const std::vector<double> slices = o.expert_load.empty() && !o.per_expert_load.empty()
                                           ? slice_loads(o.per_expert_load, o.ep)
                                           : o.expert_load;
    if (!slices.empty()) {
      std::string loads;
      for (double x : slices) loads += fmt::format("{}{}", loads.empty() ? "" : ",", x);
      s += " --expert-load " + loads;
    } else if (o.moe_imbalance > 0) {
      s += fmt::format(" --moe-imbalance {}", o.moe_imbalance);
    }
    if (o.a2a_overlap) s += " --a2a-overlap";
  }
  if (o.sequence_parallel) s += " --sp";
  if (p.kind == "fsdp" && !o.reshard_after_forward) s += " --no-reshard-after-forward";
  s += fmt::format(" --microbatches {}", o.microbatches);
  if (o.layers > 0) s += fmt::format(" --layers {}", o.layers);
  if (!o.layout.empty()) s += " --layout '" + o.layout + "'";
  // One layer per block (the default with a model): the stage chunks' blocks, written when they are not even.
  if (!o.chunk_blocks.empty() &&
      o.chunk_blocks != hw::StageLayout::even(p.model.blocks, static_cast<int>(o.chunk_blocks.size())).blocks_per_layer())
    s += " --layout '" + hw::StageLayout(o.chunk_blocks).str() + "'";
  if (is_preset(p.model)) s += " --model " + p.model.preset;
  s += fmt::format(" --microbatch-size {}", p.microbatch_size);
  if (p.seq > 0) s += fmt::format(" --seq {}", p.seq);
  s += fmt::format(" --recompute {}", hw::recompute_name(p.recompute));
  if (p.tp_overlap != hw::TpOverlap::Backward && o.tp > 1) s += std::string(" --tp-overlap ") + hw::tp_overlap_name(p.tp_overlap);
  if (p.moe_dispatcher != hw::MoeDispatcher::Nccl && p.model.moe())
    s += std::string(" --moe-dispatcher ") + hw::moe_dispatcher_name(p.moe_dispatcher);
  if (p.expert_gemm != hw::ExpertGemm::PerExpert && p.model.moe())
    s += std::string(" --expert-gemm ") + hw::expert_gemm_name(p.expert_gemm);
  if (p.fp8) s += p.fp8_all_gather ? " --fp8-all-gather" : " --fp8";
  if (p.attention != hw::Attention::Flash) s += " --attention eager";
  if (p.elementwise != hw::Elementwise::Fused) s += " --elementwise eager";
  return s;
}

bool same_configuration(const FrameworkPlan& a, const FrameworkPlan& b, std::string* why) {
  auto differ = [&](const std::string& x, const std::string& y) {
    if (why) *why = fmt::format("{} against {}", x, y);
    return false;
  };
  if (a.kind != b.kind) return differ("gen " + a.kind, "gen " + b.kind);
  if (!(a.model == b.model)) return differ("model " + hw::spec_text(a.model), "model " + hw::spec_text(b.model));
  const GenOptions &x = a.options, &y = b.options;
  if (a.kind == "3d" && chunk_blocks(a) != chunk_blocks(b))
    return differ("layout " + hw::StageLayout(chunk_blocks(a)).str(), "layout " + hw::StageLayout(chunk_blocks(b)).str());
  // Everything else the gen command spells out (the layout compared above, in blocks).
  FrameworkPlan ca = a, cb = b;
  for (FrameworkPlan* p : {&ca, &cb}) {
    p->seq = seq_of(*p);
    if (p->kind == "3d") p->options.chunk_blocks.clear(), p->options.layers = 0, p->options.layout.clear();
  }
  const std::string ga = gen_command(ca), gb = gen_command(cb);
  if (ga != gb) {
    // Only the options that differ: "--tp-overlap none" against "(none)".
    auto options = [](const std::string& c) {
      std::vector<std::string> out;
      for (std::size_t at = c.find(" --"); at != std::string::npos;) {
        const std::size_t next = c.find(" --", at + 3);
        out.push_back(c.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1));
        at = next;
      }
      return out;
    };
    const std::vector<std::string> oa = options(ga), ob = options(gb);
    std::string only_a, only_b;
    for (const std::string& o : oa)
      if (std::find(ob.begin(), ob.end(), o) == ob.end()) only_a += (only_a.empty() ? "" : " ") + o;
    for (const std::string& o : ob)
      if (std::find(oa.begin(), oa.end(), o) == oa.end()) only_b += (only_b.empty() ? "" : " ") + o;
    return differ(only_a.empty() ? "the defaults" : only_a, only_b.empty() ? "the defaults" : only_b);
  }
  if (x.prefetch != y.prefetch || x.bucket_layers != y.bucket_layers || x.stages != y.stages)
    return differ("other generator options", "these");
  if (a.fp8_all_gather != b.fp8_all_gather) return differ("FP8 all-gathers", "none");
  return true;
}

FrameworkLaunch to_megatron(const FrameworkPlan& p) {
  if (p.kind != "3d") return refused("the Megatron-LM line is written for gen 3d configurations");
  const GenOptions& o = p.options;
  if (o.schedule != "1f1b" && o.schedule != "interleaved-1f1b")
    return refused(fmt::format("Megatron-LM runs 1F1B and interleaved 1F1B, not {}", o.schedule));
  if (o.zero == 3) return refused("FSDP (--zero 3) is not written as a Megatron-LM line (its --use-torch-fsdp2 is not read back)");
  const hw::ModelSpec& m = p.model;
  std::string s = fmt::format("--tensor-model-parallel-size {} --pipeline-model-parallel-size {}", o.tp, o.pp);
  if (o.cp > 1) s += fmt::format(" --context-parallel-size {}", o.cp);
  // The stage chunks: Megatron-LM's own even split when it divides, else the layout.
  const int v = o.schedule == "interleaved-1f1b" ? o.chunks : 1;
  const std::vector<int> blocks = chunk_blocks(p);
  const int stages = o.pp * v;
  const bool even = m.blocks % stages == 0 && blocks == std::vector<int>(stages, m.blocks / stages);
  if (o.pp > 1 && !even) s += " --pipeline-model-parallel-layout '" + hw::StageLayout(blocks).str() + "'";
  else if (v > 1) s += fmt::format(" --num-virtual-stages-per-pipeline-rank {}", v);
  const long long global = static_cast<long long>(p.microbatch_size) * o.microbatches * o.dp;
  s += fmt::format(" --micro-batch-size {} --global-batch-size {} --seq-length {}", p.microbatch_size, global, seq_of(p));
  // The model's shape (gen --model gives the rest: the vocabulary comes from Megatron-LM's tokenizer).
  s += fmt::format(" --num-layers {} --hidden-size {} --ffn-hidden-size {} --num-attention-heads {}", m.blocks, m.hidden,
                   m.ffn, m.heads);
  if (m.kv_heads > 0 && m.kv_heads != m.heads) s += fmt::format(" --group-query-attention --num-query-groups {}", m.kv_heads);
  if (m.mla())
    s += fmt::format(" --multi-latent-attention --q-lora-rank {} --kv-lora-rank {} --qk-head-dim {} --qk-pos-emb-head-dim {} "
                     "--v-head-dim {}",
                     m.q_lora_rank, m.kv_lora_rank, m.head_dim(), m.rope_head_dim, m.value_head_dim());
  else if (m.head_channels > 0 && static_cast<long long>(m.head_channels) * m.heads != m.hidden)
    s += fmt::format(" --kv-channels {}", m.head_channels);
  if (m.moe()) {
    // Megatron-Core's MoE layer: the experts, their width, the router's k, shared experts, the dense layers first;
    // grouped GEMMs and the all-to-all dispatcher, as trainsim times them.
    s += fmt::format(" --num-experts {} --moe-router-topk {}", m.experts, m.top_k);
    if (m.expert_ffn > 0) s += fmt::format(" --moe-ffn-hidden-size {}", m.expert_ffn);
    if (m.shared_experts > 0)
      s += fmt::format(" --moe-shared-expert-intermediate-size {}", static_cast<long long>(m.shared_experts) * m.expert_width());
    if (m.dense_blocks > 0) s += fmt::format(" --moe-layer-freq '([0]*{}+[1]*{})'", m.dense_blocks, m.blocks - m.dense_blocks);
    if (m.router_groups > 0)
      s += fmt::format(" --moe-router-num-groups {} --moe-router-group-topk {}", m.router_groups, m.router_group_topk);
    s += p.moe_dispatcher == hw::MoeDispatcher::DeepEP
             ? " --moe-grouped-gemm --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep"
             : " --moe-grouped-gemm --moe-token-dispatcher-type alltoall";
    if (m.capacity_factor > 0) s += fmt::format(" --moe-expert-capacity-factor {}", m.capacity_factor);
    if (m.pad_to_capacity) s += " --moe-pad-expert-input-to-capacity";
    if (o.ep > 1) s += fmt::format(" --expert-model-parallel-size {}", o.ep);
    if (o.a2a_overlap) s += " --overlap-moe-expert-parallel-comm";
    // The experts whole beside TP, or split over it (Megatron-LM's expert TP defaults to the TP size: written always;
    // without EP every expert is split over the TP group).
    if (o.tp > 1) s += fmt::format(" --expert-tensor-parallel-size {}", o.ep > 1 ? o.etp : o.tp);
  }
  if (m.gated_ffn) s += " --swiglu";
  s += m.layernorm ? " --normalization LayerNorm" : " --normalization RMSNorm";
  s += m.learned_positions ? " --position-embedding-type learned_absolute" : " --position-embedding-type rope";
  if (!m.tied_embeddings) s += " --untie-embeddings-and-output-weights";
  if (!m.bias) s += " --disable-bias-linear";
  if (!m.dropout) s += " --attention-dropout 0 --hidden-dropout 0";
  s += " --bf16";
  if (o.zero == 1) s += " --use-distributed-optimizer";
  if (o.sequence_parallel) s += " --sequence-parallel";
  if (p.recompute == hw::Recompute::Selective) s += " --recompute-granularity selective";
  else if (p.recompute == hw::Recompute::Full) s += " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1";
  if (p.fp8) s += " --fp8-format hybrid";
  if (p.tp_overlap == hw::TpOverlap::Full && o.tp > 1) s += " --tp-comm-overlap";
  if (p.tp_overlap == hw::TpOverlap::None && o.tp > 1) s += " --no-async-tensor-model-parallel-allreduce";
  if (p.attention == hw::Attention::Eager) s += " --attention-backend unfused";
  FrameworkLaunch out{s, false, ""};
  try {
    FrameworkInputs in;
    in.dp = o.dp, in.dp_given = true, in.model = m;
    std::string why;
    out.exact = same_configuration(p, from_megatron(s, in), &why);
    if (!out.exact) out.note = "Megatron-LM would run another configuration (this row, then Megatron-LM's reading): " + why;
  } catch (const std::invalid_argument& e) {
    out.note = std::string("the importer refuses it: ") + e.what();
  }
  return out;
}

FrameworkLaunch to_torchtitan_toml(const FrameworkPlan& p) {
  if (p.kind != "3d") return refused("the torchtitan TOML is written for gen 3d configurations");
  const GenOptions& o = p.options;
  const hw::ModelSpec& m = p.model;
  const TorchtitanFlavor* tt = nullptr;
  for (const TorchtitanFlavor& f : torchtitan_flavors())
    if (m.preset == f.preset) tt = &f;
  if (!tt || !is_preset(m))
    return refused("torchtitan's flavors trainsim has are " + torchtitan_flavor_words() + "; this model is none of them");
  const std::string name = tt->name, flavor = tt->flavor;
  // torchtitan's MoE: dropless, its experts FSDP-sharded, no all-to-all overlap of its own (parallel_dims.py).
  if (m.moe() && (m.capacity_factor > 0 || m.pad_to_capacity))
    return refused("torchtitan's MoE routes dropless (no expert capacity factor)");
  if (o.a2a_overlap) return refused("torchtitan has no overlap of the all-to-alls with another microbatch's compute");
  if (m.moe() && o.ep > 1 && o.etp > 1)
    return refused("torchtitan's expert TP routes every token on every TP rank (its all-to-alls carry TP times "
                   "Megatron-Core's tokens), which trainsim does not time; the expert TP it timed is Megatron-LM's");
  static const std::pair<const char*, const char*> kSchedules[] = {{"1f1b", "1F1B"},
                                                                   {"interleaved-1f1b", "Interleaved1F1B"},
                                                                   {"interleaved-zb", "InterleavedZeroBubble"},
                                                                   {"zbv", "ZBVZeroBubble"},
                                                                   {"dualpipev", "DualPipeV"}};
  const char* schedule = nullptr;
  for (const auto& [ours, theirs] : kSchedules)
    if (o.schedule == ours) schedule = theirs;
  if (!schedule) return refused(fmt::format("torch.distributed.pipelining has no {} schedule torchtitan names", o.schedule));
  const int b = p.microbatch_size, s = seq_of(p);
  std::string t = "# torchtitan job configuration written by trainsim plan (torchtitan/config/job_config.py)\n";
  t += fmt::format("[model]\nname = \"{}\"\nflavor = \"{}\"\n", name, flavor);
  if (p.fp8) t += "converters = [\"float8\"]\n";
  // torchtitan's batch is per data-parallel rank; CP ranks share their sequences (the data-parallel degree is dp).
  const long long dp_global = static_cast<long long>(b) * o.microbatches * o.dp;
  const long long local = o.pp > 1 ? static_cast<long long>(b) * o.microbatches : b;
  t += fmt::format("\n[training]\nlocal_batch_size = {}\nglobal_batch_size = {}\nseq_len = {}\n", local, dp_global, s);
  t += fmt::format("\n[parallelism]\ndata_parallel_replicate_degree = 1\ndata_parallel_shard_degree = {}\n"
                   "tensor_parallel_degree = {}\ncontext_parallel_degree = {}\npipeline_parallel_degree = {}\n",
                   o.dp, o.tp, o.cp, o.pp);
  if (o.tp > 1 && p.tp_overlap == hw::TpOverlap::Full) t += "enable_async_tensor_parallel = true\n";
  // Its EP mesh borrows TP and part of the FSDP shards, with the experts whole (expert TP 1): gen 3d --ep's layout.
  if (m.moe()) t += fmt::format("expert_parallel_degree = {}\nexpert_tensor_parallel_degree = 1\n", o.ep);
  if (m.moe() && o.ep > 1 && p.moe_dispatcher == hw::MoeDispatcher::DeepEP)
    t += "expert_parallel_comm_backend = \"deepep\"\n";
  if (o.pp > 1) {
    const int per_rank = chunks_per_rank(o.schedule, o.chunks);
    const int stages = o.pp * per_rank;
    const std::vector<int> blocks = chunk_blocks(p);
    int in = -1, out = -1;
    for (int w : {1, 0})
      if (in < 0 && hw::weighted_split(m.blocks, stages, w, w) == blocks) in = out = w;
    if (in < 0) in = out = 1;  // torchtitan's default; the split will differ (said below)
    t += fmt::format("pipeline_parallel_schedule = \"{}\"\npipeline_parallel_microbatch_size = {}\n"
                     "pipeline_parallel_first_stage_less_layers = {}\npipeline_parallel_last_stage_less_layers = {}\n",
                     schedule, b, in, out);
    if (per_rank > 1) {
      // Layers per virtual stage: the value whose stage count, ceil((blocks + in + out) / it), is pp x per_rank.
      const int effective = m.blocks + in + out;
      for (int lps = 1; lps <= effective; ++lps)
        if ((effective + lps - 1) / lps == stages) {
          t += fmt::format("pipeline_parallel_layers_per_stage = {}\n", lps);
          break;
        }
    }
  }
  const char* mode = p.recompute == hw::Recompute::None ? "none" : p.recompute == hw::Recompute::Full ? "full" : "selective";
  t += fmt::format("\n[activation_checkpoint]\nmode = \"{}\"\n", mode);
  if (p.recompute == hw::Recompute::Selective) t += "selective_ac_option = \"op\"\n";
  if (p.elementwise == hw::Elementwise::Fused) t += "\n[compile]\nenable = true\n";
  if (p.fp8_all_gather) t += "\n[float8]\nenable_fsdp_float8_all_gather = true\n";
  FrameworkLaunch result{t, false, ""};
  // Read back as torchtitan reads a --job.config_file.
  try {
    FrameworkInputs in;
    in.dp = o.dp, in.dp_given = true;
    std::string why;
    result.exact = same_configuration(p, from_torchtitan_toml(t, in), &why);
    if (!result.exact) result.note = "torchtitan would run another configuration (this row, then torchtitan's reading): " + why;
  } catch (const std::invalid_argument& e) {
    result.note = std::string("the importer refuses it: ") + e.what();
  }
  return result;
}

}  // namespace trainsim
