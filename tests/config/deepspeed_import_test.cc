// Megatron-DeepSpeed launch scripts read into scenarios: the DeepSpeed configuration the script names
// (or writes with a here-document), what DeepSpeed's engine makes of it (ZeRO stage, BF16_Optimizer,
// when gradients are reduced), the PipelineModule's layer split, and the errors where the script and
// its configuration disagree.

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/deepspeed_config.h"
#include "config/megatron_args.h"
#include "config/scenario.h"
#include "util/error.h"
#include "util/json_node.h"
#include "util/shell_words.h"

using trainsim::config::deepspeed_pipeline_layout;
using trainsim::config::import_megatron;
using trainsim::config::ImportedScenario;
using trainsim::config::ImportOptions;
using trainsim::config::partition_balanced;
using trainsim::config::partition_uniform;
using trainsim::util::InputError;
using trainsim::util::split_shell_commands;
using Bounds = std::vector<std::size_t>;

namespace {

ImportedScenario import(const std::string& script) {
  ImportOptions o;
  o.source = "ds.sh";
  o.cluster = "dgx-a100";
  std::vector<std::string> notes;
  const auto commands = split_shell_commands(script, o.source, &notes, {}, &o.written_files);
  return import_megatron(commands, o);
}

std::string error_of(const std::string& script) {
  try {
    import(script);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// The shape of Megatron-DeepSpeed's examples_deepspeed scripts: the configuration written by a
// here-document, then the deepspeed arguments beside Megatron's.
std::string script(const std::string& zero_stage, const std::string& parallel, const std::string& extra = "",
                   const std::string& config_extra = "", const std::string& zero_extra = "") {
  return "ZERO_STAGE=" + zero_stage + "\nDS_CONFIG=./ds_config.json\nGBS=64\nMBS=2\n" +
         "cat <<EOT > $DS_CONFIG\n{\n  \"train_batch_size\": $GBS,\n  \"train_micro_batch_size_per_gpu\": $MBS,\n"
         "  \"steps_per_print\": 10,\n" +
         config_extra + "  \"zero_optimization\": {\"stage\": $ZERO_STAGE" + zero_extra +
         "},\n  \"bf16\": {\"enabled\": true}\n}\nEOT\n" + "torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py " +
         parallel +
         " --num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings "
         "2048 --micro-batch-size $MBS --global-batch-size $GBS --train-iters 1_000 --vocab-size 50304 --bf16 "
         "--checkpoint-activations --deepspeed --deepspeed_config $DS_CONFIG --zero-stage $ZERO_STAGE "
         "--deepspeed-activation-checkpointing " +
         extra + "\n";
}

}  // namespace

TEST_CASE("DeepSpeed's partition_uniform and partition_balanced, as its utils.py computes them") {
  // partition_uniform: the first items % parts parts one longer (DeepSpeed PR #4053's example).
  CHECK(partition_uniform(38, 8) == Bounds{0, 5, 10, 15, 20, 25, 30, 34, 38});
  CHECK(partition_uniform(3, 5) == Bounds{0, 1, 2, 3, 3, 3});
  // partition_balanced: non-empty parts, the heaviest minus the lightest smallest, ties to the later
  // boundary (DeepSpeed PR #4312's example: five equal weights over four parts).
  CHECK(partition_balanced({1, 1, 1, 1, 1}, 4) == Bounds{0, 2, 3, 4, 5});
  // Megatron-DeepSpeed's GPTModelPipe of 24 layers (_to_float16, embedding, 24 layers, norm, head,
  // float16_to_fp32) over 4 stages, by 'type:transformer': 6 layers each, the embedding with the
  // first and the head with the last.
  std::vector<double> w(29, 0);
  std::fill(w.begin() + 2, w.begin() + 26, 1);
  CHECK(partition_balanced(w, 4) == Bounds{0, 8, 14, 20, 29});
  std::string problem;
  CHECK(deepspeed_pipeline_layout(24, 4, "type:transformer", false, true, problem) == "Et*6|t*6|t*6|t*6L");
  // 'type:transformer|embedding' weighs both ends too: 26 items over 4 parts, 7 7 6 6 (E+6, 7, 6, 5+L).
  CHECK(deepspeed_pipeline_layout(24, 4, "type:Transformer|Embedding", false, true, problem) == "Et*6|t*7|t*6|t*5L");
  // uniform counts every spec, the functions too: 29 items over 4 parts of 8, 7, 7, 7.
  CHECK(deepspeed_pipeline_layout(24, 4, "uniform", false, true, problem) == "Et*6|t*7|t*7|t*4L");
  CHECK_FALSE(deepspeed_pipeline_layout(24, 4, "parameters", false, true, problem));
  CHECK(problem.find("not modelled") != std::string::npos);
  CHECK_FALSE(deepspeed_pipeline_layout(24, 4, "type:attention", false, true, problem));
  CHECK(problem == "\"type:attention\" matches none of the model's layers");
}

TEST_CASE("Megatron-DeepSpeed with the pipeline: BF16_Optimizer, gradients reduced after the last micro-batch") {
  const auto s = import(script("0", "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 4"));
  const auto& p = s.scenario["parallel"];
  // bf16 without ZeRO under the pipeline engine is BF16_Optimizer: sharded fp32 states, the whole
  // (bf16) gradients all-reduced after the last micro-batch, the shards gathered after the step.
  CHECK(p["zero"] == 1);
  CHECK(p["zero1_grad_reduce"] == "all_reduce");
  CHECK(p["overlap_grad_reduce"] == false);
  CHECK_FALSE(p.contains("overlap_param_gather"));
  CHECK_FALSE(p.contains("pipeline_layout"));  // DeepSpeed's split is even here: trainsim's default
  // BigScience's 'type:transformer|embedding' weighs the embeddings as layers: an uneven split.
  const auto b = import(script("0", "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 4",
                               "--pp-partition-method 'type:transformer|embedding'"));
  CHECK(b.scenario["parallel"]["pipeline_layout"] == "Et*6|t*7|t*6|t*5L");
  const auto& t = s.scenario["training"];
  CHECK(t["grad_reduce_in_fp32"] == false);
  CHECK(t["attention"] == "softmax");  // no --use-flash-attn: CoreAttention's unfused softmax
  CHECK(t["micro_batch"] == 2);
  CHECK(t["global_batch"] == 64);
  CHECK(t["train_tokens"] == 1000.0 * 64 * 2048);  // --train-iters 1_000, Python's digit grouping
  CHECK(contains(s.no_effect, "./ds_config.json: steps_per_print"));
  CHECK(contains(s.no_effect, "--deepspeed-activation-checkpointing"));
  CHECK(s.unknown.empty());
  // Megatron's switch changes nothing under DeepSpeed's engine, which accumulates the gradients
  // itself: a note, no key.
  const auto unfused = import(script("0", "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 4",
                                     "--no-gradient-accumulation-fusion"));
  CHECK_FALSE(unfused.scenario["training"].contains("gradient_accumulation_fusion"));
  CHECK_FALSE(contains(unfused.not_modelled, "--no-gradient-accumulation-fusion"));
  CHECK(std::any_of(unfused.notes.begin(), unfused.notes.end(), [](const std::string& n) {
    return n.rfind("--no-gradient-accumulation-fusion: under DeepSpeed's engine", 0) == 0;
  }));
}

TEST_CASE("Megatron-DeepSpeed's pipeline messages: partitioned over the TP ranks unless the config says not") {
  // DeepSpeed's PipelineEngine partitions each message of a tensor-parallel stage (PartitionedTensor;
  // pipeline.pipe_partitioned and grad_partitioned, true by default): the scenario leaves the key to
  // megatron-deepspeed's default, true here, which run resolves.
  const std::string layout = "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 4";
  const auto s = import(script("0", layout));
  CHECK_FALSE(s.scenario["parallel"].contains("scatter_gather_tensors_in_pipeline"));
  const auto resolved =
      trainsim::config::parse_scenario(trainsim::util::JsonNode(s.scenario, "ds.json"), TRAINSIM_SOURCE_DIR);
  CHECK(resolved.parallel.scatter_gather_tensors_in_pipeline);
  // Either direction whole: both whole (one switch), with a note when they differ.
  const auto off = import(script("0", layout, "", "  \"pipeline\": {\"pipe_partitioned\": false},\n"));
  CHECK(off.scenario["parallel"]["scatter_gather_tensors_in_pipeline"] == false);
  CHECK(std::any_of(off.notes.begin(), off.notes.end(), [](const std::string& n) {
    return n.find("pipe_partitioned false and grad_partitioned true") != std::string::npos;
  }));
  const auto both = import(script("0", layout, "",
                                  "  \"pipeline\": {\"pipe_partitioned\": false, \"grad_partitioned\": false, "
                                  "\"stages\": \"auto\"},\n"));
  CHECK(both.scenario["parallel"]["scatter_gather_tensors_in_pipeline"] == false);
  CHECK(contains(both.unknown, "./ds_config.json: pipeline.stages"));
  // Without tensor parallelism there is nothing to partition.
  const auto tp1 =
      import(script("0", "--pipeline-model-parallel-size 4", "", "  \"pipeline\": {\"pipe_partitioned\": false},\n"));
  CHECK_FALSE(tp1.scenario["parallel"].contains("scatter_gather_tensors_in_pipeline"));
}

TEST_CASE("the microsoft fork's Llama flags: rmsnorm spelled its way, --num-key-value-heads, legacy flags") {
  const auto s = import(script("0", "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2",
                               "--swiglu --normalization rmsnorm --disable-bias-linear --num-key-value-heads 4 "
                               "--use-rotary-position-embeddings --untie-embeddings-and-output-weights "
                               "--ffn-hidden-size 5504 --no-query-key-layer-scaling --data-impl mmap"));
  const auto& m = s.scenario["model"];
  CHECK(m["mlp"] == "swiglu");
  CHECK(m["kv_heads"] == 4);
  CHECK(m["tied_embeddings"] == false);
  CHECK_FALSE(s.scenario["parallel"].contains("pipeline_layout"));  // 12 and 12: even
  CHECK(s.scenario["training"]["framework"] == "megatron-deepspeed");
  CHECK(contains(s.no_effect, "--no-query-key-layer-scaling"));
  CHECK(contains(s.no_effect, "--data-impl"));
  CHECK(s.scenario["gpus"] == 16);  // torchrun's 8 x 2
  // The deepspeed launcher's --num_gpus x --num_nodes.
  std::string launcher = script("0", "--pipeline-model-parallel-size 2");
  launcher.replace(launcher.find("torchrun --nproc_per_node 8 --nnodes 2"), 38,
                   "deepspeed --hostfile hosts --num_gpus 4 --num_nodes 4");
  const auto d = import(launcher);
  CHECK(d.scenario["gpus"] == 16);
  CHECK(contains(d.no_effect, "--hostfile"));
  CHECK(s.notes.end() == std::find_if(s.notes.begin(), s.notes.end(), [](const std::string& n) {
          return n.find("modelled as trainsim's") != std::string::npos;  // no norm/bias/position mismatch
        }));
}

TEST_CASE("Megatron-DeepSpeed without the pipeline: ZeRO stages as DeepSpeed runs them") {
  // ZeRO-1 (bf16 accumulating in bf16): DeepSpeed's ZeRO optimizer, reduce-scattered, no overlap.
  auto s = import(script("1", "--tensor-model-parallel-size 2 --no-pipeline-parallel"));
  CHECK(s.scenario["parallel"]["zero"] == 1);
  CHECK_FALSE(s.scenario["parallel"].contains("zero1_grad_reduce"));
  CHECK(s.scenario["parallel"]["overlap_grad_reduce"] == false);
  // ZeRO-1 accumulating in fp32: BF16_Optimizer again, sending bf16 by default.
  s = import(script("1", "--no-pipeline-parallel", "", "  \"data_types\": {\"grad_accum_dtype\": \"fp32\"},\n"));
  CHECK(s.scenario["parallel"]["zero1_grad_reduce"] == "all_reduce");
  // ZeRO-2 with overlap_comm: reduced in buckets of reduce_bucket_size elements during the backward.
  s = import(script("2", "--no-pipeline-parallel --use-flash-attn-v2", "", "",
                    ", \"overlap_comm\": true, \"reduce_bucket_size\": 2e8"));
  CHECK(s.scenario["parallel"]["zero"] == 2);
  CHECK(s.scenario["parallel"]["overlap_grad_reduce"] == true);
  CHECK(s.scenario["parallel"]["dp_bucket_mb"] == 2e8 * 2 / 1e6);
  CHECK(s.scenario["training"]["attention"] == "flash2");
  // DeepSpeed-Ulysses: the sequence-parallel group is context parallelism by all-to-all.
  s = import(script("0", "--no-pipeline-parallel --ds-sequence-parallel-size 4 --use-flash-attn"));
  CHECK(s.scenario["parallel"]["cp"] == 4);
  CHECK(s.scenario["parallel"]["cp_comm_type"] == "a2a");
  CHECK(s.scenario["parallel"]["zero1_grad_reduce"].is_null());
  CHECK(s.scenario["training"]["attention"] == "flash1");
}

TEST_CASE("a Megatron-DeepSpeed script and its DeepSpeed configuration that disagree are one error line") {
  const std::string pipe = "--pipeline-model-parallel-size 4";
  CHECK(error_of(script("2", pipe)) ==
        "./ds_config.json: zero_optimization.stage: 2: DeepSpeed's pipeline engine runs ZeRO stage 0 or 1 only");
  // Megatron-DeepSpeed runs the pipeline engine at pp 1 too, unless --no-pipeline-parallel.
  CHECK(error_of(script("3", "")).find("runs ZeRO stage 0 or 1 only") != std::string::npos);
  CHECK(error_of(script("0", pipe + " --no-pipeline-parallel")) ==
        "ds.sh: line 14: --no-pipeline-parallel: with --pipeline-model-parallel-size > 1");
  CHECK(error_of(script("0", pipe, "", "  \"train_micro_batch_size_per_gpu\": 4,\n")) ==
        "./ds_config.json: train_micro_batch_size_per_gpu: 4 disagrees with the command's --micro-batch-size 2");
  CHECK(error_of(script("0", pipe, "", "  \"gradient_accumulation_steps\": 3,\n")) ==
        "./ds_config.json: gradient_accumulation_steps: 3 x micro-batch 2 x data-parallel size 4 is not the global "
        "batch 64");
  CHECK(error_of(script("0", pipe, "", "  \"train_batch_size\": \"auto\",\n")).find("\"auto\" is filled in") !=
        std::string::npos);
  CHECK(error_of(script("0", pipe, "", "  \"fp16\": {\"enabled\": true},\n")) ==
        "./ds_config.json: fp16: fp16 and bf16 are both enabled");
  CHECK(error_of(script("0", pipe, "--pp-partition-method type:attention")) ==
        "ds.sh: line 14: --pp-partition-method: \"type:attention\" matches none of the model's layers");
  CHECK(error_of(script("0", pipe, "--fp8-hybrid")) ==
        "ds.sh: line 14: --fp8-hybrid: Megatron-DeepSpeed's Transformer Engine FP8 is not modelled (trainsim's "
        "megatron-deepspeed runs bf16 or fp16)");
  // The configuration neither written by the script nor on disk.
  CHECK(error_of("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 --hidden-size 64 "
                 "--num-attention-heads 4 --seq-length 128 --vocab-size 100 --bf16 --deepspeed "
                 "--deepspeed_config missing.json\n") ==
        "ds.sh: line 1: --deepspeed-config: missing.json does not exist (nor does the script write "
        "it): give it with --deepspeed-config FILE");
}

TEST_CASE("training.framework megatron-deepspeed: DeepSpeed's engine's rules, one error line each") {
  auto doc = trainsim::util::read_json_file(std::string(TRAINSIM_SOURCE_DIR) + "/configs/bloom-176b-jean-zay-384.json");
  auto error = [](const nlohmann::json& d) -> std::string {
    try {
      trainsim::config::parse_scenario(trainsim::util::JsonNode(d, "bloom.json"), trainsim::config::default_data_dir());
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(error(doc) == "no error");
  auto with = [&](const char* section, const char* key, const nlohmann::json& v) {
    auto d = doc;
    d[section][key] = v;
    return error(d);
  };
  auto zero2 = doc;
  zero2["parallel"]["zero"] = 2;
  zero2["parallel"].erase("zero1_grad_reduce");
  CHECK(error(zero2) ==
        "bloom.json: parallel.zero: megatron-deepspeed: 2: DeepSpeed's pipeline engine runs ZeRO stage 0 or 1 only");
  CHECK(with("parallel", "overlap_grad_reduce", true) ==
        "bloom.json: parallel.overlap_grad_reduce: megatron-deepspeed: DeepSpeed's pipeline engine reduces the "
        "gradients after the last micro-batch: needs false");
  auto fp8 = doc;
  fp8["cluster"] = "dgx-h100";
  fp8["training"]["precision"] = "fp8";
  CHECK(error(fp8) ==
        "bloom.json: training.precision: megatron-deepspeed: runs bf16 or fp16 (its Transformer Engine FP8 path "
        "refuses the pipeline model)");
  CHECK(with("training", "cross_entropy", "fused").find("has no fused cross-entropy") != std::string::npos);
  CHECK(with("training", "gradient_accumulation_fusion", false) ==
        "bloom.json: training.gradient_accumulation_fusion: megatron-deepspeed: DeepSpeed's engine accumulates the "
        "gradients (Megatron's DDP hook and its main_grad are not there)");
  auto zero0 = doc;
  zero0["parallel"]["zero"] = 0;
  zero0["parallel"].erase("zero1_grad_reduce");
  CHECK(error(zero0).find("runs DeepSpeed's BF16_Optimizer: zero 1 with zero1_grad_reduce \"all_reduce\"") !=
        std::string::npos);
  auto ulysses = doc;
  ulysses["parallel"]["cp"] = 2;
  ulysses["parallel"]["cp_comm_type"] = "a2a";
  ulysses["training"]["attention"] = "flash2";
  CHECK(error(ulysses) ==
        "bloom.json: parallel.cp: megatron-deepspeed: DeepSpeed-Ulysses runs with tp 1 and pp 1 "
        "(Megatron-DeepSpeed's assertion)");
  auto moe = doc;
  moe["model"] = "mixtral-8x7b";
  moe["parallel"].erase("pipeline_layout");
  moe["parallel"]["pp"] = 4;  // Mixtral's 32 layers
  moe["parallel"]["sequence_parallel"] = true;
  moe["gpus"] = 256;
  INFO(error(moe));
  CHECK(error(moe).find("DeepSpeed-MoE's experts are not modelled") != std::string::npos);
}
