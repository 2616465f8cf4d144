#pragma once
// A decoder-only transformer as the simulator sees it, and the two file formats it is read from:
// trainsim's own model JSON (models/*.json, or inline in a scenario) and a Hugging Face config.json
// (Llama, Mistral, Qwen2, GPT-2, and the mixture-of-experts Mixtral, Qwen2-MoE and Qwen3-MoE key
// names). A mixture-of-experts model replaces every layer's MLP by `experts` routed experts of width
// moe_ffn_hidden, of which each token visits experts_per_token, plus optionally a shared expert.

#include <cstdint>
#include <string>

#include "util/json_node.h"

namespace trainsim::workload {

enum class MlpKind : std::uint8_t { gelu, swiglu };

struct ModelSpec {
  std::string name;
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;  // hidden / heads unless the model says otherwise
  std::int64_t ffn_hidden = 0;
  std::int64_t vocab = 0;
  MlpKind mlp = MlpKind::gelu;
  bool tied_embeddings = false;
  double dropout = 0.0;  // hidden and attention dropout probability; 0 = no dropout kernels
  // Sliding-window attention: each query attends to the last sliding_window tokens (0: whole
  // sequence). sliding_window_pattern N: every layer windowed (1), or every N-th layer full attention
  // and the others windowed (Gemma's sliding_window_pattern; GPT-OSS alternates: 2).
  std::int64_t sliding_window = 0;
  std::int64_t sliding_window_pattern = 1;
  // Share of the layers that are windowed (0 without a window).
  double windowed_fraction() const {
    if (sliding_window == 0) return 0;
    return sliding_window_pattern <= 1
               ? 1.0
               : static_cast<double>(sliding_window_pattern - 1) / static_cast<double>(sliding_window_pattern);
  }
  // Mixture of experts (0 experts: dense). Every layer's MLP is then a router over `experts` SwiGLU
  // or GeLU experts of width moe_ffn_hidden, top experts_per_token per token, plus a shared expert
  // of width shared_expert_ffn_hidden that every token passes (0: none); ffn_hidden is 0.
  std::int64_t experts = 0;
  std::int64_t experts_per_token = 0;
  std::int64_t moe_ffn_hidden = 0;
  std::int64_t shared_expert_ffn_hidden = 0;

  bool moe() const { return experts > 0; }

  // Parameter counts (embedding = vocab * hidden; the output layer adds another unless tied).
  // params_per_layer counts every expert; expert_params_per_layer the routed experts alone.
  std::int64_t params_per_layer() const;
  std::int64_t expert_params_per_layer() const;
  std::int64_t embedding_params() const;
  std::int64_t total_params() const;
};

// trainsim's format: name, layers, hidden, heads, kv_heads, ffn_hidden, vocab, mlp ("gelu" or
// "swiglu"); optional tied_embeddings, head_dim, dropout, sliding_window, sliding_window_pattern. A
// mixture-of-experts model gives experts,
// experts_per_token and moe_ffn_hidden (optional shared_expert_ffn_hidden) instead of ffn_hidden.
// Unknown keys are errors.
ModelSpec parse_model(const util::JsonNode& node);
// A Hugging Face config.json (recognised by "model_type" or "architectures").
ModelSpec parse_hf_config(const util::JsonNode& node, const std::string& fallback_name);
// True when the object looks like a Hugging Face config rather than trainsim's format.
bool is_hf_config(const util::JsonNode& node);

// Model FLOPs of one sequence for one training step (forward + backward, no recompute, full
// non-causal s^2 attention), as NeMo / Megatron-Bridge count them for "model TFLOP/s" and MFU. A
// mixture-of-experts layer counts the router and the experts a token visits (the active parameters).
double model_flops_per_sequence(const ModelSpec& m, std::int64_t seq_len);

}  // namespace trainsim::workload
