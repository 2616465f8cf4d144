#include "workload/model.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string_view>
#include <utility>
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

// glu_clamp (`key`: the file's, or a Hugging Face config's swiglu_limit): Megatron-Core clamps the
// gated activation of the routed experts (its weighted quick-GeGLU); its dense and shared-expert MLPs
// take no clamp, so a model with either is refused rather than run unclamped there.
void check_glu_clamp(const ModelSpec& m, const util::JsonNode& key) {
  if (!m.moe() || m.mlp != MlpKind::swiglu || m.hybrid() || m.csa() || m.shared_expert_ffn_hidden > 0 ||
      m.moe_layer_count() < m.layers)
    key.fail(
        "applies to a SwiGLU mixture-of-experts model with routed experts on every layer and no shared expert "
        "(the eager clamp of Megatron-Core's quick-GeGLU experts, GPT-OSS's)");
}

// A layer count: 1 to kMaxLayers (per-layer tables, e.g. which layers have experts, are built from it).
std::int64_t as_layer_count(const util::JsonNode& node) {
  const std::int64_t v = node.as_positive_int();
  if (v > kMaxLayers) node.fail(fmt::format("{} layers: trainsim models at most {}", v, kMaxLayers));
  return v;
}

// Sets the model's MoE layers from one flag per layer (true: routed experts), in canonical form:
// nothing when every layer has experts, first_dense_layers when the dense layers all come first.
// `node` names the key for the errors.
void set_moe_layers(ModelSpec& m, const std::vector<bool>& moe, const util::JsonNode& node) {
  const auto first = std::find(moe.begin(), moe.end(), true);
  if (first == moe.end()) node.fail("leaves no layer with experts");
  m.first_dense_layers = 0;
  m.moe_layer_pattern.clear();
  if (std::find(first, moe.end(), false) == moe.end()) {
    m.first_dense_layers = first - moe.begin();
    return;
  }
  for (const bool e : moe) m.moe_layer_pattern += e ? '1' : '0';
}

// Group-limited routing: `groups` and `topk` name the keys (the file's own, or a Hugging Face
// config's n_group / topk_group) for the errors.
void read_router_groups(ModelSpec& m, const util::JsonNode& groups, const util::JsonNode& topk) {
  m.router_groups = groups.as_positive_int();
  m.router_group_topk = topk.as_positive_int();
  if (m.experts % m.router_groups != 0)
    groups.fail(fmt::format("does not divide the {} experts into equal groups", m.experts));
  if (m.router_group_topk > m.router_groups) topk.fail(fmt::format("exceeds the {} groups", m.router_groups));
  const std::int64_t reachable = m.router_group_topk * (m.experts / m.router_groups);
  if (reachable < m.experts_per_token)
    topk.fail(fmt::format("leaves {} groups of {} experts = {}, fewer than the {} experts each token visits",
                          m.router_group_topk, m.experts / m.router_groups, reachable, m.experts_per_token));
}

MlpKind parse_mlp(const util::JsonNode& node) {
  std::string s = node.as_string();
  if (s == "gelu") return MlpKind::gelu;
  if (s == "swiglu") return MlpKind::swiglu;
  if (s == "squared_relu") return MlpKind::squared_relu;
  node.fail(fmt::format("unknown mlp \"{}\" (expected gelu, swiglu or squared_relu)", s));
}

// The matrices of one MLP: up and down, plus the gate of a gated (SwiGLU) one.
std::int64_t mlp_matrices(const ModelSpec& m) {
  return m.mlp == MlpKind::swiglu ? 3 : 2;
}

// The norms of a block: its pre-norm, and with post_norms (Gemma 2, 3) the norm on its output.
std::int64_t block_norm_params(const ModelSpec& m) {
  return (m.post_norms ? 2 : 1) * norm_params(m);
}

// The attention block: its projections, its norms, (GPT, GPT-OSS) the QKV and output biases, and
// (Qwen3) the query and key norms' weights, one head_dim vector each.
std::int64_t attention_block_params(const ModelSpec& m) {
  const std::int64_t biases = m.biased() ? q_dim(m) + 2 * kv_dim(m) + m.hidden : 0;
  const std::int64_t qk_norms = m.qk_norm ? 2 * m.head_dim : 0;
  return m.attention_params_per_layer() + block_norm_params(m) + biases + qk_norms;
}

// The MLP block (dense, or a mixture of experts' router, routed experts, shared expert and latent
// projections) with its norms; biased linears (GPT: Narayanan's 13h per layer with the attention's)
// add fc1's and fc2's biases, under MoE every expert's (fc1's gate and up halves under SwiGLU).
std::int64_t mlp_block_params(const ModelSpec& m) {
  const std::int64_t mats = mlp_matrices(m);
  std::int64_t n = block_norm_params(m);
  if (m.moe()) {
    n += m.hidden * m.experts + m.expert_params_per_layer() + mats * m.hidden * m.shared_expert_ffn_hidden +
         2 * m.hidden * m.moe_latent;
  } else {
    n += mats * m.hidden * m.ffn_hidden;
  }
  if (m.biased()) {
    const std::int64_t fc1 = mats - 1;  // fc1's outputs per unit of width: 2 with SwiGLU's gate
    // A mixture of experts: the router's bias, one per expert, then each expert's (at the latent
    // width it works at in a latent MoE) and the shared expert's.
    const std::int64_t expert_out = m.moe_latent > 0 ? m.moe_latent : m.hidden;
    n += m.moe() ? m.experts * (1 + fc1 * m.moe_ffn_hidden + expert_out) +
                       (m.shared_expert_ffn_hidden > 0 ? fc1 * m.shared_expert_ffn_hidden + m.hidden : 0)
                 : fc1 * m.ffn_hidden + m.hidden;
  }
  return n;
}

// A Mamba-2 mixer block: its norm, the input projection, the convolution's weights and biases over
// x, B and C, per head dt_bias, A_log and D, the gated RMSNorm's weight and the output projection.
std::int64_t mamba_block_params(const ModelSpec& m) {
  const std::int64_t xbc = m.mamba_inner() + 2 * m.mamba_groups * m.mamba_state;
  return norm_params(m) + m.hidden * m.mamba_in_proj() + xbc * (m.mamba_conv + 1) + 3 * m.mamba_heads +
         m.mamba_inner() + m.mamba_inner() * m.hidden;
}

// Entry i of a compress_ratios list (`list` names it): 0 (the window only) or a ratio of 2 and more.
std::int64_t compress_ratio(const util::JsonNode& list, std::size_t i) {
  const auto& r = list.json()[i];
  if (!r.is_number_integer() || r.get<std::int64_t>() < 0 || r.get<std::int64_t>() == 1 ||
      r.get<std::int64_t>() > 1 << 20)
    list.fail(fmt::format("entry {} is {}: each is 0 (the window only) or a ratio from 2 to {}", i, r.dump(), 1 << 20));
  return r.get<std::int64_t>();
}

// The residual streams of hyper-connections (trainsim's hc_streams, Hugging Face's hc_mult).
std::int64_t read_hc_streams(const util::JsonNode& n) {
  const std::int64_t streams = n.as_positive_int();
  if (streams > 64) n.fail(fmt::format("{} residual streams: trainsim models at most 64", streams));
  return streams;
}

// DeepSeek's routed experts of a Hugging Face config (V2, V3, V4, Kimi K2): n_routed_experts of
// moe_intermediate_size, num_experts_per_tok of them per token, n_shared_experts of the same width as
// one shared expert, the first first_k_dense_replace layers dense.
void read_deepseek_experts(ModelSpec& m, const util::JsonNode& node, const util::JsonNode& experts) {
  m.experts = experts.as_positive_int();
  m.experts_per_token = node.at("num_experts_per_tok").as_positive_int();
  if (m.experts_per_token > m.experts)
    node.at("num_experts_per_tok").fail(fmt::format("exceeds n_routed_experts ({})", m.experts));
  m.moe_ffn_hidden = node.at("moe_intermediate_size").as_positive_int();
  if (auto sh = node.find("n_shared_experts"); sh && !sh->json().is_null()) {
    // The product is a width like the others, at most the 9e15 an integer key may hold; the model's
    // size bound (config/scenario.cc) then refuses what is merely absurd.
    const std::int64_t shared = sh->as_nonnegative_int();
    if (static_cast<double>(shared) * static_cast<double>(m.moe_ffn_hidden) >= 9.0e15)
      sh->fail(fmt::format("{} shared experts of moe_intermediate_size {} are wider than trainsim models", shared,
                           m.moe_ffn_hidden));
    m.shared_expert_ffn_hidden = shared * m.moe_ffn_hidden;
  }
  m.first_dense_layers = 0;
  if (auto k = node.find("first_k_dense_replace"); k && !k->json().is_null()) {
    m.first_dense_layers = k->as_nonnegative_int();
    if (m.first_dense_layers >= m.layers) k->fail(fmt::format("must be below num_hidden_layers ({})", m.layers));
  }
}

ModelSpec parse_hf_llama(const util::JsonNode& n, const std::string& fallback_name) {
  ModelSpec m;
  m.name = fallback_name;
  m.layers = as_layer_count(n.at("num_hidden_layers"));
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
  // Llama's attention_bias (the q, k, v and o projections) and mlp_bias (gate, up and down): both
  // true is every linear biased, trainsim's linear_bias (on a SwiGLU model; GPT's kind has them
  // anyway). One without the other is not modelled (a few parameters and element-wise adds).
  auto flag = [&n](const char* key) {
    auto f = n.find(key);
    return f && f->json().is_boolean() && f->as_bool();
  };
  if (flag("attention_bias") && flag("mlp_bias") && m.mlp != MlpKind::gelu) m.linear_bias = true;
  return m;
}

ModelSpec parse_hf_gpt2(const util::JsonNode& n, const std::string& fallback_name) {
  ModelSpec m;
  m.name = fallback_name;
  m.layers = as_layer_count(n.at("n_layer"));
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

// A hybrid layer pattern (trainsim's hybrid_pattern, Hugging Face's hybrid_override_pattern):
// one of 'M', '*', '-', 'E' per layer.
std::string read_hybrid_pattern(const util::JsonNode& pat) {
  std::string p = pat.as_string();
  if (p.empty()) pat.fail("must name at least one layer");
  if (const auto bad = p.find_first_not_of("M*-E"); bad != std::string::npos)
    pat.fail(
        fmt::format("has '{}' at position {}; layers are 'M' (Mamba), '*' (attention), '-' (MLP) or 'E' "
                    "(mixture of experts)",
                    p[bad], bad));
  return p;
}

// Nemotron-H / Nemotron 3 (model_type nemotron_h): the hybrid_override_pattern ('M' Mamba-2, '*'
// attention, '-' MLP, 'E' mixture of experts), Mamba-2 from mamba_num_heads, mamba_head_dim,
// ssm_state_size, n_groups, conv_kernel, chunk_size; MLPs and experts with mlp_hidden_act relu2;
// experts from n_routed_experts, num_experts_per_tok, moe_intermediate_size,
// moe_shared_expert_intermediate_size and moe_latent_size; num_nextn_predict_layers.
ModelSpec parse_hf_nemotron_h(const util::JsonNode& n, const std::string& fallback_name) {
  ModelSpec m;
  m.name = fallback_name;
  m.hybrid_pattern = read_hybrid_pattern(n.at("hybrid_override_pattern"));
  m.layers = static_cast<std::int64_t>(m.hybrid_pattern.size());
  if (auto l = n.find("num_hidden_layers"); l && !l->json().is_null() && l->as_positive_int() != m.layers)
    l->fail(fmt::format("must equal the length of hybrid_override_pattern ({})", m.layers));
  m.hidden = n.at("hidden_size").as_positive_int();
  m.heads = n.at("num_attention_heads").as_positive_int();
  auto kv = n.find("num_key_value_heads");
  m.kv_heads = kv && !kv->json().is_null() ? kv->as_positive_int() : m.heads;
  if (auto hd = n.find("head_dim"); hd && !hd->json().is_null()) {
    m.head_dim = hd->as_positive_int();
  } else {
    if (m.hidden % m.heads != 0)
      n.at("num_attention_heads").fail(fmt::format("does not divide hidden_size ({})", m.hidden));
    m.head_dim = m.hidden / m.heads;
  }
  m.vocab = n.at("vocab_size").as_positive_int();
  if (auto tie = n.find("tie_word_embeddings")) m.tied_embeddings = tie->as_bool();
  m.mlp = MlpKind::squared_relu;
  if (auto act = n.find("mlp_hidden_act"); act && act->as_string() != "relu2")
    act->fail(fmt::format("unsupported activation \"{}\" (expected relu2)", act->as_string()));
  if (m.hybrid_has('-')) m.ffn_hidden = n.at("intermediate_size").as_positive_int();
  if (m.hybrid_has('E')) {
    m.experts = n.at("n_routed_experts").as_positive_int();
    m.experts_per_token = n.at("num_experts_per_tok").as_positive_int();
    if (m.experts_per_token > m.experts)
      n.at("num_experts_per_tok").fail(fmt::format("exceeds n_routed_experts ({})", m.experts));
    m.moe_ffn_hidden = n.at("moe_intermediate_size").as_positive_int();
    if (auto sh = n.find("moe_shared_expert_intermediate_size"); sh && !sh->json().is_null())
      m.shared_expert_ffn_hidden = sh->as_nonnegative_int();
    if (auto lat = n.find("moe_latent_size"); lat && !lat->json().is_null()) m.moe_latent = lat->as_positive_int();
  }
  if (m.hybrid_has('M')) {
    m.mamba_heads = n.at("mamba_num_heads").as_positive_int();
    m.mamba_head_dim = n.at("mamba_head_dim").as_positive_int();
    m.mamba_state = n.at("ssm_state_size").as_positive_int();
    m.mamba_groups = n.at("n_groups").as_positive_int();
    if (m.mamba_heads % m.mamba_groups != 0)
      n.at("n_groups").fail(fmt::format("does not divide mamba_num_heads ({})", m.mamba_heads));
    if (auto k = n.find("conv_kernel"); k && !k->json().is_null()) m.mamba_conv = k->as_positive_int();
    if (auto k = n.find("chunk_size"); k && !k->json().is_null()) m.mamba_chunk = k->as_positive_int();
  }
  if (auto mtp = n.find("num_nextn_predict_layers"); mtp && !mtp->json().is_null())
    m.mtp_layers = mtp->as_nonnegative_int();
  if (m.mtp_layers > 0 && !m.moe())
    n.at("num_nextn_predict_layers").fail("needs 'E' layers (the module's layer is \"*E\")");
  validate(m, n);
  return m;
}

// DeepSeek V4 (model_type deepseek_v4): DeepSeek V4's attention (compress_ratios, one per layer, any
// entries beyond them the multi-token prediction modules'; or layer_types of sliding_attention,
// compressed_sparse_attention and heavily_compressed_attention with compress_rate_csa and
// compress_rate_hca), the grouped output projection (o_groups, o_lora_rank), the indexer
// (index_n_heads, index_head_dim, index_topk), hyper-connections (hc_mult), and DeepSeek's experts
// (n_routed_experts of moe_intermediate_size, n_shared_experts, num_experts_per_tok, first_k_dense_replace
// with intermediate_size). Its hash-routed first layers (num_hash_layers) and square-root-softplus scores
// cost as the score router.
ModelSpec parse_hf_deepseek_v4(const util::JsonNode& n, const std::string& fallback_name) {
  ModelSpec m;
  m.name = fallback_name;
  m.layers = as_layer_count(n.at("num_hidden_layers"));
  m.hidden = n.at("hidden_size").as_positive_int();
  m.heads = n.at("num_attention_heads").as_positive_int();
  m.kv_heads = 1;
  if (auto kv = n.find("num_key_value_heads"); kv && !kv->json().is_null() && kv->as_positive_int() != 1)
    kv->fail("DeepSeek V4's attention has one key/value head: must be 1");
  m.head_dim = n.at("head_dim").as_positive_int();
  m.qk_rope_head_dim = n.at("qk_rope_head_dim").as_positive_int();
  if (m.qk_rope_head_dim >= m.head_dim)
    n.at("qk_rope_head_dim").fail(fmt::format("must be below head_dim ({})", m.head_dim));
  m.q_lora_rank = n.at("q_lora_rank").as_positive_int();
  m.o_groups = n.at("o_groups").as_positive_int();
  if (m.heads % m.o_groups != 0)
    n.at("o_groups").fail(fmt::format("does not divide num_attention_heads ({})", m.heads));
  m.o_lora_rank = n.at("o_lora_rank").as_positive_int();
  m.vocab = n.at("vocab_size").as_positive_int();
  m.mlp = MlpKind::swiglu;
  if (auto act = n.find("hidden_act"); act && !act->json().is_null() && act->as_string() != "silu")
    act->fail(fmt::format("unsupported activation \"{}\" (DeepSeek V4's experts are SwiGLU: silu)", act->as_string()));
  if (auto tie = n.find("tie_word_embeddings"); tie && !tie->json().is_null()) m.tied_embeddings = tie->as_bool();
  m.sliding_window = n.at("sliding_window").as_positive_int();
  if (auto mtp = n.find("num_nextn_predict_layers"); mtp && !mtp->json().is_null())
    m.mtp_layers = mtp->as_nonnegative_int();
  bool indexed = false;
  if (auto ratios = n.find("compress_ratios"); ratios && !ratios->json().is_null()) {
    const auto& a = ratios->json();
    if (!a.is_array() || static_cast<std::int64_t>(a.size()) < m.layers ||
        static_cast<std::int64_t>(a.size()) > m.layers + m.mtp_layers)
      ratios->fail(fmt::format("must list one ratio per layer ({}; and per multi-token prediction module, {})",
                               m.layers, m.mtp_layers));
    for (std::int64_t i = 0; i < m.layers; ++i)
      m.compress_ratios.push_back(compress_ratio(*ratios, static_cast<std::size_t>(i)));
  } else {
    auto kinds = n.find("layer_types");
    if (!kinds) n.at("compress_ratios");  // "missing required key"
    if (!kinds->json().is_array() || static_cast<std::int64_t>(kinds->json().size()) != m.layers)
      kinds->fail(fmt::format("must list one attention kind per layer ({} layers)", m.layers));
    auto rate = [&n](const char* key, std::int64_t fallback) {
      auto r = n.find(key);
      return r && !r->json().is_null() ? r->as_positive_int() : fallback;
    };
    const std::int64_t csa = rate("compress_rate_csa", 4), hca = rate("compress_rate_hca", 128);
    if (csa != 4) n.at("compress_rate_csa").fail("trainsim models compressed sparse attention at ratio 4 only");
    if (hca == 4 || hca == 1) n.at("compress_rate_hca").fail("must be a ratio other than 1 and 4");
    for (const auto& k : kinds->json()) {
      const std::string kind = k.is_string() ? k.get<std::string>() : k.dump();
      if (kind == "sliding_attention")
        m.compress_ratios.push_back(0);
      else if (kind == "compressed_sparse_attention")
        m.compress_ratios.push_back(csa);
      else if (kind == "heavily_compressed_attention")
        m.compress_ratios.push_back(hca);
      else
        kinds->fail(
            fmt::format("{} layers are not DeepSeek V4's (sliding_attention, compressed_sparse_attention, "
                        "heavily_compressed_attention)",
                        kind));
    }
  }
  for (const std::int64_t r : m.compress_ratios) indexed = indexed || r == 4;
  if (indexed) {
    m.index_heads = n.at("index_n_heads").as_positive_int();
    m.index_head_dim = n.at("index_head_dim").as_positive_int();
    m.index_topk = n.at("index_topk").as_positive_int();
  }
  if (auto hc = n.find("hc_mult"); hc && !hc->json().is_null()) m.hc_streams = read_hc_streams(*hc);
  read_deepseek_experts(m, n, n.at("n_routed_experts"));
  if (m.first_dense_layers > 0) m.ffn_hidden = n.at("intermediate_size").as_positive_int();
  return m;
}

}  // namespace

ModelSpec ModelSpec::dense_variant() const {
  ModelSpec d = *this;
  d.experts = d.experts_per_token = d.moe_ffn_hidden = d.shared_expert_ffn_hidden = 0;
  d.first_dense_layers = 0;
  d.moe_layer_pattern.clear();
  d.moe_latent = 0;
  d.router_groups = d.router_group_topk = 0;
  return d;
}

std::vector<std::pair<std::int64_t, std::int64_t>> ModelSpec::compress_ratio_counts() const {
  std::vector<std::int64_t> sorted = compress_ratios;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::pair<std::int64_t, std::int64_t>> counts;
  for (const std::int64_t r : sorted) {
    if (counts.empty() || counts.back().first != r) counts.emplace_back(r, 0);
    ++counts.back().second;
  }
  return counts;
}

namespace {

// DeepSeek V4's attention block of one layer compressing by `ratio` (0: window only): the query
// latent's projections and norm, the key/value head's projection and norm, the per-head attention
// sinks, the grouped output projection; a compressing layer's compressor (its key/value and gate
// projections, each of 2·head_dim with ratio 4's overlapping windows, else head_dim; a positional
// bias per window position; the entries' norm); ratio 4's lightning indexer (its query projection
// from the latent, per-head weights from the hidden state, and a compressor of its own at
// index_head_dim).
std::int64_t csa_attention_params(const ModelSpec& m, std::int64_t ratio) {
  const std::int64_t hd = m.head_dim;
  std::int64_t n = m.hidden * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * m.heads * hd + m.hidden * hd + hd +
                   m.heads + m.heads * hd * m.o_lora_rank + m.o_groups * m.o_lora_rank * m.hidden;
  auto compressor = [&m, ratio](std::int64_t width) {
    const std::int64_t coff = ratio == 4 ? 2 : 1;
    return 2 * m.hidden * coff * width + ratio * coff * width + width;
  };
  if (ratio > 0) n += compressor(hd);
  if (ratio == 4)
    n += m.q_lora_rank * m.index_heads * m.index_head_dim + m.hidden * m.index_heads + compressor(m.index_head_dim);
  return n;
}

}  // namespace

// One mapping of the hyper-connections: hc_streams·hidden -> hc_streams·(hc_streams + 2), with its
// bias and three scales (none with one stream).
std::int64_t ModelSpec::hc_params() const {
  if (hc_streams <= 1) return 0;
  const std::int64_t mix = hc_streams * (hc_streams + 2);
  return mix * hc_streams * hidden + mix + 3;
}

std::int64_t ModelSpec::attention_params_per_layer() const {
  if (csa()) {
    // The layers' mean (their compressors differ), rounded down.
    std::int64_t sum = 0;
    for (const std::int64_t r : compress_ratios) sum += csa_attention_params(*this, r);
    return sum / static_cast<std::int64_t>(compress_ratios.size());
  }
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
  return attention_block_params(*this) + mlp_block_params(*this) + 2 * hc_params();
}

LayerBlock ModelSpec::block(std::int64_t layer) const {
  if (!hybrid()) return LayerBlock::transformer;
  switch (hybrid_pattern[static_cast<std::size_t>(layer)]) {
    case 'M':
      return LayerBlock::mamba;
    case '*':
      return LayerBlock::attention;
    case '-':
      return LayerBlock::mlp;
    default:
      return LayerBlock::moe;  // 'E' (parse_model accepts nothing else)
  }
}

std::int64_t ModelSpec::params_per_block(LayerBlock b) const {
  switch (b) {
    case LayerBlock::transformer:
      return params_per_layer();
    case LayerBlock::mamba:
      return mamba_block_params(*this);
    case LayerBlock::attention:
      return attention_block_params(*this);
    case LayerBlock::mlp:
      return mlp_block_params(dense_variant());
    case LayerBlock::moe:
      return mlp_block_params(*this);
  }
  return 0;
}

// The routed experts' width in and out: the hidden state, or a latent MoE's latent.
std::int64_t ModelSpec::expert_params_per_layer() const {
  return experts * mlp_matrices(*this) * (moe_latent > 0 ? moe_latent : hidden) * moe_ffn_hidden;
}

std::int64_t ModelSpec::embedding_params() const {
  return vocab * hidden;
}

std::int64_t ModelSpec::main_params() const {
  const std::int64_t output = tied_embeddings ? 0 : vocab * hidden;
  if (hybrid()) {
    std::int64_t n = embedding_params() + output + norm_params(*this);
    for (std::int64_t l = 0; l < layers; ++l) n += params_per_block(block(l));
    return n;
  }
  const std::int64_t dense = moe() ? layers - moe_layer_count() : 0;
  const std::int64_t dense_layers = dense > 0 ? dense * dense_variant().params_per_layer() : 0;
  // Hyper-connections end in a head mapping (hc_streams·hidden -> hc_streams, a bias, a scale).
  const std::int64_t hc_head = hc_streams > 1 ? hc_streams * hc_streams * hidden + hc_streams + 1 : 0;
  return dense_layers + (layers - dense) * params_per_layer() + embedding_params() + output + norm_params(*this) +
         hc_head;
}

std::int64_t ModelSpec::moe_layer_count() const {
  if (hybrid()) return static_cast<std::int64_t>(std::count(hybrid_pattern.begin(), hybrid_pattern.end(), 'E'));
  if (!moe()) return 0;
  if (moe_layer_pattern.empty()) return layers - first_dense_layers;
  return static_cast<std::int64_t>(std::count(moe_layer_pattern.begin(), moe_layer_pattern.end(), '1'));
}

std::int64_t ModelSpec::mtp_params() const {
  // Per module: two input norms, the 2h -> h projection, one layer, its final norm (the embedding and
  // the output layer are the model's own).
  return mtp_layers * (3 * norm_params(*this) + 2 * hidden * hidden + params_per_layer());
}

std::int64_t ModelSpec::total_params() const {
  return main_params() + mtp_params();
}

namespace {

// DeepSeek V4's attention keys of trainsim's format (ModelSpec::csa()); `ratios` is compress_ratios.
void read_csa(ModelSpec& m, const util::JsonNode& node, const util::JsonNode& ratios) {
  if (m.hybrid()) ratios.fail("DeepSeek V4's attention in a hybrid model is not supported yet");
  if (!ratios.json().is_array() || static_cast<std::int64_t>(ratios.json().size()) != m.layers)
    ratios.fail(fmt::format("must list one compression ratio per layer ({} layers)", m.layers));
  bool indexed = false;
  for (std::size_t i = 0; i < ratios.json().size(); ++i) {
    m.compress_ratios.push_back(compress_ratio(ratios, i));
    indexed = indexed || m.compress_ratios.back() == 4;
  }
  m.q_lora_rank = node.at("q_lora_rank").as_positive_int();
  m.qk_rope_head_dim = node.at("qk_rope_head_dim").as_positive_int();
  if (!node.has("head_dim")) node.at("head_dim");  // "missing required key"
  m.kv_heads = 1;
  if (auto kv = node.find("kv_heads"); kv && kv->as_positive_int() != 1)
    kv->fail("DeepSeek V4's attention has one key/value head: must be 1");
  if (auto v = node.find("v_head_dim")) v->fail("DeepSeek V4's keys serve as values (head_dim wide)");
  m.o_groups = node.at("o_groups").as_positive_int();
  m.o_lora_rank = node.at("o_lora_rank").as_positive_int();
  if (indexed) {
    m.index_heads = node.at("index_heads").as_positive_int();
    m.index_head_dim = node.at("index_head_dim").as_positive_int();
    m.index_topk = node.at("index_topk").as_positive_int();
  } else {
    for (const char* key : {"index_heads", "index_head_dim", "index_topk"})
      if (auto k = node.find(key)) k->fail("no layer compresses by 4 (compressed sparse attention) for the indexer");
  }
  if (auto hc = node.find("hc_streams")) m.hc_streams = read_hc_streams(*hc);
}

}  // namespace

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
                       "qk_norm",
                       "linear_bias",
                       "glu_clamp",
                       "post_norms",
                       "attention_softcap",
                       "logit_softcap",
                       "first_dense_layers",
                       "q_lora_rank",
                       "kv_lora_rank",
                       "qk_rope_head_dim",
                       "v_head_dim",
                       "mtp_layers",
                       "moe_latent",
                       "router_groups",
                       "router_group_topk",
                       "moe_layer_freq",
                       "attention_chunk",
                       "hybrid_pattern",
                       "mamba_heads",
                       "mamba_head_dim",
                       "mamba_state",
                       "mamba_groups",
                       "mamba_conv",
                       "mamba_chunk",
                       "compress_ratios",
                       "o_groups",
                       "o_lora_rank",
                       "index_heads",
                       "index_head_dim",
                       "index_topk",
                       "hc_streams"});
  ModelSpec m;
  m.name = node.at("name").as_string();
  if (auto pat = node.find("hybrid_pattern")) {
    m.hybrid_pattern = read_hybrid_pattern(*pat);
    m.layers = static_cast<std::int64_t>(m.hybrid_pattern.size());
    if (auto l = node.find("layers"); l && l->as_positive_int() != m.layers)
      l->fail(fmt::format("must equal the length of hybrid_pattern ({})", m.layers));
  } else {
    m.layers = as_layer_count(node.at("layers"));
  }
  if (m.hybrid_has('M')) {
    m.mamba_heads = node.at("mamba_heads").as_positive_int();
    m.mamba_head_dim = node.at("mamba_head_dim").as_positive_int();
    m.mamba_state = node.at("mamba_state").as_positive_int();
    m.mamba_groups = node.at("mamba_groups").as_positive_int();
    if (auto k = node.find("mamba_conv")) m.mamba_conv = k->as_positive_int();
    if (auto k = node.find("mamba_chunk")) m.mamba_chunk = k->as_positive_int();
    if (m.mamba_heads % m.mamba_groups != 0)
      node.at("mamba_groups").fail(fmt::format("does not divide mamba_heads ({})", m.mamba_heads));
  } else {
    for (const char* key :
         {"mamba_heads", "mamba_head_dim", "mamba_state", "mamba_groups", "mamba_conv", "mamba_chunk"})
      if (auto k = node.find(key)) k->fail("only a hybrid model with Mamba ('M') layers takes this key");
  }
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
  } else if (auto ratios = node.find("compress_ratios")) {
    read_csa(m, node, *ratios);
  } else {
    for (const char* key : {"q_lora_rank", "qk_rope_head_dim", "v_head_dim"}) {
      if (auto k = node.find(key))
        k->fail(
            "only multi-head latent attention (with \"kv_lora_rank\") or DeepSeek V4's attention (with "
            "\"compress_ratios\") takes this key");
    }
    m.kv_heads = node.at("kv_heads").as_positive_int();
  }
  if (!m.csa()) {
    for (const char* key : {"o_groups", "o_lora_rank", "index_heads", "index_head_dim", "index_topk", "hc_streams"})
      if (auto k = node.find(key)) k->fail("only DeepSeek V4's attention (with \"compress_ratios\") takes this key");
  }
  if (m.hybrid()) {
    // A hybrid model's MLP widths belong to its '-' and 'E' layers, one key each.
    if (m.hybrid_has('E')) node.at("experts");  // "missing required key"
    if (auto e = node.find("experts"); e && !m.hybrid_has('E'))
      e->fail("hybrid_pattern has no 'E' layer for the experts");
    if (m.hybrid_has('-')) m.ffn_hidden = node.at("ffn_hidden").as_positive_int();
    if (auto f = node.find("ffn_hidden"); f && !m.hybrid_has('-'))
      f->fail("hybrid_pattern has no '-' (MLP) layer for it");
    if (auto k = node.find("first_dense_layers")) k->fail("a hybrid model places its dense layers in hybrid_pattern");
    if (auto k = node.find("moe_layer_freq")) k->fail("a hybrid model places its expert layers in hybrid_pattern");
    if (auto k = node.find("kv_lora_rank"))
      k->fail("multi-head latent attention in a hybrid model is not supported yet");
  }
  if (auto e = node.find("experts")) {
    m.experts = e->as_positive_int();
    m.experts_per_token = node.at("experts_per_token").as_positive_int();
    m.moe_ffn_hidden = node.at("moe_ffn_hidden").as_positive_int();
    if (auto sh = node.find("shared_expert_ffn_hidden")) m.shared_expert_ffn_hidden = sh->as_positive_int();
    if (auto lat = node.find("moe_latent")) m.moe_latent = lat->as_positive_int();
    auto groups = node.find("router_groups"), group_topk = node.find("router_group_topk");
    if (groups || group_topk) {
      if (!groups) group_topk->fail("needs router_groups");
      if (!group_topk) groups->fail("needs router_group_topk");
      if (m.experts_per_token > m.experts)
        node.at("experts_per_token").fail(fmt::format("exceeds experts ({})", m.experts));
      read_router_groups(m, *groups, *group_topk);
    }
    if (m.hybrid()) {
      // A hybrid model's ffn_hidden is its '-' layers' (read above).
    } else if (auto freq = node.find("moe_layer_freq")) {
      if (node.has("first_dense_layers"))
        freq->fail("cannot be combined with first_dense_layers (the pattern says which layers are dense)");
      // Megatron-Core's --moe-layer-freq: N (layer i has experts when i mod N is 0), or one 0 / 1 per layer.
      std::vector<bool> moe(static_cast<std::size_t>(m.layers));
      if (freq->json().is_array()) {
        if (static_cast<std::int64_t>(freq->json().size()) != m.layers)
          freq->fail(fmt::format("has {} entries for the model's {} layers", freq->json().size(), m.layers));
        for (std::size_t i = 0; i < moe.size(); ++i) {
          const auto& entry = freq->json()[i];
          if (!entry.is_number_integer() || (entry.get<std::int64_t>() != 0 && entry.get<std::int64_t>() != 1))
            freq->fail(fmt::format("entry {} is {}: each entry is 0 (a dense MLP) or 1 (experts)", i, entry.dump()));
          moe[i] = entry.get<std::int64_t>() == 1;
        }
      } else {
        const std::int64_t n = freq->as_positive_int();
        for (std::size_t i = 0; i < moe.size(); ++i) moe[i] = static_cast<std::int64_t>(i) % n == 0;
      }
      set_moe_layers(m, moe, *freq);
      if (m.moe_layer_count() < m.layers)
        m.ffn_hidden = node.at("ffn_hidden").as_positive_int();  // the dense layers' MLP
      else if (auto f = node.find("ffn_hidden"))
        f->fail("every layer has experts (moe_layer_freq): no dense MLP takes it");
    } else if (auto k = node.find("first_dense_layers")) {
      m.first_dense_layers = k->as_positive_int();
      if (m.first_dense_layers >= m.layers) k->fail(fmt::format("must be below layers ({})", m.layers));
      m.ffn_hidden = node.at("ffn_hidden").as_positive_int();  // the dense layers' MLP
    } else if (auto f = node.find("ffn_hidden")) {
      f->fail(
          "a mixture-of-experts model has no dense MLP unless first_dense_layers or moe_layer_freq says which "
          "layers keep one; its "
          "widths are moe_ffn_hidden and shared_expert_ffn_hidden");
    }
  } else {
    for (const char* key : {"experts_per_token", "moe_ffn_hidden", "shared_expert_ffn_hidden", "first_dense_layers",
                            "moe_latent", "router_groups", "router_group_topk", "moe_layer_freq"}) {
      if (auto k = node.find(key)) k->fail("only a mixture-of-experts model (with \"experts\") takes this key");
    }
    if (!m.hybrid()) m.ffn_hidden = node.at("ffn_hidden").as_positive_int();
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
  if (auto mtp = node.find("mtp_layers")) {
    m.mtp_layers = mtp->as_nonnegative_int();
    if (m.hybrid() && m.mtp_layers > 0 && !m.moe())
      mtp->fail("a hybrid model's multi-token prediction layer is attention and experts (\"*E\"): it needs 'E' layers");
  }
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
  } else if (m.csa()) {
    node.at("sliding_window");  // "missing required key": every DeepSeek V4 query attends its window
  }
  if (m.csa()) {
    if (auto k = node.find("sliding_window_pattern"))
      k->fail("DeepSeek V4's attention windows every layer (compress_ratios says what each layer adds)");
    if (m.mlp != MlpKind::swiglu) node.at("mlp").fail("DeepSeek V4's attention comes with SwiGLU (\"swiglu\")");
    if (m.heads % m.o_groups != 0) node.at("o_groups").fail(fmt::format("does not divide heads ({})", m.heads));
    if (m.qk_rope_head_dim >= m.head_dim)
      node.at("qk_rope_head_dim").fail(fmt::format("must be below head_dim ({})", m.head_dim));
  }
  if (auto c = node.find("attention_chunk")) {
    m.attention_chunk = c->as_positive_int();
    if (m.csa()) c->fail("chunked attention with DeepSeek V4's attention is not supported");
    if (m.hybrid())
      c->fail("applies to transformer models (a hybrid model's attention layers attend to the whole sequence)");
  }
  if (auto n = node.find("sliding_window_pattern")) {
    if (m.sliding_window == 0) n->fail("applies only with sliding_window");
    m.sliding_window_pattern = n->as_positive_int();
  }
  if (auto q = node.find("qk_norm")) {
    m.qk_norm = q->as_bool();
    if (m.qk_norm && (m.mla() || m.hybrid() || m.csa()))
      q->fail(
          "applies to models with a QKV projection (not multi-head latent attention, DeepSeek V4's attention or "
          "hybrid models)");
  }
  if (auto b = node.find("linear_bias")) {
    m.linear_bias = b->as_bool();
    if (!m.linear_bias && m.mlp == MlpKind::gelu) b->fail("a GPT (gelu) model always carries linear biases");
    if (m.linear_bias && (m.mla() || m.hybrid() || m.csa()))
      b->fail(
          "linear biases with multi-head latent attention, DeepSeek V4's attention or in a hybrid model are not "
          "supported yet");
  }
  if (auto c = node.find("glu_clamp")) {
    m.glu_clamp = c->as_positive_number();
    check_glu_clamp(m, *c);
  }
  if (auto p = node.find("post_norms")) {
    m.post_norms = p->as_bool();
    if (m.post_norms && (m.hybrid() || m.csa()))
      p->fail("post-norms in a hybrid model or with DeepSeek V4's attention are not supported yet");
  }
  if (auto cap = node.find("attention_softcap")) {
    m.attention_softcap = cap->as_positive_number();
    if (m.mla() || m.hybrid() || m.csa())
      cap->fail(
          "soft-capped attention with multi-head latent attention, DeepSeek V4's attention or in a hybrid model is "
          "not supported yet");
  }
  if (auto cap = node.find("logit_softcap")) m.logit_softcap = cap->as_positive_number();
  return m;
}

namespace {

// Hugging Face architectures whose configs carry a decoder's keys (num_hidden_layers, hidden_size,
// ...) but whose layers trainsim does not model: read as a Llama they would make another model
// without a word. One error line naming model_type instead.
void refuse_hf_architecture(const std::string& type, const std::optional<util::JsonNode>& node) {
  static const std::array<std::pair<std::string_view, std::string_view>, 25> kUnsupported = {{
      {"jamba", "Mamba (v1) layers"},
      {"bamba", "Mamba-2 layers outside Nemotron-H's pattern"},
      {"zamba", "Mamba layers"},
      {"zamba2", "Mamba-2 layers with shared attention blocks"},
      {"falcon_h1", "parallel attention and Mamba-2 mixers"},
      {"falcon_mamba", "Mamba (v1) layers"},
      {"mamba", "Mamba (v1) layers"},
      {"mamba2", "Mamba-2 layers outside Nemotron-H's pattern"},
      {"granitemoehybrid", "Mamba-2 layers outside Nemotron-H's pattern"},
      {"recurrent_gemma", "recurrent (RG-LRU) layers"},
      {"rwkv", "RWKV's recurrent layers"},
      {"qwen3_next", "linear-attention (Gated DeltaNet) layers"},
      {"lfm2", "convolution layers"},
      {"minimax", "lightning (linear) attention layers"},
      {"kimi_linear", "linear-attention (Kimi Delta Attention) layers"},
      {"deepseek_v32", "DeepSeek Sparse Attention: its lightning indexer and top-k key selection"},
      {"gemma4_text",
       "per-layer input embeddings, full-attention layers with their own head size and shared keys and values, "
       "a dense MLP beside the experts"},
      {"gemma3n_text", "AltUp, LAuReL blocks and per-layer input embeddings"},
      {"mllama_text_model", "cross-attention layers to the image"},
      {"bert", "an encoder (bidirectional, no causal decoder)"},
      {"roberta", "an encoder (bidirectional, no causal decoder)"},
      {"modernbert", "an encoder (bidirectional, no causal decoder)"},
      {"t5", "an encoder-decoder"},
      {"bart", "an encoder-decoder"},
      {"whisper", "an encoder-decoder"},
  }};
  for (const auto& [name, why] : kUnsupported)
    if (type == name)
      node->fail(
          fmt::format("\"{}\" is not supported ({}); trainsim models decoder-only transformers, mixtures "
                      "of experts and Nemotron-H hybrids",
                      type, why));
}

}  // namespace

bool is_hf_config(const util::JsonNode& node) {
  return node.is_object() && (node.has("model_type") || node.has("architectures"));
}

ModelSpec parse_hf_config(const util::JsonNode& node, const std::string& fallback_name) {
  node.expect_object();
  // Multimodal configs nest the decoder under text_config.
  if (auto text = node.find("text_config"); text && text->is_object()) {
    return parse_hf_config(*text, fallback_name);
  }
  if (node.has("hybrid_override_pattern")) return parse_hf_nemotron_h(node, fallback_name);
  auto model_type = node.find("model_type");
  const std::string type =
      model_type && model_type->json().is_string() ? model_type->json().get<std::string>() : std::string();
  refuse_hf_architecture(type, model_type);
  if (type == "deepseek_v4") return parse_hf_deepseek_v4(node, fallback_name);
  // Gemma (model_type gemma, gemma2, gemma3_text): a gated GELU MLP whatever hidden_act says (the
  // GEMMs of SwiGLU's kind; its tanh GELU costs as SiLU), tied embeddings unless the config says
  // otherwise (GemmaConfig's default). Gemma 2 and 3 add the sandwich norms (post_norms); Gemma 3 the
  // query and key norms; Gemma 2 windows every other layer, the even ones counted from 0 (its
  // configs before layer_types carry no pattern).
  const bool gemma = type == "gemma" || type == "gemma2" || type == "gemma3_text";
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
  if (type == "gemma2" && window_pattern == 0 && !node.has("layer_types") && !node.has("sliding_window_pattern"))
    window_pattern = 2;
  ModelSpec m = node.has("n_layer") || node.has("n_embd") ? parse_hf_gpt2(node, fallback_name)
                                                          : parse_hf_llama(node, fallback_name);
  if (gemma) {
    m.mlp = MlpKind::swiglu;
    if (!node.has("tie_word_embeddings")) m.tied_embeddings = true;
    m.post_norms = type != "gemma";
    m.qk_norm = type == "gemma3_text";
  }
  // Gemma 2's soft-capping (null in Gemma 3's configs, absent elsewhere).
  for (const auto& [key, cap] : {std::pair{"attn_logit_softcapping", &m.attention_softcap},
                                 std::pair{"final_logit_softcapping", &m.logit_softcap}})
    if (auto n = node.find(key); n && !n->json().is_null()) *cap = n->as_positive_number();
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
    // Llama 4 (model_type llama4_text, Llama 4's text_config): a shared expert of intermediate_size
    // beside the routed ones (Llama4TextMoe's shared_expert); experts on moe_layers, by default every
    // interleave_moe_layer_step-th layer counted from 1 (Maverick: 2, Scout: 1); the other layers a
    // dense MLP of intermediate_size_mlp; per-head query/key norms (use_qk_norm); chunked attention
    // on its rotary layers (attention_chunk_size).
    if (type == "llama4_text") {
      m.shared_expert_ffn_hidden = m.moe_ffn_hidden;
      std::vector<bool> moe(static_cast<std::size_t>(m.layers), false);
      if (auto listed = node.find("moe_layers"); listed && listed->json().is_array()) {
        for (const auto& l : listed->json()) {
          if (!l.is_number_integer() || l.get<std::int64_t>() < 0 || l.get<std::int64_t>() >= m.layers)
            listed->fail(fmt::format("{} is not a layer index below num_hidden_layers ({})", l.dump(), m.layers));
          moe[static_cast<std::size_t>(l.get<std::int64_t>())] = true;
        }
        set_moe_layers(m, moe, *listed);
      } else {
        std::int64_t step = 1;
        auto st = node.find("interleave_moe_layer_step");
        if (st && !st->json().is_null()) step = st->as_positive_int();
        for (std::size_t i = 0; i < moe.size(); ++i) moe[i] = (static_cast<std::int64_t>(i) + 1) % step == 0;
        set_moe_layers(m, moe, st.value_or(node));
      }
      if (m.moe_layer_count() < m.layers)
        m.ffn_hidden = node.at("intermediate_size_mlp").as_positive_int();
      else
        m.ffn_hidden = 0;
      if (auto qk = node.find("use_qk_norm"); qk && qk->json().is_boolean()) m.qk_norm = qk->as_bool();
      if (auto chunk = node.find("attention_chunk_size"); chunk && !chunk->json().is_null())
        m.attention_chunk = chunk->as_positive_int();
      break;
    }
    // Qwen2-MoE's sparse layers: layer i has experts when (i + 1) mod decoder_sparse_step is 0 and it
    // is not among mlp_only_layers; the others keep a dense MLP of intermediate_size.
    std::int64_t step = 1;
    if (auto st = node.find("decoder_sparse_step"); st && !st->json().is_null()) step = st->as_positive_int();
    std::vector<bool> sparse(static_cast<std::size_t>(m.layers));
    for (std::size_t i = 0; i < sparse.size(); ++i) sparse[i] = (static_cast<std::int64_t>(i) + 1) % step == 0;
    if (auto dense = node.find("mlp_only_layers"); dense && dense->json().is_array()) {
      for (const auto& l : dense->json()) {
        if (!l.is_number_integer() || l.get<std::int64_t>() < 0 || l.get<std::int64_t>() >= m.layers)
          dense->fail(fmt::format("{} is not a layer index below num_hidden_layers ({})", l.dump(), m.layers));
        sparse[static_cast<std::size_t>(l.get<std::int64_t>())] = false;
      }
    }
    set_moe_layers(m, sparse, node.find("decoder_sparse_step").value_or(node));
    if (m.moe_layer_count() == m.layers) m.ffn_hidden = 0;
    break;
  }
  // DeepSeek-V2/V3 and Kimi K2 (model_type deepseek_v2, deepseek_v3, kimi_k2): n_routed_experts of
  // width moe_intermediate_size, n_shared_experts of the same width as one shared expert, the first
  // first_k_dense_replace layers dense (intermediate_size), multi-head latent attention, and
  // num_nextn_predict_layers multi-token prediction modules.
  if (auto e = node.find("n_routed_experts"); e && !e->json().is_null()) {
    read_deepseek_experts(m, node, *e);
    // moe_layer_freq: of the layers after them, those whose index is a multiple of it have experts.
    if (auto freq = node.find("moe_layer_freq"); freq && !freq->json().is_null() && freq->as_positive_int() > 1) {
      std::vector<bool> moe(static_cast<std::size_t>(m.layers));
      for (std::size_t i = 0; i < moe.size(); ++i) {
        const auto l = static_cast<std::int64_t>(i);
        moe[i] = l >= m.first_dense_layers && l % freq->as_positive_int() == 0;
      }
      set_moe_layers(m, moe, *freq);
    }
    if (m.moe_layer_count() == m.layers) m.ffn_hidden = 0;
    // Node-limited routing (DeepSeek-V3: n_group 8, topk_group 4); Kimi K2's 1 and 1 limit nothing.
    auto groups = node.find("n_group"), group_topk = node.find("topk_group");
    if (groups && !groups->json().is_null() && group_topk && !group_topk->json().is_null())
      read_router_groups(m, *groups, *group_topk);
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
  // Qwen3 and Qwen3-MoE (model_type qwen3, qwen3_moe) normalise each head's query and key (their
  // q_norm and k_norm modules); the config carries no switch for it.
  // GPT-OSS (model_type gpt_oss): biases on the QKV and output projections (attention_bias) and on
  // every expert's gate_up_proj and down_proj and the router (its modules carry them without a switch).
  if (type == "qwen3" || type == "qwen3_moe") m.qk_norm = true;
  if (type == "gpt_oss") {
    m.linear_bias = true;
    // Its experts' activation clamps at swiglu_limit (Megatron-Bridge's GPT-OSS bridge maps it to
    // activation_func_clamp_value). Other model types' swiglu_limit (DeepSeek V4's) is not read: a
    // SwiGLU's clamp runs inside Megatron-Core's fused kernel where it runs at all (the versions read
    // either take no clamp or fuse it), no kernels of its own.
    if (auto lim = node.find("swiglu_limit"); lim && !lim->json().is_null()) {
      m.glu_clamp = lim->as_positive_number();
      check_glu_clamp(m, *lim);
    }
  }
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
  const double mats = static_cast<double>(mlp_matrices(m));
  // A mixture-of-experts layer: the router (2hE) and the experts_per_token experts and the shared
  // expert each token passes.
  // A latent MoE runs its experts at the latent width, with the two latent projections (2·2·h·latent).
  const double expert_in = m.moe_latent > 0 ? static_cast<double>(m.moe_latent) : h;
  const double moe_mlp = 2 * h * static_cast<double>(m.experts) +
                         2 * mats * expert_in * static_cast<double>(m.experts_per_token * m.moe_ffn_hidden) +
                         2 * mats * h * static_cast<double>(m.shared_expert_ffn_hidden) +
                         4 * h * static_cast<double>(m.moe_latent);
  const double dense_mlp = 2 * mats * h * static_cast<double>(m.ffn_hidden);
  // Attention scores and context: every key of the sequence (non-causal s²), or of the window in a
  // sliding-window layer.
  const double window = m.sliding_window > 0 ? std::min(s, static_cast<double>(m.sliding_window)) : s;
  const double keys = (1 - m.windowed_fraction()) * s + m.windowed_fraction() * window;
  const double heads = static_cast<double>(m.heads);
  double linear = 0, core = 0;
  if (m.csa()) {
    // DeepSeek V4: every weight of the attention's projections (the layers' mean, compressors and
    // indexers included) twice; scores and context 4·heads·head_dim per key, each query seeing its
    // window and (non-causal, as NeMo counts) the compressed entries: the indexer's top index_topk of
    // s/4 with ratio 4, all s/ratio otherwise; the indexer's scores 2·index_heads·index_head_dim per
    // entry; the hyper-connections' two mappings, 2·streams·h·streams·(streams + 2) each.
    linear = 2 * static_cast<double>(m.attention_params_per_layer());
    const double w = std::min(s, static_cast<double>(m.sliding_window));
    for (const std::int64_t r : m.compress_ratios) {
      const double entries = r > 0 ? s / static_cast<double>(r) : 0;
      const double seen = w + (r == 4 ? std::min(entries, static_cast<double>(m.index_topk)) : entries);
      core += 4 * heads * static_cast<double>(m.head_dim) * seen;
      if (r == 4) core += 2 * static_cast<double>(m.index_heads * m.index_head_dim) * entries;
    }
    core /= static_cast<double>(m.compress_ratios.size());
    const double streams = static_cast<double>(m.hc_streams);
    if (m.hc_streams > 1) core += 2 * 2 * streams * h * streams * (streams + 2);
  } else if (m.mla()) {
    const double latent_norms = static_cast<double>(m.kv_lora_rank + m.q_lora_rank);
    linear = 2 * (static_cast<double>(m.attention_params_per_layer()) - latent_norms);
    // Megatron's MLA branch (training.py num_floating_point_operations) counts causal pairs: s/2 keys.
    core = keys * heads * static_cast<double>(m.head_dim + m.qk_rope_head_dim + m.v_head_dim);
  } else {
    linear = 2 * static_cast<double>(m.attention_params_per_layer());
    core = 4 * keys * static_cast<double>(q_dim(m));
  }
  const double logits_per_token = 2 * static_cast<double>(m.vocab) * h;
  if (m.hybrid()) {
    // Per block, as Megatron-LM's hybrid count (training.py, mamba_layer_flops) takes a Mamba mixer:
    // its two projections 2·h·(in_proj width) and 2·inner·h, and 7·inner·state for the scan.
    const double inner = static_cast<double>(m.mamba_inner());
    const double mamba =
        2 * h * static_cast<double>(m.mamba_in_proj()) + 2 * inner * h + 7 * inner * static_cast<double>(m.mamba_state);
    double per_token = logits_per_token;
    for (std::int64_t l = 0; l < m.layers; ++l) {
      switch (m.block(l)) {
        case LayerBlock::mamba:
          per_token += mamba;
          break;
        case LayerBlock::attention:
          per_token += linear + core;
          break;
        case LayerBlock::mlp:
          per_token += dense_mlp;
          break;
        case LayerBlock::moe:
        case LayerBlock::transformer:
          per_token += moe_mlp;
          break;
      }
    }
    // A multi-token prediction module's layer: attention and the experts ("*E").
    per_token += static_cast<double>(m.mtp_layers) *
                 (2 * 2 * h * h + linear + core + (m.moe() ? moe_mlp : dense_mlp) + logits_per_token);
    return 3 * s * per_token;
  }
  const double moe_layers = static_cast<double>(m.moe_layer_count());
  const double dense_layers = static_cast<double>(m.layers) - moe_layers;
  const double layer_mlp = m.moe() ? moe_mlp : dense_mlp;
  double per_token = static_cast<double>(m.layers) * (linear + core) + moe_layers * moe_mlp + dense_layers * dense_mlp +
                     logits_per_token;
  per_token += static_cast<double>(m.mtp_layers) * (2 * 2 * h * h + linear + core + layer_mlp + logits_per_token);
  return 3 * s * per_token;
}

}  // namespace trainsim::workload
