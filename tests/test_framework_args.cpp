// The configurations users already have (interop/framework_args.h, docs/frameworks.md): Megatron-LM argument
// lines and torchtitan command lines become a generator kind, its options (a stage layout among them) and a
// model and training shape; what trainsim does not read is refused by name; `gen --from-...` runs end to end.
#include <doctest/doctest.h>

#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "interop/framework_args.h"
#include "interop/framework_emit.h"

using namespace trainsim;
using namespace trainsim::testing;

namespace {

FrameworkInputs dp(int d) {
  FrameworkInputs in;
  in.dp = d, in.dp_given = true;
  return in;
}

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

bool has_note(const FrameworkPlan& p, const std::string& text) {
  for (const auto& n : p.notes)
    if (n.find(text) != std::string::npos) return true;
  return false;
}

// GPT-3 175B as Narayanan et al. 2021 (Table 1's 175B row: t = 8, p = 8, 96 layers, hidden 12288, 96 heads,
// batch 1536) trains it, written as Megatron-LM's pretrain_gpt.py arguments.
const std::string kGpt3 =
    "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 --num-layers 96 --hidden-size 12288 "
    "--num-attention-heads 96 --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 "
    "--global-batch-size 1536 --vocab-size 50257 --bf16 --sequence-parallel --use-distributed-optimizer "
    "--recompute-activations --lr 6.0e-5 --train-iters 500000 --data-path 0.5 /data/a 0.5 /data/b --split 98,2,0";

}  // namespace

TEST_CASE("framework args: command lines split as a shell splits them") {
  CHECK(split_words(R"(--a 1  --layout "Et*3|t*4L" --b='x y' c\ d)") ==
        std::vector<std::string>{"--a", "1", "--layout", "Et*3|t*4L", "--b=x y", "c d"});
  CHECK_THROWS_WITH_AS(split_words("--a 'open"), doctest::Contains("an unclosed single quote at character 5"),
                       std::invalid_argument);
}

TEST_CASE("framework args: a Megatron-LM argument line becomes gen 3d and a model") {
  const FrameworkPlan p = from_megatron(kGpt3, dp(12));
  CHECK(p.kind == "3d");
  CHECK(p.options.tp == 8);
  CHECK(p.options.pp == 8);
  CHECK(p.options.dp == 12);
  CHECK(p.options.chunks == 1);
  CHECK(p.options.schedule == "1f1b");
  CHECK(p.options.microbatches == 128);  // 1536 / (1 x 12)
  CHECK(p.options.chunk_blocks == std::vector<int>(8, 12));  // one schedule layer per block, 12 per stage
  CHECK(p.options.layers == 0);
  CHECK(p.options.sequence_parallel);
  CHECK(p.options.zero == 1);
  CHECK(p.options.layout.empty());       // 96 layers split evenly
  CHECK(p.microbatch_size == 1);
  CHECK(p.seq == 2048);
  CHECK(p.recompute == hw::Recompute::Selective);
  // Megatron-LM's defaults for what the line leaves out: GeLU MLP of 4h, biases, LayerNorm, tied embeddings,
  // learned positions, dropout 0.1, the vocabulary padded to a multiple of 128 x TP.
  CHECK(p.model.blocks == 96);
  CHECK(p.model.hidden == 12288);
  CHECK(p.model.heads == 96);
  CHECK(p.model.kv_heads == 96);
  CHECK(p.model.ffn == 4 * 12288);
  CHECK_FALSE(p.model.gated_ffn);
  CHECK(p.model.bias);
  CHECK(p.model.layernorm);
  CHECK(p.model.tied_embeddings);
  CHECK(p.model.learned_positions);
  CHECK(p.model.dropout);
  CHECK(p.model.vocab == 51200);
  CHECK(p.model.grad_bytes == 4);  // --bf16: fp32 main grads
  CHECK(has_note(p, "accepted without effect on a step's time or memory: --max-position-embeddings, --lr, --train-iters, "
                    "--data-path, --split"));
  CHECK(has_note(p, "--use-distributed-optimizer as gen 3d --zero 1"));
  // A Llama-style line on a base model, with uneven first and last stages and virtual stages.
  FrameworkInputs in = dp(2);
  in.model = hw::model_preset("llama3-8b");
  const FrameworkPlan q = from_megatron(
      "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 7 "
      "--decoder-last-pipeline-num-layers 7 --micro-batch-size 2 --global-batch-size 64 --seq-length 4096 --bf16 "
      "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
      in);
  CHECK(q.model.preset == "llama3-8b");
  CHECK(q.model.gated_ffn);  // the base model's, untouched by flags not given
  CHECK(q.options.chunk_blocks == std::vector<int>{7, 9, 9, 7});
  CHECK(q.options.microbatches == 16);
  CHECK(q.recompute == hw::Recompute::Full);
  CHECK(q.seq == 4096);
  // --pipeline-model-parallel-layout: its stages are p x v; v > 1 runs the interleaved schedule.
  const FrameworkPlan l = from_megatron(
      "--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout Et*7|t*8|(t*8|)*1t*9L --micro-batch-size 1 "
      "--bf16",
      in);
  CHECK(l.options.chunks == 2);
  CHECK(l.options.schedule == "interleaved-1f1b");
  CHECK(l.options.chunk_blocks == std::vector<int>{7, 8, 8, 9});
  CHECK(l.options.layout.empty());
  // --account-for-embedding/loss-in-pipeline-split: each counts as a layer.
  FrameworkInputs in30 = dp(1);
  in30.model = hw::model_preset("llama3-8b");
  in30.model->blocks = 30;
  const FrameworkPlan a = from_megatron(
      "--pipeline-model-parallel-size 4 --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split "
      "--micro-batch-size 1 --global-batch-size 8 --fp16",
      in30);
  CHECK(a.options.chunk_blocks == std::vector<int>{7, 8, 8, 7});
  CHECK(has_note(a, "count as a layer each"));
  // --num-layers-per-virtual-pipeline-stage: v = layers per stage / it.
  const FrameworkPlan v = from_megatron(
      "--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 2 --micro-batch-size 1 --bf16", in);
  CHECK(v.options.chunks == 4);
  CHECK(v.options.chunk_blocks == std::vector<int>(16, 2));
}

TEST_CASE("framework args: Megatron-LM flags outside the subset, or configurations it refuses, are refused by name") {
  FrameworkInputs in = dp(1);
  in.model = hw::model_preset("llama3-8b");
  CHECK(refusal([&] { from_megatron("--micro-batch-size 1 --bf16 --moe-shared-expert-overlap", in); }) ==
        "--from-megatron: --moe-shared-expert-overlap is not in the subset trainsim reads (docs/frameworks.md, Megatron-LM lists it, "
        "flag by flag: the flags that change a step and are modelled, and those accepted because they do not change it)");
  CHECK(refusal([&] { from_megatron("--bf16", in); }).find("--micro-batch-size is required") != std::string::npos);
  CHECK(refusal([&] { from_megatron("--micro-batch-size 1", in); }).find("give --bf16 or --fp16") != std::string::npos);
  CHECK(refusal([&] { from_megatron("--micro-batch-size 3 --global-batch-size 10 --bf16", in); })
            .find("--global-batch-size 10 is not a multiple of --micro-batch-size 3") != std::string::npos);
  CHECK(refusal([&] { from_megatron("--pipeline-model-parallel-size 5 --micro-batch-size 1 --bf16", in); })
            .find("--num-layers 32 does not divide into 5 stage chunks") != std::string::npos);
  CHECK(refusal([&] {
          from_megatron("--pipeline-model-parallel-size 4 --micro-batch-size 1 --bf16 --recompute-granularity full "
                        "--recompute-method block --recompute-num-layers 3",
                        in);
        }).find("recomputes 3 of the 8 layers of a stage") != std::string::npos);
  CHECK(refusal([&] { from_megatron("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout Et*3|tx --micro-batch-size 1 --bf16", in); })
            .find("--pipeline-model-parallel-layout 'Et*3|tx': position 7: a layout ends with L") != std::string::npos);
  CHECK(refusal([&] { from_megatron("--micro-batch-size", in); }) == "--from-megatron: --micro-batch-size needs a value");
  CHECK(refusal([&] { from_megatron("--micro-batch-size 1 --bf16 stray", in); })
            .find("expected a flag (--name), got 'stray'") != std::string::npos);
  // Without a base model the flags must describe one.
  CHECK(refusal([&] { from_megatron("--micro-batch-size 1 --bf16 --num-layers 2 --hidden-size 64 --num-attention-heads 4", dp(1)); })
            .find("--vocab-size is needed") != std::string::npos);
  // A padding multiple so large that the padded vocabulary passes an int (issue 38: it wrapped to 64, exit 0).
  const std::string huge = refusal([&] {
    from_megatron("--micro-batch-size 1 --bf16 --tensor-model-parallel-size 4 --make-vocab-size-divisible-by 1073741840",
                  in);
  });
  CHECK(huge.find("padded to a multiple of 4294967360") != std::string::npos);
  CHECK(huge.find("more than a model may have (2147483647)") != std::string::npos);
}

TEST_CASE("framework args: a torchtitan command line becomes gen 3d, fsdp or a pipeline with torchtitan's split") {
  // torchtitan's Llama 3 8B on 8 GPUs with FSDP (its llama3_8b.toml, shapes of benchmarks/llama3_h100_202412).
  const FrameworkPlan f = from_torchtitan(
      "--model.name llama3 --model.flavor 8B --training.local_batch_size 1 --training.seq_len 8192 "
      "--activation_checkpoint.mode selective --activation_checkpoint.selective_ac_option op --training.steps 1000 "
      "--metrics.log_freq 10 --compile.enable",
      dp(8));
  CHECK(f.kind == "fsdp");
  CHECK(f.options.dp == 8);
  CHECK(f.options.layers == 32);
  CHECK(f.options.microbatches == 1);
  CHECK(f.options.reshard_after_forward);
  CHECK(f.microbatch_size == 1);
  CHECK(f.seq == 8192);
  CHECK(f.recompute == hw::Recompute::Selective);
  CHECK(f.model.preset == "llama3-8b");
  CHECK(f.elementwise == hw::Elementwise::Fused);  // --compile.enable: torch.compile's fused kernels
  CHECK(f.tp_overlap == hw::TpOverlap::None);       // DTensor's collectives, waited for
  CHECK(has_note(f, "--training.steps, --metrics.log_freq"));
  // 2D: TP x FSDP; sequence parallelism with TP, as torchtitan's TP plan runs the norms.
  const FrameworkPlan t = from_torchtitan(
      "--model.flavor 70B --parallelism.tensor_parallel_degree 8 --parallelism.data_parallel_shard_degree 4 "
      "--training.local_batch_size 2 --training.global_batch_size 16 --activation_checkpoint.mode full",
      dp(1));
  CHECK(t.kind == "3d");
  CHECK(t.options.tp == 8);
  CHECK(t.options.dp == 4);
  CHECK(t.options.zero == 3);
  CHECK(t.options.sequence_parallel);
  CHECK(t.options.microbatches == 2);  // gradient accumulation: 16 / (2 x 4)
  CHECK(t.options.chunk_blocks == std::vector<int>{80});  // one schedule layer per block
  CHECK(t.microbatch_size == 2);
  CHECK(t.recompute == hw::Recompute::Full);
  // 3D with pipelining: torchtitan's stage split (first and last stages one layer less) as a stage layout.
  const FrameworkPlan p = from_torchtitan(
      "--model.flavor 8B --parallelism.pipeline_parallel_degree 4 --parallelism.pipeline_parallel_schedule "
      "Interleaved1F1B --parallelism.tensor_parallel_degree 2 --parallelism.data_parallel_shard_degree 2 "
      "--training.local_batch_size 8 --activation_checkpoint.mode none",
      dp(1));
  CHECK(p.kind == "3d");
  CHECK(p.options.schedule == "interleaved-1f1b");
  CHECK(p.options.chunks == 2);
  CHECK(p.options.microbatches == 8);
  // generate_llm_fqn_per_model_part(8, 32, 1, 1), one schedule layer per block
  CHECK(p.options.chunk_blocks == std::vector<int>{4, 5, 4, 4, 4, 4, 4, 3});
  // Pipelining alone: gen 3d too (here ZBV, two stages per rank in V placement), so that the same configuration is
  // one schedule whichever way it is asked for.
  const FrameworkPlan z = from_torchtitan(
      "--model.flavor 8B --parallelism.pipeline_parallel_degree 4 --parallelism.pipeline_parallel_schedule ZBVZeroBubble "
      "--parallelism.data_parallel_shard_degree 1 --training.local_batch_size 8 --activation_checkpoint.mode full "
      "--parallelism.pipeline_parallel_first_stage_less_layers 0 --parallelism.pipeline_parallel_last_stage_less_layers 2",
      dp(1));
  CHECK(z.kind == "3d");
  CHECK(z.options.schedule == "zbv");
  CHECK(z.options.pp == 4);
  CHECK(z.options.chunk_blocks == std::vector<int>{5, 5, 4, 4, 4, 4, 4, 2});  // generate_llm_fqn_per_model_part(8, 32, 0, 2)
  // GPipe and LoopedBFS, which gen 3d does not run, stay pipeline kinds with torchtitan's split as their layout.
  const FrameworkPlan g = from_torchtitan(
      "--model.flavor 8B --parallelism.pipeline_parallel_degree 4 --parallelism.pipeline_parallel_schedule GPipe "
      "--parallelism.data_parallel_shard_degree 1 --training.local_batch_size 8 --activation_checkpoint.mode full",
      dp(1));
  CHECK(g.kind == "gpipe");
  CHECK(g.options.layout == "Et*8|t*9|t*8|t*7L");
}

TEST_CASE("framework args: torchtitan flags outside the subset are refused by name") {
  auto tt = [](const std::string& flags) { return refusal([&] { from_torchtitan(flags, dp(8)); }); };
  CHECK(tt("--model.flavor 8B --activation_checkpoint.mode full --parallelism.foo 3") ==
        "--from-torchtitan: --parallelism.foo is not in the subset trainsim reads (docs/frameworks.md, torchtitan lists "
        "it, flag by flag: the flags that change a step and are modelled, and those accepted because they do not change "
        "it)");
  CHECK(tt("--model.flavor debugmodel").find("--model.flavor 'debugmodel'") != std::string::npos);
  CHECK(tt("--model.flavor 8B").find("selective_ac_option '2'") != std::string::npos);  // torchtitan's default AC
  CHECK(tt("--model.flavor 8B --activation_checkpoint.mode full --model.converters mx")
            .find("--model.converters 'mx': only float8 is modelled") != std::string::npos);
  CHECK(tt("--model.flavor 8B --activation_checkpoint.mode full --parallelism.data_parallel_replicate_degree 2 "
           "--parallelism.data_parallel_shard_degree 4")
            .find("(HSDP) is not generated") != std::string::npos);
  CHECK(tt("--model.flavor 8B --activation_checkpoint.mode full --parallelism.pipeline_parallel_degree 2 "
           "--parallelism.pipeline_parallel_schedule GPipe --parallelism.tensor_parallel_degree 2")
            .find("GPipe with tensor, data or expert parallelism is not generated") != std::string::npos);
  // tyro's spellings: dashes in field names and --SECTION.no-FIELD for a false flag.
  const FrameworkPlan p = from_torchtitan(
      "--model.flavor 8B --activation-checkpoint.mode=full --training.local-batch-size 4 --compile.no-enable", dp(8));
  CHECK(p.microbatch_size == 4);
  CHECK(p.elementwise == hw::Elementwise::Eager);  // no torch.compile: every elementwise op its own kernel
}

TEST_CASE("framework args: a realistic Megatron-LM line is read, benign flags listed once, the others refused together") {
  // The flags of a Llama 3 70B pretraining line as users write them (timeouts, fusions, the attention backend, TP
  // communication overlap, FP8, context parallelism).
  const std::string line =
      "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 --context-parallel-size 2 "
      "--num-layers-per-virtual-pipeline-stage 5 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce "
      "--overlap-param-gather --tp-comm-overlap --micro-batch-size 1 --global-batch-size 128 --seq-length 8192 "
      "--bf16 --fp8-format hybrid --fp8-amax-history-len 1024 --fp8-amax-compute-algo max --attention-backend flash "
      "--cross-entropy-loss-fusion --distributed-timeout-minutes 60 --log-interval 10 --manual-gc "
      "--tokenizer-type HuggingFaceTokenizer --save /ckpt --load /ckpt --seed 1234";
  FrameworkInputs in = dp(2);
  in.model = hw::model_preset("llama3-70b");
  const FrameworkPlan p = from_megatron(line, in);
  CHECK(p.kind == "3d");
  CHECK(p.options.cp == 2);
  CHECK(p.options.chunks == 4);  // 80 blocks / (4 stages x 5 blocks)
  CHECK(p.options.chunk_blocks == std::vector<int>(16, 5));
  CHECK(p.options.microbatches == 64);
  CHECK(p.tp_overlap == hw::TpOverlap::Full);
  CHECK(p.fp8);
  CHECK(p.attention == hw::Attention::Flash);
  CHECK(has_note(p, "--cross-entropy-loss-fusion"));
  CHECK(has_note(p, "--distributed-timeout-minutes"));
  // Flags that change the step and are not modelled are refused, every one in one message.
  const std::string e =
      refusal([&] { from_megatron(line + " --moe-shared-expert-overlap --mtp-num-layers 1 --use-torch-fsdp2", in); });
  CHECK(e.find("--moe-shared-expert-overlap, --mtp-num-layers, --use-torch-fsdp2 are not in the subset") !=
        std::string::npos);
  // Megatron-LM's own rules: TP overlap needs sequence parallelism; the asynchronous all-reduce can be turned off.
  CHECK(refusal([&] { from_megatron("--tensor-model-parallel-size 2 --micro-batch-size 1 --bf16 --tp-comm-overlap", in); })
            .find("--tp-comm-overlap needs --sequence-parallel") != std::string::npos);
  CHECK(from_megatron("--tensor-model-parallel-size 2 --micro-batch-size 1 --bf16 "
                      "--no-async-tensor-model-parallel-allreduce",
                      in)
            .tp_overlap == hw::TpOverlap::None);
  CHECK(from_megatron("--micro-batch-size 1 --bf16 --attention-backend unfused", in).attention == hw::Attention::Eager);
}

TEST_CASE("framework args: torchtitan's TOML job configuration, the command line's flags over it") {
  auto dir = fresh_dir("torchtitan-toml");
  const std::string toml = (dir / "llama3_70b.toml").string();
  std::ofstream(toml) << R"(# torchtitan Config.toml
[job]
dump_folder = "./outputs"
description = "Llama 3 70B training"

[model]
name = "llama3"
flavor = "70B"
converters = ["float8"]

[optimizer]
name = "AdamW"
lr = 1.5e-4

[training]
local_batch_size = 8
seq_len = 8192
steps = 1000

[compile]
enable = true

[parallelism]
data_parallel_shard_degree = -1
tensor_parallel_degree = 8
context_parallel_degree = 2
enable_async_tensor_parallel = true

[activation_checkpoint]
mode = "full"

[float8]
enable_fsdp_float8_all_gather = true
filter_fqns = ["output"]
)";
  const FrameworkPlan p = from_torchtitan("--job.config_file " + toml + " --training.local_batch_size 4", dp(4));
  CHECK(p.kind == "3d");
  CHECK(p.model.preset == "llama3-70b");
  CHECK(p.options.tp == 8);
  CHECK(p.options.cp == 2);
  CHECK(p.options.dp == 4);
  CHECK(p.options.zero == 3);
  CHECK(p.microbatch_size == 4);  // the command line's flag wins over the file's 8
  CHECK(p.seq == 8192);
  CHECK(p.recompute == hw::Recompute::Full);
  CHECK(p.fp8);
  CHECK(p.fp8_all_gather);
  CHECK(p.tp_overlap == hw::TpOverlap::Full);
  CHECK(p.elementwise == hw::Elementwise::Fused);
  // A file that is not TOML is refused with its line.
  const std::string bad = (dir / "bad.toml").string();
  std::ofstream(bad) << "[model]\nflavor = \n";
  CHECK(refusal([&] { from_torchtitan("--job.config_file " + bad, dp(4)); }).find("bad.toml': line 2") != std::string::npos);
}

TEST_CASE("trainsim gen --from-megatron and --from-torchtitan end to end") {
  CommandResult r = run_trainsim(
      "gen --from-megatron \"--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-layers 4 "
      "--hidden-size 256 --num-attention-heads 4 --vocab-size 1000 --seq-length 128 --micro-batch-size 1 "
      "--global-batch-size 8 --bf16 --swiglu --untie-embeddings-and-output-weights --sequence-parallel\" --dp 2 --sim --json",
      false);
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["kind"] == "3d");
  CHECK(j["world_size"] == 8);
  CHECK(j["microbatches"] == 8);  // 4 per replica x 2 replicas
  CHECK(j["ok"] == true);
  CHECK(j["step_time_s"].get<double>() > 0);
  // The notes and the equivalent command go to standard error.
  r = run_trainsim("gen --from-torchtitan \"--model.flavor 8B --parallelism.pipeline_parallel_degree 4 "
                   "--training.local_batch_size 4 --activation_checkpoint.mode full\" -o -",
                   true);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("trainsim gen: from torchtitan: gen 3d --tp 1 --pp 4 --dp 1 --microbatches 4 --layout "
                   "'Et*8|t*9|t*8|t*7L' --model llama3-8b --microbatch-size 1 --seq 2048 --recompute full --elementwise eager") !=
        std::string::npos);
  CHECK(r.out.find("note: device h100-sxm (no --device given)") != std::string::npos);
  CHECK(r.out.find("note: data-parallel degree 1") != std::string::npos);
  // One schedule layer per block: the header's layout gives each of the 32 layers one block.
  CHECK(r.out.find("layout E(t|)*31tL\n") != std::string::npos);
  // Options that the configuration sets are refused beside it, and so is a kind.
  r = run_trainsim("gen --from-megatron \"--micro-batch-size 1 --bf16\" --model llama3-8b --tp 2", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("--tp comes from the Megatron-LM configuration with --from-megatron: leave it out") != std::string::npos);
  r = run_trainsim("gen 1f1b --from-megatron \"--micro-batch-size 1 --bf16\"", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("chooses the kind: leave KIND ('1f1b') out") != std::string::npos);
  r = run_trainsim("gen --from-megatron \"--micro-batch-size 1 --bf16 --foo\" --model llama3-8b", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("--foo is not in the subset trainsim reads") != std::string::npos);
  r = run_trainsim("gen", true);
  CHECK(r.exit_code == 2);
  CHECK(r.out.find("KIND is required") != std::string::npos);
}

TEST_CASE("framework args: a Megatron-LM line and the gen 3d command it prints give the same prediction") {
  // One configuration, one prediction (issue 33): the same 3D run asked for as Megatron-LM's flags and as gen 3d.
  const std::string megatron =
      "gen --from-megatron \"--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
      "--num-layers-per-virtual-pipeline-stage 8 --sequence-parallel --use-distributed-optimizer --micro-batch-size 1 "
      "--global-batch-size 16 --seq-length 4096 --bf16 --recompute-activations\" --dp 2 --model llama3-8b --sim --json";
  const std::string gen =
      "gen 3d --tp 2 --pp 2 --dp 2 --sp --zero 1 --schedule interleaved-1f1b --chunks 2 --global-batch 16 "
      "--model llama3-8b --seq 4096 --recompute selective --sim --json";
  CommandResult a = run_trainsim(megatron), b = run_trainsim(gen);
  INFO(a.out);
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  const auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
  CHECK(ja["step_time_s"] == jb["step_time_s"]);
  CHECK(ja["peak_memory_bytes"] == jb["peak_memory_bytes"]);
  CHECK(ja["layers"] == 32);  // one schedule layer per block on both paths
  CHECK(jb["layers"] == 32);
}

TEST_CASE("framework args: a Megatron-LM MoE line: experts, their layers, EP, and what is not modelled refused") {
  // Qwen3-30B-A3B as a public Megatron-LM script writes it (slime's scripts/models/qwen3-30B-A3B.sh), on 16 GPUs
  // with EP 8: the flags describe the same model as trainsim's preset.
  const std::string qwen3 =
      "--disable-bias-linear --qk-layernorm --group-query-attention --num-attention-heads 32 --num-query-groups 4 "
      "--kv-channels 128 --num-layers 48 --hidden-size 2048 --ffn-hidden-size 6144 --normalization RMSNorm "
      "--position-embedding-type rope --norm-epsilon 1e-6 --swiglu --untie-embeddings-and-output-weights "
      "--vocab-size 151936 --make-vocab-size-divisible-by 1 --rotary-base 1000000 --moe-ffn-hidden-size 768 "
      "--moe-router-score-function softmax --moe-token-dispatcher-type alltoall --moe-router-topk 8 "
      "--moe-layer-freq \"'([1]*48)'\" --num-experts 128 --moe-grouped-gemm --moe-token-drop-policy probs "
      "--moe-router-dtype fp32 --moe-permute-fusion --moe-aux-loss-coeff 0 --expert-model-parallel-size 8 "
      "--micro-batch-size 1 --global-batch-size 64 --seq-length 4096 --bf16 --use-distributed-optimizer "
      "--attention-dropout 0 --hidden-dropout 0";
  const FrameworkPlan p = from_megatron(qwen3, dp(16));
  hw::ModelSpec want = hw::model_preset("qwen3-30b-a3b");
  want.preset = "custom", want.seq = 4096;
  CHECK(hw::spec_text(p.model) == hw::spec_text(want));
  CHECK(p.model == want);
  CHECK(p.kind == "3d");
  CHECK(p.options.ep == 8);
  CHECK(p.options.dp == 16);
  CHECK(p.options.dense_layers == 0);
  CHECK(p.options.zero == 1);
  CHECK(p.options.microbatches == 4);
  CHECK(!has_note(p, "default dispatcher is allgather"));
  CHECK(!has_note(p, "grouped GEMMs"));
  // DeepSeek-V3's dense first layers, written as Megatron-LM's list expression; a shared expert.
  FrameworkInputs in = dp(8);
  in.model = hw::model_preset("deepseek-v3");
  const std::string ds = "--micro-batch-size 1 --bf16 --pipeline-model-parallel-size 1 --num-experts 256 "
                         "--moe-router-topk 8 --moe-ffn-hidden-size 2048 --moe-shared-expert-intermediate-size 2048 "
                         "--moe-layer-freq [0]*3+[1]*58 --moe-router-num-groups 8 --moe-router-group-topk 4 "
                         "--expert-model-parallel-size 8";
  const FrameworkPlan d = from_megatron(ds, in);
  CHECK(d.model == hw::model_preset("deepseek-v3"));
  CHECK(d.options.ep == 8);
  CHECK(d.options.dense_layers == 3);
  CHECK(has_note(d, "default dispatcher is allgather"));
  CHECK(has_note(d, "grouped GEMMs"));
  CHECK(from_megatron("--micro-batch-size 1 --bf16 --moe-layer-freq '[0,0,0]+[1]*58'", in).model.dense_blocks == 3);
  CHECK(from_megatron("--micro-batch-size 1 --bf16 --moe-layer-freq 1", in).model.dense_blocks == 0);
  // --num-experts alone takes Megatron-LM's defaults: top-2, experts of --ffn-hidden-size, in every layer.
  FrameworkInputs llama = dp(4);
  llama.model = hw::model_preset("llama3-8b");
  const hw::ModelSpec m = from_megatron("--micro-batch-size 1 --bf16 --num-experts 8", llama).model;
  CHECK(m.experts == 8);
  CHECK(m.top_k == 2);
  CHECK(m.expert_width() == m.ffn);
  CHECK(m.dense_blocks == 0);
  // Refused, naming the flag: what trainsim does not model, and what Megatron-LM refuses too.
  auto refused = [&](const std::string& flags, const FrameworkInputs& with) {
    return refusal([&] { from_megatron("--micro-batch-size 1 --bf16 " + flags, with); });
  };
  CHECK(refused("--moe-layer-freq 2", in).find("--moe-layer-freq 2: experts in every 2th layer are not modelled") !=
        std::string::npos);
  CHECK(refused("--moe-layer-freq [0]*3+[1]*57+[0]", in).find("a dense layer after an MoE layer is not modelled") !=
        std::string::npos);
  CHECK(refused("--moe-layer-freq [0]*3+[1]*50", in).find("gives 53 layers, not --num-layers 61") != std::string::npos);
  CHECK(refused("--moe-layer-freq [0]*3+[1]*5000000", in).find("gives more layers than --num-layers 61") !=
        std::string::npos);
  CHECK(refused("--moe-layer-freq [2]*61", in).find("is an integer or a list expression") != std::string::npos);
  CHECK(refused("--moe-layer-freq [0]*3+[1]*58+", in).find("is an integer or a list expression") != std::string::npos);
  // Token dropping: the capacity and its padding, read into the model and written back; the padding alone refused.
  {
    const FrameworkPlan drop = from_megatron(ds + " --moe-expert-capacity-factor 1.25 --moe-pad-expert-input-to-capacity", in);
    CHECK(drop.model.capacity_factor == 1.25);
    CHECK(drop.model.pad_to_capacity);
    CHECK(from_megatron(ds, in).model.capacity_factor == 0);  // dropless: Megatron-LM's default
    const FrameworkLaunch back = to_megatron(drop);
    INFO(back.text);
    CHECK(back.exact);
    CHECK(back.text.find("--moe-expert-capacity-factor 1.25 --moe-pad-expert-input-to-capacity") != std::string::npos);
  }
  CHECK(refused("--moe-pad-expert-input-to-capacity", in).find("needs --moe-expert-capacity-factor") != std::string::npos);
  // Megatron-LM's combined 1F1B (EP all-to-all overlap): read as gen 3d --a2a-overlap and written back; without EP
  // refused.
  {
    const FrameworkPlan ov = from_megatron(ds + " --overlap-moe-expert-parallel-comm --delay-wgrad-compute", in);
    CHECK(ov.options.a2a_overlap);
    CHECK(has_note(ov, "--delay-wgrad-compute: accepted"));
    CHECK(!from_megatron(ds, in).options.a2a_overlap);
    const FrameworkLaunch back = to_megatron(ov);
    CHECK(back.exact);
    CHECK(back.text.find("--overlap-moe-expert-parallel-comm") != std::string::npos);
    CHECK(gen_command(ov).find("--a2a-overlap") != std::string::npos);
  }
  CHECK(refused("--overlap-moe-expert-parallel-comm", in).find("needs --expert-model-parallel-size above 1") !=
        std::string::npos);
  // As Megatron-LM: with pipeline stages only interleaved, and not with full recomputation.
  std::string pp2 = ds;
  pp2.replace(pp2.find("--pipeline-model-parallel-size 1"), 32,
              "--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 31");
  CHECK(refusal([&] { from_megatron(pp2 + " --overlap-moe-expert-parallel-comm", in); })
            .find("needs virtual pipeline stages") != std::string::npos);
  CHECK(refusal([&] {
          from_megatron(ds + " --overlap-moe-expert-parallel-comm --recompute-granularity full --recompute-method uniform", in);
        }).find("with full recomputation") != std::string::npos);
  CHECK(refused("--moe-expert-capacity-factor 0", in).find("the capacity is 0.01 to 1000") != std::string::npos);
  CHECK(refused("--expert-model-parallel-size 8 --moe-token-dispatcher-type allgather", in)
            .find("trainsim times the alltoall dispatcher") != std::string::npos);
  // TP with experts: Megatron-LM's expert TP defaults to the TP size (each expert split over the TP group: gen 3d
  // --etp beside EP, or without EP every expert on every TP rank, split); 1 keeps the experts whole beside EP.
  // Sequence parallelism is needed; with expert TP 1 EP is a multiple of TP, with expert TP = TP it divides CP x DP.
  const std::string tp2 = "--tensor-model-parallel-size 2 ";
  CHECK(refused(tp2, in).find("needs --sequence-parallel") != std::string::npos);
  CHECK(refused(tp2 + "--sequence-parallel --expert-tensor-parallel-size 1", in)
            .find("no expert parallelism and --expert-tensor-parallel-size 1: every expert whole on every TP rank is "
                  "not modelled") != std::string::npos);
  {
    const FrameworkPlan t = from_megatron("--micro-batch-size 1 --bf16 " + tp2 + "--sequence-parallel", in);
    CHECK(t.options.tp == 2);
    CHECK(t.options.ep == 1);
    const FrameworkLaunch back = to_megatron(t);
    INFO(back.text << " / " << back.note);
    CHECK(back.exact);
    CHECK(back.text.find("--expert-tensor-parallel-size 2") != std::string::npos);
  }
  CHECK(refused(tp2 + "--expert-tensor-parallel-size 1 --expert-model-parallel-size 8", in)
            .find("needs --sequence-parallel") != std::string::npos);
  CHECK(refused("--tensor-model-parallel-size 4 --expert-tensor-parallel-size 1 --sequence-parallel "
                "--expert-model-parallel-size 2",
                in)
            .find("--expert-model-parallel-size 2 is not a multiple of the TP size 4") != std::string::npos);
  CHECK(refused("--tensor-model-parallel-size 4 --expert-tensor-parallel-size 2 --sequence-parallel "
                "--expert-model-parallel-size 4",
                in)
            .find("--expert-tensor-parallel-size 2: trainsim models expert TP 1 (the experts whole beside TP) or equal "
                  "to the TP size 4") != std::string::npos);
  CHECK(refused(tp2 + "--sequence-parallel --expert-model-parallel-size 16", in)
            .find("--expert-model-parallel-size 16 with --expert-tensor-parallel-size 2 (Megatron-LM's default: the TP "
                  "size): the EP degree must divide the context- x data-parallel degree 1 x 8") != std::string::npos);
  {
    // Megatron-LM's default expert TP: TP 2 x DP 8, EP 8 of one TP index each; written back explicit, read back the
    // same, and the gen command says --etp.
    const FrameworkPlan t = from_megatron(ds + " " + tp2 + "--sequence-parallel", in);
    CHECK(t.options.tp == 2);
    CHECK(t.options.ep == 8);
    CHECK(t.options.etp == 2);
    CHECK(gen_command(t).find(" --ep 8 --etp 2") != std::string::npos);
    const FrameworkLaunch back = to_megatron(t);
    INFO(back.text << " / " << back.note);
    CHECK(back.exact);
    CHECK(back.text.find("--expert-tensor-parallel-size 2") != std::string::npos);
    CHECK(from_megatron(ds + " " + tp2 + "--sequence-parallel --expert-tensor-parallel-size 1", in).options.etp == 1);
    // torchtitan's TOML is not written for it: its expert TP is not Megatron-LM's.
    CHECK(to_torchtitan_toml(t).text.empty());
    CHECK(to_torchtitan_toml(t).note.find("torchtitan's expert TP routes every token on every TP rank") !=
          std::string::npos);
  }
  // CP with EP: EP carved out of TP x CP x DP (Megatron-Core's expert ranks ignore the dense CP split).
  CHECK(from_megatron("--micro-batch-size 1 --bf16 --context-parallel-size 2 --expert-model-parallel-size 16", in)
            .options.cp == 2);
  CHECK(refused("--context-parallel-size 2 --expert-model-parallel-size 32", in)
            .find("does not divide the tensor- x context- x data-parallel degree 1 x 2 x 8") != std::string::npos);
  {
    // TP 2 x DP 8 with EP 16, which spans TP x DP (Megatron-Core's folded layout): accepted, written back, and
    // read back to the same configuration.
    const std::string line = ds.substr(0, ds.rfind(" --expert-model-parallel-size")) + " " + tp2 +
                             "--expert-tensor-parallel-size 1 --sequence-parallel --expert-model-parallel-size 16";
    const FrameworkPlan t = from_megatron(line, in);
    CHECK(t.options.tp == 2);
    CHECK(t.options.dp == 8);
    CHECK(t.options.ep == 16);
    CHECK(t.options.sequence_parallel);
    const FrameworkLaunch back = to_megatron(t);
    INFO(back.text);
    INFO(back.note);
    CHECK(back.exact);
    CHECK(back.text.find("--expert-tensor-parallel-size 1") != std::string::npos);
    CHECK(back.text.find("--expert-model-parallel-size 16") != std::string::npos);
  }
  // Megatron-LM's flex dispatcher through DeepEP (its default backend) or HybridEP: DeepEP's hierarchical dispatch,
  // written back as it was read.
  {
    const FrameworkPlan flex = from_megatron(
        ds + " --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep", in);
    CHECK(flex.moe_dispatcher == hw::MoeDispatcher::DeepEP);
    CHECK(from_megatron(ds + " --moe-token-dispatcher-type flex", in).moe_dispatcher == hw::MoeDispatcher::DeepEP);
    const FrameworkPlan hybrid = from_megatron(ds + " --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep", in);
    CHECK(hybrid.moe_dispatcher == hw::MoeDispatcher::DeepEP);
    CHECK(has_note(hybrid, "hybridep timed as DeepEP's hierarchical dispatch"));
    CHECK(from_megatron(ds + " --moe-token-dispatcher-type alltoall", in).moe_dispatcher == hw::MoeDispatcher::Nccl);
    const FrameworkLaunch back = to_megatron(flex);
    INFO(back.text << " / " << back.note);
    CHECK(back.exact);
    CHECK(back.text.find("--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep") != std::string::npos);
    CHECK(gen_command(flex).find(" --moe-dispatcher deepep") != std::string::npos);
    CHECK(refused(ds.substr(ds.find("--num-experts")) + " --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend nixl", in)
              .find("is deepep or hybridep, not 'nixl'") != std::string::npos);
    CHECK(refused(ds.substr(ds.find("--num-experts")) + " --moe-token-dispatcher-type alltoall --moe-enable-deepep", in)
              .find("--moe-enable-deepep needs --moe-token-dispatcher-type flex") != std::string::npos);
    // Group-limited routing: read, written back (the line above reads back exact), and both flags needed.
    CHECK(flex.model.router_groups == 8);
    CHECK(flex.model.router_group_topk == 4);
    CHECK(back.text.find("--moe-router-num-groups 8 --moe-router-group-topk 4") != std::string::npos);
    CHECK(refused("--num-experts 256 --moe-router-topk 8 --moe-router-num-groups 8", in)
              .find("--moe-router-num-groups goes with --moe-router-group-topk") != std::string::npos);
  }
  CHECK(refused("--expert-tensor-parallel-size 2", in).find("or equal to the TP size 1") != std::string::npos);
  CHECK(refused("--expert-model-parallel-size 3", in).find("does not divide --num-experts 256") != std::string::npos);
  CHECK(refused("--expert-model-parallel-size 16", in).find("does not divide the tensor- x context- x data-parallel degree 1 x 1 x 8") !=
        std::string::npos);
  CHECK(refused("--moe-shared-expert-intermediate-size 3000", in).find("not a whole number of experts of width 2048") !=
        std::string::npos);
  CHECK(refused("--expert-model-parallel-size 2", llama).find("needs experts: give --num-experts") != std::string::npos);
  CHECK(refused("--moe-router-topk 2", llama).find("--moe-router-topk needs experts") != std::string::npos);
  CHECK(refused("--multi-latent-attention", llama).find("needs --kv-lora-rank") != std::string::npos);
  CHECK(refused("--kv-lora-rank 512", llama).find("goes with --multi-latent-attention") != std::string::npos);
}

TEST_CASE("framework args: a torchtitan MoE job (qwen3 30B-A3B, deepseek_v3 671B): EP with FSDP, its mesh, refusals") {
  // torchtitan's expert parallelism with expert TP 1, its default (torchtitan/distributed/parallel_dims.py): the EP
  // mesh borrows all of TP and part of the FSDP shards, TP fastest; the experts FSDP-sharded over the rest.
  const std::string base = "--model.name qwen3 --model.flavor 30B-A3B --activation_checkpoint.mode full "
                           "--training.local_batch_size 2 --training.seq_len 4096 ";
  const FrameworkPlan q = from_torchtitan(base + "--parallelism.expert_parallel_degree 8", dp(16));
  CHECK(q.model == [] {
    hw::ModelSpec m = hw::model_preset("qwen3-30b-a3b");
    m.grad_bytes = 4;  // (torchtitan reduces in fp32)
    return m;
  }());
  CHECK(q.kind == "3d");
  CHECK(q.options.ep == 8);
  CHECK(q.options.dp == 16);
  CHECK(q.options.zero == 3);
  CHECK(q.options.tp == 1);
  // Its experts run as one grouped GEMM per linear layer (torch._grouped_mm): no host time per expert, and the gen
  // line says so.
  CHECK(q.expert_gemm == hw::ExpertGemm::Grouped);
  CHECK(gen_command(q).find(" --expert-gemm grouped") != std::string::npos);
  const FrameworkPlan t = from_torchtitan(base + "--parallelism.expert_parallel_degree 8 "
                                                 "--parallelism.tensor_parallel_degree 2 "
                                                 "--parallelism.expert_tensor_parallel_degree 1", dp(8));
  CHECK(t.options.tp == 2);
  CHECK(t.options.sequence_parallel);
  CHECK(t.options.ep == 8);  // (TP 2 x 4 of the 8 FSDP shards)
  const FrameworkPlan d = from_torchtitan(
      "--model.name deepseek_v3 --model.flavor 671B --activation_checkpoint.mode full --training.local_batch_size 32 "
      "--parallelism.pipeline_parallel_degree 16 --parallelism.pipeline_parallel_schedule DualPipeV "
      "--parallelism.expert_parallel_degree 64",
      dp(128));
  CHECK(d.model.preset == "deepseek-v3");
  CHECK(d.options.schedule == "dualpipev");
  CHECK(d.options.ep == 64);
  CHECK(d.options.pp == 16);
  // A dense model: EP has no effect, as in torchtitan (a note).
  const FrameworkPlan l = from_torchtitan("--model.flavor 8B --activation_checkpoint.mode full "
                                          "--parallelism.expert_parallel_degree 2", dp(8));
  CHECK(l.kind == "fsdp");
  CHECK(has_note(l, "--parallelism.expert_parallel_degree 2: no effect on a model without experts"));
  // Refused, naming the flag: what torchtitan refuses, and what trainsim does not model.
  auto tt = [&](const std::string& flags, int d = 8) { return refusal([&] { from_torchtitan(base + flags, dp(d)); }); };
  CHECK(tt("--parallelism.expert_parallel_degree 8 --parallelism.tensor_parallel_degree 2 "
           "--parallelism.expert_tensor_parallel_degree 2")
            .find("expert_tensor_parallel_degree 2 (the TP degree): torchtitan's expert TP gathers the sequence over "
                  "the TP ranks first and routes every token on each") != std::string::npos);
  CHECK(tt("--parallelism.expert_parallel_degree 8 --parallelism.tensor_parallel_degree 2 "
           "--parallelism.expert_tensor_parallel_degree 4")
            .find("torchtitan runs 1 or the TP degree (2)") != std::string::npos);
  {
    // TP without EP: torchtitan's TensorParallel of the experts (each split over the TP ranks), gen 3d --tp.
    const FrameworkPlan t = from_torchtitan(base + "--parallelism.tensor_parallel_degree 2", dp(8));
    CHECK(t.options.tp == 2);
    CHECK(t.options.ep == 1);
    CHECK(t.options.sequence_parallel);
    const FrameworkLaunch back = to_torchtitan_toml(t);
    INFO(back.text << " / " << back.note);
    CHECK(back.exact);
  }
  CHECK(tt("--parallelism.expert_parallel_degree 4 --parallelism.tensor_parallel_degree 8")
            .find("must be a multiple of CP x TP = 1 x 8") != std::string::npos);
  CHECK(tt("--parallelism.expert_parallel_degree 16", 4).find("divide data_parallel_shard_degree x CP x TP = 4 x 1 x 1") !=
        std::string::npos);
  // CP with EP: torchtitan's EP mesh borrows all of CP (EP a multiple of CP x TP).
  CHECK(from_torchtitan(base + "--parallelism.expert_parallel_degree 8 --parallelism.context_parallel_degree 2",
                        dp(8)).options.cp == 2);
  CHECK(tt("--parallelism.expert_parallel_degree 2 --parallelism.context_parallel_degree 4")
            .find("must be a multiple of CP x TP = 4 x 1") != std::string::npos);
  CHECK(from_torchtitan(base + "--parallelism.expert_parallel_degree 8 --parallelism.expert_parallel_comm_backend deepep",
                        dp(8)).moe_dispatcher == hw::MoeDispatcher::DeepEP);
  CHECK(tt("--parallelism.expert_parallel_degree 8 --parallelism.expert_parallel_comm_backend nvshmem")
            .find("is standard or deepep, not 'nvshmem'") != std::string::npos);
  CHECK(tt("--parallelism.expert_parallel_degree 3", 6).find("does not divide the model's 128 experts") != std::string::npos);
  CHECK(refusal([] { from_torchtitan("--model.name qwen3 --model.flavor 32B", dp(8)); })
            .find("--model.flavor '32B': trainsim has qwen3's 30B-A3B and 235B-A22B") != std::string::npos);
  CHECK(from_torchtitan("--model.name qwen3 --model.flavor 235B-A22B --activation_checkpoint.mode full "
                        "--parallelism.expert_parallel_degree 8", dp(8)).model.preset == "qwen3-235b-a22b");
  CHECK(refusal([] { from_torchtitan("--model.name llama4 --model.flavor 17bx16e", dp(8)); })
            .find("--model.name 'llama4': trainsim has torchtitan's llama3") != std::string::npos);
}
