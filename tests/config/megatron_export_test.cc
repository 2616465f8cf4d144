// A scenario written out as the Megatron-LM launch script that runs it: importing the script gives
// the scenario back, on every shipped config and validation record that Megatron-LM can run, and
// what Megatron-LM cannot run is one error naming the key.

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config/megatron_args.h"
#include "config/megatron_export.h"
#include "config/scenario.h"
#include "util/error.h"
#include "util/json_node.h"
#include "util/shell_words.h"

#include "round_trip.h"

using trainsim::config::export_megatron;
using trainsim::config::Scenario;
using trainsim::test::describe;
using trainsim::test::expected_after_round_trip;
using trainsim::test::parse;
using trainsim::util::InputError;

namespace {

// The script of `doc`, imported again.
Scenario round_trip(const nlohmann::json& doc, const Scenario& original, std::string* script = nullptr) {
  const auto exported = export_megatron(doc, original);
  if (script != nullptr) *script = exported.script;
  trainsim::config::ImportOptions o;
  o.source = "exported.sh";
  o.cluster = doc["cluster"].get<std::string>();
  o.vocab = original.model.vocab;  // a Megatron-DeepSpeed script names a tokenizer, not a vocabulary
  std::vector<std::string> notes;
  const auto commands = trainsim::util::split_shell_commands(exported.script, o.source, &notes, {}, &o.written_files);
  const auto imported = trainsim::config::import_megatron(commands, o);
  return parse(nlohmann::json::parse(imported.scenario.dump()), "imported.json");
}

std::string export_error(nlohmann::json doc) {
  try {
    export_megatron(doc, parse(doc, "s.json"));
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("every shipped config and validation record that Megatron-LM runs comes back from its script") {
  const auto docs = trainsim::test::shipped_scenarios();
  int compared = 0, refused = 0;
  for (const auto& [file, doc] : docs) {
    INFO(file);
    if (!doc["cluster"].is_string()) continue;
    // A few records are not valid scenarios as published (validate skips them, with the reason).
    Scenario original;
    try {
      original = parse(doc, file);
    } catch (const InputError&) {
      continue;
    }
    std::string script;
    Scenario back;
    try {
      back = round_trip(doc, original, &script);
    } catch (const InputError& e) {
      // Only what Megatron-LM has no flag for is refused, and the message says which key.
      const std::string what = e.what();
      INFO(what);
      CHECK((what.find("training.framework") != std::string::npos || what.find("training.peft") != std::string::npos ||
             what.find("training.attention") != std::string::npos ||
             what.find("model.compress_ratios") != std::string::npos ||
             // Nemotron 3 Super's NVFP4 recipe: a per-module Transformer Engine recipe file.
             what.find("training.module_precision.mamba_out_proj") != std::string::npos ||
             what.find("parallel.schedule") != std::string::npos ||
             what.find("parallel.zero2_param_gather") != std::string::npos ||
             what.find("parallel.zero1_grad_reduce") != std::string::npos));
      ++refused;
      continue;
    }
    INFO(script);
    CHECK(describe(back) == describe(expected_after_round_trip(original)));
    ++compared;
  }
  // 15 configs and 586 records when this test was written; most are Megatron runs.
  CHECK(compared > 300);
  CHECK(refused < compared);
}

TEST_CASE("the script's flags for Llama 3.1 8B, checked by hand") {
  const nlohmann::json doc = nlohmann::json::parse(R"({
    "model": "llama3.1-8b", "cluster": "dgx-h100", "gpus": 16,
    "parallel": {"tp": 2, "pp": 2, "sequence_parallel": true, "schedule": "interleaved", "virtual_stages": 4,
                 "zero": 1, "overlap_grad_reduce": true, "overlap_param_gather": true, "dp_bucket_mb": 160},
    "training": {"micro_batch": 2, "global_batch": 64, "seq_len": 8192, "precision": "fp8",
                 "recompute": "selective", "recompute_modules": ["core_attn", "mlp"], "cross_entropy": "fused",
                 "grad_reduce_in_fp32": false, "gradient_accumulation_fusion": false}})");
  const std::string script = export_megatron(doc, parse(doc, "s.json")).script;
  const auto has = [&](const std::string& line) {
    INFO(line);
    CHECK(script.find("    " + line) != std::string::npos);
  };
  // 16 GPUs on 8-GPU DGX nodes: two hosts of 8.
  has("--nproc-per-node 8\n");
  has("--nnodes 2\n");
  // Llama 3.1 8B (its Hugging Face config): 32 layers of 4096, 32 heads over 8 KV groups, SwiGLU 14336.
  has("--num-layers 32\n");
  has("--hidden-size 4096\n");
  has("--num-query-groups 8\n");
  has("--ffn-hidden-size 14336\n");
  has("--untie-embeddings-and-output-weights\n");
  // 128256 tokens: NullTokenizer's 128255 and its end-of-document token.
  has("--vocab-size 128255 ");
  has("--num-virtual-stages-per-pipeline-rank 4 ");
  // 160 MB of bf16 gradients (grad_reduce_in_fp32 false) = 80,000,000 parameters.
  has("--ddp-bucket-size 80000000 ");
  has("--grad-reduce-in-bf16\n");
  // Hopper's FP8: per-tensor delayed scaling with E4M3 forward and E5M2 backward.
  has("--fp8-format hybrid\n");
  has("--fp8-recipe delayed\n");
  has("--recompute-modules core_attn mlp\n");
  has("--cross-entropy-loss-fusion\n");
  has("--no-gradient-accumulation-fusion\n");
  CHECK(script.find("pretrain_gpt.py") != std::string::npos);
  CHECK(script.find("--moe") == std::string::npos);
}

TEST_CASE("a GB200 job is launched per compute tray, a hybrid model with pretrain_mamba.py") {
  const nlohmann::json doc = nlohmann::json::parse(R"({
    "model": "nemotron-3-nano", "cluster": "gb200-nvl72", "gpus": 128, "segment_gpus": 64,
    "parallel": {"ep": 8, "moe_token_dispatcher": "flex"}, "training": {"global_batch": 128, "seq_len": 8192}})");
  const std::string script = export_megatron(doc, parse(doc, "s.json")).script;
  // A GB200 compute tray holds 4 GPUs: 128 GPUs are 32 trays, and a 64-GPU segment 16 of them.
  CHECK(script.find("--nproc-per-node 4\n") != std::string::npos);
  CHECK(script.find("--nnodes 32\n") != std::string::npos);
  CHECK(script.find("--segment=16") != std::string::npos);
  CHECK(script.find("pretrain_mamba.py") != std::string::npos);
  CHECK(script.find("--hybrid-override-pattern '") != std::string::npos);
  CHECK(script.find("--moe-token-dispatcher-type flex") != std::string::npos);
}

TEST_CASE("what Megatron-LM cannot run is one error naming the key") {
  const auto base = nlohmann::json::parse(
      R"({"model": "llama3.1-8b", "cluster": "dgx-h100", "gpus": 8, "training": {"global_batch": 8, "seq_len": 4096}})");
  auto gpipe = base;
  gpipe["parallel"] = {{"pp", 2}, {"schedule", "gpipe"}};
  CHECK(export_error(gpipe) ==
        "s.json: parallel.schedule: Megatron-LM has no GPipe schedule (its pipeline runs 1F1B or interleaved 1F1B) "
        "(trainsim export megatron)");
  auto lora = base;
  lora["training"]["peft"] = "lora";
  CHECK(export_error(lora).starts_with("s.json: training.peft: LoRA is Megatron-Bridge's"));
  auto flash1 = base;
  flash1["training"]["attention"] = "flash1";
  CHECK(export_error(flash1).starts_with("s.json: training.attention:"));
  auto gemma = base;
  gemma["model"] = "gemma3-27b";
  CHECK(export_error(gemma).starts_with("s.json: model.post_norms: Megatron-LM has no flag for post-norms"));
  auto capped = base;
  capped["model"] = {{"name", "capped"},   {"layers", 2},    {"hidden", 1024},  {"heads", 8},         {"kv_heads", 8},
                     {"ffn_hidden", 4096}, {"vocab", 32000}, {"mlp", "swiglu"}, {"logit_softcap", 30}};
  CHECK(export_error(capped).starts_with(
      "s.json: model.logit_softcap: Megatron-LM has no flag for soft-capped logits; Megatron-Bridge runs them only "
      "inside its Gemma 2 model provider"));
  CHECK(export_error(base) == "no error");
}

TEST_CASE("BF16 first and last layers come back from the script, with a recipe Megatron allows them under") {
  const nlohmann::json doc = nlohmann::json::parse(R"({
    "model": "llama3.1-8b", "cluster": "dgx-h100", "gpus": 8,
    "training": {"global_batch": 8, "seq_len": 4096, "precision": "fp8", "bf16_layers_at_start": 1,
                 "bf16_layers_at_end": 2}})");
  const Scenario original = parse(doc, "s.json");
  std::string script;
  const Scenario back = round_trip(doc, original, &script);
  CHECK(describe(back) == describe(expected_after_round_trip(original)));
  CHECK(back.training.bf16_layers_at_end == 2);
  // Megatron-Core refuses BF16 layers under delayed scaling: Hopper's FP8 is then per-tensor current scaling.
  CHECK(script.find("--fp8-recipe tensorwise") != std::string::npos);
}

TEST_CASE("modules kept in BF16 come back from the script; those only a per-module recipe holds are refused") {
  // Nemotron 3 Super under NVFP4 with its multi-token prediction and attention layers in BF16
  // (--keep-mtp-spec-in-bf16, --keep-mamba-stack-attention-linear-in-bf16).
  const nlohmann::json doc = nlohmann::json::parse(R"({
    "model": "nemotron-3-super", "cluster": "gb200-nvl72", "gpus": 64,
    "parallel": {"tp": 2, "sequence_parallel": true, "ep": 32, "etp": 1, "moe_token_dispatcher": "flex"},
    "training": {"global_batch": 64, "seq_len": 8192, "precision": "nvfp4", "bf16_layers_at_end": 14,
                 "module_precision": {"mtp": "bf16", "attention_linears": "bf16"}}})");
  const Scenario original = parse(doc, "s.json");
  std::string script;
  const Scenario back = round_trip(doc, original, &script);
  CHECK(describe(back) == describe(expected_after_round_trip(original)));
  CHECK(back.training.bf16_mtp);
  CHECK(back.training.bf16_modules == trainsim::workload::kQuantAttentionLinears);
  CHECK(script.find("--keep-mtp-spec-in-bf16") != std::string::npos);
  CHECK(script.find("--keep-mamba-stack-attention-linear-in-bf16") != std::string::npos);
  auto out_proj = doc;
  out_proj["training"]["module_precision"]["mamba_out_proj"] = "fp8";
  CHECK(export_error(out_proj) ==
        "s.json: training.module_precision.mamba_out_proj: Megatron-LM takes this module's precision from a "
        "per-module Transformer Engine recipe (Megatron-Core's quant_recipe), which trainsim does not write (trainsim "
        "export megatron)");
  auto dense = nlohmann::json::parse(R"({
    "model": "llama3.1-8b", "cluster": "dgx-b200", "gpus": 8,
    "training": {"global_batch": 8, "seq_len": 4096, "precision": "fp8",
                 "module_precision": {"attention_linears": "bf16"}}})");
  CHECK(export_error(dense).starts_with(
      "s.json: training.module_precision.attention_linears: Megatron-LM keeps attention linears in BF16 in hybrid "
      "(Mamba) models only"));
}

TEST_CASE("a stated FP8 recipe comes back from the script, with the format it needs") {
  const nlohmann::json doc = nlohmann::json::parse(R"({
    "model": "llama3.1-8b", "cluster": "dgx-h100", "gpus": 8,
    "training": {"global_batch": 8, "seq_len": 4096, "precision": "fp8", "fp8_recipe": "blockwise"}})");
  const Scenario original = parse(doc, "s.json");
  std::string script;
  const Scenario back = round_trip(doc, original, &script);
  CHECK(describe(back) == describe(expected_after_round_trip(original)));
  CHECK(back.training.fp8_recipe == trainsim::config::Fp8Recipe::blockwise);
  // Block scaling casts every tensor to E4M3 (as MXFP8); the per-tensor recipes keep E5M2 gradients.
  CHECK(script.find("--fp8-format e4m3") != std::string::npos);
  CHECK(script.find("--fp8-recipe blockwise") != std::string::npos);
}

TEST_CASE("FP8 parameters come back from the script, MXFP8's with the gradient buffer they are gathered into") {
  for (const char* cluster : {"dgx-h100", "dgx-b200"}) {
    INFO(cluster);
    nlohmann::json doc = nlohmann::json::parse(R"({
      "model": "llama3.1-8b", "gpus": 16, "parallel": {"zero": 1},
      "training": {"global_batch": 16, "seq_len": 4096, "precision": "fp8", "fp8_param_gather": true}})");
    doc["cluster"] = cluster;
    const Scenario original = parse(doc, "s.json");
    std::string script;
    const Scenario back = round_trip(doc, original, &script);
    CHECK(describe(back) == describe(expected_after_round_trip(original)));
    CHECK(back.training.fp8_param_gather);
    CHECK(script.find("--fp8-param-gather") != std::string::npos);
    CHECK((script.find("--reuse-grad-buf-for-mxfp8-param-ag") != std::string::npos) ==
          (std::string(cluster) == "dgx-b200"));
  }
}

TEST_CASE("the output layer's deferred weight gradients come back from the script") {
  const nlohmann::json doc = nlohmann::json::parse(R"({
    "model": "llama3.1-70b", "cluster": "dgx-h100", "gpus": 64,
    "parallel": {"tp": 4, "pp": 4, "sequence_parallel": true, "zero": 1, "defer_embedding_wgrad_compute": true,
                 "wgrad_deferral_limit": 22},
    "training": {"global_batch": 64, "seq_len": 4096}})");
  const Scenario original = parse(doc, "s.json");
  std::string script;
  const Scenario back = round_trip(doc, original, &script);
  CHECK(describe(back) == describe(expected_after_round_trip(original)));
  CHECK(back.parallel.defer_embedding_wgrad);
  CHECK(back.parallel.wgrad_deferral_limit == 22);
  CHECK(script.find("--wgrad-deferral-limit 22") != std::string::npos);
}

TEST_CASE("parameter gathers on demand come back from the script") {
  const nlohmann::json doc = nlohmann::json::parse(R"({
    "model": "llama3.1-70b", "cluster": "dgx-h100", "gpus": 64,
    "parallel": {"tp": 4, "pp": 4, "schedule": "interleaved", "virtual_stages": 5, "sequence_parallel": true,
                 "zero": 1, "overlap_grad_reduce": true, "overlap_param_gather": true, "align_param_gather": false},
    "training": {"global_batch": 64, "seq_len": 4096}})");
  const Scenario original = parse(doc, "s.json");
  std::string script;
  const Scenario back = round_trip(doc, original, &script);
  CHECK(describe(back) == describe(expected_after_round_trip(original)));
  CHECK(back.parallel.align_param_gather == false);
  CHECK(script.find("--no-align-param-gather") != std::string::npos);
}

TEST_CASE("distributed optimizer instances come back from the script") {
  const nlohmann::json doc = nlohmann::json::parse(R"({
    "model": "llama3.1-8b", "cluster": "dgx-h100", "gpus": 32,
    "parallel": {"zero": 1, "distributed_optimizer_instances": 4},
    "training": {"global_batch": 32, "seq_len": 4096}})");
  const Scenario original = parse(doc, "s.json");
  std::string script;
  const Scenario back = round_trip(doc, original, &script);
  CHECK(describe(back) == describe(expected_after_round_trip(original)));
  CHECK(script.find("--num-distributed-optimizer-instances 4\n") != std::string::npos);
}

TEST_CASE("context parallelism's communication type comes back from the script") {
  for (const char* type : {"p2p", "a2a", "allgather"}) {
    INFO(type);
    nlohmann::json doc = nlohmann::json::parse(R"({
      "model": "llama3.1-8b", "cluster": "dgx-h100", "gpus": 8,
      "parallel": {"cp": 4}, "training": {"global_batch": 2, "seq_len": 32768}})");
    doc["parallel"]["cp_comm_type"] = type;
    const Scenario original = parse(doc, "s.json");
    std::string script;
    const Scenario back = round_trip(doc, original, &script);
    CHECK(describe(back) == describe(expected_after_round_trip(original)));
    CHECK(script.find(std::string("--cp-comm-type ") + type + "\n") != std::string::npos);
  }
}

TEST_CASE("the shared expert overlap comes back from the script") {
  nlohmann::json doc = nlohmann::json::parse(R"({
    "model": "deepseek-v3", "cluster": "gb200-nvl72", "gpus": 256, "segment_gpus": 64,
    "parallel": {"pp": 4, "ep": 64, "schedule": "interleaved", "virtual_stages": 4,
                 "pipeline_layout": "Et*4|(t*4|)*14tmL", "zero": 1, "moe_shared_expert_overlap": true},
    "training": {"global_batch": 256, "seq_len": 4096, "precision": "fp8"}})");
  const Scenario original = parse(doc, "s.json");
  std::string script;
  const Scenario back = round_trip(doc, original, &script);
  CHECK(describe(back) == describe(expected_after_round_trip(original)));
  CHECK(script.find("--moe-shared-expert-overlap\n") != std::string::npos);
}

TEST_CASE("experts one module at a time (SequentialMLP) come back from a script without --moe-grouped-gemm") {
  nlohmann::json doc = nlohmann::json::parse(R"({
    "model": "mixtral-8x7b", "cluster": "dgx-h100", "gpus": 64,
    "parallel": {"pp": 4, "ep": 8, "zero": 1},
    "training": {"global_batch": 256, "seq_len": 4096, "moe_grouped_gemm": false}})");
  const Scenario original = parse(doc, "s.json");
  REQUIRE_FALSE(original.training.moe_grouped_gemm);
  std::string script;
  const Scenario back = round_trip(doc, original, &script);
  CHECK(describe(back) == describe(expected_after_round_trip(original)));
  CHECK(script.find("--moe-grouped-gemm") == std::string::npos);
  doc["training"].erase("moe_grouped_gemm");
  round_trip(doc, parse(doc, "s.json"), &script);
  CHECK(script.find("--moe-grouped-gemm\n") != std::string::npos);
}

TEST_CASE("experts on every other layer and the allgather dispatcher come back from the script") {
  nlohmann::json doc = nlohmann::json::parse(R"({
    "model": {"name": "m", "layers": 8, "hidden": 2048, "heads": 16, "kv_heads": 4, "vocab": 32000,
              "mlp": "swiglu", "experts": 8, "experts_per_token": 2, "moe_ffn_hidden": 1408, "ffn_hidden": 8192,
              "moe_layer_freq": [0, 1, 0, 1, 0, 1, 0, 1]},
    "cluster": "dgx-h100", "gpus": 8,
    "parallel": {"ep": 8, "zero": 1, "moe_token_dispatcher": "allgather"},
    "training": {"global_batch": 64, "seq_len": 4096}})");
  const Scenario original = parse(doc, "s.json");
  REQUIRE(original.model.moe_layer_pattern == "01010101");
  std::string script;
  const Scenario back = round_trip(doc, original, &script);
  CHECK(describe(back) == describe(expected_after_round_trip(original)));
  CHECK(script.find("--moe-layer-freq '[0,1,0,1,0,1,0,1]'") != std::string::npos);
  CHECK(script.find("--moe-token-dispatcher-type allgather") != std::string::npos);
}

TEST_CASE("a Megatron-DeepSpeed scenario exports as the fork's script with DeepSpeed's configuration") {
  nlohmann::json doc = nlohmann::json::parse(R"({
    "model": "llama3.1-8b", "cluster": "dgx-h100", "gpus": 16,
    "parallel": {"tp": 2, "zero": 2, "overlap_grad_reduce": true, "dp_bucket_mb": 400},
    "training": {"framework": "megatron-deepspeed", "micro_batch": 1, "global_batch": 64, "seq_len": 8192,
                 "recompute": "full", "attention": "flash2", "grad_reduce_in_fp32": false}})");
  Scenario s = parse(doc, "ds.json");
  std::string script;
  CHECK(describe(round_trip(doc, s, &script)) == describe(expected_after_round_trip(s)));
  INFO(script);
  // pp 1 with ZeRO-2: DeepSpeed's engine, not its pipeline engine; the 400 MB bucket of bf16
  // gradients is 2e8 elements; Llama's architecture in the fork's spelling.
  for (const char* line :
       {"    --no-pipeline-parallel", "    --num-key-value-heads 8", "    --normalization rmsnorm",
        "    --use-flash-attn-v2", "    --checkpoint-activations",
        R"("zero_optimization": {"stage": 2, "overlap_comm": true, "reduce_bucket_size": 200000000},)",
        R"("communication_data_type": "bf16")", "    --zero-stage 2", "cat <<EOT > \"$DS_CONFIG\""})
    CHECK(script.find(line) != std::string::npos);
  // The whole gradients all-reduced without the pipeline engine: ZeRO-1 with reduce_scatter off.
  doc["parallel"] = nlohmann::json::parse(R"({"tp": 2, "zero": 1, "zero1_grad_reduce": "all_reduce"})");
  s = parse(doc, "ds.json");
  CHECK(describe(round_trip(doc, s, &script)) == describe(expected_after_round_trip(s)));
  CHECK(script.find(R"("zero_optimization": {"stage": 1, "reduce_scatter": false},)") != std::string::npos);
  // With the pipeline: the split must be one DeepSpeed's PipelineModule makes.
  doc["gpus"] = 32;
  doc["parallel"] = nlohmann::json::parse(
      R"({"tp": 2, "pp": 2, "zero": 1, "zero1_grad_reduce": "all_reduce", "pipeline_layout": "Et*15|t*17L"})");
  CHECK(export_error(doc) ==
        "s.json: parallel.pipeline_layout: Et*15|t*17L is not a split DeepSpeed's PipelineModule makes "
        "(type:transformer gives Et*16|t*16L) (trainsim export megatron)");
  doc["parallel"].erase("pipeline_layout");  // DeepSpeed's even split, trainsim's default
  s = parse(doc, "ds.json");
  CHECK(describe(round_trip(doc, s, &script)) == describe(expected_after_round_trip(s)));
  CHECK(script.find(R"("zero_optimization": {"stage": 0},)") != std::string::npos);
  CHECK(script.find("--pp-partition-method") == std::string::npos);
  // DeepSpeed's engine partitions the pipeline messages over the TP ranks by default (the scenario's
  // default too): the configuration says nothing; whole messages are its pipe/grad_partitioned false.
  CHECK(s.parallel.scatter_gather_tensors_in_pipeline);
  CHECK(script.find(R"("pipeline")") == std::string::npos);
  doc["parallel"]["scatter_gather_tensors_in_pipeline"] = false;
  s = parse(doc, "ds.json");
  CHECK(describe(round_trip(doc, s, &script)) == describe(expected_after_round_trip(s)));
  CHECK(script.find(R"("pipeline": {"pipe_partitioned": false, "grad_partitioned": false},)") != std::string::npos);
}
