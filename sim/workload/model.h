#pragma once
// A decoder-only transformer as the simulator sees it, and the two file formats it is read from:
// trainsim's own model JSON (models/*.json, or inline in a scenario) and a Hugging Face config.json
// (Llama, Mistral, Qwen2, Gemma, GPT-2, and the mixture-of-experts Mixtral, Qwen2-MoE and Qwen3-MoE key
// names). A mixture-of-experts model replaces every layer's MLP by `experts` routed experts of width
// moe_ffn_hidden, of which each token visits experts_per_token, plus optionally a shared expert.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "util/json_node.h"

namespace trainsim::workload {

// gelu: GPT (LayerNorm, biases, learned positions); swiglu: Llama (RMSNorm, gated SiLU, rotary);
// squared_relu: Nemotron (RMSNorm, ReLU(x)^2 without a gate, no biases).
enum class MlpKind : std::uint8_t { gelu, swiglu, squared_relu };

// The blocks of a hybrid model (Megatron-Core's MambaModel: Nemotron-H, Nemotron 3), one per character
// of its hybrid pattern, each a residual block with its own pre-norm: 'M' a Mamba-2 mixer, '*' self-
// attention, '-' a dense MLP, 'E' a mixture of experts. Every layer of any other model is a
// `transformer` layer: attention followed by the MLP (or the experts).
enum class LayerBlock : std::uint8_t { transformer, mamba, attention, mlp, moe };

// The most layers trainsim models, about a thousand times the deepest published models' (GPT-3's
// 96, Llama 3.1 405B's 126, the 1T GPT's 128): per-layer tables are built from the count.
inline constexpr std::int64_t kMaxLayers = 100000;

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
  // Chunked attention (Llama 4's attention_chunk_size): its rotary layers attend within chunks of
  // this many tokens (0: none). trainsim runs sequences no longer than one chunk, where it is the
  // full causal attention; longer ones are refused (config/scenario.cc).
  std::int64_t attention_chunk = 0;
  // Qwen3's per-head RMSNorm of the queries and keys after the QKV projection (Megatron-Core's
  // qk_layernorm; Hugging Face's q_norm and k_norm).
  bool qk_norm = false;
  // Biases on the attention's and the MLP's linear layers, every routed and shared expert's included
  // (Megatron-Core's add_bias_linear; GPT-OSS). GPT's gelu models always carry them (biased()).
  bool linear_bias = false;
  // The clamp of the experts' gated activation (0: none): the gate's half of fc1's output clamped
  // from above and the linear half both ways at this value before the activation (Megatron-Core's
  // activation_func_clamp_value with its quick-GeGLU experts; Hugging Face gpt_oss's swiglu_limit).
  // Megatron-Core's weighted quick-GeGLU clamps in eager PyTorch before its fused kernel: the two
  // halves clamped and joined again (torch.cat), kernels and a kept copy of their own (ops.cc,
  // experts_glu_clamp). Routed experts only, on every layer, without a shared expert (GPT-OSS).
  double glu_clamp = 0;
  // Gemma 2's and Gemma 3's sandwich norms: a norm on the attention's and on the MLP's output before
  // each residual add, beside the usual pre-norms (Hugging Face's post_attention_layernorm and
  // post_feedforward_layernorm; Megatron-Bridge's TERowParallelLinearLayerNorm).
  bool post_norms = false;
  // Gemma 2's tanh soft-capping (0: none): attention scores become cap·tanh(scores / cap) before the
  // softmax (Hugging Face's attn_logit_softcapping), the output layer's logits likewise
  // (final_logit_softcapping). Megatron-Bridge applies the first in its unfused attention
  // (Gemma2DotProductAttention: Transformer Engine's fused kernels take no cap), so a model with it
  // runs training.attention "softmax"; the second on the logits before the loss.
  double attention_softcap = 0;
  double logit_softcap = 0;
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
  // Group-limited routing (DeepSeek-V3's node-limited routing: HF n_group / topk_group, Megatron's
  // --moe-router-num-groups / --moe-router-group-topk): the experts form router_groups groups of
  // consecutive experts, and each token picks its experts_per_token experts within the
  // router_group_topk groups it scores highest. 0: no limit. With Megatron-Core's contiguous expert
  // placement a group is a node's (or a rank's) experts, so a token reaches fewer of them.
  std::int64_t router_groups = 0;
  std::int64_t router_group_topk = 0;
  // A mixture-of-experts model whose first first_dense_layers layers keep a dense MLP of ffn_hidden
  // (DeepSeek's first_k_dense_replace; Megatron's --moe-layer-freq with leading zeros).
  std::int64_t first_dense_layers = 0;
  // Or experts on any layers (Megatron-Core's --moe-layer-freq N or list, Qwen2-MoE's
  // decoder_sparse_step and mlp_only_layers): one character per layer, '1' routed experts, '0' a
  // dense MLP of ffn_hidden. Empty: every layer from first_dense_layers on. Never all '1', nor
  // '0's then '1's (first_dense_layers says those).
  std::string moe_layer_pattern;
  // Multi-head latent attention (DeepSeek-V2/V3, Kimi K2; kv_lora_rank > 0): queries come from a
  // q_lora_rank latent (0: straight from the hidden state), keys and values from a kv_lora_rank
  // latent, each normed and projected up per head. Query and key heads are head_dim (without
  // position) + qk_rope_head_dim (rotary, the key's part shared by all heads) wide, value heads
  // v_head_dim; kv_heads = heads.
  std::int64_t q_lora_rank = 0;
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_rope_head_dim = 0;
  std::int64_t v_head_dim = 0;
  // DeepSeek-V3's multi-token prediction (num_nextn_predict_layers; Megatron's --mtp-num-layers):
  // each module embeds the tokens one further ahead, norms them and the hidden state, projects the
  // pair (2h -> h), runs one more transformer layer (of the model's kind) and the shared output
  // layer and loss. Megatron-Core runs the modules on the last pipeline stage.
  std::int64_t mtp_layers = 0;
  // DeepSeek V4's hybrid attention (csa(): compress_ratios given; the Hugging Face model_type
  // deepseek_v4, Megatron-Core's DeepSeek-V4 hybrid attention). Queries come from a q_lora_rank
  // latent (normed, projected up to heads of head_dim, then each head RMS-normed); keys and values
  // are one head_dim-wide head (kv_heads 1: each key serves as its value), qk_rope_head_dim of it
  // rotary. Every query attends the last sliding_window tokens, plus entries of the sequence
  // compressed compress_ratios[layer] : 1 (0: none): ratio 4 is compressed sparse attention (CSA:
  // overlapping windows of 2·4 tokens pooled into each entry, and a lightning indexer of index_heads
  // heads of index_head_dim that picks index_topk of the entries for each query), any other ratio
  // heavily compressed attention (HCA: every entry). The output projection is grouped: o_groups
  // groups of heads, each projected to o_lora_rank, then o_groups·o_lora_rank -> hidden.
  std::vector<std::int64_t> compress_ratios;
  std::int64_t o_groups = 0;
  std::int64_t o_lora_rank = 0;
  std::int64_t index_heads = 0;
  std::int64_t index_head_dim = 0;
  std::int64_t index_topk = 0;
  // Manifold-constrained hyper-connections (DeepSeek V4's hc_mult; 1: a plain residual stream): the
  // residual stream is hc_streams copies of the hidden state; before each attention and MoE block a
  // mapping (hc_streams·hidden -> hc_streams·(hc_streams + 2)) weighs the copies into the block's
  // input and after it mixes the block's output back into the copies.
  std::int64_t hc_streams = 1;

  // Latent MoE (Nemotron 3 Super; Megatron-Core's moe_latent_size; 0: none): the routed experts work
  // in a latent of this width. Each token is projected down (hidden -> latent) after the router, which
  // reads the full hidden state, dispatched and run through the experts at the latent width, and
  // projected back up after the combine; the shared expert stays at the hidden width.
  std::int64_t moe_latent = 0;
  // A hybrid model (Megatron-Core's hybrid_override_pattern): one character per layer, 'M', '*', '-'
  // or 'E' (LayerBlock above); layers is its length. Empty: every layer a transformer layer.
  std::string hybrid_pattern;
  // Mamba-2 mixers (Megatron-Core's MambaMixer with the SSD kernels): mamba_heads heads of
  // mamba_head_dim channels (the inner width heads x head_dim), a state of mamba_state per head,
  // mamba_groups groups of B and C shared by the heads, a depthwise causal convolution of
  // mamba_conv taps over x, B and C, and the chunked scan over chunks of mamba_chunk tokens.
  std::int64_t mamba_heads = 0;
  std::int64_t mamba_head_dim = 0;
  std::int64_t mamba_state = 0;
  std::int64_t mamba_groups = 0;
  std::int64_t mamba_conv = 4;
  std::int64_t mamba_chunk = 128;

  bool moe() const { return experts > 0; }
  bool mla() const { return kv_lora_rank > 0; }
  bool csa() const { return !compress_ratios.empty(); }
  // DeepSeek V4's layers by their compression: each distinct entry of compress_ratios (ascending) and
  // how many layers have it.
  std::vector<std::pair<std::int64_t, std::int64_t>> compress_ratio_counts() const;
  bool hybrid() const { return !hybrid_pattern.empty(); }
  // RMSNorm (every kind but GPT's gelu); linear biases (gelu, or linear_bias); rotary positions in the attention
  // (Llama-style models; a hybrid model's attention layers use no position embedding, Megatron-Core
  // MambaModel's default position_embedding_type "none", as Nemotron-H trains).
  bool rms_norm() const { return mlp != MlpKind::gelu; }
  bool biased() const { return mlp == MlpKind::gelu || linear_bias; }
  bool rotary() const { return mlp != MlpKind::gelu && !hybrid(); }
  // Whether the hybrid pattern has a layer of this letter ('M', '*', '-', 'E'); false for other models.
  bool hybrid_has(char c) const { return hybrid_pattern.find(c) != std::string::npos; }
  // Whether some layer has a dense MLP: a hybrid model's '-' layers, a dense model's layers, a MoE
  // model's first_dense_layers.
  bool has_dense_mlp() const { return hybrid() ? hybrid_has('-') : !moe() || moe_layer_count() < layers; }
  // The block layer `layer` (0-based) is: its hybrid pattern's, or a transformer layer.
  LayerBlock block(std::int64_t layer) const;
  // Whether layer `layer` (0-based) has routed experts: a MoE model's transformer layers after its
  // first_dense_layers, or a hybrid model's 'E' layers.
  bool moe_layer(std::int64_t layer) const {
    if (hybrid()) return block(layer) == LayerBlock::moe;
    if (!moe()) return false;
    return moe_layer_pattern.empty() ? layer >= first_dense_layers
                                     : moe_layer_pattern[static_cast<std::size_t>(layer)] == '1';
  }
  // The layers with routed experts.
  std::int64_t moe_layer_count() const;
  // The inner width of a Mamba mixer (heads x head_dim) and its input projection's output width:
  // z and x (inner each), B and C (groups x state each) and one dt per head.
  std::int64_t mamba_inner() const { return mamba_heads * mamba_head_dim; }
  std::int64_t mamba_in_proj() const { return 2 * mamba_inner() + 2 * mamba_groups * mamba_state + mamba_heads; }
  // The model with a dense MLP of ffn_hidden in place of the experts: a first_dense_layers layer.
  ModelSpec dense_variant() const;

  // Parameter counts (embedding = vocab * hidden; the output layer adds another unless tied).
  // params_per_layer counts every expert (of a mixture-of-experts layer); expert_params_per_layer
  // the routed experts alone; attention_params_per_layer the attention block without its norm.
  // total_params counts the multi-token prediction modules too (main_params without them).
  std::int64_t params_per_layer() const;
  // One block of a hybrid model (`transformer`: params_per_layer()).
  std::int64_t params_per_block(LayerBlock b) const;
  std::int64_t expert_params_per_layer() const;
  std::int64_t attention_params_per_layer() const;
  // One mapping of the hyper-connections (two per layer; 0 with a plain residual stream).
  std::int64_t hc_params() const;
  std::int64_t embedding_params() const;
  std::int64_t main_params() const;
  std::int64_t mtp_params() const;
  std::int64_t total_params() const;
};

// trainsim's format: name, layers, hidden, heads, kv_heads, ffn_hidden, vocab, mlp ("gelu" or
// "swiglu"); optional tied_embeddings, head_dim, dropout, sliding_window, sliding_window_pattern. A
// mixture-of-experts model gives experts, experts_per_token and moe_ffn_hidden (optional
// shared_expert_ffn_hidden) instead of ffn_hidden, which it gives only with first_dense_layers.
// Multi-head latent attention: kv_lora_rank, qk_rope_head_dim, head_dim, optional q_lora_rank,
// v_head_dim (default head_dim); kv_heads optional (= heads). Optional mtp_layers. A hybrid model
// gives hybrid_pattern (layers optional, its length), mlp "squared_relu" where it has MLPs or
// experts, mamba_heads, mamba_head_dim, mamba_state, mamba_groups (optional mamba_conv 4,
// mamba_chunk 128), ffn_hidden only with '-' layers and the experts only with 'E' layers; optional
// moe_latent. Unknown keys are errors.
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
