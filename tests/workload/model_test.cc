#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "util/error.h"
#include "util/json_node.h"
#include "workload/model.h"

using trainsim::util::InputError;
using trainsim::util::JsonNode;
using namespace trainsim::workload;

namespace {

ModelSpec parse(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text);
  return parse_model(JsonNode(j, "m.json"));
}

// A model file shipped in models/, by its name.
ModelSpec model(const std::string& name) {
  const nlohmann::json j =
      trainsim::util::read_json_file(std::string(TRAINSIM_SOURCE_DIR) + "/models/" + name + ".json");
  return parse_model(JsonNode(j, name + ".json"));
}

ModelSpec parse_hf(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text);
  JsonNode node(j, "config.json");
  REQUIRE(is_hf_config(node));
  return parse_hf_config(node, "fallback");
}

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

const char* kLlama31_8b = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
  "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
  "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
  "rope_scaling": {"factor": 8.0, "rope_type": "llama3"}, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16"})";

}  // namespace

// Llama 3.1 8B: 32 x (attention 4096·(4096 + 2·1024 + 4096) + SwiGLU 3·4096·14336 + 2 norms)
// + untied 128256 x 4096 embedding and head + final norm = 8,030,261,248 (ecosystem.md §1.2).
TEST_CASE("Llama parameter counts match the published totals") {
  ModelSpec m8 = parse_hf(kLlama31_8b);
  CHECK(m8.total_params() == 8'030'261'248);
  ModelSpec m70 = parse(R"({"name": "l70", "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8,
                            "ffn_hidden": 28672, "vocab": 128256, "mlp": "swiglu"})");
  CHECK(m70.total_params() == 70'553'706'496);
}

// Narayanan et al. 2021: a GPT layer holds 12h² + 13h parameters (weights, biases, 2 LayerNorms).
TEST_CASE("GPT layer parameters are 12h^2 + 13h") {
  ModelSpec m = parse(R"({"name": "g", "layers": 96, "hidden": 12288, "heads": 96, "kv_heads": 96,
                          "ffn_hidden": 49152, "vocab": 51200, "mlp": "gelu", "tied_embeddings": true})");
  const std::int64_t h = 12288;
  CHECK(m.params_per_layer() == 12 * h * h + 13 * h);
  CHECK(m.total_params() == 96 * (12 * h * h + 13 * h) + 51200 * h + 2 * h);
}

TEST_CASE("every model file in models/ parses") {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(TRAINSIM_SOURCE_DIR) + "/models")) {
    if (entry.path().extension() != ".json") continue;
    nlohmann::json j = trainsim::util::read_json_file(entry.path().string());
    ModelSpec m = parse_model(JsonNode(j, entry.path().string()));
    CHECK(m.name == entry.path().stem().string());
    ++count;
  }
  CHECK(count >= 17);
  // GPT-OSS 120B: OpenAI's model card gives 116.8 B parameters. By hand from its config.json (h 2880,
  // 64 query and 8 key-value heads of 64, 128 experts of 2880, vocabulary 201,088, untied): per layer
  // QKV 2880 x 5120 and output 4096 x 2880 with their biases (5120 + 2880), the router 2880 x 128 and
  // its bias, 128 experts of 3 x 2880 x 2880 with fc1's 5760 and fc2's 2880 biases, two RMSNorms; then
  // the embedding, the output layer and the final norm. Its attention sinks (64 per layer, 2304 in
  // all) are the only parameters left out.
  const ModelSpec gpt_oss = model("gpt-oss-120b");
  CHECK(gpt_oss.linear_bias);
  CHECK(gpt_oss.glu_clamp == 7.0);  // its config.json's swiglu_limit
  const std::int64_t h = 2880, experts = 128;
  const std::int64_t layer =
      h * 5120 + 4096 * h + (5120 + h) + h * experts + experts + experts * (3 * h * h + 2 * h + h) + 2 * h;
  CHECK(gpt_oss.total_params() == 36 * layer + 2 * 201088 * h + h);
  CHECK(std::abs(static_cast<double>(gpt_oss.total_params()) / 1e9 - 116.8) < 0.05);
  // GPT-OSS 20B (openai/gpt-oss-20b's config.json): the same layer with 32 experts, 24 layers. OpenAI's
  // model card: 20.91 B parameters.
  const ModelSpec small = model("gpt-oss-20b");
  CHECK(small.experts == 32);
  const std::int64_t small_layer =
      h * 5120 + 4096 * h + (5120 + h) + h * 32 + 32 + 32 * (3 * h * h + 2 * h + h) + 2 * h;
  CHECK(small.total_params() == 24 * small_layer + 2 * 201088 * h + h);
  CHECK(std::abs(static_cast<double>(small.total_params()) / 1e9 - 20.91) < 0.01);
}

TEST_CASE("model JSON defaults and validation") {
  ModelSpec m = parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2,
                          "ffn_hidden": 256, "vocab": 100, "mlp": "swiglu"})");
  CHECK(m.head_dim == 16);
  CHECK_FALSE(m.tied_embeddings);
  CHECK(m.dropout == 0.0);

  CHECK(error_of([] {
          parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4,
                                "ffn_hidden": 256, "vocab": 100, "mlp": "gelu", "colour": 1})");
        }) ==
        "m.json: colour: unknown key (expected one of: name, layers, hidden, heads, kv_heads, ffn_hidden, "
        "vocab, mlp, tied_embeddings, head_dim, dropout, experts, experts_per_token, moe_ffn_hidden, "
        "shared_expert_ffn_hidden, sliding_window, sliding_window_pattern, qk_norm, linear_bias, glu_clamp, "
        "post_norms, "
        "attention_softcap, logit_softcap, first_dense_layers, "
        "q_lora_rank, "
        "kv_lora_rank, qk_rope_head_dim, v_head_dim, mtp_layers, moe_latent, router_groups, router_group_topk, "
        "moe_layer_freq, attention_chunk, hybrid_pattern, mamba_heads, "
        "mamba_head_dim, mamba_state, mamba_groups, mamba_conv, mamba_chunk, compress_ratios, o_groups, o_lora_rank, "
        "index_heads, index_head_dim, index_topk, hc_streams)");
  CHECK(error_of([] {
          parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 8,
                                "ffn_hidden": 256, "vocab": 100, "mlp": "gelu"})");
        }) == "m.json: kv_heads: exceeds heads (4)");
  CHECK(error_of([] {
          parse(R"({"name": "x", "layers": 2, "hidden": 96, "heads": 6, "kv_heads": 4,
                                "ffn_hidden": 256, "vocab": 100, "mlp": "gelu"})");
        }) == "m.json: kv_heads: does not divide heads (6)");
  CHECK(error_of([] {
          parse(R"({"name": "x", "layers": 0, "hidden": 64, "heads": 4, "kv_heads": 4,
                                "ffn_hidden": 256, "vocab": 100, "mlp": "gelu"})");
        }) == "m.json: layers: must be a positive integer, got 0");
  CHECK(error_of([] {
          parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4,
                                "ffn_hidden": 256, "vocab": 100, "mlp": "relu"})");
        }) == "m.json: mlp: unknown mlp \"relu\" (expected gelu, swiglu or squared_relu)");
  CHECK(error_of([] {
          parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4,
                                "ffn_hidden": 256, "vocab": 100, "mlp": "gelu", "dropout": 1})");
        }) == "m.json: dropout: must be below 1, got 1");
  CHECK(error_of([] {
          parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4,
                                "vocab": 100, "mlp": "gelu"})");
        }) == "m.json: ffn_hidden: missing required key");
  CHECK(error_of([] {
          parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4,
                                "ffn_hidden": 256, "vocab": 100, "mlp": "gelu", "linear_bias": false})");
        }) == "m.json: linear_bias: a GPT (gelu) model always carries linear biases");
  // linear_bias on a Llama-style model adds the attention's and the MLP's biases (fc1's gate and up
  // halves under SwiGLU) to each layer: q + 2 kv + h, and 2 F + h.
  const ModelSpec plain = parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2,
                                    "ffn_hidden": 256, "vocab": 100, "mlp": "swiglu"})");
  const ModelSpec biased = parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2,
                                     "ffn_hidden": 256, "vocab": 100, "mlp": "swiglu", "linear_bias": true})");
  CHECK(biased.total_params() - plain.total_params() == 2 * ((64 + 2 * 32 + 64) + (2 * 256 + 64)));
}

TEST_CASE("Hugging Face Llama config reads its keys and ignores the rest") {
  ModelSpec m = parse_hf(kLlama31_8b);
  CHECK(m.name == "fallback");
  CHECK(m.layers == 32);
  CHECK(m.hidden == 4096);
  CHECK(m.heads == 32);
  CHECK(m.kv_heads == 8);
  CHECK(m.head_dim == 128);
  CHECK(m.ffn_hidden == 14336);
  CHECK(m.vocab == 128256);
  CHECK(m.mlp == MlpKind::swiglu);
  CHECK_FALSE(m.tied_embeddings);

  // Missing num_key_value_heads means MHA; text_config nesting is followed.
  ModelSpec mha = parse_hf(R"({"model_type": "mllama", "text_config": {"num_hidden_layers": 2,
      "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 10}})");
  CHECK(mha.kv_heads == 4);
  CHECK(mha.head_dim == 16);
}

TEST_CASE("Hugging Face GPT-2 config: n_inner null is 4 n_embd, embeddings tied") {
  ModelSpec m = parse_hf(R"({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12,
                             "n_inner": null, "vocab_size": 50257, "n_positions": 1024,
                             "activation_function": "gelu_new", "resid_pdrop": 0.1})");
  CHECK(m.layers == 12);
  CHECK(m.ffn_hidden == 3072);
  CHECK(m.kv_heads == 12);
  CHECK(m.head_dim == 64);
  CHECK(m.mlp == MlpKind::gelu);
  CHECK(m.tied_embeddings);
  CHECK(m.dropout == Approx(0.1));
}

TEST_CASE("Hugging Face errors name the JSON path") {
  CHECK(error_of([] {
          parse_hf(R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
      "num_attention_heads": 4, "vocab_size": 10})");
        }) == "config.json: intermediate_size: missing required key");
  CHECK(error_of([] {
          parse_hf(R"({"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64,
      "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 10, "num_local_experts": 8})");
        }) == "config.json: num_experts_per_tok: missing required key");
  CHECK(error_of([] {
          parse_hf(R"({"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64,
      "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 10, "num_local_experts": 8,
      "num_experts_per_tok": 9})");
        }) == "config.json: num_experts_per_tok: exceeds num_local_experts (8)");
  CHECK(error_of([] {
          parse_hf(R"({"model_type": "deepseek_v2", "num_hidden_layers": 4, "hidden_size": 64,
      "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 10, "kv_lora_rank": 16,
      "qk_rope_head_dim": 8, "v_head_dim": 16})");
        }) == "config.json: qk_nope_head_dim: missing required key");
  CHECK(error_of([] {
          parse_hf(R"({"model_type": "qwen2_moe", "num_hidden_layers": 4, "hidden_size": 64,
      "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 10, "num_experts": 8,
      "num_experts_per_tok": 2, "moe_intermediate_size": 16, "decoder_sparse_step": 5})");
        }) == "config.json: decoder_sparse_step: leaves no layer with experts");
  CHECK(error_of([] {
          parse_hf(R"({"model_type": "qwen2_moe", "num_hidden_layers": 4, "hidden_size": 64,
      "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 10, "num_experts": 8,
      "num_experts_per_tok": 2, "moe_intermediate_size": 16, "mlp_only_layers": [4]})");
        }) == "config.json: mlp_only_layers: 4 is not a layer index below num_hidden_layers (4)");
  CHECK(error_of([] { parse_hf(R"({"model_type": "x", "layer_types": ["chunked_attention"]})"); }) ==
        "config.json: layer_types: chunked_attention layers are not supported yet (full_attention and "
        "sliding_attention only)");
  CHECK(error_of([] {
          parse_hf(R"({"model_type": "x", "layer_types": ["sliding_attention", "full_attention", "full_attention"]})");
        }) ==
        "config.json: layer_types: sliding and full attention layers that do not repeat every N layers with the "
        "N-th full are not supported yet");
}

// Qwen3-30B-A3B's config.json (Qwen/Qwen3-30B-A3B on the Hugging Face hub): 48 layers, hidden 2048,
// 32 query and 4 KV heads of 128, 128 experts of width 768, 8 per token, no shared expert. Its
// parameter count from the formula: per layer attention 2048·(4096 + 2·512) + 4096·2048 = 18,874,368,
// router 2048·128 = 262,144, experts 128·3·2048·768 = 603,979,776, norms 2·2048 and the per-head
// query and key norms 2·128 (model_type qwen3_moe: qk_norm); embedding and output 2·151936·2048;
// final norm 2048. 30.5 B in all, the model card's "30.5B"; active per token 8 of 128 experts: 3.3 B
// ("3.3B activated").
TEST_CASE("a Qwen3-MoE config.json reads as a mixture of experts") {
  const ModelSpec m = parse_hf(R"({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
    "num_hidden_layers": 48, "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4,
    "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
    "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
    "hidden_act": "silu", "tie_word_embeddings": false})");
  CHECK(m.moe());
  CHECK(m.experts == 128);
  CHECK(m.experts_per_token == 8);
  CHECK(m.moe_ffn_hidden == 768);
  CHECK(m.ffn_hidden == 0);
  CHECK(m.shared_expert_ffn_hidden == 0);
  CHECK(m.qk_norm);
  const std::int64_t layer = 18874368 + 262144 + 603979776 + 2 * 2048 + 2 * 128;
  CHECK(m.params_per_layer() == layer);
  CHECK(m.expert_params_per_layer() == 603979776);
  CHECK(m.total_params() == 48 * layer + 2 * 151936 * 2048 + 2048);
  CHECK(std::abs(static_cast<double>(m.total_params()) / 1e9 - 30.5) < 0.05);
  const std::int64_t active = m.total_params() - std::int64_t{48} * (603979776 - 8 * 3 * 2048 * 768);
  CHECK(std::abs(static_cast<double>(active) / 1e9 - 3.3) < 0.1);  // 3.35 B by this count
}

TEST_CASE("trainsim's model format takes experts instead of ffn_hidden") {
  const ModelSpec m = parse(R"({"name": "moe", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4,
    "vocab": 100, "mlp": "swiglu", "experts": 8, "experts_per_token": 2, "moe_ffn_hidden": 32,
    "shared_expert_ffn_hidden": 64})");
  CHECK(m.experts == 8);
  CHECK(m.shared_expert_ffn_hidden == 64);
  // attention 4·64² + router 64·8 + experts 8·3·64·32 + shared 3·64·64 + norms 2·64
  CHECK(m.params_per_layer() == 4 * 64 * 64 + 64 * 8 + 8 * 3 * 64 * 32 + 3 * 64 * 64 + 2 * 64);
  CHECK(error_of([] {
          parse(R"({"name": "moe", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4, "ffn_hidden": 256,
            "vocab": 100, "mlp": "swiglu", "experts": 8, "experts_per_token": 2, "moe_ffn_hidden": 32})");
        }) ==
        "m.json: ffn_hidden: a mixture-of-experts model has no dense MLP unless first_dense_layers or "
        "moe_layer_freq says which layers keep one; its widths are moe_ffn_hidden and shared_expert_ffn_hidden");
  CHECK(error_of([] {
          parse(R"({"name": "d", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4, "ffn_hidden": 256,
            "vocab": 100, "mlp": "swiglu", "moe_ffn_hidden": 32})");
        }) == "m.json: moe_ffn_hidden: only a mixture-of-experts model (with \"experts\") takes this key");
  CHECK(error_of([] {
          parse(R"({"name": "moe", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4,
            "vocab": 100, "mlp": "swiglu", "experts": 8, "experts_per_token": 9, "moe_ffn_hidden": 32})");
        }) == "m.json: experts_per_token: exceeds experts (8)");
}

TEST_CASE("trainsim's own format is not mistaken for a Hugging Face config") {
  nlohmann::json j = nlohmann::json::parse(R"({"name": "x", "layers": 1})");
  CHECK_FALSE(is_hf_config(JsonNode(j, "m.json")));
}

// NeMo's GPT count seq·(24Lh² + 12Lhs + 48Lh² + 6Vh) equals Korthikanti's
// 72·s·L·h²·(1 + s/(6h) + V/(12hL)); the Llama form is seq·(12Lh²(1 + G/A + s/h) + 18LFh + 6Vh).
TEST_CASE("model FLOPs per sequence follow the NeMo / Korthikanti formulas") {
  ModelSpec gpt = parse(R"({"name": "g", "layers": 96, "hidden": 12288, "heads": 96, "kv_heads": 96,
                            "ffn_hidden": 49152, "vocab": 51200, "mlp": "gelu"})");
  const double s = 2048, L = 96, h = 12288, V = 51200;
  CHECK(model_flops_per_sequence(gpt, 2048) ==
        Approx(s * (24 * L * h * h + 12 * L * h * s + 48 * L * h * h + 6 * V * h)));
  CHECK(model_flops_per_sequence(gpt, 2048) ==
        Approx(72 * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L))).epsilon(1e-12));

  ModelSpec llama = parse_hf(kLlama31_8b);
  const double s2 = 8192, L2 = 32, h2 = 4096, G = 8, A = 32, F = 14336, V2 = 128256;
  CHECK(model_flops_per_sequence(llama, 8192) ==
        Approx(s2 * (12 * L2 * h2 * h2 * (1 + G / A + s2 / h2) + 18 * L2 * F * h2 + 6 * V2 * h2)).epsilon(1e-12));
}

// GPT-OSS 120B's config.json (openai/gpt-oss-120b): 36 layers alternating sliding (128 tokens) and full
// attention, 128 experts of width 2880, 4 per token, 64 query heads of 64 over hidden 2880.
TEST_CASE("a GPT-OSS config.json: alternating sliding-window layers and experts") {
  const ModelSpec m = parse_hf(R"({"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
    "num_hidden_layers": 4, "hidden_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8,
    "head_dim": 64, "intermediate_size": 2880, "num_local_experts": 128, "num_experts_per_tok": 4,
    "experts_per_token": 4, "vocab_size": 201088, "sliding_window": 128, "hidden_act": "silu",
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    "tie_word_embeddings": false})");
  CHECK(m.sliding_window == 128);
  CHECK(m.sliding_window_pattern == 2);
  CHECK(m.windowed_fraction() == 0.5);
  CHECK(m.experts == 128);
  CHECK(m.moe_ffn_hidden == 2880);
  CHECK(m.linear_bias);     // model_type gpt_oss: biased attention, router and experts
  CHECK(m.glu_clamp == 0);  // no swiglu_limit in this config
  // swiglu_limit is gpt_oss's experts' clamp; another model type's (DeepSeek V4's) is not read.
  const std::string oss = R"({"model_type": "gpt_oss", "num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 32,
    "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 10, "swiglu_limit": )";
  CHECK(parse_hf(oss + "7.0}").glu_clamp == 7.0);
  CHECK(parse_hf(oss + "null}").glu_clamp == 0);
  CHECK(error_of([&] { parse_hf(oss + "-1}"); }) == "config.json: swiglu_limit: must be positive, got -1");
  // A Llama config with both of Llama's bias switches on is linear_bias; either alone is not.
  const std::string llama = R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 10, "attention_bias": true, "mlp_bias": )";
  CHECK(parse_hf(llama + "true}").linear_bias);
  CHECK_FALSE(parse_hf(llama + "false}").linear_bias);
  // Model FLOPs: a windowed layer's scores and context count 128 keys per query, a full one s.
  ModelSpec full = m;
  full.sliding_window = 0;
  const double s = 4096, q = 64 * 64;
  CHECK(model_flops_per_sequence(full, 4096) - model_flops_per_sequence(m, 4096) ==
        Approx(3 * s * 4 * 0.5 * 4 * (s - 128) * q));
}

TEST_CASE("sliding windows: Mistral's on every layer, Qwen's unused one ignored, Gemma's pattern") {
  const ModelSpec mistral = parse_hf(R"({"model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 10, "sliding_window": 4096})");
  CHECK(mistral.sliding_window == 4096);
  CHECK(mistral.windowed_fraction() == 1.0);
  const ModelSpec qwen = parse_hf(R"({"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 10, "sliding_window": 4096,
    "use_sliding_window": false})");
  CHECK(qwen.sliding_window == 0);
  const ModelSpec gemma = parse_hf(R"({"model_type": "gemma3_text", "num_hidden_layers": 6, "hidden_size": 64,
    "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 10, "sliding_window": 512,
    "sliding_window_pattern": 6})");
  CHECK(gemma.sliding_window_pattern == 6);
  CHECK(gemma.windowed_fraction() == Approx(5.0 / 6.0));
  CHECK(error_of([] {
          parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4, "ffn_hidden": 256,
            "vocab": 100, "mlp": "gelu", "sliding_window_pattern": 2})");
        }) == "m.json: sliding_window_pattern: applies only with sliding_window");
}

TEST_CASE("DeepSeek-V3: its Hugging Face config reads as models/deepseek-v3.json, with the model card's sizes") {
  // deepseek-ai/DeepSeek-V3 config.json (the keys trainsim reads).
  const ModelSpec hf = parse_hf(R"({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
      "num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128,
      "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
      "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1, "q_lora_rank": 1536,
      "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
      "num_nextn_predict_layers": 1, "vocab_size": 129280, "hidden_act": "silu", "tie_word_embeddings": false,
      "n_group": 8, "topk_group": 4})");
  nlohmann::json j =
      nlohmann::json::parse(std::ifstream(std::filesystem::path(TRAINSIM_SOURCE_DIR) / "models" / "deepseek-v3.json"));
  const ModelSpec m = parse_model(JsonNode(j, "deepseek-v3.json"));
  CHECK(hf.total_params() == m.total_params());
  CHECK(hf.first_dense_layers == 3);
  CHECK(hf.shared_expert_ffn_hidden == 2048);
  CHECK(hf.mtp_layers == 1);
  CHECK(hf.mla());
  CHECK((hf.router_groups == 8 && hf.router_group_topk == 4));
  CHECK((m.router_groups == 8 && m.router_group_topk == 4));
  // The model card: 671B parameters in the main model; the MTP module adds 11.6B of its own (the card's
  // "14B" counts its copies of the embedding and output layer, 2 x 129280 x 7168 = 1.85B, as well).
  CHECK(static_cast<double>(m.main_params()) == Approx(671e9).epsilon(0.002));
  CHECK(static_cast<double>(m.mtp_params() + 2 * m.embedding_params()) == Approx(13.5e9).epsilon(0.01));
  // MLA attention per layer by hand: q down 7168 x 1536 + norm 1536 + q up 1536 x 128 x 192; kv down
  // 7168 x 576 + norm 512 + kv up 512 x 128 x 256; output 128 x 128 x 7168.
  const std::int64_t attention =
      7168LL * 1536 + 1536 + 1536LL * 128 * 192 + 7168LL * 576 + 512 + 512LL * 128 * 256 + 128LL * 128 * 7168;
  CHECK(m.attention_params_per_layer() == attention);
  // Training FLOPs per token at 4096 tokens, as Megatron counts them (training.py, MLA branch: causal
  // core attention s·heads·(qk + v)/2 per pass pair), 61 layers + 1 MTP layer:
  const double s = 4096, h = 7168;
  const double linear = 2.0 * static_cast<double>(attention - 1536 - 512);
  const double core = s * 128 * (192 + 128);
  const double moe = 2 * h * 256 + 6 * h * (8 * 2048 + 2048), dense = 6 * h * 18432;
  const double logits = 2 * 129280 * h;
  const double per_token =
      61 * (linear + core) + 58 * moe + 3 * dense + logits + (4 * h * h + linear + core + moe + logits);
  CHECK(model_flops_per_sequence(m, 4096) / s == Approx(3 * per_token));
  // Megatron-Bridge's published DeepSeek-V3 rows: 1276 TFLOP/s at 4912 tokens/s per GPU (26.08, GB200).
  CHECK(model_flops_per_sequence(m, 4096) / s == Approx(1276e12 / 4912).epsilon(0.005));
}

// ecosystem.md §1.2's table (each from its Hugging Face config.json; counts by the formula under it):
// Llama-2-7B 6.74 B, Llama-2-70B 68.98 B, Llama-2-13B 13.02 B (by hand: 2·32000·5120 embedding and
// output + 40 layers of 4·5120² + 3·5120·13824 + 2·5120, + 5120 = 13,015,864,320), Qwen2-7B 7.62 B (its QKV biases, 0.1
// M, not modelled), Mixtral-8x7B 46.70 B in all and 12.88 B active (Mistral's announcement: 46.7B, 12.9B per token).
TEST_CASE("Llama 2, Qwen2 and Mixtral model files hold their published parameter counts") {
  auto billions = [](std::int64_t n) { return static_cast<double>(n) / 1e9; };
  CHECK(billions(model("llama2-7b").total_params()) == Approx(6.74).margin(0.005));
  CHECK(billions(model("llama2-70b").total_params()) == Approx(68.98).margin(0.005));
  const std::int64_t h13 = 5120;
  CHECK(model("llama2-13b").total_params() == 2 * 32000 * h13 + 40 * (4 * h13 * h13 + 3 * h13 * 13824 + 2 * h13) + h13);
  CHECK(billions(model("qwen2-7b").total_params()) == Approx(7.62).margin(0.005));
  const ModelSpec mixtral = model("mixtral-8x7b");
  CHECK(billions(mixtral.total_params()) == Approx(46.70).margin(0.005));
  // Active: all but the 6 of 8 experts a token does not visit, in each of the 32 layers.
  const double inactive = 32.0 * static_cast<double>(mixtral.expert_params_per_layer()) * 6 / 8;
  CHECK((static_cast<double>(mixtral.total_params()) - inactive) / 1e9 == Approx(12.88).margin(0.005));
}

// Nemotron-4 (arXiv:2402.16819 Table 1 for 15B: 12.5B non-embedding and 3.2B embedding parameters;
// arXiv:2406.11704 for 340B: 331.6B non-embedding and 9.4B embedding, 341B in all): squared-ReLU MLPs
// without a gate, GQA with 8 KV heads, a 256,000-token vocabulary, untied. Mixtral-8x22B-v0.1
// (Mistral's announcement: 141B parameters, 39B active): 56 layers, hidden 6144, 8 experts of 16384.
// By hand, a dense layer is h(h + 2·8·head_dim) + h² + 2·h·ffn + 2h (the two norms' weights).
TEST_CASE("Nemotron-4 and Mixtral 8x22B model files hold their published parameter counts") {
  auto dense_layer = [](std::int64_t h, std::int64_t head_dim, std::int64_t ffn) {
    return h * (h + 2 * 8 * head_dim) + h * h + 2 * h * ffn + 2 * h;
  };
  const ModelSpec n340 = model("nemotron-4-340b");
  CHECK(n340.total_params() == 96 * dense_layer(18432, 192, 73728) + std::int64_t{2} * 256000 * 18432 + 18432);
  CHECK(static_cast<double>(n340.total_params() - std::int64_t{2} * 256000 * 18432) / 1e9 ==
        Approx(331.6).margin(0.05));
  CHECK(static_cast<double>(n340.total_params()) / 1e9 == Approx(341).margin(0.5));
  const ModelSpec n15 = model("nemotron-4-15b");
  CHECK(n15.total_params() == 32 * dense_layer(6144, 128, 24576) + std::int64_t{2} * 256000 * 6144 + 6144);
  CHECK(static_cast<double>(n15.total_params() - std::int64_t{2} * 256000 * 6144) / 1e9 == Approx(12.5).margin(0.05));
  const ModelSpec mixtral = model("mixtral-8x22b");
  CHECK(static_cast<double>(mixtral.total_params()) / 1e9 == Approx(141).margin(0.5));
  // Active: all but the 6 of 8 experts a token does not visit, in each of the 56 layers.
  const double inactive = 56.0 * static_cast<double>(mixtral.expert_params_per_layer()) * 6 / 8;
  CHECK((static_cast<double>(mixtral.total_params()) - inactive) / 1e9 == Approx(39).margin(0.5));
  // Grok-1 (xai-org/grok-1): by hand, per layer attention 6144·(6144 + 2·1024) + 6144², a router
  // 6144·8, 8 gated experts of 3·6144·32768, four RMSNorms (the pre-norms and, after the attention and
  // the experts, the post-norms of its model.py); the tied embedding once and the final norm. xAI says
  // 314B; the count is 315.7 B. Active: 6 of the 8 experts left out of each layer.
  const ModelSpec grok = model("grok-1");
  CHECK(grok.post_norms);
  const std::int64_t gh = 6144;
  const std::int64_t grok_layer = gh * (gh + 2 * 1024) + gh * gh + gh * 8 + 8 * 3 * gh * 32768 + 4 * gh;
  CHECK(grok.total_params() == 64 * grok_layer + 131072 * gh + gh);
  CHECK(static_cast<double>(grok.total_params()) / 1e9 == Approx(315.7).margin(0.05));
  const double grok_inactive = 64.0 * static_cast<double>(grok.expert_params_per_layer()) * 6 / 8;
  CHECK((static_cast<double>(grok.total_params()) - grok_inactive) / 1e9 == Approx(83.76).margin(0.01));
}

// Llama 4 (meta-llama/Llama-4-Scout-17B-16E and Llama-4-Maverick-17B-128E, their text_config): 48
// layers of hidden 5120, 40 query and 8 KV heads of 128, a shared expert of 8192 beside routed experts
// of 8192 (top 1), vocab 202048, untied. Scout: 16 experts on every layer and per-head query/key norms;
// Maverick: 128 experts on every second layer (1, 3, ...), dense MLPs of 16384 between. Meta's model
// cards: 109B and 400B total (Scout's with its vision encoder), 17B active each. By hand, attention
// h(h + 2·1024) + h², a SwiGLU MLP of width f 3·h·f, a router h·E, two norms 2h.
TEST_CASE("Llama 4 Scout and Maverick model files hold Meta's parameter counts") {
  const std::int64_t h = 5120, attention = h * (h + 2 * 1024) + h * h, mlp = 3 * h * 8192, embeddings = 2 * 202048 * h;
  const ModelSpec scout = model("llama4-scout");
  const ModelSpec maverick = model("llama4-maverick");
  CHECK(scout.moe_layer_count() == 48);
  CHECK(maverick.moe_layer_count() == 24);
  // Per layer without the norms and the query/key norms (a few thousand parameters in all).
  const double scout_layer = static_cast<double>(attention + 17 * mlp + h * 16);
  CHECK(static_cast<double>(scout.total_params()) == Approx(48 * scout_layer + embeddings).epsilon(1e-5));
  CHECK(static_cast<double>(scout.total_params()) / 1e9 == Approx(109).epsilon(0.02));
  const double maverick_moe = static_cast<double>(attention + 129 * mlp + h * 128);
  const double maverick_dense = static_cast<double>(attention + 3 * h * 16384);
  CHECK(static_cast<double>(maverick.total_params()) ==
        Approx(24 * maverick_moe + 24 * maverick_dense + embeddings).epsilon(1e-5));
  CHECK(static_cast<double>(maverick.total_params()) / 1e9 == Approx(400).epsilon(0.005));
  // Active: a token visits one routed expert and the shared one.
  const double scout_active =
      static_cast<double>(scout.total_params()) - 48.0 * static_cast<double>(scout.expert_params_per_layer()) * 15 / 16;
  const double maverick_active = static_cast<double>(maverick.total_params()) -
                                 24.0 * static_cast<double>(maverick.expert_params_per_layer()) * 127 / 128;
  CHECK(scout_active / 1e9 == Approx(17).epsilon(0.02));
  CHECK(maverick_active / 1e9 == Approx(17).epsilon(0.02));
}

TEST_CASE("Kimi K2 has the model card's one trillion parameters, 32B of them active") {
  nlohmann::json j =
      nlohmann::json::parse(std::ifstream(std::filesystem::path(TRAINSIM_SOURCE_DIR) / "models" / "kimi-k2.json"));
  const ModelSpec m = parse_model(JsonNode(j, "kimi-k2.json"));
  // The card says "1T" (total) and "32B" (activated), both rounded: within 3%.
  CHECK(static_cast<double>(m.total_params()) == Approx(1e12).epsilon(0.03));
  // Active: everything but the 376 of 384 routed experts a token does not visit in the 60 MoE layers.
  const double inactive = 60.0 * static_cast<double>(m.expert_params_per_layer()) * (384 - 8) / 384;
  CHECK(static_cast<double>(m.total_params()) - inactive == Approx(32e9).epsilon(0.03));
}

TEST_CASE("MLA and dense-first keys: one error line each") {
  CHECK(
      error_of([] {
        parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4, "ffn_hidden": 256,
                    "vocab": 100, "mlp": "swiglu", "q_lora_rank": 16})");
      }) ==
      "m.json: q_lora_rank: only multi-head latent attention (with \"kv_lora_rank\") or DeepSeek V4's attention (with "
      "\"compress_ratios\") takes this key");
  CHECK(error_of([] {
          parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_lora_rank": 16, "qk_rope_head_dim": 8,
                    "ffn_hidden": 256, "vocab": 100, "mlp": "swiglu"})");
        }) == "m.json: head_dim: missing required key");
  CHECK(error_of([] {
          parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4, "ffn_hidden": 256,
                    "vocab": 100, "mlp": "swiglu", "experts": 4, "experts_per_token": 2, "moe_ffn_hidden": 16,
                    "first_dense_layers": 2})");
        }) == "m.json: first_dense_layers: must be below layers (2)");
  // The shared expert's width is n_shared_experts x moe_intermediate_size: 2^53 of them overflowed
  // int64 (UBSan, found by tools/fuzz-scenarios --models).
  CHECK(error_of([] {
          parse_hf(R"({"model_type": "deepseek_v3", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                    "intermediate_size": 256, "vocab_size": 100, "n_routed_experts": 4, "num_experts_per_tok": 2,
                    "moe_intermediate_size": 2048, "n_shared_experts": 9007199254740992})");
        }) ==
        "config.json: n_shared_experts: 9007199254740992 shared experts of moe_intermediate_size 2048 are wider "
        "than trainsim models");
}

// NVIDIA's Nemotron 3 Nano 30B-A3B model card gives 31.6B parameters in all; Megatron-Bridge's
// performance table reports its model FLOPs as 901 TFLOP/s/GPU at 39,936 tokens/s/GPU (26.08, GB300),
// 22.56 GFLOP per token, and Super's as 831 at 9,856 (84.3 GFLOP per token): trainsim's count (the
// Mamba mixers as Megatron-LM counts them) is within 5% of both.
TEST_CASE("Nemotron 3 hybrid models: parameters and model FLOPs match the published figures") {
  const auto load = [](const char* stem) {
    std::ifstream in(std::filesystem::path(TRAINSIM_SOURCE_DIR) / "models" / (std::string(stem) + ".json"));
    nlohmann::json j = nlohmann::json::parse(in);
    return parse_model(JsonNode(j, stem));
  };
  const ModelSpec nano = load("nemotron-3-nano");
  CHECK(nano.layers == 52);
  CHECK(nano.block(0) == LayerBlock::mamba);
  CHECK(nano.block(1) == LayerBlock::moe);
  CHECK(nano.block(5) == LayerBlock::attention);
  CHECK(static_cast<double>(nano.total_params()) / 1e9 == Approx(31.6).epsilon(0.005));
  CHECK(model_flops_per_sequence(nano, 8192) / 8192 / 1e9 == Approx(901e3 / 39936).epsilon(0.05));
  const ModelSpec super = load("nemotron-3-super");
  CHECK(super.layers == 88);
  CHECK(model_flops_per_sequence(super, 8192) / 8192 / 1e9 == Approx(831e3 / 9856).epsilon(0.05));
  // Ultra 550B-A55B (its model card's name): the 26.08 table's GB300 row, 1,281 TFLOP/s/GPU at 3,552
  // tokens/s/GPU, 360.6 GFLOP per token.
  const ModelSpec ultra = load("nemotron-3-ultra");
  CHECK(ultra.layers == 108);
  CHECK(static_cast<double>(ultra.main_params()) / 1e9 == Approx(550).epsilon(0.02));
  CHECK(model_flops_per_sequence(ultra, 8192) / 8192 / 1e9 == Approx(1281e3 / 3552).epsilon(0.05));
}

// Qwen3-8B (Qwen/Qwen3-8B's config.json): its model card gives 8.2 B parameters, 6.95 B without the
// embeddings. By hand, per layer: QKV 4096 x (32 + 2 x 8) x 128, output 4096 x 4096, SwiGLU 3 x 4096 x
// 12288, two RMSNorms and the per-head query and key norms (2 x 128); the untied embedding and output
// layer of 151,936 x 4096 and the final norm.
TEST_CASE("Qwen3-8B: the model card's parameter counts") {
  const ModelSpec m = model("qwen3-8b");
  const std::int64_t h = 4096;
  const std::int64_t layer = h * 48 * 128 + h * h + 3 * h * 12288 + 2 * h + 2 * 128;
  CHECK(m.total_params() == 36 * layer + 2 * 151936 * h + h);
  CHECK(static_cast<double>(36 * layer) / 1e9 == Approx(6.95).epsilon(0.001));
  CHECK(static_cast<double>(m.total_params()) / 1e9 == Approx(8.2).epsilon(0.005));
}

// Nemotron 3 Nano 4B (Megatron-Bridge's nemotron_3_nano_4b recipe's HybridModelProvider; its model
// verification card counts 3,973,556,832 parameters). By hand: a Mamba layer's in_proj 3136 x (2 x 7680
// + 2 x 8 x 128 + 96) with its norm, conv1d (7680 + 2 x 8 x 128 channels, width 4, biased), dt_bias,
// A_log and D per head, the gated norm over 7680 and out_proj 7680 x 3136; an attention layer's norm,
// QKV 3136 x (40 + 2 x 8) x 128 and output 5120 x 3136; an MLP layer's norm and 2 x 3136 x 12544; then
// the untied embedding and output layer and the final norm.
TEST_CASE("Nemotron 3 Nano 4B: 21 Mamba, 4 attention and 17 MLP layers, the card's parameter count") {
  std::ifstream in(std::filesystem::path(TRAINSIM_SOURCE_DIR) / "models" / "nemotron-3-nano-4b.json");
  nlohmann::json j = nlohmann::json::parse(in);
  const ModelSpec m = parse_model(JsonNode(j, "nemotron-3-nano-4b.json"));
  CHECK(m.layers == 42);
  const std::int64_t h = 3136, inner = 96 * 80, bc = 2 * 8 * 128, conv = inner + bc;
  const std::int64_t mamba = h + h * (2 * inner + bc + 96) + conv * 4 + conv + 3 * 96 + inner + inner * h;
  const std::int64_t attention = h + h * (40 + 2 * 8) * 128 + 40 * 128 * h;
  const std::int64_t mlp = h + 2 * h * 12544;
  CHECK(m.total_params() == 21 * mamba + 4 * attention + 17 * mlp + 2 * 131072 * h + h);
  CHECK(m.total_params() == 3973556832);
}

TEST_CASE("hybrid model JSON is checked") {
  const std::string base = R"("name": "h", "hidden": 256, "heads": 4, "kv_heads": 2, "vocab": 1000,
      "mlp": "squared_relu", "mamba_heads": 8, "mamba_head_dim": 32, "mamba_state": 16, "mamba_groups": 2)";
  const ModelSpec ok = parse("{" + base + R"(, "hybrid_pattern": "M*-", "ffn_hidden": 512})");
  CHECK(ok.layers == 3);
  CHECK(ok.block(2) == LayerBlock::mlp);
  CHECK_FALSE(ok.rotary());
  CHECK(error_of([&] {
          parse("{" + base + R"(, "hybrid_pattern": "M*X", "ffn_hidden": 512})");
        }).find("m.json: hybrid_pattern: has 'X' at position 2") != std::string::npos);
  CHECK(error_of([&] {
          parse("{" + base + R"(, "hybrid_pattern": "M*-", "ffn_hidden": 512, "layers": 4})");
        }).find("must equal the length of hybrid_pattern (3)") != std::string::npos);
  CHECK(parse("{" + base + R"(, "hybrid_pattern": "M*"})").params_per_block(LayerBlock::mamba) > 0);
  CHECK(error_of([&] {
          parse("{" + base + R"(, "hybrid_pattern": "M*", "ffn_hidden": 512})");
        }).find("hybrid_pattern has no '-' (MLP) layer for it") != std::string::npos);
  CHECK(error_of([&] {
          parse("{" + base + R"(, "hybrid_pattern": "*E"})");
        }).find("only a hybrid model with Mamba ('M') layers takes this key") != std::string::npos);
  CHECK(error_of([&] { parse("{" + base + R"(, "hybrid_pattern": "ME"})"); }).find("experts") != std::string::npos);
}

// The Hugging Face config of Nemotron 3 Nano (model_type nemotron_h; its keys as the Nemotron-H
// configs name them) reads as models/nemotron-3-nano.json.
TEST_CASE("Hugging Face nemotron_h config reads the hybrid keys") {
  const ModelSpec hf = parse_hf(R"({"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
      "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME", "num_hidden_layers": 52,
      "hidden_size": 2688, "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
      "vocab_size": 131072, "tie_word_embeddings": false, "mlp_hidden_act": "relu2", "intermediate_size": 1856,
      "n_routed_experts": 128, "num_experts_per_tok": 6, "moe_intermediate_size": 1856,
      "moe_shared_expert_intermediate_size": 3712, "mamba_num_heads": 64, "mamba_head_dim": 64,
      "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "chunk_size": 128})");
  std::ifstream in(std::filesystem::path(TRAINSIM_SOURCE_DIR) / "models" / "nemotron-3-nano.json");
  nlohmann::json j = nlohmann::json::parse(in);
  const ModelSpec file = parse_model(JsonNode(j, "nemotron-3-nano.json"));
  CHECK(hf.total_params() == file.total_params());
  CHECK(hf.block(5) == LayerBlock::attention);
  CHECK(hf.mamba_in_proj() == file.mamba_in_proj());
  CHECK(error_of([] {
          parse_hf(R"({"model_type": "nemotron_h", "hybrid_override_pattern": "M*", "num_hidden_layers": 3,
                       "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10, "mamba_num_heads": 4,
                       "mamba_head_dim": 16, "ssm_state_size": 16, "n_groups": 1})");
        }) == "config.json: num_hidden_layers: must equal the length of hybrid_override_pattern (2)");
}

TEST_CASE("qk_norm: a model key, set by Qwen3 configs, refused where there is no QKV projection") {
  const ModelSpec plain = parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2,
                                    "ffn_hidden": 256, "vocab": 100, "mlp": "swiglu"})");
  CHECK_FALSE(plain.qk_norm);
  const ModelSpec q = parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2,
                                "ffn_hidden": 256, "vocab": 100, "mlp": "swiglu", "qk_norm": true})");
  CHECK(q.qk_norm);
  CHECK(q.params_per_layer() == plain.params_per_layer() + 2 * 16);  // two head_dim weights
  // A Llama config (model_type llama) has none; a Qwen3 dense one (qwen3) has them.
  const std::string base = R"("num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 256, "vocab_size": 100, "hidden_act": "silu")";
  CHECK_FALSE(parse_hf("{\"model_type\": \"llama\", " + base + "}").qk_norm);
  CHECK(parse_hf("{\"model_type\": \"qwen3\", " + base + "}").qk_norm);
  CHECK(error_of([] {
          parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "mlp": "swiglu",
                    "experts": 8, "experts_per_token": 2, "moe_ffn_hidden": 32, "q_lora_rank": 16,
                    "kv_lora_rank": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "head_dim": 16, "qk_norm": true})");
        }) ==
        "m.json: qk_norm: applies to models with a QKV projection (not multi-head latent attention, DeepSeek "
        "V4's attention or hybrid models)");
}

// Group-limited routing: G groups of E/G consecutive experts, each token within M of them. The
// groups must split the experts evenly and reach the token's k experts; the two keys go together
// and only with experts.
TEST_CASE("Group-limited routing: router_groups and router_group_topk, checked") {
  auto moe = [](const std::string& extra) {
    return parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4, "vocab": 100,
                     "mlp": "swiglu", "experts": 32, "experts_per_token": 8, "moe_ffn_hidden": 32)" +
                 extra + "}");
  };
  const ModelSpec m = moe(R"(, "router_groups": 8, "router_group_topk": 2)");
  CHECK((m.router_groups == 8 && m.router_group_topk == 2));
  CHECK(moe("").router_groups == 0);
  CHECK(error_of([&] { moe(R"(, "router_groups": 6, "router_group_topk": 2)"); }) ==
        "m.json: router_groups: does not divide the 32 experts into equal groups");
  CHECK(error_of([&] { moe(R"(, "router_groups": 4, "router_group_topk": 5)"); }) ==
        "m.json: router_group_topk: exceeds the 4 groups");
  // 1 of 8 groups of 4 experts cannot hold a token's 8 experts.
  CHECK(error_of([&] { moe(R"(, "router_groups": 8, "router_group_topk": 1)"); }) ==
        "m.json: router_group_topk: leaves 1 groups of 4 experts = 4, fewer than the 8 experts each token visits");
  CHECK(error_of([&] { moe(R"(, "router_groups": 8)"); }) == "m.json: router_groups: needs router_group_topk");
  CHECK(error_of([&] { moe(R"(, "router_group_topk": 2)"); }) == "m.json: router_group_topk: needs router_groups");
  CHECK(error_of([] {
          parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4, "ffn_hidden": 256,
                    "vocab": 100, "mlp": "gelu", "router_groups": 8})");
        }) == "m.json: router_groups: only a mixture-of-experts model (with \"experts\") takes this key");
}

// Experts on some layers only (Megatron-Core's --moe-layer-freq, Qwen2-MoE's decoder_sparse_step and
// mlp_only_layers, DeepSeek's moe_layer_freq): dense layers anywhere, with their MLP of ffn_hidden.
// Four layers of hidden 64: attention 4·64², norms 2·64; a dense SwiGLU MLP 3·64·256; experts 8·3·64·32
// with the router 64·8.
TEST_CASE("moe_layer_freq: experts on every N-th layer or on a listed pattern; the HF equivalents") {
  auto moe = [](const std::string& extra) {
    return parse(R"({"name": "x", "layers": 4, "hidden": 64, "heads": 4, "kv_heads": 4, "vocab": 100,
                     "mlp": "swiglu", "experts": 8, "experts_per_token": 2, "moe_ffn_hidden": 32)" +
                 extra + "}");
  };
  const std::int64_t attention = 4 * 64 * 64 + 2 * 64, dense = 3 * 64 * 256, experts = 8 * 3 * 64 * 32 + 64 * 8;
  const std::int64_t outside = 2 * 100 * 64 + 64;  // embedding, output layer, final norm
  const ModelSpec every2 = moe(R"(, "moe_layer_freq": 2, "ffn_hidden": 256)");
  CHECK(every2.moe_layer_pattern == "1010");  // Megatron: layer i when i mod 2 is 0
  CHECK((every2.moe_layer(0) && !every2.moe_layer(1) && every2.moe_layer(2) && !every2.moe_layer(3)));
  CHECK(every2.moe_layer_count() == 2);
  CHECK(every2.has_dense_mlp());
  CHECK(every2.total_params() == 4 * attention + 2 * dense + 2 * experts + outside);
  // A list; dense layers first only is first_dense_layers, and all experts is the default.
  CHECK(moe(R"(, "moe_layer_freq": [0, 1, 1, 0], "ffn_hidden": 256)").moe_layer_pattern == "0110");
  const ModelSpec first = moe(R"(, "moe_layer_freq": [0, 0, 1, 1], "ffn_hidden": 256)");
  CHECK((first.moe_layer_pattern.empty() && first.first_dense_layers == 2));
  const ModelSpec all = moe(R"(, "moe_layer_freq": 1)");
  CHECK((all.moe_layer_pattern.empty() && all.first_dense_layers == 0 && !all.has_dense_mlp()));
  CHECK(error_of([&] { moe(R"(, "moe_layer_freq": 2)"); }) == "m.json: ffn_hidden: missing required key");
  CHECK(error_of([&] { moe(R"(, "moe_layer_freq": 1, "ffn_hidden": 256)"); }) ==
        "m.json: ffn_hidden: every layer has experts (moe_layer_freq): no dense MLP takes it");
  CHECK(error_of([&] { moe(R"(, "moe_layer_freq": [0, 1], "ffn_hidden": 256)"); }) ==
        "m.json: moe_layer_freq: has 2 entries for the model's 4 layers");
  CHECK(error_of([&] { moe(R"(, "moe_layer_freq": [0, 1, 2, 1], "ffn_hidden": 256)"); }) ==
        "m.json: moe_layer_freq: entry 2 is 2: each entry is 0 (a dense MLP) or 1 (experts)");
  CHECK(error_of([&] { moe(R"(, "moe_layer_freq": [0, 0, 0, 0], "ffn_hidden": 256)"); }) ==
        "m.json: moe_layer_freq: leaves no layer with experts");
  CHECK(error_of([&] { moe(R"(, "moe_layer_freq": 2, "first_dense_layers": 1, "ffn_hidden": 256)"); }) ==
        "m.json: moe_layer_freq: cannot be combined with first_dense_layers (the pattern says which layers are "
        "dense)");
  // Qwen2-MoE: layer i sparse when (i + 1) mod decoder_sparse_step is 0 and not in mlp_only_layers.
  const ModelSpec qwen = parse_hf(R"({"model_type": "qwen2_moe", "num_hidden_layers": 4, "hidden_size": 64,
      "num_attention_heads": 4, "intermediate_size": 256, "vocab_size": 100, "num_experts": 8,
      "num_experts_per_tok": 2, "moe_intermediate_size": 32, "decoder_sparse_step": 2, "mlp_only_layers": [3],
      "tie_word_embeddings": false})");
  CHECK(qwen.moe_layer_pattern == "0100");
  CHECK(qwen.ffn_hidden == 256);
  // DeepSeek-V2 style: after first_k_dense_replace, the layers whose index is a multiple of moe_layer_freq.
  const ModelSpec ds = parse_hf(R"({"model_type": "deepseek_v2", "num_hidden_layers": 4, "hidden_size": 64,
      "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 10, "n_routed_experts": 8,
      "num_experts_per_tok": 2, "moe_intermediate_size": 16, "first_k_dense_replace": 1, "moe_layer_freq": 2})");
  CHECK(ds.moe_layer_pattern == "0010");
  CHECK(ds.ffn_hidden == 128);
}

// Llama 4 Maverick's text_config (meta-llama/Llama-4-Maverick-17B-128E, the keys trainsim reads):
// 48 layers, experts on every second layer counted from 1 (interleave_moe_layer_step 2: layers 1, 3,
// ...), 128 routed experts of 8192, top 1, a shared expert of 8192 beside them; the other 24 layers
// a dense MLP of intermediate_size_mlp 16384; query/key norms; chunked attention of 8192 tokens.
// Scout (16 experts, step 1) has experts on every layer.
TEST_CASE("Llama 4: interleaved experts with a shared expert, dense layers of intermediate_size_mlp") {
  const std::string text = R"("model_type": "llama4_text", "num_hidden_layers": 48, "hidden_size": 5120,
      "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192,
      "intermediate_size_mlp": 16384, "vocab_size": 202048, "num_experts_per_tok": 1, "use_qk_norm": true,
      "attention_chunk_size": 8192, "hidden_act": "silu", "tie_word_embeddings": false)";
  const ModelSpec maverick = parse_hf(R"({"model_type": "llama4", "text_config": {)" + text +
                                      R"(, "num_local_experts": 128, "interleave_moe_layer_step": 2}})");
  CHECK(maverick.experts == 128);
  CHECK(maverick.experts_per_token == 1);
  CHECK(maverick.moe_ffn_hidden == 8192);
  CHECK(maverick.shared_expert_ffn_hidden == 8192);
  CHECK(maverick.ffn_hidden == 16384);
  CHECK(maverick.moe_layer_count() == 24);
  CHECK((!maverick.moe_layer(0) && maverick.moe_layer(1) && maverick.moe_layer(47)));
  CHECK(maverick.qk_norm);
  CHECK(maverick.attention_chunk == 8192);
  const ModelSpec scout = parse_hf("{" + text + R"(, "num_local_experts": 16, "interleave_moe_layer_step": 1})");
  CHECK(scout.moe_layer_count() == 48);
  CHECK(scout.ffn_hidden == 0);
  // An explicit moe_layers list wins over the step.
  const ModelSpec listed =
      parse_hf("{" + text + R"(, "num_local_experts": 16, "moe_layers": [0, 47], "interleave_moe_layer_step": 2})");
  CHECK(listed.moe_layer_count() == 2);
  CHECK(listed.moe_layer_pattern.front() == '1');
}

// Gemma's config.json files (google/gemma-7b, gemma-2-9b, gemma-3-27b-pt's text_config, the keys
// trainsim reads). Gemma 7B: 28 x (attention 3072·(4096 + 2·4096) + 4096·3072 + gated MLP
// 3·3072·24576 + 2 norms of 3072) + tied 256000 x 3072 embedding + final norm = 8,537,680,896 (Gemma
// 1's "8.54B"). Gemma 2 9B: 42 x (3584·(4096 + 2·2048) + 4096·3584 + 3·3584·14336 + 4 norms of 3584)
// + 256000·3584 + 3584 = 9,241,705,984 (the Hub's count for google/gemma-2-9b). Gemma 3 27B's text
// model: 62 x (5376·(4096 + 2·2048) + 4096·5376 + 3·5376·21504 + 4·5376 + q and k norms 2·128)
// + 262208·5376 + 5376 = 27,009,346,304.
TEST_CASE("Gemma configs: gated GELU, tied embeddings, post-norms, Gemma 2's alternating windows") {
  const ModelSpec g1 = parse_hf(R"({"model_type": "gemma", "hidden_act": "gelu", "hidden_size": 3072,
      "intermediate_size": 24576, "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
      "num_hidden_layers": 28, "vocab_size": 256000})");
  CHECK(g1.mlp == MlpKind::swiglu);
  CHECK(g1.tied_embeddings);
  CHECK_FALSE(g1.post_norms);
  CHECK(g1.sliding_window == 0);
  CHECK(g1.total_params() == 8'537'680'896);
  const ModelSpec g2 = parse_hf(R"({"model_type": "gemma2", "hidden_act": "gelu_pytorch_tanh",
      "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584, "intermediate_size": 14336,
      "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "num_hidden_layers": 42,
      "vocab_size": 256000, "sliding_window": 4096, "attn_logit_softcapping": 50.0,
      "final_logit_softcapping": 30.0})");
  CHECK(g2.mlp == MlpKind::swiglu);
  CHECK(g2.post_norms);
  CHECK_FALSE(g2.qk_norm);
  CHECK(g2.sliding_window == 4096);
  CHECK(g2.sliding_window_pattern == 2);
  CHECK(g2.total_params() == 9'241'705'984);
  CHECK(g2.attention_softcap == 50.0);
  CHECK(g2.logit_softcap == 30.0);
  const ModelSpec g3 = parse_hf(R"({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text",
      "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 5376, "intermediate_size": 21504,
      "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128, "num_hidden_layers": 62,
      "vocab_size": 262208, "sliding_window": 1024, "sliding_window_pattern": 6}})");
  CHECK(g3.post_norms);
  CHECK(g3.qk_norm);
  CHECK(g3.sliding_window_pattern == 6);
  CHECK(g3.total_params() == 27'009'346'304);
  CHECK(g3.attention_softcap == 0);  // Gemma 3 caps nothing (its configs carry the keys as null)
  // A config that says tie_word_embeddings false keeps its head.
  const ModelSpec untied = parse_hf(R"({"model_type": "gemma", "hidden_size": 64, "intermediate_size": 128,
      "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 10, "tie_word_embeddings": false})");
  CHECK_FALSE(untied.tied_embeddings);
  // The model key: each of a layer's two blocks gains a norm of h; not in a hybrid model.
  const std::string base = R"("name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4, "ffn_hidden": 256,
                              "vocab": 100, "mlp": "swiglu")";
  CHECK(parse("{" + base + R"(, "post_norms": true})").total_params() - parse("{" + base + "}").total_params() ==
        2 * 2 * 64);
  CHECK(
      error_of([] {
        parse(
            R"({"name": "x", "hybrid_pattern": "M*", "hidden": 64, "heads": 4, "kv_heads": 4, "vocab": 100, "mlp": "swiglu",
                    "mamba_heads": 2, "mamba_head_dim": 32, "mamba_state": 16, "mamba_groups": 1, "post_norms": true})");
      }) == "m.json: post_norms: post-norms in a hybrid model or with DeepSeek V4's attention are not supported yet");
}

// The model files: Gemma 2 9B and Gemma 3 27B as their configs above read; Gemma 2 27B (46 layers,
// hidden 4608, 32 query and 16 KV heads of 128, MLP 36864): 46 x (4608·(4096 + 2·2048) + 4096·4608
// + 3·4608·36864 + 4·4608) + 256000·4608 + 4608 = 27,227,128,320 (the Hub's count for gemma-2-27b).
TEST_CASE("Gemma model files hold the configs' parameter counts") {
  CHECK(model("gemma2-9b").total_params() == 9'241'705'984);
  CHECK(model("gemma2-27b").total_params() == 27'227'128'320);
  CHECK(model("gemma3-27b").total_params() == 27'009'346'304);
  CHECK(model("gemma2-27b").windowed_fraction() == 0.5);
}

TEST_CASE("Hugging Face architectures trainsim does not model are refused by model_type") {
  CHECK(error_of([] {
          parse_hf(R"({"model_type": "jamba", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
              "intermediate_size": 14336, "vocab_size": 65536, "num_experts": 16, "num_experts_per_tok": 2})");
        }) ==
        "config.json: model_type: \"jamba\" is not supported (Mamba (v1) layers); trainsim models decoder-only "
        "transformers, mixtures of experts and Nemotron-H hybrids");
  CHECK(error_of([] {
          parse_hf(R"({"model_type": "bert", "num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
              "intermediate_size": 3072, "vocab_size": 30522, "hidden_act": "gelu"})");
        }).find("\"bert\" is not supported (an encoder") != std::string::npos);
  // Inside a multimodal config the text_config's own model_type is the one named.
  CHECK(error_of([] {
          parse_hf(R"({"model_type": "mllama", "text_config": {"model_type": "mllama_text_model",
              "num_hidden_layers": 40, "hidden_size": 4096, "num_attention_heads": 32, "intermediate_size": 14336,
              "vocab_size": 128256}})");
        }).starts_with("config.json: text_config.model_type: \"mllama_text_model\" is not supported"));
  CHECK(error_of([] {
          parse_hf(R"({"model_type": "deepseek_v32", "num_hidden_layers": 61, "hidden_size": 7168,
              "num_attention_heads": 128, "intermediate_size": 18432, "vocab_size": 129280})");
        }).find("DeepSeek Sparse Attention") != std::string::npos);
  // Gemma 4 under its multimodal wrapper (google/gemma-4-31B's layout of keys).
  CHECK(error_of([] {
          parse_hf(R"({"model_type": "gemma4", "text_config": {"model_type": "gemma4_text",
              "num_hidden_layers": 60, "hidden_size": 5376, "num_attention_heads": 32, "num_key_value_heads": 16,
              "head_dim": 256, "global_head_dim": 512, "intermediate_size": 21504, "vocab_size": 262144}})");
        }).starts_with("config.json: text_config.model_type: \"gemma4_text\" is not supported (per-layer input"));
}

TEST_CASE("DeepSeek V4 Flash: its Hugging Face config reads as models/deepseek-v4-flash.json, 284B parameters") {
  // deepseek-ai/DeepSeek-V4-Flash's config.json keys (NeMo Automodel's DeepseekV4Config defaults);
  // compress_ratios lists the 43 layers and, last, the MTP module's.
  std::string ratios = "[0, 0";
  for (int i = 0; i < 20; ++i) ratios += ", 4, 128";
  ratios += ", 4, 0]";
  const ModelSpec hf = parse_hf(R"({"model_type": "deepseek_v4", "vocab_size": 129280, "hidden_size": 4096,
      "moe_intermediate_size": 2048, "num_hidden_layers": 43, "num_attention_heads": 64, "num_key_value_heads": 1,
      "head_dim": 512, "qk_rope_head_dim": 64, "q_lora_rank": 1024, "o_lora_rank": 1024, "o_groups": 8,
      "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 6, "scoring_func": "sqrtsoftplus",
      "hidden_act": "silu", "sliding_window": 128, "num_hash_layers": 3, "hc_mult": 4, "hc_sinkhorn_iters": 20,
      "index_head_dim": 128, "index_n_heads": 64, "index_topk": 512, "num_nextn_predict_layers": 1,
      "tie_word_embeddings": false, "compress_ratios": )" +
                                ratios + "}");
  const ModelSpec m = model("deepseek-v4-flash");
  CHECK(hf.total_params() == m.total_params());
  CHECK(hf.compress_ratios == m.compress_ratios);
  CHECK((m.csa() && !m.mla() && m.kv_heads == 1 && m.hc_streams == 4 && m.mtp_layers == 1));
  // 2 window-only layers, 21 of ratio 4, 20 of ratio 128.
  const std::vector<std::pair<std::int64_t, std::int64_t>> counts{{0, 2}, {4, 21}, {128, 20}};
  CHECK(m.compress_ratio_counts() == counts);
  // Attention per layer by hand. Every layer: q down 4096 x 1024 + norm 1024 + q up 1024 x 64 x 512, kv
  // 4096 x 512 + norm 512, 64 sinks, grouped output 64 x 512 x 1024 + 8 x 1024 x 4096. Ratio 4 adds
  // its compressor (2 x 4096 x 1024 + 4 x 1024 + 512) and indexer (1024 x 64 x 128 + 4096 x 64 +
  // 2 x 4096 x 256 + 4 x 256 + 128); ratio 128 its compressor (2 x 4096 x 512 + 128 x 512 + 512).
  const std::int64_t base =
      4096LL * 1024 + 1024 + 1024LL * 64 * 512 + 4096LL * 512 + 512 + 64 + 64LL * 512 * 1024 + 8LL * 1024 * 4096;
  const std::int64_t csa =
      base + 2LL * 4096 * 1024 + 4 * 1024 + 512 + 1024LL * 64 * 128 + 4096LL * 64 + 2LL * 4096 * 256 + 4 * 256 + 128;
  const std::int64_t hca = base + 2LL * 4096 * 512 + 128 * 512 + 512;
  CHECK(m.attention_params_per_layer() == (2 * base + 21 * csa + 20 * hca) / 43);
  // Hyper-connections: 4 x 4096 -> 4 x 6 per mapping, with 24 biases and 3 scales.
  CHECK(m.hc_params() == 24LL * 4 * 4096 + 24 + 3);
  // The model card: 284B parameters (the MTP module not counted).
  CHECK(static_cast<double>(m.main_params()) == Approx(284e9).epsilon(0.002));
  // Megatron-Bridge's 26.08 rows count 748 TFLOP/s at 8224 tokens/s per GPU (GB300) for it: 91.0 GFLOP
  // per token of 4096, within 2% of trainsim's count (its own conventions: NeMo's rules, with each query's
  // window and entries for the attention).
  CHECK(model_flops_per_sequence(m, 4096) / 4096 == Approx(748e12 / 8224).epsilon(0.02));
  // Errors: one line naming the key.
  CHECK(error_of([] {
          parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "head_dim": 16, "qk_rope_head_dim": 8,
              "q_lora_rank": 32, "o_groups": 2, "o_lora_rank": 16, "sliding_window": 8, "compress_ratios": [0, 4],
              "experts": 4, "experts_per_token": 2, "moe_ffn_hidden": 32, "vocab": 100, "mlp": "swiglu"})");
        }) == "m.json: index_heads: missing required key");
  CHECK(error_of([] {
          parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "head_dim": 16, "qk_rope_head_dim": 8,
              "q_lora_rank": 32, "o_groups": 3, "o_lora_rank": 16, "sliding_window": 8, "compress_ratios": [0, 128],
              "experts": 4, "experts_per_token": 2, "moe_ffn_hidden": 32, "vocab": 100, "mlp": "swiglu"})");
        }) == "m.json: o_groups: does not divide heads (4)");
  CHECK(error_of([] {
          parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "head_dim": 16, "qk_rope_head_dim": 8,
              "q_lora_rank": 32, "o_groups": 2, "o_lora_rank": 16, "sliding_window": 8, "compress_ratios": [0, 1],
              "experts": 4, "experts_per_token": 2, "moe_ffn_hidden": 32, "vocab": 100, "mlp": "swiglu"})");
        }).starts_with("m.json: compress_ratios: entry 1 is 1: each is 0 (the window only) or a ratio from 2"));
  CHECK(error_of([] {
          parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4, "ffn_hidden": 128,
              "vocab": 100, "mlp": "swiglu", "hc_streams": 4})");
        }) == "m.json: hc_streams: only DeepSeek V4's attention (with \"compress_ratios\") takes this key");
}

// glu_clamp (Megatron-Core's activation_func_clamp_value with its quick-GeGLU experts): only the routed
// experts clamp, so a model with a dense or a shared-expert MLP, or no experts, is refused.
TEST_CASE("glu_clamp: the experts' clamp, refused where Megatron-Core applies none") {
  const std::string moe = R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "vocab": 100,
    "mlp": "swiglu", "experts": 8, "experts_per_token": 2, "moe_ffn_hidden": 32, )";
  CHECK(parse(moe + R"("glu_clamp": 7})").glu_clamp == 7.0);
  const std::string refused =
      "m.json: glu_clamp: applies to a SwiGLU mixture-of-experts model with routed experts on every layer and no "
      "shared expert (the eager clamp of Megatron-Core's quick-GeGLU experts, GPT-OSS's)";
  CHECK(error_of([&] { parse(moe + R"("shared_expert_ffn_hidden": 32, "glu_clamp": 7})"); }) == refused);
  CHECK(error_of([&] { parse(moe + R"("first_dense_layers": 1, "ffn_hidden": 64, "glu_clamp": 7})"); }) == refused);
  CHECK(error_of([] {
          parse(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "vocab": 100,
                    "mlp": "swiglu", "ffn_hidden": 64, "glu_clamp": 7})");
        }) == refused);
  CHECK(error_of([&] { parse(moe + R"("glu_clamp": 0})"); }) == "m.json: glu_clamp: must be positive, got 0");
}
