// A torchtitan job's TOML (either layout of its keys) and its command-line overrides read into a
// scenario of the torchtitan framework: each key lands on the scenario key of the same meaning,
// torchtitan's defaults fill what the file leaves out, its pipeline split rules become a
// pipeline_layout, and what cannot be represented is an error naming the file, the line and the key.

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config/scenario.h"
#include "config/torchtitan_config.h"
#include "util/error.h"
#include "util/json_node.h"

using trainsim::config::import_torchtitan;
using trainsim::config::ImportedScenario;
using trainsim::config::ImportOptions;
using trainsim::util::InputError;

namespace {

ImportedScenario import(const std::string& toml, std::int64_t gpus = 0, const std::vector<std::string>& overrides = {},
                        const std::string& model = "") {
  ImportOptions o;
  o.source = "job.toml";
  o.cluster = "dgx-h100";
  o.gpus = gpus;
  o.model = model;
  return import_torchtitan(toml, overrides, o);
}

std::string error_of(const std::string& toml, std::int64_t gpus = 0, const std::vector<std::string>& overrides = {}) {
  try {
    import(toml, gpus, overrides);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

bool starts_with_any(const std::vector<std::string>& v, const std::string& prefix) {
  return std::any_of(v.begin(), v.end(), [&prefix](const std::string& s) { return s.starts_with(prefix); });
}

// The scenario as `run` reads it: the import must make a valid one.
trainsim::config::Scenario parse(const ImportedScenario& m) {
  const auto doc = nlohmann::json::parse(m.scenario.dump());
  return trainsim::config::parse_scenario(trainsim::util::JsonNode(doc, "imported.json"),
                                          trainsim::config::default_data_dir());
}

// A 2025 configuration ([parallelism], [compile], local_batch_size) of Llama 3 8B on one node.
const char* kLlama8b = R"(# Llama 3 8B, FSDP over 8 GPUs
[job]
dump_folder = "./outputs"
description = "Llama 3 8B training"

[model]
name = "llama3"
flavor = "8B"
hf_assets_path = "./assets/hf/Llama-3.1-8B"
converters = []

[optimizer]
name = "AdamW"
lr = 3e-4
implementation = "fused"

[training]
local_batch_size = 2
seq_len = 8192
max_norm = 1.0
steps = 1000
dataset = "c4"

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
tensor_parallel_degree = 1

[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"

[compile]
enable = true
components = ["model", "loss"]

[checkpoint]
enable = false
)";

// A December 2024 configuration (degrees and compile under [training], pipeline parallelism under
// [experimental], [float8] enable_float8_linear): Llama 3.1 405B in 3D with Float8.
const char* kLlama405b2024 = R"([job]
dump_folder = "./outputs"

[model]
name = "llama3"
flavor = "405B"
norm_type = "rmsnorm"
tokenizer_path = "./torchtitan/datasets/tokenizer/original/tokenizer.model"

[optimizer]
name = "AdamW"
lr = 8e-5

[training]
batch_size = 32
seq_len = 8192
warmup_steps = 600
steps = 3000
data_parallel_shard_degree = -1
tensor_parallel_degree = 8
compile = true

[experimental]
pipeline_parallel_degree = 8
pipeline_parallel_schedule = "Interleaved1F1B"
enable_async_tensor_parallel = true

[activation_checkpoint]
mode = 'full'

[float8]
enable_float8_linear = true
enable_fsdp_float8_all_gather = true
precompute_float8_dynamic_scale_for_fsdp = true
)";

std::string with(std::string toml, const std::string& from, const std::string& to) {
  const auto at = toml.find(from);
  REQUIRE(at != std::string::npos);
  return toml.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("torchtitan import: a 2025 FSDP configuration of Llama 3 8B") {
  const ImportedScenario m = import(kLlama8b, 8);
  const auto& s = m.scenario;
  CHECK(s["model"] == "llama3.1-8b");
  CHECK(s["cluster"] == "dgx-h100");
  CHECK(s["gpus"] == 8);
  CHECK(s["parallel"] == nlohmann::ordered_json({{"tp", 1}, {"pp", 1}, {"cp", 1}, {"zero", 3}}));
  const auto& t = s["training"];
  CHECK(t["framework"] == "torchtitan");
  CHECK(t["micro_batch"] == 2);
  CHECK(t["global_batch"] == 16);  // local batch 2 x 8 FSDP ranks
  CHECK(t["seq_len"] == 8192);
  CHECK(t["train_tokens"] == 1000 * 16 * 8192);  // steps x global batch x seq_len
  CHECK(t["precision"] == "bf16");
  CHECK(t["recompute"] == "selective");
  CHECK(t["torch_compile"] == true);
  CHECK(t["torch_compile_loss"] == true);  // compile.components names the loss
  CHECK(t["attention"] == "flash2");
  CHECK_FALSE(t.contains("grad_reduce_in_fp32"));  // mixed_precision_reduce float32 by default
  CHECK(contains(m.no_effect, "optimizer.lr"));
  CHECK(contains(m.no_effect, "checkpoint.enable"));
  CHECK(contains(m.no_effect, "model.hf_assets_path"));
  CHECK(m.unknown.empty());
  CHECK(m.not_modelled.empty());
  CHECK(m.origin.at("parallel.tp") == "line 27: parallelism.tensor_parallel_degree");
  const auto scenario = parse(m);
  CHECK(scenario.parallel.zero == 3);
  CHECK(scenario.training.torch_compile);
}

TEST_CASE("torchtitan import: a December 2024 3D configuration gives torchtitan's split and micro-batches") {
  const ImportedScenario m = import(kLlama405b2024, 512);
  const auto& p = m.scenario["parallel"];
  CHECK(p["tp"] == 8);
  CHECK(p["pp"] == 8);
  CHECK(p["sequence_parallel"] == true);
  CHECK(p["tp_comm_overlap"] == true);
  CHECK(p["schedule"] == "interleaved");
  CHECK(p["virtual_stages"] == 2);
  // generate_split_points (2024-12) over 8 ranks x 2 stages: 126 / 16 = 7 rest 14; the first and
  // last stages get 7, the 14 middle ones 7 + 1 while the rest lasts: 7 + 14 x 8 + 7 = 126.
  std::string expected = "Et*7";
  for (int i = 0; i < 14; ++i) expected += "|t*8";
  CHECK(p["pipeline_layout"] == expected + "|t*7L");
  const auto& t = m.scenario["training"];
  // pipeline_parallel_microbatches defaults to the pipeline degree: 8 micro-batches of 32 / 8.
  CHECK(t["micro_batch"] == 4);
  CHECK(t["global_batch"] == 256);  // local batch 32 x 512 / (8 x 8) FSDP ranks
  CHECK(t["precision"] == "fp8");
  CHECK(t["recompute"] == "full");
  CHECK(t["torch_compile"] == true);
  CHECK_FALSE(t.contains("torch_compile_loss"));  // December 2024's train.py left the loss eager
  CHECK(m.not_modelled.empty());                  // the Float8 flags are the ones trainsim models
  CHECK(contains(m.no_effect, "training.warmup_steps"));
  CHECK(contains(m.no_effect, "model.tokenizer_path"));
  CHECK(starts_with_any(m.notes, "optimizer: December 2024 torchtitan steps the foreach AdamW"));
  const auto scenario = parse(m);
  CHECK(scenario.parallel.layout_layers.size() == 16);

  // The scenario of torchtitan's published 3D run (validation/sources/torchtitan.json, written by
  // tools/gen-validation from the performance page), key for key but the token budget.
  std::ifstream in(std::string(TRAINSIM_SOURCE_DIR) +
                   "/validation/records/torchtitan_h100_t5_512gpu_3d_interleaved.json");
  REQUIRE(in);
  const auto record = nlohmann::json::parse(in)["scenario"];
  auto imported = nlohmann::json::parse(m.scenario.dump());
  imported["training"].erase("train_tokens");
  CHECK(imported["parallel"] == record["parallel"]);
  CHECK(imported["training"] == record["training"]);
  CHECK(imported["model"] == record["model"]);
}

TEST_CASE("torchtitan import: the 2025 pipeline split weighs the embedding and the output as layers") {
  const std::string pp = with(kLlama8b, "tensor_parallel_degree = 1", "pipeline_parallel_degree = 4");
  const ImportedScenario m = import(pp, 32);
  // generate_llm_fqn_per_model_part: 32 layers + 1 + 1 = 34 over 4 stages = 8 rest 2, so stages 0 and
  // 1 take 9: stage 0 holds 9 - 1 layers beside the embedding, stage 1 9, stage 2 8, stage 3 8 - 1.
  CHECK(m.scenario["parallel"]["pipeline_layout"] == "Et*8|t*9|t*8|t*7L");
  CHECK(m.scenario["parallel"]["schedule"] == "1f1b");
  // pipeline_parallel_microbatch_size defaults to 1: 2 micro-batches of 1 per local batch of 2.
  CHECK(m.scenario["training"]["micro_batch"] == 1);
  CHECK(m.scenario["training"]["global_batch"] == 16);  // 2 x 8 FSDP ranks (32 GPUs / pp 4)
  parse(m);

  // Interleaved with pipeline_parallel_layers_per_stage 6: ceil(34 / 6) = 6 virtual stages, 3 per
  // rank of pp 2; 34 = 6 x 5 + 4, so the first four stages take 6 effective layers: 6 - 1, 6, 6, 6,
  // then 5 and 5 - 1 (32 layers).
  const std::string il = with(kLlama8b, "tensor_parallel_degree = 1",
                              "pipeline_parallel_degree = 2\npipeline_parallel_schedule = \"Interleaved1F1B\"\n"
                              "pipeline_parallel_layers_per_stage = 6\npipeline_parallel_microbatch_size = 1");
  const ImportedScenario v = import(with(il, "local_batch_size = 2", "local_batch_size = 4"), 16);
  CHECK(v.scenario["parallel"]["pipeline_layout"] == "Et*5|t*6|t*6|t*6|t*5|t*4L");
  CHECK(v.scenario["parallel"]["virtual_stages"] == 3);
  CHECK(v.scenario["training"]["micro_batch"] == 1);
  parse(v);
  // ceil(34 / 5) = 7 stages do not share out over 2 ranks.
  CHECK(error_of(with(il, "layers_per_stage = 6", "layers_per_stage = 5"), 16) ==
        "job.toml: line 29: parallelism.pipeline_parallel_layers_per_stage: makes 7 virtual stages, not a multiple "
        "of the pipeline degree 2");

  // Explicit split points and module lists.
  const std::string split =
      with(pp, "pipeline_parallel_degree = 4",
           "pipeline_parallel_degree = 4\npipeline_parallel_split_points = [\"layers.10\", \"layers.20\", "
           "\"layers.26\"]");
  CHECK(import(split, 32).scenario["parallel"]["pipeline_layout"] == "Et*10|t*10|t*6|t*6L");
  const ImportedScenario cli =
      import(pp, 32, {"--parallelism.pipeline_parallel_split_points", "layers.16,layers.17,layers.18"});
  CHECK(cli.scenario["parallel"]["pipeline_layout"] == "Et*16|t*1|t*1|t*14L");
  // module_fqns_per_model_part: 4 stages of 8, 9, 9 and 6 layers over pp 2, interleaved.
  std::string parts = "[[\"tok_embeddings\"";
  for (int layer = 0, stage = 0, end = 8; layer < 32; ++layer) {
    if (layer == end) {
      parts += "], [";
      end += ++stage == 3 ? 6 : 9;
    } else if (layer > 0 || stage > 0) {
      parts += ", ";
    }
    parts += fmt::format("{}\"layers.{}\"", layer == 0 ? ", " : "", layer);
  }
  parts += ", \"norm\", \"output\"]]";
  const std::string fqns = with(kLlama8b, "tensor_parallel_degree = 1",
                                "pipeline_parallel_degree = 2\npipeline_parallel_schedule = \"interleaved1f1b\"\n"
                                "module_fqns_per_model_part = " +
                                    parts);
  const ImportedScenario f = import(fqns, 16);
  CHECK(f.scenario["parallel"]["pipeline_layout"] == "Et*8|t*9|t*9|t*6L");
  CHECK(f.scenario["parallel"]["virtual_stages"] == 2);
  parse(f);
  // Modules out of order are refused, naming the key.
  CHECK(error_of(with(fqns, "\"layers.9\", \"layers.10\"", "\"layers.10\", \"layers.9\""), 16) ==
        "job.toml: line 29: parallelism.module_fqns_per_model_part: \"layers.10\" in stage 1: the stages must hold "
        "layers.0 to layers.31 in order");
}

TEST_CASE("torchtitan import: command-line overrides, switches and their negations") {
  const ImportedScenario m =
      import(kLlama8b, 16,
             {"--parallelism.tensor_parallel_degree", "2", "--parallelism.enable-async-tensor-parallel",
              "--activation_checkpoint.mode=full", "--training.seq_len", "4096", "--training.steps", "10"});
  CHECK(m.scenario["parallel"]["tp"] == 2);
  CHECK(m.scenario["parallel"]["sequence_parallel"] == true);
  CHECK(m.scenario["parallel"]["tp_comm_overlap"] == true);
  CHECK(m.scenario["training"]["recompute"] == "full");
  CHECK(m.scenario["training"]["seq_len"] == 4096);
  CHECK(m.scenario["training"]["global_batch"] == 16);  // 2 x 8 FSDP ranks (16 GPUs / tp 2)
  CHECK(m.origin.at("parallel.tp") == "argument --parallelism.tensor_parallel_degree");
  parse(m);

  // A negated switch beats the file, whichever layout spells the key.
  CHECK_FALSE(import(kLlama8b, 8, {"--compile.no-enable"}).scenario["training"].contains("torch_compile"));
  CHECK_FALSE(import(kLlama8b, 8, {"--compile.no-enable"}).scenario["training"].contains("torch_compile_loss"));
  const auto blocks_only = import(kLlama8b, 8, {"--compile.components", "model"}).scenario["training"];
  CHECK(blocks_only["torch_compile"] == true);
  CHECK_FALSE(blocks_only.contains("torch_compile_loss"));
  CHECK_FALSE(import(kLlama8b, 8, {"--training.no_compile"}).scenario["training"].contains("torch_compile"));
  CHECK(import(kLlama8b, 0, {"--parallelism.data_parallel_shard_degree", "4"}).scenario["gpus"] == 4);

  CHECK(error_of(kLlama8b, 8, {"training.seq_len", "4096"}) ==
        "arguments: training.seq_len: is not a torchtitan option (--section.key VALUE); trainsim's own options go "
        "before --");
  CHECK(error_of(kLlama8b, 8, {"--training.compile", "-o", "out.json"}) ==
        "arguments: -o: is not a torchtitan option (--section.key VALUE); trainsim's own options go before --");
  CHECK(import(kLlama8b, 8, {"--parallelism.data_parallel_shard_degree", "-1"}).scenario["gpus"] == 8);
  CHECK(error_of(kLlama8b, 8, {"--seq_len", "4096"}) ==
        "arguments: --seq_len: is not a torchtitan option: its names are section.key (--training.steps 50)");
  CHECK(error_of(kLlama8b, 8, {"--training.seq_len", "8k"}) ==
        "job.toml: argument --training.seq_len: expects an integer, got \"8k\"");
}

TEST_CASE("torchtitan import: activation checkpointing every n-th block, context parallelism, Float8") {
  // selective_ac_option 2 (torchtitan's default): blocks 2, 4, ..., 32 checkpointed whole, 16 of 32.
  const ImportedScenario every2 =
      import(with(kLlama8b, "selective_ac_option = \"op\"", "selective_ac_option = \"2\""), 8);
  CHECK(every2.scenario["training"]["recompute"] == "full");
  CHECK(every2.scenario["training"]["recompute_layers"] == 16);
  const ImportedScenario every1 =
      import(with(kLlama8b, "selective_ac_option = \"op\"", "selective_ac_option = \"1\""), 8);
  CHECK(every1.scenario["training"]["recompute"] == "full");
  CHECK_FALSE(every1.scenario["training"].contains("recompute_layers"));
  const ImportedScenario defaults = import(with(kLlama8b, "mode = \"selective\"\nselective_ac_option = \"op\"", ""), 8);
  CHECK(defaults.scenario["training"]["recompute_layers"] == 16);
  parse(every2);

  const ImportedScenario cp = import(kLlama8b, 8, {"--parallelism.context_parallel_degree", "4"});
  CHECK(cp.scenario["parallel"]["cp"] == 4);
  CHECK(cp.scenario["parallel"]["cp_comm_type"] == "allgather");
  CHECK(cp.scenario["training"]["global_batch"] == 4);  // 2 x 2 FSDP ranks: CP ranks share a batch
  const ImportedScenario ring = import(
      kLlama8b, 8,
      {"--parallelism.context_parallel_degree", "4", "--parallelism.context_parallel_rotate_method", "alltoall"});
  CHECK(ring.scenario["parallel"]["cp_comm_type"] == "p2p");
  parse(ring);

  // The 2025 float8 converter, with torchtitan's own defaults for its FSDP flags (off): trainsim
  // gathers in fp8 and precomputes the scales, so both are listed as not modelled.
  const ImportedScenario f8 = import(with(kLlama8b, "converters = []", "converters = [\"float8\"]"), 8);
  CHECK(f8.scenario["training"]["precision"] == "fp8");
  CHECK(f8.not_modelled.size() == 2);
  CHECK(starts_with_any(f8.not_modelled, "float8.enable_fsdp_float8_all_gather false"));
  parse(f8);
  const ImportedScenario rowwise = import(with(kLlama8b, "converters = []", "converters = \"float8\""), 8,
                                          {"--float8.recipe_name", "rowwise", "--float8.enable_fsdp_float8_all_gather",
                                           "--float8.precompute_float8_dynamic_scale_for_fsdp"});
  CHECK(rowwise.not_modelled == std::vector<std::string>{"float8.recipe_name rowwise (trainsim scales tensorwise)"});

  const ImportedScenario bf16_reduce = import(kLlama8b, 8, {"--training.mixed_precision_reduce", "bfloat16"});
  CHECK(bf16_reduce.scenario["training"]["grad_reduce_in_fp32"] == false);
  const ImportedScenario offload = import(kLlama8b, 8, {"--training.enable_cpu_offload", "--unknown.key", "1"});
  CHECK(contains(offload.not_modelled, "training.enable_cpu_offload (FSDP's CPU offload)"));
  CHECK(offload.unknown == std::vector<std::string>{"unknown.key"});
  CHECK(import(kLlama8b, 8, {}, "llama2-7b").scenario["model"] == "llama2-7b");

  // reshard_after_forward never keeps each block from its forward to its backward: zero 2 per unit.
  const ImportedScenario kept = import(kLlama8b, 8, {"--parallelism.fsdp_reshard_after_forward", "never"});
  CHECK(kept.scenario["parallel"]["zero"] == 2);
  CHECK(kept.scenario["parallel"]["zero2_param_gather"] == "per_unit");
  CHECK(kept.not_modelled.empty());
  parse(kept);
  const ImportedScenario always_pp =
      import(kLlama8b, 16,
             {"--parallelism.fsdp_reshard_after_forward", "always", "--parallelism.pipeline_parallel_degree", "2"});
  CHECK(always_pp.scenario["parallel"]["zero"] == 3);
  CHECK(always_pp.not_modelled.size() == 1);

  // HSDP: 4 replicas of the shard degree left (64 / 4 = 16-way sharding), as distributed optimizer
  // instances over the 64 data-parallel ranks; the batch counts every one of them.
  const ImportedScenario hsdp = import(kLlama8b, 64, {"--parallelism.data_parallel_replicate_degree", "4"});
  CHECK(hsdp.scenario["parallel"]["distributed_optimizer_instances"] == 4);
  CHECK(hsdp.scenario["training"]["global_batch"] == 2 * 64);
  const auto h = parse(hsdp);
  CHECK(h.parallel.dp == 64);
  CHECK(h.parallel.dist_opt_instances == 4);
}

TEST_CASE("torchtitan import: what trainsim cannot represent is one error naming the line and the key") {
  CHECK(error_of(kLlama8b) ==
        "job.toml: line 26: parallelism.data_parallel_shard_degree: -1 takes the ranks left, "
        "and a torchtitan configuration does not say how many GPUs torchrun starts: give --gpus");
  CHECK(error_of(with(kLlama8b, "data_parallel_shard_degree = -1", "data_parallel_shard_degree = 8"), 16) ==
        "job.toml: line 26: parallelism.data_parallel_shard_degree: dp_replicate 1 x dp_shard 8 x tp 1 x pp 1 x cp 1 "
        "= 8 ranks, not the 16 GPUs of --gpus");
  // Replicas without sharding are DDP, which trainsim's torchtitan does not run.
  const std::string ddp =
      with(with(kLlama8b, "data_parallel_replicate_degree = 1", "data_parallel_replicate_degree = 8"),
           "data_parallel_shard_degree = -1", "data_parallel_shard_degree = 1");
  CHECK(error_of(ddp, 8) ==
        "job.toml: line 25: parallelism.data_parallel_replicate_degree: 8 replicas without "
        "sharding (DDP) are not modelled: trainsim's torchtitan shards with FSDP2 (give "
        "data_parallel_shard_degree above 1 for HSDP)");
  CHECK(error_of(with(kLlama8b, "flavor = \"8B\"", "flavor = \"debugmodel\""), 8) ==
        "job.toml: line 8: model.flavor: flavor \"debugmodel\" of llama3 has no trainsim model file (8B, 70B, 405B "
        "have): give --model");
  CHECK(error_of(with(kLlama8b, "name = \"llama3\"", "name = \"deepseek_v3\""), 8) ==
        "job.toml: line 7: model.name: torchtitan's model \"deepseek_v3\" has no trainsim model (llama2 and llama3 "
        "have): give --model");
  CHECK(error_of(with(kLlama8b, "converters = []", "converters = [\"mx\"]"), 8) ==
        "job.toml: line 10: model.converters: converter \"mx\" (MXFP8 linears) is not modelled: trainsim's torchtitan "
        "runs bfloat16 or tensorwise Float8");
  CHECK(error_of(kLlama8b, 8, {"--training.mixed_precision_param", "float32"}) ==
        "job.toml: argument --training.mixed_precision_param: \"float32\" parameters are not modelled: trainsim's "
        "torchtitan computes in bfloat16 (or Float8)");
  CHECK(error_of(kLlama8b, 16,
                 {"--parallelism.pipeline_parallel_degree", "2", "--parallelism.pipeline_parallel_schedule",
                  "ZBVZeroBubble"}) ==
        "job.toml: argument --parallelism.pipeline_parallel_schedule: schedule \"ZBVZeroBubble\" is not modelled "
        "(trainsim runs GPipe, 1F1B and Interleaved1F1B)");
  CHECK(error_of(
            kLlama8b, 16,
            {"--parallelism.pipeline_parallel_degree", "2", "--parallelism.pipeline_parallel_microbatch_size", "3"}) ==
        "job.toml: argument --parallelism.pipeline_parallel_microbatch_size: 3 does not divide the local batch 2");
  CHECK(error_of(kLlama8b, 8, {"--parallelism.expert_parallel_degree", "2"}) ==
        "job.toml: argument --parallelism.expert_parallel_degree: expert parallelism needs a mixture-of-experts model; "
        "trainsim's torchtitan runs Llama models");
  CHECK(error_of(kLlama8b, 8, {"--activation_checkpoint.mode", "memory_budget"}) ==
        "job.toml: argument --activation_checkpoint.mode: mode \"memory_budget\" is not modelled (none, selective, "
        "full)");
  CHECK(error_of(kLlama8b, 8, {"--activation_checkpoint.selective_ac_option", "every"}) ==
        "job.toml: argument --activation_checkpoint.selective_ac_option: \"every\" is neither \"op\" nor a positive "
        "layer interval");
  CHECK(error_of("[training]\nseq_len = = 4\n") ==
        "job.toml: line 2: Error while parsing value: could not determine "
        "value type");
  CHECK(error_of(with(kLlama8b, "tensor_parallel_degree = 1", "tensor_parallel_degree = \"two\""), 8) ==
        "job.toml: line 27: parallelism.tensor_parallel_degree: expects an integer, got \"two\"");
}
