#include "workload/model.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

namespace trainsim::workload {

namespace {

std::int64_t q_dim(const ModelSpec& m) {
  return m.heads * m.head_dim;
}
std::int64_t kv_dim(const ModelSpec& m) {
  return m.kv_heads * m.head_dim;
}
// LayerNorm (gelu/GPT models) has weight and bias; RMSNorm (swiglu/Llama models) a weight only.
std::int64_t norm_params(const ModelSpec& m) {
  return m.mlp == MlpKind::gelu ? 2 * m.hidden : m.hidden;
}

// Checks shared by both formats; `node` names the file for the error.
void validate(const ModelSpec& m, const util::JsonNode& node) {
  if (m.kv_heads > m.heads) {
    node.fail(fmt::format("kv_heads ({}) exceeds heads ({})", m.kv_heads, m.heads));
  }
  if (m.heads % m.kv_heads != 0) {
    node.fail(fmt::format("heads ({}) is not a multiple of kv_heads ({})", m.heads, m.kv_heads));
  }
}

MlpKind parse_mlp(const util::JsonNode& node) {
  std::string s = node.as_string();
  if (s == "gelu") return MlpKind::gelu;
  if (s == "swiglu") return MlpKind::swiglu;
  node.fail(fmt::format("unknown mlp \"{}\" (expected gelu or swiglu)", s));
}

ModelSpec parse_hf_llama(const util::JsonNode& n, const std::string& fallback_name) {
  ModelSpec m;
  m.name = fallback_name;
  m.layers = n.at("num_hidden_layers").as_positive_int();
  m.hidden = n.at("hidden_size").as_positive_int();
  m.heads = n.at("num_attention_heads").as_positive_int();
  auto kv = n.find("num_key_value_heads");
  m.kv_heads = kv && !kv->json().is_null() ? kv->as_positive_int() : m.heads;
  auto hd = n.find("head_dim");
  if (hd && !hd->json().is_null()) {
    m.head_dim = hd->as_positive_int();
  } else {
    if (m.hidden % m.heads != 0) {
      n.at("num_attention_heads").fail(fmt::format("does not divide hidden_size ({})", m.hidden));
    }
    m.head_dim = m.hidden / m.heads;
  }
  m.ffn_hidden = n.at("intermediate_size").as_positive_int();
  m.vocab = n.at("vocab_size").as_positive_int();
  m.mlp = MlpKind::swiglu;
  if (auto act = n.find("hidden_act")) {
    std::string a = act->as_string();
    if (a == "silu" || a == "swiglu") {
      m.mlp = MlpKind::swiglu;
    } else if (a == "gelu" || a == "gelu_new" || a == "gelu_pytorch_tanh") {
      m.mlp = MlpKind::gelu;
    } else {
      act->fail(fmt::format("unsupported activation \"{}\" (expected silu, swiglu or gelu)", a));
    }
  }
  if (auto tie = n.find("tie_word_embeddings")) m.tied_embeddings = tie->as_bool();
  return m;
}

ModelSpec parse_hf_gpt2(const util::JsonNode& n, const std::string& fallback_name) {
  ModelSpec m;
  m.name = fallback_name;
  m.layers = n.at("n_layer").as_positive_int();
  m.hidden = n.at("n_embd").as_positive_int();
  m.heads = n.at("n_head").as_positive_int();
  m.kv_heads = m.heads;
  if (m.hidden % m.heads != 0) {
    n.at("n_head").fail(fmt::format("does not divide n_embd ({})", m.hidden));
  }
  m.head_dim = m.hidden / m.heads;
  auto inner = n.find("n_inner");
  m.ffn_hidden = inner && !inner->json().is_null() ? inner->as_positive_int() : 4 * m.hidden;
  m.vocab = n.at("vocab_size").as_positive_int();
  m.mlp = MlpKind::gelu;
  m.tied_embeddings = true;
  if (auto tie = n.find("tie_word_embeddings")) m.tied_embeddings = tie->as_bool();
  if (auto p = n.find("resid_pdrop")) m.dropout = p->as_nonnegative_number();
  if (m.dropout >= 1) n.at("resid_pdrop").fail("must be below 1");
  return m;
}

}  // namespace

ModelSpec ModelSpec::dense_variant() const {
  ModelSpec d = *this;
  d.experts = d.experts_per_token = d.moe_ffn_hidden = d.shared_expert_ffn_hidden = 0;
  d.first_dense_layers = 0;
  return d;
}

std::int64_t ModelSpec::attention_params_per_layer() const {
  if (!mla()) return hidden * (q_dim(*this) + 2 * kv_dim(*this)) + q_dim(*this) * hidden;
  // Down projections (the key's rotary part comes out of the kv one), the latents' RMSNorm
  // weights, up projections per head, and the output projection from the value heads.
  const std::int64_t qk_head = head_dim + qk_rope_head_dim;
  const std::int64_t q =
      q_lora_rank > 0 ? hidden * q_lora_rank + q_lora_rank + q_lora_rank * heads * qk_head : hidden * heads * qk_head;
  const std::int64_t kv =
      hidden * (kv_lora_rank + qk_rope_head_dim) + kv_lora_rank + kv_lora_rank * heads * (head_dim + v_head_dim);
  return q + kv + heads * v_head_dim * hidden;
}

std::int64_t ModelSpec::params_per_layer() const {
  const std::int64_t mats = mlp == MlpKind::swiglu ? 3 : 2;
  std::int64_t weights = attention_params_per_layer();
  if (moe()) {
    // Router (hidden x experts, no bias), the routed experts, the shared expert.
    weights += hidden * experts + expert_params_per_layer() + mats * hidden * shared_expert_ffn_hidden;
  } else {
    weights += mats * hidden * ffn_hidden;
  }
  std::int64_t small = 2 * norm_params(*this);
  // GPT (gelu) linears carry biases: QKV, output projection, fc1, fc2 (Narayanan's 13h per layer);
  // under MoE every expert has its fc1 and fc2 biases.
  if (mlp == MlpKind::gelu) {
    small += q_dim(*this) + 2 * kv_dim(*this) + hidden;
    small += moe() ? experts * (moe_ffn_hidden + hidden) +
                         (shared_expert_ffn_hidden > 0 ? shared_expert_ffn_hidden + hidden : 0)
                   : ffn_hidden + hidden;
  }
  return weights + small;
}

std::int64_t ModelSpec::expert_params_per_layer() const {
  return experts * (mlp == MlpKind::swiglu ? 3 : 2) * hidden * moe_ffn_hidden;
}

std::int64_t ModelSpec::embedding_params() const {
  return vocab * hidden;
}

std::int64_t ModelSpec::main_params() const {
  const std::int64_t output = tied_embeddings ? 0 : vocab * hidden;
  const std::int64_t dense = moe() ? first_dense_layers : 0;
  const std::int64_t dense_layers = dense > 0 ? dense * dense_variant().params_per_layer() : 0;
  return dense_layers + (layers - dense) * params_per_layer() + embedding_params() + output + norm_params(*this);
}

std::int64_t ModelSpec::mtp_params() const {
  // Per module: two input norms, the 2h -> h projection, one layer, its final norm (the embedding and
  // the output layer are the model's own).
  return mtp_layers * (3 * norm_params(*this) + 2 * hidden * hidden + params_per_layer());
}

std::int64_t ModelSpec::total_params() const {
  return main_params() + mtp_params();
}

ModelSpec parse_model(const util::JsonNode& node) {
  node.expect_object();
  node.reject_unknown({"name",
                       "layers",
                       "hidden",
                       "heads",
                       "kv_heads",
                       "ffn_hidden",
                       "vocab",
                       "mlp",
                       "tied_embeddings",
                       "head_dim",
                       "dropout",
                       "experts",
                       "experts_per_token",
                       "moe_ffn_hidden",
                       "shared_expert_ffn_hidden",
                       "sliding_window",
                       "sliding_window_pattern",
                       "first_dense_layers",
                       "q_lora_rank",
                       "kv_lora_rank",
                       "qk_rope_head_dim",
                       "v_head_dim",
                       "mtp_layers"});
  ModelSpec m;
  m.name = node.at("name").as_string();
  m.layers = node.at("layers").as_positive_int();
  m.hidden = node.at("hidden").as_positive_int();
  m.heads = node.at("heads").as_positive_int();
  if (auto lora = node.find("kv_lora_rank")) {
    m.kv_lora_rank = lora->as_positive_int();
    m.qk_rope_head_dim = node.at("qk_rope_head_dim").as_positive_int();
    if (auto q = node.find("q_lora_rank")) m.q_lora_rank = q->as_positive_int();
    if (!node.has("head_dim")) node.at("head_dim");  // "missing required key": MLA's heads are not hidden / heads
    m.kv_heads = m.heads;
    if (auto kv = node.find("kv_heads"); kv && kv->as_positive_int() != m.heads)
      kv->fail(fmt::format("must equal heads ({}) with multi-head latent attention", m.heads));
  } else {
    for (const char* key : {"q_lora_rank", "qk_rope_head_dim", "v_head_dim"}) {
      if (auto k = node.find(key)) k->fail("only multi-head latent attention (with \"kv_lora_rank\") takes this key");
    }
    m.kv_heads = node.at("kv_heads").as_positive_int();
  }
  if (auto e = node.find("experts")) {
    m.experts = e->as_positive_int();
    m.experts_per_token = node.at("experts_per_token").as_positive_int();
    m.moe_ffn_hidden = node.at("moe_ffn_hidden").as_positive_int();
    if (auto sh = node.find("shared_expert_ffn_hidden")) m.shared_expert_ffn_hidden = sh->as_positive_int();
    if (auto k = node.find("first_dense_layers")) {
      m.first_dense_layers = k->as_positive_int();
      if (m.first_dense_layers >= m.layers) k->fail(fmt::format("must be below layers ({})", m.layers));
      m.ffn_hidden = node.at("ffn_hidden").as_positive_int();  // the dense layers' MLP
    } else if (auto f = node.find("ffn_hidden")) {
      f->fail(
          "a mixture-of-experts model has no dense MLP unless first_dense_layers says which layers keep one; its "
          "widths are moe_ffn_hidden and shared_expert_ffn_hidden");
    }
  } else {
    for (const char* key : {"experts_per_token", "moe_ffn_hidden", "shared_expert_ffn_hidden", "first_dense_layers"}) {
      if (auto k = node.find(key)) k->fail("only a mixture-of-experts model (with \"experts\") takes this key");
    }
    m.ffn_hidden = node.at("ffn_hidden").as_positive_int();
  }
  m.vocab = node.at("vocab").as_positive_int();
  m.mlp = parse_mlp(node.at("mlp"));
  if (auto tie = node.find("tied_embeddings")) m.tied_embeddings = tie->as_bool();
  if (auto hd = node.find("head_dim")) {
    m.head_dim = hd->as_positive_int();
  } else {
    if (m.hidden % m.heads != 0) {
      node.at("heads").fail(fmt::format("does not divide hidden ({}); give head_dim", m.hidden));
    }
    m.head_dim = m.hidden / m.heads;
  }
  if (m.mla()) m.v_head_dim = node.has("v_head_dim") ? node.at("v_head_dim").as_positive_int() : m.head_dim;
  if (auto mtp = node.find("mtp_layers")) m.mtp_layers = mtp->as_nonnegative_int();
  if (auto p = node.find("dropout")) {
    m.dropout = p->as_nonnegative_number();
    if (m.dropout >= 1) p->fail(fmt::format("must be below 1, got {}", m.dropout));
  }
  if (m.kv_heads > m.heads) {
    node.at("kv_heads").fail(fmt::format("exceeds heads ({})", m.heads));
  }
  if (m.heads % m.kv_heads != 0) {
    node.at("kv_heads").fail(fmt::format("does not divide heads ({})", m.heads));
  }
  if (m.moe() && m.experts_per_token > m.experts) {
    node.at("experts_per_token").fail(fmt::format("exceeds experts ({})", m.experts));
  }
  if (auto w = node.find("sliding_window")) {
    m.sliding_window = w->as_positive_int();
    if (m.mla()) w->fail("sliding-window attention with multi-head latent attention is not supported yet");
  }
  if (auto n = node.find("sliding_window_pattern")) {
    if (m.sliding_window == 0) n->fail("applies only with sliding_window");
    m.sliding_window_pattern = n->as_positive_int();
  }
  return m;
}

bool is_hf_config(const util::JsonNode& node) {
  return node.is_object() && (node.has("model_type") || node.has("architectures"));
}

ModelSpec parse_hf_config(const util::JsonNode& node, const std::string& fallback_name) {
  node.expect_object();
  // Multimodal configs nest the decoder under text_config.
  if (auto text = node.find("text_config"); text && text->is_object()) {
    return parse_hf_config(*text, fallback_name);
  }
  // Mixture-of-experts layouts trainsim does not model: Qwen-MoE's dense or sparse-every-k layers,
  // DeepSeek's MoE layers on every k-th layer, per-layer attention kinds other than below.
  if (auto freq = node.find("moe_layer_freq"); freq && freq->json().is_number() && freq->json().get<double>() != 1) {
    freq->fail("mixture-of-experts layers on only some layers are not supported yet (every layer must be sparse)");
  }
  if (auto step = node.find("decoder_sparse_step");
      step && step->json().is_number() && step->json().get<double>() != 1) {
    step->fail("mixture-of-experts layers on only some layers are not supported yet (every layer must be sparse)");
  }
  if (auto dense = node.find("mlp_only_layers"); dense && dense->json().is_array() && !dense->json().empty()) {
    dense->fail("dense layers among mixture-of-experts layers are not supported yet");
  }
  // Per-layer attention kinds (GPT-OSS, Gemma 3, ...): full and sliding-window layers in a pattern
  // that repeats every N layers with the N-th full; anything else is refused.
  std::int64_t window_pattern = 0;  // 0: no sliding layers listed; 1: all windowed; N: every N-th full
  if (auto kinds = node.find("layer_types"); kinds && kinds->json().is_array() && !kinds->json().empty()) {
    std::vector<bool> full;
    bool any_window = false;
    for (const auto& k : kinds->json()) {
      const std::string kind = k.is_string() ? k.get<std::string>() : k.dump();
      if (kind != "full_attention" && kind != "sliding_attention")
        kinds->fail(fmt::format("{} layers are not supported yet (full_attention and sliding_attention only)", kind));
      full.push_back(kind == "full_attention");
      any_window = any_window || !full.back();
    }
    if (any_window) {
      const auto first_full = std::find(full.begin(), full.end(), true);
      window_pattern = first_full == full.end() ? 1 : static_cast<std::int64_t>(first_full - full.begin()) + 1;
      for (std::size_t i = 0; i < full.size(); ++i)
        if (full[i] != (window_pattern > 1 && (static_cast<std::int64_t>(i) + 1) % window_pattern == 0))
          kinds->fail(
              "sliding and full attention layers that do not repeat every N layers with the N-th full are not "
              "supported yet");
    }
  }
  ModelSpec m = node.has("n_layer") || node.has("n_embd") ? parse_hf_gpt2(node, fallback_name)
                                                          : parse_hf_llama(node, fallback_name);
  // Sliding windows: by layer_types, by Gemma's sliding_window_pattern, or (Mistral) on every layer
  // unless use_sliding_window is false (Qwen2 and Qwen3 configs carry a window they do not use) or
  // layer_types lists only full layers.
  auto window = node.find("sliding_window");
  const bool has_window = window && !window->json().is_null();
  auto use = node.find("use_sliding_window");
  const bool used = !(use && use->json().is_boolean() && !use->json().get<bool>());
  const bool typed = node.has("layer_types");
  if (window_pattern > 0 && !has_window) {
    if (!window) node.at("sliding_window");  // "missing required key"
    window->fail("must be a number: layer_types has sliding_attention layers");
  }
  if (has_window && used && (window_pattern > 0 || !typed)) {
    m.sliding_window = window->as_positive_int();
    m.sliding_window_pattern = window_pattern > 0 ? window_pattern : 1;
    if (auto pat = node.find("sliding_window_pattern"); pat && window_pattern == 0 && !pat->json().is_null())
      m.sliding_window_pattern = pat->as_positive_int();
  }
  // Mixtral: num_local_experts, experts of width intermediate_size; Qwen2/Qwen3-MoE: num_experts,
  // experts of width moe_intermediate_size, Qwen2-MoE's shared expert.
  for (const char* key : {"num_local_experts", "num_experts"}) {
    auto e = node.find(key);
    if (!e || e->json().is_null() || (e->json().is_number() && e->json().get<double>() == 0)) continue;
    m.experts = e->as_positive_int();
    m.experts_per_token = node.at("num_experts_per_tok").as_positive_int();
    if (m.experts_per_token > m.experts) {
      node.at("num_experts_per_tok").fail(fmt::format("exceeds {} ({})", key, m.experts));
    }
    auto width = node.find("moe_intermediate_size");
    m.moe_ffn_hidden = width ? width->as_positive_int() : m.ffn_hidden;
    if (auto sh = node.find("shared_expert_intermediate_size"); sh && !sh->json().is_null()) {
      m.shared_expert_ffn_hidden = sh->as_nonnegative_int();
    }
    m.ffn_hidden = 0;
    break;
  }
  // DeepSeek-V2/V3 and Kimi K2 (model_type deepseek_v2, deepseek_v3, kimi_k2): n_routed_experts of
  // width moe_intermediate_size, n_shared_experts of the same width as one shared expert, the first
  // first_k_dense_replace layers dense (intermediate_size), multi-head latent attention, and
  // num_nextn_predict_layers multi-token prediction modules.
  if (auto e = node.find("n_routed_experts"); e && !e->json().is_null()) {
    m.experts = e->as_positive_int();
    m.experts_per_token = node.at("num_experts_per_tok").as_positive_int();
    if (m.experts_per_token > m.experts)
      node.at("num_experts_per_tok").fail(fmt::format("exceeds n_routed_experts ({})", m.experts));
    m.moe_ffn_hidden = node.at("moe_intermediate_size").as_positive_int();
    if (auto sh = node.find("n_shared_experts"); sh && !sh->json().is_null())
      m.shared_expert_ffn_hidden = sh->as_nonnegative_int() * m.moe_ffn_hidden;
    m.first_dense_layers = 0;
    if (auto k = node.find("first_k_dense_replace"); k && !k->json().is_null()) {
      m.first_dense_layers = k->as_nonnegative_int();
      if (m.first_dense_layers >= m.layers) k->fail(fmt::format("must be below num_hidden_layers ({})", m.layers));
    }
    if (m.first_dense_layers == 0) m.ffn_hidden = 0;
  } else if (auto k = node.find("first_k_dense_replace"); k && k->json().is_number() && k->json().get<double>() > 0) {
    k->fail("applies only with n_routed_experts");
  }
  if (auto lora = node.find("kv_lora_rank"); lora && !lora->json().is_null()) {
    m.kv_lora_rank = lora->as_positive_int();
    if (auto q = node.find("q_lora_rank"); q && !q->json().is_null()) m.q_lora_rank = q->as_positive_int();
    m.head_dim = node.at("qk_nope_head_dim").as_positive_int();
    m.qk_rope_head_dim = node.at("qk_rope_head_dim").as_positive_int();
    m.v_head_dim = node.at("v_head_dim").as_positive_int();
    m.kv_heads = m.heads;
    if (m.sliding_window > 0)
      node.at("sliding_window").fail("sliding-window attention with multi-head latent attention is not supported yet");
  }
  if (auto mtp = node.find("num_nextn_predict_layers"); mtp && !mtp->json().is_null())
    m.mtp_layers = mtp->as_nonnegative_int();
  validate(m, node);
  return m;
}

// Per token and layer, forward: QKV 2h(q+2kv), output projection 2qh, attention scores and
// context 4·s·q (full s², not halved for causal), MLP 4hF (gelu) or 6hF (swiglu); logits 2Vh.
// A training step is 3 passes. With q = h, kv = G·h/A:
//   swiglu: seq·(12Lh²(1 + G/A + s/h) + 18LFh + 6Vh)           (NeMo's Llama/GQA form)
//   gelu, F = 4h, G = A: seq·(24Lh² + 12Lhs + 48Lh² + 6Vh)     (NeMo's GPT form)
//                        = 72·s·L·h²·(1 + s/(6h) + V/(12hL))   (Korthikanti et al. 2022)
// Multi-head latent attention counts 2 FLOPs per weight of its projections and s·heads·(qk + v)
// for scores and context (causal, as Megatron counts MLA); a multi-token prediction module its 2h -> h projection, one
// layer and the logits.
double model_flops_per_sequence(const ModelSpec& m, std::int64_t seq_len) {
  const double s = static_cast<double>(seq_len);
  const double h = static_cast<double>(m.hidden);
  const double mlp_matrices = m.mlp == MlpKind::swiglu ? 3 : 2;
  // A mixture-of-experts layer: the router (2hE) and the experts_per_token experts and the shared
  // expert each token passes.
  const double moe_mlp =
      2 * h * static_cast<double>(m.experts) +
      2 * mlp_matrices * h * static_cast<double>(m.experts_per_token * m.moe_ffn_hidden + m.shared_expert_ffn_hidden);
  const double dense_mlp = 2 * mlp_matrices * h * static_cast<double>(m.ffn_hidden);
  // Attention scores and context: every key of the sequence (non-causal s²), or of the window in a
  // sliding-window layer.
  const double window = m.sliding_window > 0 ? std::min(s, static_cast<double>(m.sliding_window)) : s;
  const double keys = (1 - m.windowed_fraction()) * s + m.windowed_fraction() * window;
  const double heads = static_cast<double>(m.heads);
  double linear = 0, core = 0;
  if (m.mla()) {
    const double latent_norms = static_cast<double>(m.kv_lora_rank + m.q_lora_rank);
    linear = 2 * (static_cast<double>(m.attention_params_per_layer()) - latent_norms);
    // Megatron's MLA branch (training.py num_floating_point_operations) counts causal pairs: s/2 keys.
    core = keys * heads * static_cast<double>(m.head_dim + m.qk_rope_head_dim + m.v_head_dim);
  } else {
    linear = 2 * static_cast<double>(m.attention_params_per_layer());
    core = 4 * keys * static_cast<double>(q_dim(m));
  }
  const double moe_layers = m.moe() ? static_cast<double>(m.layers - m.first_dense_layers) : 0;
  const double dense_layers = static_cast<double>(m.layers) - moe_layers;
  const double layer_mlp = m.moe() ? moe_mlp : dense_mlp;
  const double logits = 2 * static_cast<double>(m.vocab) * h;
  double per_token =
      static_cast<double>(m.layers) * (linear + core) + moe_layers * moe_mlp + dense_layers * dense_mlp + logits;
  per_token += static_cast<double>(m.mtp_layers) * (2 * 2 * h * h + linear + core + layer_mlp + logits);
  return 3 * s * per_token;
}

}  // namespace trainsim::workload
