// A scenario written out as the Megatron-Bridge configuration that runs it: importing the YAML gives
// the scenario back, on every shipped config and validation record that Megatron-Core can run; the
// keys come out as the hand-checked ConfigContainer fields; what Megatron-Bridge cannot run is one
// error naming the key.

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config/bridge_config.h"
#include "config/bridge_export.h"
#include "config/megatron_args.h"
#include "config/scenario.h"
#include "util/error.h"
#include "util/json_node.h"

#include "round_trip.h"

using trainsim::config::export_bridge;
using trainsim::config::Scenario;
using trainsim::test::describe;
using trainsim::test::expected_after_round_trip;
using trainsim::test::parse;
using trainsim::util::InputError;

namespace {

// The YAML of `doc`, imported again as `trainsim import bridge` does.
Scenario round_trip(const nlohmann::json& doc, const Scenario& original, std::string* yaml = nullptr,
                    std::vector<std::string>* notes = nullptr) {
  const auto exported = export_bridge(doc, original);
  if (yaml != nullptr) *yaml = exported.yaml;
  if (notes != nullptr) *notes = exported.notes;
  trainsim::config::ImportOptions o;
  o.source = "exported.yaml";
  o.cluster = doc["cluster"].get<std::string>();
  o.gpus = original.gpus;
  const auto flags = trainsim::config::read_bridge_config(exported.yaml, o.source, o.gpus);
  o.labels = flags.labels;
  auto imported = trainsim::config::import_megatron({flags.command}, o);
  for (const auto& [key, value] : flags.training.items()) imported.scenario["training"][key] = value;
  return parse(nlohmann::json::parse(imported.scenario.dump()), "imported.json");
}

// What the YAML writes out that the scenario left to Megatron-LM's default: the gradient buckets,
// max(40M, 1M x dp x cp) parameters.
Scenario expected_after_bridge(Scenario s) {
  s = expected_after_round_trip(std::move(s));
  auto& p = s.parallel;
  if (p.dp_bucket_mb == 0) {
    const double bytes = s.training.grad_reduce_in_fp32 ? 4.0 : 2.0;
    p.dp_bucket_mb = std::max(40e6, 1e6 * static_cast<double>(p.dp * p.cp)) * bytes / 1e6;
  }
  return s;
}

std::string export_error(const nlohmann::json& doc) {
  try {
    export_bridge(doc, parse(doc, "s.json"));
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("every shipped config and validation record that Megatron-Core runs comes back from its Bridge YAML") {
  const auto docs = trainsim::test::shipped_scenarios();
  int compared = 0, refused = 0, lora = 0;
  for (const auto& [file, doc] : docs) {
    INFO(file);
    if (!doc["cluster"].is_string()) continue;
    Scenario original;
    try {
      original = parse(doc, file);
    } catch (const InputError&) {
      continue;  // a few records are not valid scenarios as published (validate skips them)
    }
    std::string yaml;
    std::vector<std::string> notes;
    Scenario back;
    try {
      back = round_trip(doc, original, &yaml, &notes);
    } catch (const InputError& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK((what.find("training.framework") != std::string::npos ||
             what.find("training.attention") != std::string::npos ||
             what.find("model.compress_ratios") != std::string::npos ||
             // Nemotron 3 Super's NVFP4 recipe: a per-module Transformer Engine recipe file.
             what.find("training.module_precision.mamba_out_proj") != std::string::npos ||
             what.find("parallel.schedule") != std::string::npos ||
             what.find("parallel.zero2_param_gather") != std::string::npos ||
             what.find("parallel.zero1_grad_reduce") != std::string::npos));
      CHECK(what.find("(trainsim export bridge)") != std::string::npos);
      ++refused;
      continue;
    }
    INFO(yaml);
    CHECK(describe(back) == describe(expected_after_bridge(original)));
    // Every flag of the Megatron-LM command found its key.
    for (const auto& n : notes) CHECK(n.find("no Megatron-Bridge key") == std::string::npos);
    lora += original.training.lora ? 1 : 0;
    ++compared;
  }
  // Most of the 15 configs and 600 records are Megatron runs; the fine-tuning ones use LoRA.
  CHECK(compared > 300);
  CHECK(lora > 0);
  CHECK(refused < compared);
}

TEST_CASE("the Bridge YAML for Llama 3.1 8B with FP8 on Blackwell, checked by hand") {
  const nlohmann::json doc = nlohmann::json::parse(R"({
    "model": "llama3.1-8b", "cluster": "gb200-nvl72", "gpus": 16,
    "parallel": {"tp": 2, "pp": 2, "sequence_parallel": true, "zero": 1, "overlap_grad_reduce": true,
                 "overlap_param_gather": true, "tp_comm_overlap": true},
    "training": {"micro_batch": 2, "global_batch": 128, "seq_len": 8192, "precision": "fp8",
                 "recompute": "selective", "grad_reduce_in_fp32": false, "cross_entropy": "fused",
                 "gradient_accumulation_fusion": false}
  })");
  const auto out = export_bridge(doc, parse(doc, "llama.json"));
  auto has = [&](const std::string& line) {
    INFO(line);
    INFO(out.yaml);
    CHECK(out.yaml.find("\n" + line) != std::string::npos);
  };
  has("model:\n  num_layers: 32\n  hidden_size: 4096\n  ffn_hidden_size: 14336\n  num_attention_heads: 32\n");
  has("  num_query_groups: 8 ");
  has("  gated_linear_unit: true\n  activation_func: {_target_: torch.nn.functional.silu, _call_: false}");
  has("  normalization: RMSNorm\n  add_bias_linear: false\n  position_embedding_type: rope\n"
      "  share_embeddings_and_output_weights: false\n");
  has("  tensor_model_parallel_size: 2\n  pipeline_model_parallel_size: 2\n");
  has("  sequence_parallel: true\n");
  has("  tp_comm_overlap: true\n  recompute_granularity: selective\n  recompute_modules: [core_attn]\n"
      "  cross_entropy_loss_fusion: true\n  gradient_accumulation_fusion: false\n");
  has("train:\n  micro_batch_size: 2\n  global_batch_size: 128\n  train_iters: 100 ");
  // 16 GPUs / (tp 2 x pp 2) = dp 4: Megatron-LM's default bucket, max(40M, 4M) parameters.
  has("ddp:\n  use_distributed_optimizer: true ");
  has("  overlap_grad_reduce: true\n  overlap_param_gather: true\n  bucket_size: 40000000 ");
  has("  grad_reduce_in_fp32: false\ncomm_overlap:\n  tp_comm_overlap: true\n  overlap_grad_reduce: true\n"
      "  overlap_param_gather: true\n  bucket_size: 40000000\n");
  // Blackwell's FP8 is Transformer Engine's MXFP8 recipe.
  has("mixed_precision:\n  bf16: true\n  fp16: false\n  fp8: e4m3\n  fp8_recipe: mxfp8 ");
  has("dataset:\n  sequence_length: 8192 ");
  CHECK(out.yaml.find("peft:") == std::string::npos);
  // The overrides: the same scalar keys, the objects left to the recipe with a note.
  CHECK(std::find(out.overrides.begin(), out.overrides.end(), "model.tensor_model_parallel_size=2") !=
        out.overrides.end());
  CHECK(std::find(out.overrides.begin(), out.overrides.end(), "model.recompute_modules=[core_attn]") !=
        out.overrides.end());
  CHECK(std::find(out.overrides.begin(), out.overrides.end(), "mixed_precision.fp8=e4m3") != out.overrides.end());
  CHECK(std::none_of(out.overrides.begin(), out.overrides.end(),
                     [](const std::string& o) { return o.starts_with("model.activation_func"); }));
  CHECK(std::any_of(out.override_notes.begin(), out.override_notes.end(),
                    [](const std::string& n) { return n.find("model.activation_func") != std::string::npos; }));
}

TEST_CASE("a LoRA fine-tuning scenario becomes Megatron-Bridge's peft section") {
  const nlohmann::json doc = nlohmann::json::parse(R"({
    "model": "llama3.1-8b", "cluster": "dgx-h100", "gpus": 8,
    "parallel": {"tp": 1, "pp": 1},
    "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 4096, "peft": "lora", "lora_rank": 16,
                 "lora_targets": ["linear_qkv", "linear_proj"]}
  })");
  const Scenario s = parse(doc, "lora.json");
  std::string yaml;
  const Scenario back = round_trip(doc, s, &yaml);
  INFO(yaml);
  CHECK(yaml.find("peft:\n  _target_: megatron.bridge.peft.lora.LoRA") != std::string::npos);
  CHECK(yaml.find("  dim: 16\n  target_modules: [linear_qkv, linear_proj]\n") != std::string::npos);
  CHECK(yaml.find("dataset:\n  seq_length: 4096 ") != std::string::npos);  // a fine-tuning dataset's key
  CHECK(back.training.lora);
  CHECK(back.training.lora_rank == 16);
  CHECK(back.training.lora_targets == s.training.lora_targets);
}

TEST_CASE("what Megatron-Bridge cannot run is one error naming the key") {
  nlohmann::json base = nlohmann::json::parse(R"({
    "model": "llama3.1-8b", "cluster": "dgx-h100", "gpus": 16,
    "parallel": {"tp": 2, "pp": 2}, "training": {"micro_batch": 1, "global_batch": 64, "seq_len": 4096}
  })");
  nlohmann::json gpipe = base;
  gpipe["parallel"]["schedule"] = "gpipe";
  CHECK(export_error(gpipe).starts_with("s.json: parallel.schedule: "));
  CHECK(export_error(gpipe).find("(trainsim export bridge)") != std::string::npos);
  nlohmann::json eager = base;
  eager["training"]["framework"] = "pytorch-eager";
  eager["parallel"] = {{"tp", 1}, {"pp", 1}};
  eager["gpus"] = 1;
  eager["training"]["global_batch"] = 1;
  CHECK(export_error(eager).starts_with("s.json: training.framework: "));
  nlohmann::json deepspeed = base;
  deepspeed["training"]["framework"] = "megatron-deepspeed";
  deepspeed["model"] = "gpt3-175b";
  deepspeed["parallel"] = {{"tp", 8}, {"pp", 2}};
  deepspeed["gpus"] = 16;
  deepspeed["training"]["global_batch"] = 16;
  deepspeed["training"]["seq_len"] = 2048;
  deepspeed["parallel"]["zero"] = 1;
  deepspeed["parallel"]["zero1_grad_reduce"] = "all_reduce";
  const std::string ds = export_error(deepspeed);
  CHECK(ds.starts_with("s.json: training.framework: megatron-deepspeed runs under DeepSpeed's engine"));
}
