// A Megatron-LM training command read into a trainsim scenario: each flag lands on the key of the
// same meaning, Megatron's defaults fill what the command leaves out, and what cannot be represented
// is an error naming the flag and its line.

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/megatron_args.h"
#include "config/scenario.h"
#include "util/error.h"
#include "util/json_node.h"
#include "util/shell_words.h"

using trainsim::config::import_megatron;
using trainsim::config::ImportedScenario;
using trainsim::config::ImportOptions;
using trainsim::util::InputError;
using trainsim::util::split_shell_commands;

namespace {

ImportedScenario import(const std::string& script, const std::string& cluster = "dgx-h100", std::int64_t gpus = 0,
                        const std::string& model = "") {
  ImportOptions o;
  o.source = "train.sh";
  o.cluster = cluster;
  o.gpus = gpus;
  o.model = model;
  return import_megatron(split_shell_commands(script, o.source), o);
}

std::string error_of(const std::string& script, std::int64_t gpus = 64) {
  try {
    import(script, "dgx-h100", gpus);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

trainsim::config::Scenario parse(const ImportedScenario& m) {
  const auto doc = nlohmann::json::parse(m.scenario.dump());
  return trainsim::config::parse_scenario(trainsim::util::JsonNode(doc, "imported.json"),
                                          trainsim::config::default_data_dir());
}

// Megatron-LM's GPT-3 175B example: 128 nodes of 8 GPUs through torchrun.
const char* kGpt3 = R"(
GPUS_PER_NODE=8
NUM_NODES=128
DISTRIBUTED_ARGS=(--nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES --master_addr localhost)
torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
  --num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 \
  --micro-batch-size 1 --global-batch-size 1536 --train-iters 500000 --lr 6.0e-5 --bf16 \
  --tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 \
  --vocab-file $VOCAB --merge-file $MERGES --manual-gc --bogus-flag 3
)";

}  // namespace

TEST_CASE("Megatron's GPT-3 example becomes its scenario, with Megatron's defaults for what it leaves out") {
  const ImportedScenario m = import(kGpt3, "dgx-a100");
  const auto& s = m.scenario;
  CHECK(s["gpus"] == 8 * 128);  // --nproc_per_node x --nnodes
  CHECK(s["model"]["layers"] == 96);
  CHECK(s["model"]["mlp"] == "gelu");
  CHECK(s["model"]["ffn_hidden"] == 4 * 12288);  // Megatron's default 4h
  CHECK(s["model"]["kv_heads"] == 96);
  CHECK(s["model"]["vocab"] == 50257);  // GPT-2's BPE files
  CHECK(s["model"]["tied_embeddings"] == true);
  CHECK(s["model"]["dropout"] == 0.1);
  CHECK(s["parallel"]["tp"] == 8);
  CHECK(s["parallel"]["pp"] == 16);
  CHECK(s["training"]["global_batch"] == 1536);
  CHECK(s["training"]["precision"] == "bf16");
  CHECK(s["training"]["train_tokens"] == 500000.0 * 1536 * 2048);
  CHECK(contains(m.no_effect, "--lr"));
  CHECK(contains(m.no_effect, "--master-addr"));
  CHECK(contains(m.not_modelled, "--manual-gc"));
  CHECK(contains(m.unknown, "--bogus-flag"));
  CHECK(m.origin.at("parallel.tp") == "line 8: --tensor-model-parallel-size 8");
  const auto sc = parse(m);
  CHECK(sc.parallel.dp == 8);
  // The same input gives the same scenario, byte for byte.
  CHECK(import(kGpt3, "dgx-a100").scenario.dump() == s.dump());
}

TEST_CASE("--no-gradient-accumulation-fusion reads as training.gradient_accumulation_fusion false") {
  const std::string base = kGpt3;
  const ImportedScenario fused = import(base, "dgx-a100");
  CHECK_FALSE(fused.scenario["training"].contains("gradient_accumulation_fusion"));
  std::string script = base;
  script.replace(script.find("--manual-gc"), 0, "--no-gradient-accumulation-fusion ");
  const ImportedScenario m = import(script, "dgx-a100");
  CHECK(m.scenario["training"]["gradient_accumulation_fusion"] == false);
  CHECK_FALSE(contains(m.not_modelled, "--no-gradient-accumulation-fusion"));
  CHECK(m.origin.at("training.gradient_accumulation_fusion") == "line 9: --no-gradient-accumulation-fusion");
  CHECK_FALSE(parse(m).training.gradient_accumulation_fusion);
}

TEST_CASE("a Llama 3.1 70B command reads as the shipped model and scenario") {
  // configs/llama3.1-70b-h100-1024.json written as Megatron arguments.
  const ImportedScenario m = import(R"(
    --num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64
    --group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm --disable-bias-linear
    --position-embedding-type rope --untie-embeddings-and-output-weights --vocab-size 128256
    --hidden-dropout 0 --attention-dropout 0
    --tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 --sequence-parallel --use-distributed-optimizer
    --micro-batch-size 1 --global-batch-size 1024 --seq-length 8192 --recompute-activations --bf16)",
                                    "dgx-h100", 1024);
  CHECK(m.notes.empty());
  const auto imported = parse(m);
  const auto shipped = trainsim::config::load_scenario(
      (trainsim::config::default_data_dir() / "configs/llama3.1-70b-h100-1024.json").string(),
      trainsim::config::default_data_dir());
  const auto& a = imported.model;
  const auto& b = shipped.model;
  CHECK(a.total_params() == b.total_params());
  CHECK((a.layers == b.layers && a.hidden == b.hidden && a.heads == b.heads && a.kv_heads == b.kv_heads &&
         a.head_dim == b.head_dim && a.ffn_hidden == b.ffn_hidden && a.vocab == b.vocab && a.mlp == b.mlp &&
         a.tied_embeddings == b.tied_embeddings && a.dropout == b.dropout));
  CHECK(imported.parallel.tp == 8);
  CHECK(imported.parallel.pp == 4);
  CHECK(imported.parallel.dp == shipped.parallel.dp);
  CHECK(imported.parallel.sequence_parallel);
  CHECK(imported.parallel.zero == 1);
  CHECK(imported.training.recompute == shipped.training.recompute);
  CHECK(imported.training.global_batch == shipped.training.global_batch);
  CHECK(imported.training.seq_len == shipped.training.seq_len);
}

TEST_CASE("Megatron's defaults: the SwiGLU width, dropout, top-k, and one micro-batch per replica") {
  const ImportedScenario m = import(R"(
    --num-layers 4 --hidden-size 4096 --num-attention-heads 32 --swiglu --normalization RMSNorm
    --disable-bias-linear --position-embedding-type rope --vocab-size 32000 --num-experts 8 --moe-grouped-gemm
    --moe-token-dispatcher-type alltoall --expert-model-parallel-size 8 --seq-length 4096 --bf16)",
                                    "dgx-h100", 16);
  // arguments.py: int(4h * 2/3 / 64) * 64 = int(10922.67 / 64) * 64 = 170 * 64.
  CHECK(m.scenario["model"]["moe_ffn_hidden"] == 10880);
  CHECK(m.scenario["model"]["experts_per_token"] == 2);
  CHECK(m.scenario["model"]["dropout"] == 0.1);
  CHECK(m.scenario["training"]["micro_batch"] == 1);
  CHECK(m.scenario["training"]["global_batch"] == 16);  // 1 x dp 16
  CHECK(!m.scenario["model"].contains("ffn_hidden"));   // every layer a MoE layer
  CHECK(m.notes.size() >= 4);
  CHECK(!m.scenario["model"].contains("linear_bias"));  // --disable-bias-linear
  // Without --disable-bias-linear a SwiGLU model keeps Megatron's default linear biases (GPT-OSS).
  const ImportedScenario biased = import(R"(
    --num-layers 4 --hidden-size 4096 --num-attention-heads 32 --swiglu --normalization RMSNorm
    --position-embedding-type rope --vocab-size 32000 --num-experts 8 --moe-grouped-gemm
    --moe-token-dispatcher-type alltoall --expert-model-parallel-size 8 --seq-length 4096 --bf16)",
                                         "dgx-h100", 16);
  CHECK(biased.scenario["model"]["linear_bias"] == true);
}

// --quick-geglu (GPT-OSS's gated quick-GELU) is trainsim's swiglu kind, with Megatron's 4h default
// width (arguments.py sets 8h/3 for --swiglu only); --activation-func-clamp-value is the experts'
// clamp (glu_clamp) with experts, a note without them.
TEST_CASE("--quick-geglu and --activation-func-clamp-value: GPT-OSS's clamped experts") {
  const std::string base =
      "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --normalization RMSNorm "
      "--position-embedding-type rope --vocab-size 32000 --seq-length 4096 --bf16 --quick-geglu "
      "--activation-func-clamp-value 7.0 ";
  const ImportedScenario moe =
      import(base + "--num-experts 8 --moe-grouped-gemm --expert-model-parallel-size 8", "dgx-h100", 8);
  CHECK(moe.scenario["model"]["mlp"] == "swiglu");
  CHECK(moe.scenario["model"]["glu_clamp"] == 7.0);
  CHECK(moe.scenario["model"]["moe_ffn_hidden"] == 4 * 1024);
  const ImportedScenario dense = import(base, "dgx-h100", 8);
  CHECK(!dense.scenario["model"].contains("glu_clamp"));
  CHECK(dense.scenario["model"]["ffn_hidden"] == 4 * 1024);
  CHECK(error_of(base + "--swiglu", 8) == "train.sh: line 1: --quick-geglu: --swiglu and --quick-geglu both given");
}

TEST_CASE("layouts: interleaving, FSDP strategies, buckets, dense layers before the experts") {
  const auto layout = [](const std::string& extra, std::int64_t gpus = 64) {
    return import(
               "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --vocab-size 32000 "
               "--seq-length 4096 --micro-batch-size 1 --global-batch-size 256 --bf16 " +
                   extra,
               "dgx-h100", gpus)
        .scenario;
  };
  // 32 layers over pp 4 in chunks of 2: (32 / 4) / 2 = 4 virtual stages.
  const auto vp = layout("--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 2");
  CHECK(vp["parallel"]["schedule"] == "interleaved");
  CHECK(vp["parallel"]["virtual_stages"] == 4);
  CHECK(layout("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads")["parallel"]["zero"] == 2);
  CHECK(layout("--use-megatron-fsdp")["parallel"]["zero"] == 3);  // its default optim_grads_params
  CHECK(layout("--use-torch-fsdp2")["parallel"]["zero"] == 3);
  // 40M parameters of fp32 gradients = 160 MB; with bf16 gradients 80 MB.
  CHECK(
      layout(
          "--use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 40000000")["parallel"]["dp_bucket_mb"] ==
      160.0);
  CHECK(layout("--grad-reduce-in-bf16 --ddp-bucket-size 40000000")["parallel"]["dp_bucket_mb"] == 80.0);
  const auto moe = layout(
      "--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 1024 --ffn-hidden-size 8192 "
      "--moe-layer-freq ([0]*2+[1]*30) --expert-model-parallel-size 8 --moe-grouped-gemm "
      "--moe-token-dispatcher-type flex");
  CHECK(moe["model"]["first_dense_layers"] == 2);
  CHECK(moe["model"]["ffn_hidden"] == 8192);
  CHECK(moe["parallel"]["moe_token_dispatcher"] == "flex");
  const auto fp8 = layout(
      "--fp8-format hybrid --recompute-granularity full --recompute-method block "
      "--recompute-num-layers 3 --cuda-graph-impl transformer_engine --cuda-graph-scope attn");
  CHECK(fp8["training"]["precision"] == "fp8");
  CHECK(fp8["training"]["recompute"] == "full");
  CHECK(fp8["training"]["recompute_layers"] == 3);
  CHECK(fp8["training"]["cuda_graph_scope"] == nlohmann::ordered_json::array({"attn"}));
}

TEST_CASE("what cannot be read is one error naming the flag and its line") {
  CHECK(error_of("TP=2\n--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 100 --seq-length 8 "
                 "--bf16\n--tensor-model-parallel-size $PP") ==
        "train.sh: line 3: --tensor-model-parallel-size: \"$PP\" is a shell variable the script does not set; give "
        "the value itself");
  CHECK(error_of("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 100 --seq-length 8") ==
        "train.sh: neither --bf16 nor --fp16: fp32 training is not modelled");
  CHECK(error_of("--num-layers x") == "train.sh: line 1: --num-layers: \"x\" is not an integer");
  // Bounded before a per-layer pattern is built from it (found by fuzzing: 2^53 layers and
  // --moe-layer-freq 2 allocated 2^53 flags, std::bad_alloc, exit 1).
  CHECK(error_of("--num-layers 9007199254740992 --hidden-size 64 --num-attention-heads 4 --vocab-size 100 "
                 "--seq-length 8 --bf16 --num-experts 4 --moe-layer-freq 2") ==
        "train.sh: line 1: --num-layers: 9007199254740992 layers: trainsim models 1 to 100000");
  CHECK(error_of("--num-layers 0 --hidden-size 64 --num-attention-heads 4 --vocab-size 100 --seq-length 8 --bf16") ==
        "train.sh: line 1: --num-layers: 0 layers: trainsim models 1 to 100000");
  CHECK(error_of("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 8 --bf16 --tokenizer-type "
                 "HuggingFaceTokenizer") ==
        "train.sh: the vocabulary size is not in the command (--tokenizer-type HuggingFaceTokenizer): give it with "
        "--vocab N");
  CHECK(error_of("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 100 --seq-length 8 --bf16 "
                 "--num-experts 4 --moe-layer-freq [0,0,0,0]") ==
        "train.sh: line 1: --moe-layer-freq: leaves no layer with experts");
  CHECK(error_of("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 100 --seq-length 8 --bf16 "
                 "--num-experts 4 --moe-layer-freq [0,1]*3") ==
        "train.sh: line 1: --moe-layer-freq: the pattern has 6 layers, the model 4");
  CHECK(error_of("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 100 --seq-length 8 --bf16", 0) ==
        "train.sh: the GPU count is not in the command: give it with --gpus N (or launch with "
        "torchrun's --nproc-per-node and --nnodes)");
  // Products of two flags that overflowed int64 (UBSan, found by tools/fuzz-imports): Megatron's default
  // global batch, one micro-batch per replica, and torchrun's GPUs per node times nodes.
  CHECK(error_of("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 100 --seq-length 8 --bf16 "
                 "--micro-batch-size 9007199254740992",
                 1024) ==
        "train.sh: line 1: --micro-batch-size: 9007199254740992 sequences per micro-batch on 1024 replicas is beyond "
        "any batch trainsim models");
  CHECK(error_of("torchrun --nproc-per-node 9007199254740992 --nnodes 1024 pretrain_gpt.py --num-layers 4 "
                 "--hidden-size 64 --num-attention-heads 4 --vocab-size 100 --seq-length 8 --bf16",
                 0) ==
        "train.sh: line 1: --nproc-per-node: 9007199254740992 GPUs per node on 1024 nodes is beyond any cluster "
        "trainsim models");
}

TEST_CASE("--model replaces the architecture flags") {
  const ImportedScenario m = import(
      "--num-layers 80 --hidden-size 8192 --tensor-model-parallel-size 8 "
      "--pipeline-model-parallel-size 4 --seq-length 8192 --bf16 --global-batch-size 64 --micro-batch-size 1",
      "dgx-h100", 64, "llama3.1-70b");
  CHECK(m.scenario["model"] == "llama3.1-70b");
  REQUIRE(m.notes.size() == 1);
  CHECK(m.notes[0].find("--hidden-size") != std::string::npos);
  CHECK(parse(m).model.layers == 80);
}

TEST_CASE("hybrid ratios place the layers as Megatron-Core's allocate_layers does") {
  // 10 layers, attention 0.2: A = 2 attention layers between 8 Mamba layers in 3 sections of 8/3;
  // the budget 2.67, 1.67, 0.67, -0.33 (< 0.5: attention at layer 3, +2.67), 1.33, 0.33 (attention
  // at 6), then 2, 1, 0 -> MMM*MM*MMM.
  CHECK(trainsim::config::allocate_hybrid_layers(10, 0.2, 0.0) == "MMM*MM*MMM");
  // MLP 0.3: 3 MLP layers over the 5 Mamba layers left, 5/3 each: 1.67, 0.67, -0.33 (MLP at layer 2),
  // 1.33 (layer 4), 0.33 (MLP at 5), 2 (layer 7), 1 (8), 0 (MLP at 9) -> MM-*M-*MM-.
  CHECK(trainsim::config::allocate_hybrid_layers(10, 0.2, 0.3) == "MM-*M-*MM-");
  CHECK(trainsim::config::allocate_hybrid_layers(4, 0, 0) == "MMMM");
  const ImportedScenario m = import(
      "python pretrain_mamba.py --num-layers 10 --hidden-size 256 --num-attention-heads 4 --vocab-size 1000 "
      "--seq-length 512 --bf16 --hybrid-attention-ratio 0.2 --hybrid-mlp-ratio 0.3 --ffn-hidden-size 1024 "
      "--squared-relu --normalization RMSNorm --disable-bias-linear --position-embedding-type none",
      "dgx-h100", 8);
  CHECK(m.scenario["model"]["hybrid_pattern"] == "MM-*M-*MM-");
  CHECK(m.scenario["model"]["ffn_hidden"] == 1024);
  CHECK(parse(m).model.layers == 10);
  // The default Mamba head count is 2·hidden / --mamba-head-dim: 0 is refused, not divided by (UBSan
  // found the division through fuzzing the import).
  CHECK(error_of("python pretrain_mamba.py --num-layers 4 --hidden-size 256 --num-attention-heads 4 --vocab-size "
                 "1000 --seq-length 512 --bf16 --hybrid-override-pattern 'M*M-' --mamba-head-dim 0") ==
        "train.sh: line 1: --mamba-head-dim: must be at least 1, got 0");
}

TEST_CASE("pipeline stages from a layout or a hybrid pattern's splits give the virtual stages") {
  const std::string base =
      "--num-layers 4 --hidden-size 256 --num-attention-heads 4 --vocab-size 1000 "
      "--seq-length 512 --bf16 --micro-batch-size 1 --global-batch-size 16 ";
  // Megatron's arguments.py: the layout's 4 stages over pp 2 are 2 virtual stages per rank.
  const auto layout =
      import(base + "--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'Et|t|t|tL'", "dgx-h100", 8)
          .scenario;
  CHECK(layout["parallel"]["virtual_stages"] == 2);
  CHECK(layout["parallel"]["schedule"] == "interleaved");
  // A hybrid pattern split in 4 by '|' on pp 2: the same, its segments' layer counts kept.
  const auto hybrid = import("python pretrain_mamba.py " + base +
                                 "--pipeline-model-parallel-size 2 --hybrid-override-pattern 'M*|M-|MM|M*' "
                                 "--num-layers 8 --ffn-hidden-size 1024",
                             "dgx-h100", 8)
                          .scenario;
  CHECK(hybrid["model"]["hybrid_pattern"] == "M*M-MMM*");
  CHECK(hybrid["parallel"]["pipeline_layout"] == "Ett|tt|tt|ttL");
  CHECK(hybrid["parallel"]["virtual_stages"] == 2);
  // --cuda-graph-modules is --cuda-graph-scope's newer name; --cuda-graph-impl full_iteration the whole step.
  CHECK(import(base + "--cuda-graph-impl transformer_engine --cuda-graph-modules attn mlp", "dgx-h100", 8)
            .scenario["training"]["cuda_graph_scope"] == nlohmann::ordered_json::array({"attn", "mlp"}));
  CHECK(import(base + "--cuda-graph-impl full_iteration", "dgx-h100", 8).scenario["training"]["cuda_graph_scope"] ==
        nlohmann::ordered_json::array({"full_iteration"}));
}

TEST_CASE("--first-last-layers-bf16: Megatron's one layer at each end unless counted, only under FP8 or FP4") {
  const std::string cmd =
      "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
      "--swiglu --vocab-size 32000 --seq-length 4096 --bf16 --fp8-format hybrid --fp8-recipe tensorwise "
      "--first-last-layers-bf16";
  const auto defaults = import(cmd);
  CHECK(defaults.scenario["training"]["bf16_layers_at_start"] == 1);
  CHECK(defaults.scenario["training"]["bf16_layers_at_end"] == 1);
  const auto counted = import(cmd + " --num-layers-at-start-in-bf16 0 --num-layers-at-end-in-bf16 4");
  CHECK(!counted.scenario["training"].contains("bf16_layers_at_start"));
  CHECK(counted.scenario["training"]["bf16_layers_at_end"] == 4);
  CHECK(parse(counted).training.bf16_layers_at_end == 4);
  const auto plain = import(
      "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
      "--vocab-size 32000 --seq-length 4096 --bf16 --first-last-layers-bf16");
  CHECK(!plain.scenario["training"].contains("bf16_layers_at_end"));
}

TEST_CASE("--keep-mtp-spec-in-bf16 and --keep-mamba-stack-attention-linear-in-bf16: module_precision") {
  const std::string cmd =
      "python pretrain_mamba.py --num-layers 4 --hidden-size 1024 --num-attention-heads 8 --vocab-size 32000 "
      "--seq-length 4096 --hybrid-override-pattern 'M*ME' --num-experts 8 --moe-router-topk 2 "
      "--moe-ffn-hidden-size 1024 --mtp-num-layers 1 --bf16 --fp8-format e4m3 "
      "--fp8-recipe mxfp8 --keep-mtp-spec-in-bf16 --keep-mamba-stack-attention-linear-in-bf16";
  const auto kept = import(cmd, "dgx-b200", 8);
  CHECK(kept.scenario["training"]["module_precision"] ==
        nlohmann::ordered_json({{"mtp", "bf16"}, {"attention_linears", "bf16"}}));
  const auto s = parse(kept);
  CHECK(s.training.bf16_mtp);
  CHECK(s.training.bf16_modules == trainsim::workload::kQuantAttentionLinears);
  // Without FP8 or FP4 there is nothing to keep: a note, and no key.
  std::string bf16 = cmd;
  bf16.replace(bf16.find(" --fp8-format e4m3 --fp8-recipe mxfp8"), 37, "");
  const auto plain = import(bf16, "dgx-b200", 8);
  CHECK(!plain.scenario["training"].contains("module_precision"));
  CHECK(std::any_of(plain.notes.begin(), plain.notes.end(), [](const std::string& n) {
    return n.find("--keep-mtp-spec-in-bf16 without --fp8-format or --fp4-format") != std::string::npos;
  }));
}

TEST_CASE("--fp8-recipe: training.fp8_recipe for the recipes trainsim models, a note for custom") {
  const std::string cmd =
      "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
      "--swiglu --vocab-size 32000 --seq-length 4096 --bf16 --fp8-format e4m3";
  CHECK(!import(cmd).scenario["training"].contains("fp8_recipe"));  // Megatron's default: the GPU's
  for (const char* recipe : {"delayed", "tensorwise", "blockwise"}) {
    INFO(recipe);
    const auto imported = import(cmd + " --fp8-recipe " + recipe);
    CHECK(imported.scenario["training"]["fp8_recipe"] == recipe);
    CHECK(trainsim::config::fp8_recipe_name(trainsim::config::fp8_recipe(parse(imported))) == recipe);
  }
  const auto custom = import(cmd + " --fp8-recipe custom");
  CHECK(!custom.scenario["training"].contains("fp8_recipe"));
  CHECK(std::ranges::any_of(custom.notes, [](const std::string& n) { return n.find("--fp8-recipe custom") == 0; }));
  // Without --fp8-format the recipe means nothing (Megatron trains in BF16).
  CHECK(!import(cmd.substr(0, cmd.find(" --fp8-format")) + " --fp8-recipe mxfp8")
             .scenario["training"]
             .contains("fp8_recipe"));
}

TEST_CASE("--fp8-param-gather: training.fp8_param_gather under FP8, a note without it") {
  const std::string cmd =
      "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
      "--swiglu --vocab-size 32000 --seq-length 4096 --bf16 --use-distributed-optimizer --fp8-param-gather";
  const auto fp8 = import(cmd + " --fp8-format hybrid");
  CHECK(fp8.scenario["training"]["fp8_param_gather"] == true);
  CHECK(parse(fp8).training.fp8_param_gather);
  CHECK(fp8.not_modelled.empty());
  // MXFP8 parameters gathered in BF16 into the gradient buffer: what the scenario models for them.
  const auto mx = import(cmd + " --fp8-format e4m3 --fp8-recipe mxfp8 --reuse-grad-buf-for-mxfp8-param-ag");
  CHECK(mx.scenario["training"]["fp8_param_gather"] == true);
  CHECK(mx.not_modelled.empty());
  const auto bf16 = import(cmd);
  CHECK(!bf16.scenario["training"].contains("fp8_param_gather"));
  CHECK(
      std::ranges::any_of(bf16.notes, [](const std::string& n) { return n.find("--fp8-param-gather without") == 0; }));
}

TEST_CASE("--defer-embedding-wgrad-compute with --wgrad-deferral-limit: the output layer's wgrad in the flush") {
  const std::string cmd =
      "torchrun --nproc-per-node 8 --nnodes 2 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
      "--num-attention-heads 32 --swiglu --vocab-size 32000 --seq-length 4096 --bf16 --use-distributed-optimizer "
      "--pipeline-model-parallel-size 4 --defer-embedding-wgrad-compute";
  const auto all = import(cmd);
  CHECK(all.scenario["parallel"]["defer_embedding_wgrad_compute"] == true);
  CHECK(!all.scenario["parallel"].contains("wgrad_deferral_limit"));  // Megatron's 0: every micro-batch
  const auto limited = import(cmd + " --wgrad-deferral-limit 22");
  CHECK(limited.scenario["parallel"]["wgrad_deferral_limit"] == 22);
  CHECK(parse(limited).parallel.wgrad_deferral_limit == 22);
  CHECK(limited.not_modelled.empty());
  const auto alone = import(cmd.substr(0, cmd.find(" --defer-embedding")) + " --wgrad-deferral-limit 22");
  CHECK(!alone.scenario["parallel"].contains("wgrad_deferral_limit"));
  CHECK(std::ranges::any_of(alone.notes,
                            [](const std::string& n) { return n.find("--wgrad-deferral-limit without") == 0; }));
}

TEST_CASE("--no-align-param-gather: the overlapped gathers dispatched on demand") {
  const std::string cmd =
      "torchrun --nproc-per-node 8 --nnodes 2 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
      "--num-attention-heads 32 --swiglu --vocab-size 32000 --seq-length 4096 --bf16 --use-distributed-optimizer "
      "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 4 --global-batch-size 16 "
      "--overlap-grad-reduce "
      "--overlap-param-gather";
  CHECK(!import(cmd).scenario["parallel"].contains("align_param_gather"));  // Megatron-LM's default: aligned
  const auto off = import(cmd + " --no-align-param-gather");
  CHECK(off.scenario["parallel"]["align_param_gather"] == false);
  CHECK(parse(off).parallel.align_param_gather == false);
  CHECK(off.not_modelled.empty());
}

TEST_CASE("--num-distributed-optimizer-instances: the distributed optimizer's instances") {
  const std::string cmd =
      "torchrun --nproc-per-node 8 --nnodes 4 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
      "--num-attention-heads 32 --swiglu --vocab-size 32000 --seq-length 4096 --bf16 --use-distributed-optimizer";
  CHECK(!import(cmd).scenario["parallel"].contains("distributed_optimizer_instances"));
  CHECK(!import(cmd + " --num-distributed-optimizer-instances 1")
             .scenario["parallel"]
             .contains("distributed_optimizer_instances"));
  const auto four = import(cmd + " --num-distributed-optimizer-instances 4");
  CHECK(four.scenario["parallel"]["distributed_optimizer_instances"] == 4);
  CHECK(parse(four).parallel.dist_opt_instances == 4);
  // Megatron FSDP with instances is hybrid sharding (HSDP, its outer strategy no_shard); optim
  // (HFSDP) also shards the optimizer states across the replicas: outer_dp_sharding_strategy.
  const std::string fsdp =
      "torchrun --nproc-per-node 8 --nnodes 4 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
      "--num-attention-heads 32 --swiglu --vocab-size 32000 --seq-length 4096 --bf16 --use-megatron-fsdp "
      "--num-distributed-optimizer-instances 4";
  const auto hsdp = import(fsdp + " --outer-dp-sharding-strategy no_shard");
  CHECK(hsdp.scenario["parallel"]["zero"] == 3);
  CHECK(parse(hsdp).parallel.dist_opt_instances == 4);
  CHECK(hsdp.not_modelled.empty());
  const auto hfsdp = import(fsdp + " --outer-dp-sharding-strategy optim");
  CHECK(hfsdp.not_modelled.empty());
  CHECK(parse(hfsdp).parallel.outer_optim_shard);
  CHECK_FALSE(parse(hsdp).parallel.outer_optim_shard);
}

TEST_CASE("--cp-comm-type: a2a and allgather read, a2a+p2p simulated as the ring, a bad type one line") {
  const std::string cmd =
      "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
      "--swiglu --vocab-size 32000 --seq-length 32768 --bf16 --context-parallel-size 4";
  CHECK(import(cmd + " --cp-comm-type a2a").scenario["parallel"]["cp_comm_type"] == "a2a");
  CHECK(import(cmd + " --cp-comm-type allgather").scenario["parallel"]["cp_comm_type"] == "allgather");
  CHECK(!import(cmd + " --cp-comm-type p2p").scenario["parallel"].contains("cp_comm_type"));
  const auto hierarchical = import(cmd + " --cp-comm-type a2a+p2p");
  CHECK(!hierarchical.scenario["parallel"].contains("cp_comm_type"));
  CHECK(std::any_of(hierarchical.notes.begin(), hierarchical.notes.end(),
                    [](const std::string& n) { return n.find("a2a+p2p") != std::string::npos; }));
  CHECK(error_of(cmd + " --cp-comm-type ring", 8) ==
        "train.sh: line 1: --cp-comm-type: unknown type \"ring\" (expected p2p, a2a, allgather or a2a+p2p)");
}

TEST_CASE("--moe-shared-expert-overlap: read with expert parallelism and a shared expert, else a note") {
  const std::string moe =
      "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 8 --hidden-size 2048 --num-attention-heads 16 "
      "--swiglu --vocab-size 32000 --seq-length 4096 --bf16 --num-experts 64 --moe-router-topk 6 "
      "--moe-ffn-hidden-size 1408 --moe-grouped-gemm --moe-token-dispatcher-type alltoall --moe-shared-expert-overlap";
  const auto with = import(moe + " --moe-shared-expert-intermediate-size 2816 --expert-model-parallel-size 8");
  CHECK(with.scenario["parallel"]["moe_shared_expert_overlap"] == true);
  CHECK(parse(with).parallel.moe_shared_expert_overlap);
  // No shared expert, no expert parallelism, or beside the combined 1F1B: nothing set, a note.
  for (const std::string& extra :
       {std::string(" --expert-model-parallel-size 8"), std::string(" --moe-shared-expert-intermediate-size 2816"),
        std::string(" --moe-shared-expert-intermediate-size 2816 --expert-model-parallel-size "
                    "8 --overlap-moe-expert-parallel-comm")}) {
    INFO(extra);
    const auto m = import(moe + extra);
    CHECK(!m.scenario["parallel"].contains("moe_shared_expert_overlap"));
    CHECK(std::any_of(m.notes.begin(), m.notes.end(),
                      [](const std::string& n) { return n.find("--moe-shared-expert-overlap") != std::string::npos; }));
  }
}

TEST_CASE("--moe-router-num-groups and --moe-router-group-topk: group-limited routing, the pair or an error") {
  const std::string moe =
      "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 8 --hidden-size 2048 --num-attention-heads 16 "
      "--swiglu --vocab-size 32000 --seq-length 4096 --bf16 --num-experts 64 --moe-router-topk 8 "
      "--moe-ffn-hidden-size 1408 --moe-grouped-gemm --moe-token-dispatcher-type alltoall";
  const auto limited = import(moe + " --moe-router-num-groups 8 --moe-router-group-topk 4");
  CHECK(limited.scenario["model"]["router_groups"] == 8);
  CHECK(limited.scenario["model"]["router_group_topk"] == 4);
  const auto m = parse(limited).model;
  CHECK((m.router_groups == 8 && m.router_group_topk == 4));
  CHECK(!import(moe).scenario["model"].contains("router_groups"));
  CHECK(error_of(moe + " --moe-router-num-groups 8", 8) ==
        "train.sh: line 1: --moe-router-num-groups: needs --moe-router-group-topk");
  CHECK(error_of(moe + " --moe-router-group-topk 4", 8) ==
        "train.sh: line 1: --moe-router-group-topk: needs --moe-router-num-groups");
}

TEST_CASE("--moe-token-dispatcher-type: allgather, Megatron's default, read as such") {
  const std::string moe =
      "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 8 --hidden-size 2048 --num-attention-heads 16 "
      "--swiglu --vocab-size 32000 --seq-length 4096 --bf16 --num-experts 8 --moe-router-topk 2 "
      "--moe-ffn-hidden-size 1408 --moe-grouped-gemm --expert-model-parallel-size 8";
  const auto by_default = import(moe);
  CHECK(by_default.scenario["parallel"]["moe_token_dispatcher"] == "allgather");
  CHECK(std::any_of(by_default.notes.begin(), by_default.notes.end(), [](const std::string& n) {
    return n.find("Megatron's default --moe-token-dispatcher-type") != std::string::npos;
  }));
  CHECK(parse(by_default).parallel.moe_dispatcher == trainsim::config::MoeDispatcher::allgather);
  const auto named = import(moe + " --moe-token-dispatcher-type allgather");
  CHECK(named.scenario["parallel"]["moe_token_dispatcher"] == "allgather");
  CHECK(named.not_modelled.empty());
  CHECK(!import(moe + " --moe-token-dispatcher-type alltoall").scenario["parallel"].contains("moe_token_dispatcher"));
}

// Megatron-Core's router and permute fusions are off unless asked: a MoE script without the switches
// reads as both false, with a note each; with them, nothing is written (trainsim's default). A dense
// model's switches change nothing.
TEST_CASE("--moe-router-fusion and --moe-permute-fusion: off unless given, as Megatron-LM runs them") {
  const std::string moe =
      "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 8 --hidden-size 2048 --num-attention-heads 16 "
      "--swiglu --vocab-size 32000 --seq-length 4096 --bf16 --num-experts 8 --moe-router-topk 2 "
      "--moe-ffn-hidden-size 1408 --moe-grouped-gemm --expert-model-parallel-size 8 "
      "--moe-token-dispatcher-type alltoall";
  const auto plain = import(moe);
  CHECK(plain.scenario["training"]["moe_router_fusion"] == false);
  CHECK(plain.scenario["training"]["moe_permute_fusion"] == false);
  for (const char* what : {"without --moe-router-fusion", "without --moe-permute-fusion"})
    CHECK(std::any_of(plain.notes.begin(), plain.notes.end(),
                      [&](const std::string& n) { return n.find(what) != std::string::npos; }));
  CHECK_FALSE(parse(plain).training.moe_router_fusion);
  CHECK_FALSE(parse(plain).training.moe_permute_fusion);
  const auto fused = import(moe + " --moe-router-fusion --moe-permute-fusion");
  CHECK_FALSE(fused.scenario["training"].contains("moe_router_fusion"));
  CHECK_FALSE(fused.scenario["training"].contains("moe_permute_fusion"));
  CHECK(fused.not_modelled.empty());
  const auto dense = import(
      "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 8 --hidden-size 2048 --num-attention-heads 16 "
      "--swiglu --vocab-size 32000 --seq-length 4096 --bf16 --moe-router-fusion");
  CHECK_FALSE(dense.scenario["training"].contains("moe_router_fusion"));
  CHECK(dense.not_modelled.empty());
}

// Megatron-Core runs the experts as SequentialMLP unless --moe-grouped-gemm: a MoE script without it
// reads as training.moe_grouped_gemm false, with a note; with it nothing is written. Export writes the
// switch only where the scenario runs the grouped GEMM.
TEST_CASE("--moe-grouped-gemm: SequentialMLP unless given, as Megatron-LM runs it") {
  const std::string moe =
      "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 8 --hidden-size 2048 --num-attention-heads 16 "
      "--swiglu --vocab-size 32000 --seq-length 4096 --bf16 --num-experts 8 --moe-router-topk 2 "
      "--moe-ffn-hidden-size 1408 --expert-model-parallel-size 8 --moe-token-dispatcher-type alltoall "
      "--moe-router-fusion --moe-permute-fusion";
  const auto plain = import(moe);
  CHECK(plain.scenario["training"]["moe_grouped_gemm"] == false);
  CHECK(std::any_of(plain.notes.begin(), plain.notes.end(), [](const std::string& n) {
    return n.find("without --moe-grouped-gemm Megatron-Core runs the experts one MLP module at a time") !=
           std::string::npos;
  }));
  CHECK_FALSE(parse(plain).training.moe_grouped_gemm);
  const auto grouped = import(moe + " --moe-grouped-gemm");
  CHECK_FALSE(grouped.scenario["training"].contains("moe_grouped_gemm"));
  CHECK(parse(grouped).training.moe_grouped_gemm);
}

TEST_CASE("--moe-layer-freq: N, dense layers first, or any pattern") {
  const std::string cmd =
      "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 4 --hidden-size 2048 --num-attention-heads 16 "
      "--swiglu --vocab-size 32000 --seq-length 4096 --bf16 --num-experts 8 --moe-router-topk 2 "
      "--moe-ffn-hidden-size 1408 --ffn-hidden-size 8192 --moe-grouped-gemm --moe-token-dispatcher-type alltoall";
  // N: layer i has experts when i mod N is 0 (Megatron-Core's moe_layer_freq int).
  const auto every2 = import(cmd + " --moe-layer-freq 2");
  CHECK(every2.scenario["model"]["moe_layer_freq"] == nlohmann::ordered_json::array({1, 0, 1, 0}));
  CHECK(every2.scenario["model"]["ffn_hidden"] == 8192);
  CHECK(parse(every2).model.moe_layer_pattern == "1010");
  CHECK(import(cmd + " --moe-layer-freq ([0]*1+[1]*3)").scenario["model"]["first_dense_layers"] == 1);
  CHECK(import(cmd + " --moe-layer-freq [0,1,1,0]").scenario["model"]["moe_layer_freq"] ==
        nlohmann::ordered_json::array({0, 1, 1, 0}));
  CHECK(!import(cmd + " --moe-layer-freq 1").scenario["model"].contains("moe_layer_freq"));
}

TEST_CASE("--fine-grained-activation-offloading --offload-modules: training.offload_modules") {
  const std::string moe =
      "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 8 --hidden-size 2048 --num-attention-heads 16 "
      "--swiglu --vocab-size 32000 --seq-length 4096 --bf16 --num-experts 8 --moe-router-topk 2 "
      "--moe-ffn-hidden-size 1408 --moe-grouped-gemm --expert-model-parallel-size 8 "
      "--fine-grained-activation-offloading";
  const auto attention = import(moe + " --offload-modules core_attn attn_proj");
  CHECK(attention.scenario["training"]["offload_modules"] == nlohmann::json::array({"core_attn", "attn_proj"}));
  CHECK(parse(attention).training.offload_modules ==
        (trainsim::workload::kOffloadCoreAttn | trainsim::workload::kOffloadAttnProj));
  // Transformer Engine's fused grouped MLP: what it keeps above the default threshold.
  const auto fused = import(moe + " --offload-modules fused_group_mlp");
  CHECK(fused.scenario["training"]["offload_modules"] == nlohmann::json::array({"expert_fc1", "moe_act"}));
  CHECK(std::any_of(fused.notes.begin(), fused.notes.end(), [](const std::string& n) {
    return n.starts_with("--offload-modules fused_group_mlp: offloaded as expert_fc1 and moe_act");
  }));
  const auto none = import(moe);
  CHECK(!none.scenario["training"].contains("offload_modules"));
  CHECK(std::any_of(none.notes.begin(), none.notes.end(), [](const std::string& n) {
    return n.find("without --offload-modules: nothing offloaded") != std::string::npos;
  }));
}
