// A Megatron-Bridge configuration (its ConfigContainer YAML) read as the Megatron-LM flags of the
// same meaning: model keys by their TransformerConfig names, the training loop, precision, data
// parallelism and optimizer from their own sections, each message naming the YAML key and line.

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "config/bridge_config.h"
#include "config/megatron_args.h"
#include "util/error.h"

using trainsim::config::import_megatron;
using trainsim::config::ImportedScenario;
using trainsim::config::ImportOptions;
using trainsim::config::read_bridge_config;
using trainsim::config::read_megatron_yaml;
using trainsim::util::InputError;

namespace {

ImportedScenario import(const std::string& yaml, std::int64_t gpus = 64) {
  const auto flags = read_bridge_config(yaml, "run.yaml", gpus);
  ImportOptions o;
  o.source = "run.yaml";
  o.cluster = "gb200-nvl72";
  o.gpus = gpus;
  o.labels = flags.labels;
  return import_megatron({flags.command}, o);
}

// A mixture-of-experts model with grouped-query attention, gated quick-GELU experts and alternating
// sliding windows, written as Megatron-Bridge dumps it.
const char* kMoe = R"(_target_: megatron.bridge.training.config.ConfigContainer
comm_overlap:
  overlap_grad_reduce: null
  overlap_moe_expert_parallel_comm: true
ddp:
  grad_reduce_in_fp32: false
  overlap_grad_reduce: true
  overlap_param_gather: true
  use_distributed_optimizer: true
  use_megatron_fsdp: false
mixed_precision:
  bf16: true
  fp16: false
  fp8: hybrid
  fp8_recipe: mxfp8
  fp4: null
model:
  _target_: megatron.bridge.models.gpt_provider.GPTModelProvider
  activation_func:
    _call_: false
    _target_: megatron.core.fusions.fused_bias_geglu.quick_gelu
  add_bias_linear: true
  attention_backend: null
  attention_dropout: 0.0
  bf16: true
  context_parallel_size: 1
  cuda_graph_impl: transformer_engine
  cuda_graph_scope:
  - attn
  - moe_router
  - moe_preprocess
  expert_model_parallel_size: 64
  expert_tensor_parallel_size: 1
  ffn_hidden_size: 2880
  fp8: null
  gated_linear_unit: true
  hidden_dropout: 0.0
  hidden_size: 2880
  kv_channels: 64
  moe_ffn_hidden_size: 2880
  moe_grouped_gemm: true
  moe_layer_freq: 1
  moe_router_group_topk: null
  moe_router_num_groups: null
  moe_router_topk: 4
  moe_token_dispatcher_type: alltoall
  normalization: RMSNorm
  num_attention_heads: 64
  num_layers: 36
  num_moe_experts: 128
  num_query_groups: 8
  pipeline_model_parallel_size: 1
  position_embedding_type: yarn
  recompute_granularity: selective
  recompute_modules:
  - layernorm
  - moe_act
  seq_length: 4096
  sequence_parallel: false
  share_embeddings_and_output_weights: false
  tensor_model_parallel_size: 1
  vocab_size: 201088
  window_attn_skip_freq: 2
  window_size:
  - 127
  - 0
optimizer:
  exp_avg_dtype:
    _call_: false
    _target_: torch.float32
  lr: 0.0003
  optimizer: adam
train:
  global_batch_size: 512
  micro_batch_size: 4
  train_iters: 100
)";

}  // namespace

TEST_CASE("a Megatron-Bridge MoE configuration reads as its scenario") {
  const ImportedScenario m = import(kMoe);
  const auto& s = m.scenario;
  CHECK(s["model"]["layers"] == 36);
  CHECK(s["model"]["kv_heads"] == 8);  // num_query_groups 8 of 64 heads
  CHECK(s["model"]["head_dim"] == 64);
  CHECK(s["model"]["mlp"] == "swiglu");  // gated quick-GELU taken as SwiGLU (a note)
  CHECK(s["model"]["experts"] == 128);
  CHECK(s["model"]["experts_per_token"] == 4);
  CHECK(s["model"]["sliding_window"] == 128);  // Transformer Engine's (127, 0): 127 keys back and its own
  CHECK(s["model"]["sliding_window_pattern"] == 2);
  CHECK(s["model"]["tied_embeddings"] == false);
  CHECK(s["model"]["vocab"] == 201088);
  CHECK(s["parallel"]["ep"] == 64);
  CHECK(s["parallel"]["zero"] == 1);
  CHECK(s["parallel"]["moe_a2a_overlap"] == true);      // comm_overlap's, set
  CHECK(s["parallel"]["overlap_grad_reduce"] == true);  // ddp's: comm_overlap's is null
  CHECK(s["training"]["micro_batch"] == 4);
  CHECK(s["training"]["global_batch"] == 512);
  CHECK(s["training"]["seq_len"] == 4096);
  CHECK(s["training"]["precision"] == "fp8");  // mixed_precision's, not the model's null copy
  CHECK(s["training"]["grad_reduce_in_fp32"] == false);
  CHECK(s["training"]["recompute_modules"] == nlohmann::ordered_json::array({"layernorm", "moe_act"}));
  CHECK(s["training"]["cuda_graph_scope"] == nlohmann::ordered_json::array({"attn", "moe_router", "moe_preprocess"}));
  CHECK(s["training"]["train_tokens"] == 100.0 * 512 * 4096);
  CHECK(m.origin.at("parallel.ep") == "line 32: model.expert_model_parallel_size 64");
  CHECK(!s["model"].contains("router_groups"));  // null: no group-limited routing
}

// GPT-OSS's provider sets activation_func_clamp_value 7.0 with the quick-GELU GLU: the experts'
// clamp (glu_clamp); without the key, none.
TEST_CASE("a Megatron-Bridge quick-GeGLU configuration's activation_func_clamp_value reads as glu_clamp") {
  CHECK(!import(kMoe).scenario["model"].contains("glu_clamp"));
  std::string yaml = kMoe;
  yaml.replace(yaml.find("  add_bias_linear: true\n"), 0, "  activation_func_clamp_value: 7.0\n");
  const ImportedScenario m = import(yaml);
  CHECK(m.scenario["model"]["glu_clamp"] == 7.0);
  CHECK(m.scenario["model"]["mlp"] == "swiglu");
}

TEST_CASE("a Megatron-Bridge MoE configuration's group-limited routing reads as router_groups") {
  std::string yaml = kMoe;
  yaml.replace(yaml.find("moe_router_group_topk: null"), 27, "moe_router_group_topk: 2");
  yaml.replace(yaml.find("moe_router_num_groups: null"), 27, "moe_router_num_groups: 8");
  const auto& s = import(yaml).scenario;
  CHECK(s["model"]["router_groups"] == 8);
  CHECK(s["model"]["router_group_topk"] == 2);
}

TEST_CASE("a Megatron-Bridge model.gradient_accumulation_fusion false reads as training.gradient_accumulation_fusion") {
  for (const bool fused : {true, false}) {
    std::string yaml = kMoe;
    yaml.replace(yaml.find("  gated_linear_unit: true\n"), 0,
                 fused ? "  gradient_accumulation_fusion: true\n" : "  gradient_accumulation_fusion: false\n");
    const ImportedScenario m = import(yaml);
    INFO(fused);
    // Megatron's default (fused) is written as nothing.
    CHECK(m.scenario["training"].contains("gradient_accumulation_fusion") == !fused);
    if (!fused) {
      CHECK(m.scenario["training"]["gradient_accumulation_fusion"] == false);
      CHECK(m.origin.at("training.gradient_accumulation_fusion") == "line 36: model.gradient_accumulation_fusion");
    }
  }
}

// Megatron-Core's router and permute fusions are off unless set (TransformerConfig's defaults, which
// a Bridge dump writes): the fixture has neither key, so both read as false; set, nothing is written.
TEST_CASE("a Megatron-Bridge MoE configuration's moe_router_fusion and moe_permute_fusion") {
  const ImportedScenario unset = import(kMoe);
  CHECK(unset.scenario["training"]["moe_router_fusion"] == false);
  CHECK(unset.scenario["training"]["moe_permute_fusion"] == false);
  std::string yaml = kMoe;
  yaml.replace(yaml.find("  moe_layer_freq: 1\n"), 0, "  moe_permute_fusion: true\n  moe_router_fusion: true\n");
  const ImportedScenario set = import(yaml);
  CHECK_FALSE(set.scenario["training"].contains("moe_router_fusion"));
  CHECK_FALSE(set.scenario["training"].contains("moe_permute_fusion"));
}

// The experts' grouped GEMM likewise (TransformerConfig's moe_grouped_gemm defaults to false, which
// runs SequentialMLP): the key true leaves trainsim's default, false or absent writes false.
TEST_CASE("a Megatron-Bridge MoE configuration's moe_grouped_gemm") {
  std::string yaml = kMoe;
  const auto at = yaml.find("  moe_grouped_gemm: true\n");
  REQUIRE(at != std::string::npos);
  CHECK_FALSE(import(yaml).scenario["training"].contains("moe_grouped_gemm"));
  yaml.replace(at, std::string("  moe_grouped_gemm: true\n").size(), "  moe_grouped_gemm: false\n");
  CHECK(import(yaml).scenario["training"]["moe_grouped_gemm"] == false);
}

// The 26.06 MoE recipes' kernels trainsim does not model are notes when on: Transformer Engine's op
// fuser (the CuTeDSL fused grouped MLP) and FP8 attention, the model's or mixed_precision's key.
TEST_CASE("Megatron-Bridge's op fuser and FP8 attention are notes when on") {
  std::string yaml = kMoe;
  yaml.replace(yaml.find("  moe_layer_freq: 1\n"), 0,
               "  use_transformer_engine_op_fuser: true\n  fp8_dot_product_attention: false\n");
  const auto flags = read_bridge_config(yaml, "run.yaml", 64);
  auto noted = [&](const std::string& what) {
    return std::ranges::any_of(flags.notes, [&](const std::string& n) { return n == what + " is on: not modelled"; });
  };
  CHECK(noted("model.use_transformer_engine_op_fuser"));
  CHECK_FALSE(noted("model.fp8_dot_product_attention"));
}

// FP8 parameters: mixed_precision's fp8_param_gather (which its set-up copies over the DDP's and the
// model's) with MXFP8's reuse of the gradient buffer; the DDP's key where there is no such section.
TEST_CASE("Megatron-Bridge's fp8_param_gather reads as training.fp8_param_gather") {
  CHECK_FALSE(import(kMoe).scenario["training"].contains("fp8_param_gather"));
  std::string yaml = kMoe;
  yaml.replace(yaml.find("  fp4: null\n"), 0, "  fp8_param_gather: true\n  reuse_grad_buf_for_mxfp8_param_ag: true\n");
  const ImportedScenario on = import(yaml);
  CHECK(on.scenario["training"]["fp8_param_gather"] == true);
  CHECK(on.origin.at("training.fp8_param_gather") == "line 16: mixed_precision.fp8_param_gather");
  // The section's false wins over the DDP's true.
  std::string off = kMoe;
  off.replace(off.find("  fp4: null\n"), 0, "  fp8_param_gather: false\n");
  off.replace(off.find("  use_megatron_fsdp: false\n"), 0, "  fp8_param_gather: true\n");
  CHECK_FALSE(import(off).scenario["training"].contains("fp8_param_gather"));
}

// comm_overlap's deferral of the output layer's weight gradients (what Megatron-Bridge applies over
// the model's copies), its limit read only beside it.
TEST_CASE("Megatron-Bridge's defer_embedding_wgrad_compute and wgrad_deferral_limit") {
  std::string yaml = kMoe;
  yaml.replace(yaml.find("ddp:\n"), 0, "  defer_embedding_wgrad_compute: true\n  wgrad_deferral_limit: 22\n");
  auto words = [](const std::string& text) {
    const auto flags = read_bridge_config(text, "run.yaml", 64);
    std::string out;
    for (const auto& w : flags.command.words) out += w + " ";
    return out;
  };
  CHECK(words(yaml).find("--defer-embedding-wgrad-compute ") != std::string::npos);
  CHECK(words(yaml).find("--wgrad-deferral-limit 22 ") != std::string::npos);
  std::string off = kMoe;
  off.replace(off.find("ddp:\n"), 0, "  defer_embedding_wgrad_compute: false\n  wgrad_deferral_limit: -1\n");
  CHECK(words(off).find("wgrad-deferral-limit") == std::string::npos);
  CHECK(words(off).find("--defer-embedding-wgrad-compute") == std::string::npos);
}

TEST_CASE("Megatron-Bridge keys: layouts as lists, dtypes as torch objects, errors naming the key and line") {
  const std::string base = R"(model:
  num_layers: 4
  hidden_size: 256
  num_attention_heads: 4
  vocab_size: 1000
  seq_length: 128
  pipeline_model_parallel_size: 2
  virtual_pipeline_model_parallel_size: 2
  pipeline_model_parallel_layout:
  - [embedding, decoder]
  - [decoder]
  - [decoder]
  - [decoder, loss]
mixed_precision:
  bf16: true
optimizer:
  use_precision_aware_optimizer: true
  exp_avg_dtype: {_target_: torch.bfloat16}
ddp:
  use_distributed_optimizer: true
train:
  global_batch_size: 8
  micro_batch_size: 1
)";
  const ImportedScenario m = import(base, 8);
  CHECK(m.scenario["parallel"]["pipeline_layout"] == "Et|t|t|tL");
  // A dense model's dump carries the MoE and Mamba keys at their defaults: not read, not listed.
  std::string with_defaults = base;
  with_defaults.replace(
      with_defaults.find("  vocab_size"), 0,
      "  moe_layer_freq: 1\n  moe_router_topk: 2\n  mamba_state_dim: 128\n  cpu_offloading_num_layers: 0\n");
  const ImportedScenario d = import(with_defaults, 8);
  CHECK(d.not_modelled.empty());
  CHECK(d.scenario == m.scenario);
  CHECK(m.scenario["parallel"]["virtual_stages"] == 2);
  CHECK(m.scenario["training"]["optimizer"]["exp_avg_dtype"] == "bf16");

  // A flag the importer itself refuses names the YAML key and its line.
  std::string with_sgd = base;
  with_sgd.replace(with_sgd.find("  use_precision_aware_optimizer"), 0, "  optimizer: sgd\n");
  try {
    import(with_sgd, 8);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) ==
          "run.yaml: line 17: optimizer.optimizer: the sgd optimizer is not modelled (adam is)");
  }
  try {
    read_bridge_config("model:\n  num_layers: [1\n", "run.yaml", 8);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("run.yaml: line ") == 0);
  }
  CHECK_THROWS_AS(read_bridge_config("just a string\n", "run.yaml", 8), InputError);
  CHECK_THROWS_AS(read_bridge_config("train:\n  global_batch_size: 8\n", "run.yaml", 8), InputError);
  try {
    import("model:\n  num_layers: x\n");
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) == "run.yaml: line 2: model.num_layers: \"x\" is not an integer");
  }
}

TEST_CASE("Megatron-LM's model_config.yaml: MODEL_ARGS as flags, true a switch, false and null not given") {
  const auto c = read_megatron_yaml(
      "ENV_VARS:\n  X: 1\nMODEL_ARGS:\n  # comment\n  --num-layers: 32\n  --bf16: true\n  --fp16: false\n"
      "  --save: null\n  --recompute-modules: [core_attn, mlp]\n",
      "model_config.yaml");
  CHECK(c.words == std::vector<std::string>{"--num-layers", "32", "--bf16", "--recompute-modules", "core_attn", "mlp"});
  CHECK(c.lines == std::vector<int>{5, 5, 6, 9, 9, 9});
  // As the test harness passes them through xargs and eval: escapes go, "[a b]" lists become words.
  const auto h = read_megatron_yaml(
      "MODEL_ARGS:\n  --recompute-modules: \"[moe_act layernorm]\"\n  --pipeline-model-parallel-layout: "
      "Et*2\\\\|\\\\(tt\\\\|\\\\)*2L\n  --moe-layer-freq: ([0]*1+[1]*3)\n",
      "model_config.yaml");
  CHECK(h.words == std::vector<std::string>{"--recompute-modules", "moe_act", "layernorm",
                                            "--pipeline-model-parallel-layout", "Et*2|(tt|)*2L", "--moe-layer-freq",
                                            "([0]*1+[1]*3)"});
  CHECK_THROWS_AS(read_megatron_yaml("TEST_TYPE: release\n", "model_config.yaml"), InputError);
  CHECK_THROWS_AS(read_megatron_yaml("MODEL_ARGS:\n  num-layers: 2\n", "model_config.yaml"), InputError);
}

TEST_CASE("Megatron-Bridge's keep_mtp_spec_in_bf16: the multi-token prediction layers in BF16 under FP8") {
  // The Nemotron 3 recipes' setting, here on a GPT model with one MTP layer under MXFP8.
  std::string yaml = kMoe;
  yaml.replace(yaml.find("  num_layers: 36\n"), 17,
               "  num_layers: 36\n  mtp_num_layers: 1\n  keep_mtp_spec_in_bf16: true\n");
  const auto s = import(yaml).scenario;
  CHECK(s["training"]["precision"] == "fp8");
  CHECK(s["training"]["module_precision"] == nlohmann::ordered_json({{"mtp", "bf16"}}));
  std::string off = yaml;
  off.replace(off.find("keep_mtp_spec_in_bf16: true"), 27, "keep_mtp_spec_in_bf16: false");
  CHECK(!import(off).scenario["training"].contains("module_precision"));
}

TEST_CASE("Megatron-Bridge's BF16 first and last layers: mixed_precision's, read only with the switch on") {
  // Nemotron 3 Super's NVFP4 recipe (nemotron_3_super_bf16_with_nvfp4_mixed): the last 14 layers in BF16.
  std::string yaml = kMoe;
  yaml.replace(yaml.find("  fp4: null\n"), 12,
               "  fp4: e2m1\n  first_last_layers_bf16: true\n  num_layers_at_start_in_bf16: 0\n"
               "  num_layers_at_end_in_bf16: 14\n");
  yaml.replace(yaml.find("  fp8: hybrid\n  fp8_recipe: mxfp8\n"), 33, "  fp8: null\n");
  const auto s = import(yaml).scenario;
  CHECK(s["training"]["precision"] == "nvfp4");
  CHECK(!s["training"].contains("bf16_layers_at_start"));
  CHECK(s["training"]["bf16_layers_at_end"] == 14);
  // The counts without the switch keep every layer quantised (a dump carries them at their defaults).
  std::string off = yaml;
  off.replace(off.find("first_last_layers_bf16: true"), 28, "first_last_layers_bf16: false");
  CHECK(!import(off).scenario["training"].contains("bf16_layers_at_end"));
}

TEST_CASE("Megatron-Core enums as a ConfigContainer dump writes them: by value, named by enums.py") {
  const std::string base = R"(model:
  num_layers: 4
  hidden_size: 256
  num_attention_heads: 4
  vocab_size: 1000
  seq_length: 128
  attention_backend:
    _args_:
    - BACKEND
    _call_: true
    _target_: megatron.core.transformer.enums.AttnBackend
  cuda_graph_impl: transformer_engine
  cuda_graph_scope:
  - {_target_: megatron.core.transformer.enums.CudaGraphScope, _call_: true, _args_: [2]}
  - {_target_: megatron.core.transformer.enums.CudaGraphScope, _call_: true, _args_: [3]}
mixed_precision:
  bf16: true
train:
  global_batch_size: 8
  micro_batch_size: 1
)";
  auto with = [&](const std::string& backend) {
    std::string y = base;
    y.replace(y.find("BACKEND"), 7, backend);
    return y;
  };
  // AttnBackend: flash 1, fused 2, unfused 3, local 4, auto 5; CudaGraphScope: attn 2, mlp 3.
  const ImportedScenario fused = import(with("5"), 8);
  CHECK_FALSE(fused.scenario["training"].contains("attention"));
  CHECK(fused.scenario["training"]["cuda_graph_scope"] == nlohmann::json::array({"attn", "mlp"}));
  const ImportedScenario unfused = import(with("3"), 8);
  CHECK(unfused.scenario["training"]["attention"] == "softmax");
  // The member's name, as an older dump's repr spells it, reads the same.
  CHECK(import(with("unfused"), 8).scenario == unfused.scenario);
  try {
    import(with("9"), 8);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) == "run.yaml: line 8: model.attention_backend: AttnBackend has no member of value 9");
  }
}

// Megatron-Bridge's Gemma 2 and Gemma 3 providers name their own layer spec, whose post-norms no
// flag says: the model the flags build gets post_norms; Gemma 2's also its unfused attention (over
// an attention_backend the file gives) and its two soft-caps.
TEST_CASE("a Gemma layer spec gives the flags' model its post-norms, Gemma 2's its soft-capped unfused attention") {
  const std::string base = R"(model:
  num_layers: 2
  hidden_size: 64
  num_attention_heads: 4
  ffn_hidden_size: 128
  vocab_size: 100
  attention_backend:
    _call_: true
    _target_: megatron.core.transformer.enums.AttnBackend
    _args_: [5]
  attn_logit_softcapping: 50.0
  final_logit_softcapping: 30.0
  transformer_layer_spec:
    _call_: false
    _target_: megatron.bridge.models.gemma.gemma2_provider.gemma2_layer_spec
train:
  global_batch_size: 8
  micro_batch_size: 1
)";
  auto has_note = [](const std::vector<std::string>& notes, const std::string& text) {
    for (const auto& n : notes)
      if (n.find(text) != std::string::npos) return true;
    return false;
  };
  const auto gemma2 = read_bridge_config(base, "run.yaml", 8);
  CHECK(gemma2.model ==
        nlohmann::ordered_json::parse(R"({"post_norms": true, "attention_softcap": 50.0, "logit_softcap": 30.0})"));
  CHECK(has_note(gemma2.notes,
                 "model.transformer_layer_spec gemma2_layer_spec: a norm after each row-parallel linear (model "
                 "post_norms) and its own unfused attention (attention \"softmax\", whatever attention_backend "
                 "says), soft-capped (model attention_softcap 50.0, logit_softcap 30.0)"));
  const auto& words = gemma2.command.words;
  const auto backend = std::find(words.begin(), words.end(), "--attention-backend");
  REQUIRE(backend != words.end());
  CHECK(*(backend + 1) == "unfused");
  std::string g3 = base;
  g3.replace(g3.find("gemma2_provider.gemma2"), 22, "gemma3_provider.gemma3");
  const auto gemma3 = read_bridge_config(g3, "run.yaml", 8);
  CHECK(gemma3.model == nlohmann::ordered_json::parse(R"({"post_norms": true})"));
  CHECK(has_note(gemma3.notes, "gemma3_layer_spec: a norm after each row-parallel linear"));
  CHECK_FALSE(has_note(gemma3.notes, "soft-cap"));
  std::string bad = base;
  bad.replace(bad.find("50.0"), 4, "-1.0");
  try {
    read_bridge_config(bad, "run.yaml", 8);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) ==
          "run.yaml: line 11: model.attn_logit_softcapping: \"-1.0\" is not a positive number");
  }
}
