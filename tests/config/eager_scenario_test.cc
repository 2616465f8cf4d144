// training.framework: "pytorch-eager" (the single-GPU eager PyTorch model of workload/eager_ops.h)
// parses with its host keys, and everything it cannot model is refused on its JSON path.

#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "config/scenario.h"
#include "util/error.h"

using nlohmann::json;
using trainsim::config::Framework;
using trainsim::config::parse_scenario;
using trainsim::util::InputError;
using trainsim::util::JsonNode;

namespace {

json eager(const json& training_extra = json::object(), const json& model_extra = json::object()) {
  json model = {{"name", "tiny-llama"}, {"layers", 4},        {"hidden", 1024}, {"heads", 8},
                {"kv_heads", 8},        {"ffn_hidden", 2816}, {"vocab", 32000}, {"mlp", "swiglu"}};
  model.update(model_extra);
  json training = {{"micro_batch", 2}, {"global_batch", 2}, {"seq_len", 1024}, {"framework", "pytorch-eager"}};
  training.update(training_extra);
  return {{"model", model}, {"cluster", "dgx-h200"}, {"gpus", 1}, {"training", training}};
}

trainsim::config::Scenario parse(const json& j) {
  return parse_scenario(JsonNode(j, "eager.json"), TRAINSIM_SOURCE_DIR);
}

// The one-line message of the InputError `j` raises.
std::string error(const json& j) {
  try {
    (void)parse(j);
  } catch (const InputError& e) {
    return e.what();
  }
  FAIL("no error");
  return {};
}

}  // namespace

TEST_CASE("framework defaults to megatron; pytorch-eager takes its host costs in microseconds", "[config]") {
  json plain = eager();
  plain["training"].erase("framework");
  CHECK(parse(plain).training.framework == Framework::megatron);
  const auto sc = parse(eager({{"host_forward_us", 9.5}, {"host_backward_us", 3}}));
  CHECK(sc.training.framework == Framework::pytorch_eager);
  CHECK(sc.training.host_forward_s == Approx(9.5e-6));
  CHECK(sc.training.host_backward_s == Approx(3e-6));
  // Defaults: [A] 8 and 4 µs.
  CHECK(parse(eager()).training.host_forward_s == Approx(8e-6));
  CHECK(parse(eager()).training.host_backward_s == Approx(4e-6));
}

TEST_CASE("framework values and host keys are checked on their paths", "[config]") {
  CHECK(error(eager({{"framework", "jax"}})) ==
        "eager.json: training.framework: unknown value \"jax\" (expected one of: megatron, pytorch-eager, "
        "torchtitan, megatron-deepspeed, pytorch-compile)");
  CHECK(error(eager({{"framework", "pytorch-compile"}})) ==
        "eager.json: training.framework: \"pytorch-compile\" is not supported yet (supported: megatron, "
        "pytorch-eager, torchtitan, megatron-deepspeed)");
  CHECK(error(eager({{"framework", "megatron"}, {"host_forward_us", 5}})) ==
        "eager.json: training.host_forward_us: applies to \"framework\": \"pytorch-eager\" or \"torchtitan\" only");
  CHECK(error(eager({{"host_backward_us", 0}})).find("training.host_backward_us") != std::string::npos);
  CHECK(error(eager({{"cross_entropy", "fused"}})) ==
        "eager.json: training.cross_entropy: applies to \"framework\": \"megatron\" only (pytorch-eager runs "
        "torch's cross_entropy)");
  CHECK(error(eager({{"grad_reduce_in_fp32", true}})) ==
        "eager.json: training.grad_reduce_in_fp32: applies to \"framework\": \"megatron\" only (pytorch-eager "
        "keeps bf16 gradients)");
  CHECK(error(eager({{"gradient_accumulation_fusion", false}})) ==
        "eager.json: training.gradient_accumulation_fusion: applies to \"framework\": \"megatron\" only "
        "(pytorch-eager has no main_grad buffer)");
  CHECK(error(eager({{"moe_router_fusion", false}})) ==
        "eager.json: training.moe_router_fusion: applies to \"framework\": \"megatron\" only (Megatron-Core's MoE "
        "layers)");
  CHECK(error(eager({{"moe_grouped_gemm", false}})) ==
        "eager.json: training.moe_grouped_gemm: applies to \"framework\": \"megatron\" only (Megatron-Core's MoE "
        "layers)");
}

TEST_CASE("pytorch-eager refuses what its model does not cover", "[config]") {
  json two = eager();
  two["gpus"] = 2;
  two["training"]["global_batch"] = 4;
  CHECK(error(two) == "eager.json: gpus: framework pytorch-eager simulates one GPU, got 2");
  CHECK(error(eager(json::object(), {{"mlp", "gelu"}})) ==
        "eager.json: training.framework: pytorch-eager needs a Llama-style model (mlp swiglu)");
  CHECK(error(eager(json::object(), {{"tied_embeddings", true}})) ==
        "eager.json: training.framework: pytorch-eager needs untied embeddings (its LM head is a separate weight)");
  CHECK(error(eager({{"recompute", "full"}})) == "eager.json: training.framework: pytorch-eager needs recompute none");
  CHECK(error(eager({{"attention", "softmax"}})) ==
        "eager.json: training.framework: pytorch-eager needs fused attention (attention flash or flash2)");
  CHECK(error(eager({{"precision", "fp16"}})) == "eager.json: training.framework: pytorch-eager needs precision bf16");
  CHECK(error(eager(json::object(), {{"post_norms", true}})) ==
        "eager.json: training.framework: pytorch-eager needs a model without post_norms (its Llama has none)");
  // Grouped-query attention runs SDPA's enable_gqa (the model keys already make kv_heads divide heads).
  CHECK(parse(eager(json::object(), {{"kv_heads", 2}})).model.kv_heads == 2);
}

namespace {

// torchtitan: Llama 3 8B's shape at 4 layers with grouped-query attention, FSDP2 over 8 GPUs.
json titan(const json& training_extra = json::object(), const json& parallel_extra = json::object()) {
  json j = eager(training_extra, {{"kv_heads", 2}});
  j["gpus"] = 8;
  j["training"]["framework"] = "torchtitan";
  j["training"]["global_batch"] = 16;
  j["parallel"] = {{"zero", 3}};
  j["parallel"].update(parallel_extra);
  j["training"].update(training_extra);
  return j;
}

}  // namespace

TEST_CASE("torchtitan: FSDP2 over data parallelism, torch_compile, its checkpointing policy", "[config]") {
  const auto sc = parse(titan({{"torch_compile", true}, {"recompute", "selective"}}));
  CHECK(sc.training.framework == Framework::torchtitan);
  CHECK(sc.training.torch_compile);
  CHECK(sc.parallel.dp == 8);
  // Selective recompute is torchtitan's op-level policy, not Megatron's modules.
  CHECK(sc.training.recompute_modules == trainsim::workload::kRecomputeTorchtitanOp);
  CHECK(trainsim::config::framework_name(sc.training.framework) == "torchtitan");
  CHECK_FALSE(parse(titan()).training.torch_compile);
  // FSDP2 reduces gradients in fp32 unless told bf16 (torchtitan's mixed_precision_reduce).
  CHECK(parse(titan()).training.grad_reduce_in_fp32);
  CHECK_FALSE(parse(titan({{"grad_reduce_in_fp32", false}})).training.grad_reduce_in_fp32);
}

TEST_CASE("torchtitan refuses what its model does not cover, on the key's path", "[config]") {
  CHECK(error(titan(json::object(), {{"zero", 1}})) ==
        "eager.json: parallel.zero: torchtitan shards with FSDP2: needs zero 3, or zero 2 with zero2_param_gather "
        "per_unit, got 1");
  CHECK(error(titan({{"global_batch", 8}}, {{"tp", 2}})) ==
        "eager.json: parallel.sequence_parallel: torchtitan tensor parallelism is sequence-parallel: needs "
        "sequence_parallel true");
  CHECK(error(titan({{"global_batch", 8}}, {{"tp", 2}, {"sequence_parallel", true}, {"tp_comm_overlap", true}})) ==
        "eager.json: parallel.tp_comm_overlap: torchtitan async tensor parallelism needs torch_compile");
  CHECK(error(titan({{"global_batch", 2}}, {{"tp", 4}, {"sequence_parallel", true}})) ==
        "eager.json: parallel.tp: 4 does not divide kv_heads (2)");
  CHECK(parse(titan({{"global_batch", 8}}, {{"tp", 2}, {"sequence_parallel", true}})).parallel.tp == 2);
  CHECK(error(titan({{"global_batch", 16}}, {{"pp", 2}, {"schedule", "zb-h1"}})) ==
        "eager.json: parallel.zero: zero 3 with the zb-h1 schedule is not supported yet (its weight-gradient passes "
        "would re-gather each layer)");
  CHECK(parse(titan({{"global_batch", 16}}, {{"pp", 2}})).parallel.pp == 2);
  CHECK(error(titan({{"global_batch", 8}}, {{"cp", 2}, {"cp_comm_type", "a2a"}})) ==
        "eager.json: parallel.cp_comm_type: torchtitan context parallelism rotates by allgather or around the ring "
        "(p2p), not a2a");
  CHECK(parse(titan({{"global_batch", 8}}, {{"cp", 2}, {"cp_comm_type", "allgather"}})).parallel.cp == 2);
  CHECK(error(titan({{"precision", "fp8"}})) ==
        "eager.json: training.precision: torchtitan Float8 without torch_compile is not supported yet");
  CHECK(error(titan({{"precision", "fp16"}})) ==
        "eager.json: training.precision: torchtitan runs bf16, or fp8 as torchao's Float8");
  CHECK(parse(titan({{"precision", "fp8"}, {"torch_compile", true}})).training.precision ==
        trainsim::config::Precision::fp8);
  CHECK(error(titan({{"attention", "softmax"}})) ==
        "eager.json: training.attention: torchtitan needs fused attention (scaled_dot_product_attention: attention "
        "flash or flash2)");
  CHECK(error(titan({{"recompute", "selective"}, {"recompute_modules", json::array({"mlp"})}})) ==
        "eager.json: training.recompute_modules: torchtitan has no recompute modules (recompute selective is its "
        "op-level policy)");
  CHECK(error(titan({{"cross_entropy", "fused"}})) ==
        "eager.json: training.cross_entropy: applies to \"framework\": \"megatron\" only (torchtitan runs torch's "
        "cross_entropy)");
  CHECK(error(titan({{"gradient_accumulation_fusion", true}})) ==
        "eager.json: training.gradient_accumulation_fusion: applies to \"framework\": \"megatron\" only "
        "(torchtitan has no main_grad buffer)");
  CHECK(error(titan({{"moe_permute_fusion", true}})) ==
        "eager.json: training.moe_permute_fusion: applies to \"framework\": \"megatron\" only (Megatron-Core's MoE "
        "layers)");
  CHECK(error(eager({{"torch_compile", true}})) ==
        "eager.json: training.torch_compile: applies to \"framework\": \"torchtitan\" only");
  json gemma = titan();
  gemma["model"]["post_norms"] = true;
  CHECK(error(gemma) ==
        "eager.json: training.framework: torchtitan needs a model without post_norms (torchtitan's Llama has none)");
  json moe = titan();
  moe["model"].erase("ffn_hidden");
  moe["model"].update({{"experts", 8}, {"experts_per_token", 2}, {"moe_ffn_hidden", 512}});
  CHECK(error(moe) ==
        "eager.json: training.framework: torchtitan with a mixture-of-experts model is not supported yet");
}
