#include "workload/ops.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "util/error.h"

// Saved activations follow Korthikanti et al. 2022 (arXiv:2205.05198, §4): every op keeps the
// tensors its backward reads, 2 bytes per bf16 element and 1 byte per dropout-mask element. For a
// GPT layer (gelu, 4h MLP, dropout, softmax attention) this gives per layer, with tensor
// parallelism t:
//   replicated 10sbh: two norm inputs 4sbh, QKV and fc1 inputs 4sbh, two dropout masks 2sbh
//   split 24sbh/t:    Q, K, V 6sbh, output-projection input 2sbh, GeLU input 8sbh, fc2 input 8sbh
//   split 5as²b/t:    softmax output 2as²b, its dropout mask as²b, dropout output 2as²b
// which is Eq. 2: s·b·h·(10 + 24/t + 5as/(ht)). Under sequence parallelism the replicated regions
// hold s/t tokens and the column-parallel GEMMs keep their sharded (pre-all-gather) input, so all
// terms divide by t (Eq. 4). Only the s² tensors belong to attention-core ops, so selective
// recompute drops exactly them. Flash attention keeps only its logsumexp; its output is the input
// the output projection keeps anyway.

namespace trainsim::workload {

namespace {

struct Dims {
  double b, s, t, d;   // micro-batch, whole sequence, TP size, bytes per activation element
  double sl;           // s / cp: the sequence this context-parallel rank holds
  double tokens;       // b·sl: tokens every TP rank holds in the tensor-parallel region
  double region;       // tokens in the norm/dropout region: b·s/t under SP, else b·s (replicated)
  double h, q, kv, f;  // hidden; per-rank query, key/value and FFN widths
  double heads;        // query heads per rank
  double hd;
  bool sp, drop, swiglu;
  bool rms = false, rotary = false;  // RMSNorm (else LayerNorm); rotary positions in attention
  bool qk_norm = false;              // per-head RMSNorms of Q and K (Qwen3)
  bool post_norms = false;           // norms on the attention's and the MLP's outputs (Gemma 2, 3)
  bool bias = false;                 // linear biases (ModelSpec::biased)
  bool glu_clamp = false;            // the experts' activation clamps its input (ModelSpec::glu_clamp)
  std::string activation;            // a non-gated MLP's activation op: "gelu" or "squared_relu"
  std::int64_t window = 0;           // sliding-window attention: the window, and the share of layers with it
  double windowed = 0;
  bool softcap = false;  // attention scores soft-capped (Gemma 2; unfused attention only)
  // Mixture of experts: experts, top-k, local experts (experts / ep), expert width per ETP rank, the
  // shared expert's width per TP rank, token copies through this rank's experts (region·k·etp under
  // balanced routing) and rows per local expert.
  bool moe = false;
  double experts = 0, topk = 0, local_experts = 0, fe = 0, fsh = 0, moe_rows = 0, expert_rows = 0, etp = 1, ep = 1;
  // Token rows one dispatch (and one combine) all-to-all moves per rank: region·k with the alltoall
  // dispatcher; deduplicated per destination with the flex one (dispatch_rows).
  double a2a_rows = 0;
  double routed = 0;          // token copies this rank routes (k per token, or as the capacity allows)
  bool drop_and_pad = false;  // a capacity factor with padding: static shapes, no token counts to wait for
  // Sync-free experts (LayerConfig::moe_rank_capacity_factor): the rows the capacity-sized buffers hold
  // (0: off), and the rows of the activations the experts keep for the backward (their buffers', or
  // the real ones with paged stashing).
  double cap_rows = 0, kept_rows = 0;
  bool paged_stash = false;
  bool flex = false;            // the flex dispatcher (DeepEP / HybridEP)
  bool allgather = false;       // the allgather dispatcher
  double group_tokens = 0;      // allgather: the tokens of the ep x etp group, region·ep·etp
  bool shared_overlap = false;  // --moe-shared-expert-overlap (LayerConfig)
  bool router_fusion = true;    // --moe-router-fusion (LayerConfig)
  bool permute_fusion = true;   // --moe-permute-fusion (LayerConfig)
  bool sequential = false;      // SequentialMLP: --moe-grouped-gemm off (LayerConfig::moe_grouped_gemm)
  // The width tokens enter and leave the routed experts at: the hidden state, or a latent MoE's
  // latent (then `latent` > 0).
  double he = 0, latent = 0;
  // A Mamba-2 mixer per TP rank: heads, head width, state, groups, inner width (heads x head width),
  // the convolved x, B, C channels, the input projection's width, the scan's chunk and conv taps.
  double mh = 0, mp = 0, mn = 0, mg = 0, mi = 0, xbc = 0, min_w = 0, chunk = 0, conv = 0;
  // Context parallelism of a Mamba mixer (Megatron-Core's MambaContextParallel): the CP size, and the
  // width of the in_proj outputs (z, x, B, C, dt) its first all-to-all moves, with B and C repeated
  // over the CP ranks that share a group when the rank's groups are fewer than the CP ranks.
  double cp = 1, mamba_cp_w = 0;
  // Multi-head latent attention: the q and kv latents, the rotary width, query/key and value head
  // widths (q = heads·qk and kv = heads·v then size the attention core's tensors; hd is their mean,
  // which gives the core's FLOPs as 2·(qk + v) per pair).
  bool mla = false;
  double ql = 0, kvl = 0, rope = 0, qk = 0, v = 0;
  // DeepSeek V4's attention (ModelSpec::csa; tp 1, cp 1): the residual streams of its
  // hyper-connections (1: a plain residual add).
  bool csa = false;
  double hc = 1;
};

// The chance that a token's k experts, drawn uniformly without repeats from E (balanced routing),
// miss one group of `group` experts: C(E - group, k) / C(E, k).
double misses_group(double experts, double k, double group) {
  double p = 1;
  for (double i = 0; i < k; ++i) p *= std::max(0.0, experts - group - i) / (experts - i);
  return p;
}

// The chance that a token misses every expert of one destination unit (a rank, or a node) holding
// experts [first, first + size). Without group-limited routing the token's k experts are drawn
// uniformly from all E. With it (ModelSpec::router_groups G, router_group_topk M; groups of w = E/G
// consecutive experts) the token first picks M of the G groups, all alike under balanced routing,
// then its k experts uniformly among the M·w experts of those groups. The unit holds F groups
// whole and at most two in part (overlaps o); picking j of the whole ones, a subset S of the partial
// ones and the rest elsewhere, C(F, j)·C(G - F - partials, M - j - |S|) of the C(G, M) picks, leaves
// t = j·w + sum(o in S) of the unit's experts among the token's choices, which all miss with
// chance C(M·w - t, k) / C(M·w, k).
double log_choose(double n, double k) {
  return std::lgamma(n + 1) - std::lgamma(k + 1) - std::lgamma(n - k + 1);
}

double misses_unit(const ModelSpec& m, double first, double size) {
  const double e = static_cast<double>(m.experts), k = static_cast<double>(m.experts_per_token);
  if (m.router_groups <= 1 || m.router_group_topk >= m.router_groups) return misses_group(e, k, size);
  const double g = static_cast<double>(m.router_groups), pick = static_cast<double>(m.router_group_topk);
  const double w = e / g;
  double whole = 0;
  std::vector<double> partial;
  for (double i = std::floor(first / w); i * w < first + size; ++i) {
    const double overlap = std::min(first + size, (i + 1) * w) - std::max(first, i * w);
    if (overlap >= w)
      ++whole;
    else if (overlap > 0)
      partial.push_back(overlap);
  }
  const double outside = g - whole - static_cast<double>(partial.size());
  const double all = log_choose(g, pick);
  double missed = 0;
  for (std::size_t subset = 0; subset < (std::size_t{1} << partial.size()); ++subset) {
    double held = 0, chosen = 0;
    for (std::size_t b = 0; b < partial.size(); ++b)
      if (subset & (std::size_t{1} << b)) held += partial[b], ++chosen;
    for (double j = 0; j <= std::min(whole, pick - chosen); ++j) {
      const double rest = pick - j - chosen;
      if (rest > outside) continue;
      const double p = std::exp(log_choose(whole, j) + log_choose(outside, rest) - all);
      missed += p * misses_group(pick * w, k, j * w + held);
    }
  }
  return missed;
}

// Flex dispatch (DeepEP, HybridEP): the copies of one token a rank sends, sized so that the
// all-to-all's cost model charges what the kernels move. Inside one node a token goes once to each
// rank holding any of its experts: the sum over the ep ranks of 1 - miss(rank). Across nodes it
// crosses once to each node holding any of its experts and is forwarded over NVLink there; the cost
// model sends (N - 1)/N of an all-to-all's bytes over the NICs, so the expected distinct nodes,
// the sum over the N nodes of 1 - miss(node), put exactly the node-deduplicated traffic on them.
// (NVLink forwarding is then undercounted; the NICs bound the time.) Group-limited routing confines
// a token to fewer nodes (misses_unit).
double flex_copies_per_token(const ModelSpec& m, const LayerConfig& c) {
  const double e = static_cast<double>(m.experts);
  const std::int64_t units = c.ep_nodes > 1 ? c.ep_nodes : c.ep;
  const double size = e / static_cast<double>(units);
  double copies = 0;
  for (std::int64_t u = 0; u < units; ++u) copies += 1 - misses_unit(m, static_cast<double>(u) * size, size);
  return copies;
}

Dims dims(const ModelSpec& m, const LayerConfig& c) {
  TRAINSIM_ASSERT(c.tp >= 1 && m.heads % c.tp == 0 && m.kv_heads % c.tp == 0 && m.ffn_hidden % c.tp == 0);
  TRAINSIM_ASSERT(c.cp >= 1 && c.seq_len % c.cp == 0);
  TRAINSIM_ASSERT(!c.sequence_parallel || (c.seq_len / c.cp) % c.tp == 0);
  TRAINSIM_ASSERT(!m.moe() || (m.experts % c.ep == 0 && m.moe_ffn_hidden % c.etp == 0 &&
                               m.shared_expert_ffn_hidden % c.tp == 0 && (c.tp == 1 || c.sequence_parallel)));
  Dims x{};
  x.b = static_cast<double>(c.micro_batch);
  x.s = static_cast<double>(c.seq_len);
  x.t = static_cast<double>(c.tp);
  x.d = static_cast<double>(c.dtype_bytes);
  x.sl = x.s / static_cast<double>(c.cp);
  x.tokens = x.b * x.sl;
  x.sp = c.sequence_parallel && c.tp > 1;
  x.region = x.sp ? x.tokens / x.t : x.tokens;
  x.h = static_cast<double>(m.hidden);
  x.heads = static_cast<double>(m.heads / c.tp);
  x.hd = static_cast<double>(m.head_dim);
  x.q = x.heads * x.hd;
  x.kv = static_cast<double>(m.kv_heads / c.tp) * x.hd;
  x.f = static_cast<double>(m.ffn_hidden / c.tp);
  x.drop = m.dropout > 0;
  x.swiglu = m.mlp == MlpKind::swiglu;
  x.rms = m.rms_norm();
  x.rotary = m.rotary();
  x.qk_norm = m.qk_norm;
  x.post_norms = m.post_norms;
  x.bias = m.biased();
  x.glu_clamp = m.glu_clamp > 0;
  x.activation = m.mlp == MlpKind::squared_relu ? "squared_relu" : "gelu";
  x.he = x.h;
  if (m.mamba_heads > 0) {
    TRAINSIM_ASSERT(m.mamba_heads % c.tp == 0 && m.mamba_groups % c.tp == 0);
    x.mh = static_cast<double>(m.mamba_heads / c.tp);
    x.mp = static_cast<double>(m.mamba_head_dim);
    x.mn = static_cast<double>(m.mamba_state);
    x.mg = static_cast<double>(m.mamba_groups / c.tp);
    x.mi = x.mh * x.mp;
    x.xbc = x.mi + 2 * x.mg * x.mn;
    x.min_w = 2 * x.mi + 2 * x.mg * x.mn + x.mh;
    x.chunk = static_cast<double>(m.mamba_chunk);
    x.conv = static_cast<double>(m.mamba_conv);
    x.cp = static_cast<double>(c.cp);
    const double repeat = x.mg < x.cp ? x.cp / x.mg : 1;
    x.mamba_cp_w = 2 * x.mi + 2 * x.mg * repeat * x.mn + x.mh;
  }
  x.window = m.sliding_window;
  x.windowed = m.windowed_fraction();
  x.softcap = m.attention_softcap > 0;
  // Only Gemma 2's unfused attention takes a window, and it computes every score anyway.
  TRAINSIM_ASSERT(x.windowed == 0 || c.attention != AttentionImpl::softmax || x.softcap);
  TRAINSIM_ASSERT(!x.softcap || c.attention == AttentionImpl::softmax);
  if (m.moe()) {
    x.moe = true;
    x.experts = static_cast<double>(m.experts);
    x.topk = static_cast<double>(m.experts_per_token);
    x.local_experts = static_cast<double>(m.experts / c.ep);
    x.etp = static_cast<double>(c.etp);
    x.ep = static_cast<double>(c.ep);
    x.fe = static_cast<double>(m.moe_ffn_hidden / c.etp);
    x.fsh = static_cast<double>(m.shared_expert_ffn_hidden / c.tp);
    // The token copies this rank routes: k per token, dropless and balanced; with a capacity factor
    // each expert takes at most ceil(factor · tokens · k / experts) of them (Megatron-Core's
    // get_capacity over the rank's tokens), which drops copies when the factor is below 1, and with
    // padding exactly that many, so padded rows run through the experts and the all-to-alls too.
    x.routed = x.region * x.topk;
    // Routing imbalance: the busiest rank receives moe_load_imbalance times the mean, each of its
    // experts at most its capacity; its experts' rows and its side of the all-to-alls (the slowest
    // receiver in the dispatch, sender in the combine) set the group's pace.
    double received = c.moe_load_imbalance * x.routed;
    if (c.moe_capacity_factor > 0) {
      const double capacity = std::ceil(c.moe_capacity_factor * x.routed / x.experts);
      if (c.moe_pad_to_capacity || capacity * x.experts < x.routed) x.routed = capacity * x.experts;
      received = std::min(received, capacity * x.experts);
    }
    received = std::max(received, x.routed);
    x.drop_and_pad = c.moe_capacity_factor > 0 && c.moe_pad_to_capacity;
    x.moe_rows = received * x.etp;
    x.kept_rows = x.moe_rows;
    if (c.moe_rank_capacity_factor > 0) {
      x.cap_rows = std::max(c.moe_rank_capacity_factor * x.routed * x.etp, x.moe_rows);
      x.paged_stash = c.moe_paged_stash;
      if (!x.paged_stash) x.kept_rows = x.cap_rows;
    }
    x.expert_rows = x.moe_rows / x.local_experts;
    x.a2a_rows = (c.moe_flex_dispatch ? x.region * flex_copies_per_token(m, c) : x.routed) * (received / x.routed);
    x.flex = c.moe_flex_dispatch;
    x.allgather = c.moe_allgather_dispatch;
    x.group_tokens = x.region * x.ep * x.etp;
    x.shared_overlap = c.moe_shared_expert_overlap;
    x.router_fusion = c.moe_router_fusion;
    x.permute_fusion = c.moe_permute_fusion;
    x.sequential = !c.moe_grouped_gemm;
    if (m.moe_latent > 0) x.he = x.latent = static_cast<double>(m.moe_latent);
  }
  if (m.csa()) {
    TRAINSIM_ASSERT(c.tp == 1 && c.cp == 1 && c.attention != AttentionImpl::softmax);
    x.csa = true;
    x.window = 0;
    x.windowed = 0;
    x.ql = static_cast<double>(m.q_lora_rank);
    x.rope = static_cast<double>(m.qk_rope_head_dim);
    x.hc = static_cast<double>(m.hc_streams);
  }
  if (m.mla()) {
    TRAINSIM_ASSERT(c.attention != AttentionImpl::softmax && x.windowed == 0);
    x.mla = true;
    x.ql = static_cast<double>(m.q_lora_rank);
    x.kvl = static_cast<double>(m.kv_lora_rank);
    x.rope = static_cast<double>(m.qk_rope_head_dim);
    x.qk = static_cast<double>(m.head_dim + m.qk_rope_head_dim);
    x.v = static_cast<double>(m.v_head_dim);
    x.q = x.heads * x.qk;
    x.kv = x.heads * x.v;
    x.hd = (x.qk + x.v) / 2;
  }
  return x;
}

std::int64_t to_bytes(double v) {
  return static_cast<std::int64_t>(v);
}

Op gemm(std::string name, double m, double n, double k, double d, double saved = 0, double batch = 1) {
  Op op;
  op.name = std::move(name);
  op.kind = OpKind::gemm;
  op.gemm = {static_cast<std::int64_t>(m), static_cast<std::int64_t>(n), static_cast<std::int64_t>(k),
             static_cast<std::int64_t>(batch)};
  op.flops = batch * 2 * m * n * k;
  op.bytes = batch * (m * k + k * n + m * n) * d;
  op.saved_bytes = to_bytes(saved);
  return op;
}

// A weight-gradient GEMM dW[m x n] = X^T dY over k tokens: its own pass under zero-bubble schedules,
// which hold X (`input` bytes as the forward saved it, sequence-sharded under SP) and dY (k x n,
// written by the input-gradient pass) until it runs.
Op wgrad(std::string name, double m, double n, double k, double d, double input, double batch = 1) {
  Op op = gemm(std::move(name), m, n, k, d, 0, batch);
  op.weight_grad = true;
  op.grad_output_bytes = to_bytes(batch * k * n * d);
  op.held_input_bytes = to_bytes(input);
  return op;
}

Op memory(std::string name, double bytes, double saved = 0, std::int32_t kernels = 1) {
  Op op;
  op.name = std::move(name);
  op.kind = OpKind::memory;
  op.bytes = bytes;
  op.kernels = kernels;
  op.host_calls = kernels;
  op.saved_bytes = to_bytes(saved);
  return op;
}

// A grouped GEMM over the local experts: Transformer Engine's GroupedLinear, one call that launches
// a cuBLAS GEMM per expert from C++ (multi-stream cuBLAS, the MoE guide of Megatron-LM's
// docs/discussions/deepseek-v3-gb200-optimization, section 1): `batch` kernels, each with its launch
// and the fixed cost of a GEMM (ComputeModel: the single-GEMM sweeps' t0 per kernel; the 4 streams
// may hide part of it, which nothing published measures). Sync-free experts (Dims::cap_rows) keep the
// token counts on the GPU, where no host loop over the experts can read them: one grouped kernel.
// SequentialMLP (Dims::sequential) runs the same GEMMs as each expert's own Transformer Engine
// linear: a module call per expert (as a dense linear's, its GEMM launch included), each weight
// gradient a launch of its own.
Op grouped(const Dims& x, Op op) {
  const auto kernels = x.cap_rows > 0 ? 1 : static_cast<std::int32_t>(op.gemm.batch);
  op.kernels = kernels;
  op.host_calls = x.sequential ? kernels : 1;
  op.host_launches = x.sequential && !op.weight_grad ? 0 : kernels;
  return op;
}

// Marks ops [from, end) as captured by the CUDA graph scope `scope`.
void graph(std::vector<Op>& ops, std::size_t from, std::uint8_t scope) {
  for (std::size_t i = from; i < ops.size(); ++i) ops[i].graph = scope;
}

Op comm(std::string name, Comm what, double bytes, CommGroup group = CommGroup::tp) {
  Op op;
  op.name = std::move(name);
  op.kind = OpKind::tp_comm;
  op.comm = what;
  op.group = group;
  op.comm_bytes = to_bytes(bytes);
  op.kernels = 1;
  return op;
}

Op core(Op op) {
  op.attention_core = true;
  op.rerun = op.discards = kRecomputeCoreAttn;
  return op;
}

// Marks ops [from, end) as run again (and, with `discards`, their saved bytes dropped) when
// `module` is recomputed.
void tag(std::vector<Op>& ops, std::size_t from, std::uint8_t module, bool discards = true) {
  for (std::size_t i = from; i < ops.size(); ++i) {
    ops[i].rerun |= module;
    if (discards) ops[i].discards |= module;
  }
}

// The input a checkpointed module keeps (bf16, the layer's region of tokens): an op without work.
Op checkpoint_input(std::string name, double bytes) {
  return memory(std::move(name), 0, bytes, 0);
}

// One fused attention kernel over `share` of the rank's heads, whose queries each see `window`
// keys back (0: the whole sequence).
Op flash_part(const Dims& x, const LayerConfig& c, bool backward, double share, std::int64_t window) {
  Op op;
  op.kind = OpKind::attention;
  op.name = backward ? "core_attention_backward" : "core_attention";
  if (window > 0) op.name += "_windowed";
  const double heads = x.heads * share;
  // Packed documents of L tokens: each query sees only its own document's keys.
  const bool packed = c.document_tokens > 0 && c.document_tokens < c.seq_len;
  const std::int64_t span = packed ? c.document_tokens : c.seq_len;
  const bool windowed = window > 0 && window < span;
  op.attention = {static_cast<std::int64_t>(x.b * heads),
                  static_cast<std::int64_t>(x.sl),
                  windowed ? window : span,
                  static_cast<std::int64_t>(x.hd),
                  c.causal,
                  backward,
                  c.attention,
                  windowed ? window : 0,
                  share};
  // FlashAttention's count: 4·b·s²·heads·hd forward, halved when causal; backward 2.5× forward.
  // With context parallelism each rank's sl = s/cp queries meet all s keys, causal work balanced
  // over the ranks (Megatron's 2·cp chunks): 1/cp of the whole. A causal window of W keys: query i
  // sees min(i + 1, W) of them, W·s − W(W − 1)/2 pairs in all, again 1/cp of them on each context-
  // parallel rank (its two chunks' queries each see at most W keys).
  double fwd = 4 * x.b * x.sl * x.s * heads * x.hd * (c.causal ? 0.5 : 1.0);
  if (windowed) {
    const double w = static_cast<double>(window);
    fwd = 4 * x.b * heads * x.hd * (w * x.s - w * (w - 1) / 2) * (x.sl / x.s);
  }
  // Packed: s / L documents, each causal over its own L tokens (or within the window inside it);
  // with context parallelism each document is split over the ranks as the sequence is (Transformer
  // Engine's THD format: 2·cp chunks of each), 1/cp of the work on each.
  if (packed) {
    const double l = static_cast<double>(span);
    const double w = static_cast<double>(window);
    const double pairs = windowed ? w * l - w * (w - 1) / 2 : l * l * (c.causal ? 0.5 : 1.0);
    fwd = 4 * x.b * heads * x.hd * (x.s / l) * pairs * (x.sl / x.s);
  }
  op.flops = backward ? 2.5 * fwd : fwd;
  const double lse = 4 * x.b * heads * x.sl;  // fp32 logsumexp per query row
  // Forward reads Q, K, V and writes O; backward reads Q, K, V, O, dO and writes dQ, dK, dV.
  op.bytes = share * (backward ? x.tokens * (4 * x.q + 4 * x.kv) * x.d : x.tokens * (2 * x.q + 2 * x.kv) * x.d) + lse;
  op.saved_bytes = backward ? 0 : to_bytes(lse);
  op.attention_core = true;
  op.rerun = op.discards = kRecomputeCoreAttn;
  return op;
}

// The attention core of one layer. Sliding-window models whose layers alternate between windowed
// and full attention run every layer as their average, since trainsim's layers are uniform: the
// windowed share of the heads attends within the window, the rest to the whole sequence (the sum of
// the two kernels' times is the mean of the two kinds of layer, each kernel's time being linear in
// its heads).
void flash(std::vector<Op>& ops, const Dims& x, const LayerConfig& c, bool backward) {
  if (x.windowed < 1) ops.push_back(flash_part(x, c, backward, 1 - x.windowed, 0));
  if (x.windowed > 0) ops.push_back(flash_part(x, c, backward, x.windowed, x.window));
}

// Tokens x width for one activation tensor.
double act(double tokens, double width, double d) {
  return tokens * width * d;
}

// A tensor-parallel MLP of `width` per TP rank over the layer's tokens: the dense MLP (names as
// Megatron's: fc1 / fc1_gate_up, the activation, fc2, communication "mlp_...") or a mixture of
// experts' shared expert (the same ops, names prefixed "shared_expert_"). With SP its input is
// all-gathered first and its output reduce-scattered; without, all-reduced. `fc1_saved`: what fc1
// keeps of its input.
struct TpMlp {
  double width = 0;
  std::string prefix;  // op names: "" or "shared_expert_"
  std::string comm;    // communication names: "mlp" or "shared_expert"
};

void tp_mlp_forward(std::vector<Op>& ops, const Dims& x, const TpMlp& mlp, double fc1_saved, double gemm_in_d) {
  const bool tp = x.t > 1;
  const double full = act(x.tokens, x.h, x.d);
  const double w = mlp.width;
  if (tp && x.sp) ops.push_back(comm(mlp.comm + "_input_all_gather", Comm::all_gather, full));
  if (x.swiglu) {
    // Gate and up projections as one column-parallel GEMM; SiLU(gate)·up keeps both halves.
    ops.push_back(gemm(mlp.prefix + "fc1_gate_up", x.tokens, 2 * w, x.h, x.d, fc1_saved));
    ops.push_back(memory(mlp.prefix + "swiglu", 3 * act(x.tokens, w, x.d), act(x.tokens, 2 * w, x.d)));
  } else {
    ops.push_back(gemm(mlp.prefix + "fc1", x.tokens, w, x.h, x.d, fc1_saved));
    ops.push_back(memory(mlp.prefix + x.activation, 2 * act(x.tokens, w, x.d), act(x.tokens, w, x.d)));
  }
  ops.push_back(gemm(mlp.prefix + "fc2", x.tokens, x.h, w, x.d, act(x.tokens, w, gemm_in_d)));
  if (tp) {
    ops.push_back(x.sp ? comm(mlp.comm + "_reduce_scatter", Comm::reduce_scatter, full)
                       : comm(mlp.comm + "_all_reduce", Comm::all_reduce, full));
  }
}

// Its backward: fc2, activation and fc1 data and weight gradients with their SP/TP communication.
void tp_mlp_backward(std::vector<Op>& ops, const Dims& x, const TpMlp& mlp, double region_gemm_in, double gemm_in_d) {
  const bool tp = x.t > 1;
  const double full = act(x.tokens, x.h, x.d);
  const double w = mlp.width;
  if (tp && x.sp) ops.push_back(comm(mlp.comm + "_output_grad_all_gather", Comm::all_gather, full));
  ops.push_back(gemm(mlp.prefix + "fc2_dgrad", x.tokens, w, x.h, x.d));
  ops.push_back(wgrad(mlp.prefix + "fc2_wgrad", w, x.h, x.tokens, x.d, act(x.tokens, w, gemm_in_d)));
  const double fc1_width = x.swiglu ? 2 * w : w;
  // Activation backward reads its saved input and the output grad, writes the input grad.
  ops.push_back(x.swiglu ? memory(mlp.prefix + "swiglu_backward", 5 * act(x.tokens, w, x.d))
                         : memory(mlp.prefix + x.activation + "_backward", 3 * act(x.tokens, w, x.d)));
  if (tp && x.sp) ops.push_back(comm(mlp.comm + "_input_all_gather", Comm::all_gather, full));
  const std::string fc1 = mlp.prefix + (x.swiglu ? "fc1_gate_up" : "fc1");
  ops.push_back(gemm(fc1 + "_dgrad", x.tokens, x.h, fc1_width, x.d));
  if (tp) {
    ops.push_back(x.sp ? comm(mlp.comm + "_input_grad_reduce_scatter", Comm::reduce_scatter, full)
                       : comm(mlp.comm + "_input_grad_all_reduce", Comm::all_reduce, full));
  }
  ops.push_back(wgrad(fc1 + "_wgrad", x.h, fc1_width, x.tokens, x.d, region_gemm_in));
}

TpMlp dense_mlp(const Dims& x) {
  return {x.f, "", "mlp"};
}

TpMlp shared_expert(const Dims& x) {
  return {x.fsh, "shared_expert_", "shared_expert"};
}

// A mixture-of-experts MLP as Megatron-Core runs it with the alltoall token dispatcher, grouped
// GEMMs and balanced routing (the Megatron-Bridge benchmarks force-balance tokens over experts):
// the R tokens of this rank's region (its sequence shard under SP) are routed (router GEMM, softmax
// and top-k in fp32), each copied to its k experts (permute), exchanged over the expert-parallel
// group so that every rank receives R·k copies for its local experts (all-to-all), all-gathered over
// the expert tensor-parallel group when etp > 1, run through the local experts as grouped GEMMs
// whose activation also scales each row by its routing weight (Megatron-Core's TEGroupedMLP applies
// the permuted probabilities there, weighted_bias_swiglu_impl), and sent back (reduce-scatter,
// all-to-all) to be summed per token (unpermute). A shared expert runs as a tensor-parallel MLP
// beside it. Kept for backward: the router input and fp32 probabilities, the experts' GEMM and
// activation inputs (as the dense MLP keeps them) with each row's fp32 weight.
// The bytes of the activations the routed experts keep for the backward at their real rows: the
// first GEMM's input, the activation's input with each row's fp32 routing weight, the second GEMM's
// input.
double paged_stash_bytes(const Dims& x, double gemm_in_d) {
  const double fc1_width = x.swiglu ? 2 * x.fe : x.fe;
  return act(x.moe_rows, x.he, gemm_in_d) + act(x.moe_rows, fc1_width, x.d) + x.moe_rows * 4 +
         act(x.moe_rows, x.fe, gemm_in_d);
}

// Megatron-Core's router without --moe-router-fusion: topk_routing_with_score_function and the
// aux-loss scores as eager PyTorch ops (moe_utils.py, softmax scoring). Per element of the [tokens x
// experts] scores: the fp32 softmax (d read, 4 written), top-k (4 read), the dense probabilities and
// routing map built by zeros + scatter (4 + 4, then 4 + 4 + 1 as int and bool), the aux loss's own
// softmax (d + 4), its token counts (1) and probability sums (4): 2d + 34 bytes where the fused
// kernels move d + 8. The router part runs 72 kernels without the fusion and 31 with it (Megatron-LM's
// DeepSeek-V3 GB200 guide, section 2.1.4, Transformer Engine PR 1883): 41 more, each a PyTorch call of
// its own. The backward [A]: as many more kernels and calls, autograd's inverses of the same passes
// (the two softmaxes' backwards, 12 bytes each; the top-k scatter's zeros and gather, 4 + 4; the sum
// of the two branches, 12; the cast to the logits' dtype, 4 + d): 44 + d bytes where the fused
// backward moves 12 + d.
constexpr std::int32_t kUnfusedRouterKernels = 72 - 31;

void unfused_router(Op& op, const Dims& x, bool backward) {
  op.bytes += x.region * x.experts * (backward ? 32 : x.d + 26);
  op.kernels += kUnfusedRouterKernels;
  op.host_calls += kUnfusedRouterKernels;
}

// Megatron-Core's permute() without --moe-permute-fusion (moe_utils.py, the dropless path): the
// routing map cast to bool and transposed (1 + 1 bytes per element of the [tokens x experts] map),
// torch.arange's token indices (8 per token) expanded over the experts and masked_select-ed by the
// map (8 + 1 read; a prefix sum, the count copied to the CPU, a gather: 3 kernels), the probabilities
// transposed (4 + 4) and selected the same way (4 + 1, 3 kernels), then index_select of the rows, the
// copy the fused kernel makes too; each copy's int64 index and fp32 probability written (12): 10
// kernels from 7 PyTorch calls where Transformer Engine's fused_permute_with_probs is one call. The
// padded path (drop_and_pad: an argsort over the int8 map, index_select of the probabilities) is taken
// alike [A]. Dropless, masked_select copies its output size to the CPU, which waits for it, sync-free
// buffers or not.
void unfused_permute(Op& op, const Dims& x, double tokens, double experts, double copies) {
  op.bytes += tokens * experts * 24 + tokens * 8 + copies * 12;
  op.kernels = 10;
  op.host_calls = 7;
  op.host_sync = op.host_sync || !x.drop_and_pad;
}

// Its backward (autograd): index_select's is an index_add of every copy's row into a zeroed [tokens x
// h] buffer, which adds each copy's row into its token's row atomically (read and written per copy,
// 2 rows more than the fused kernel's gather); the probabilities' masked_select is a masked_scatter
// into zeros and a transpose back (4 + 4 + 8 bytes per map element): 6 kernels from 5 calls.
void unfused_permute_backward(Op& op, double tokens, double experts, double copies, double row) {
  op.bytes += 2 * copies * row + tokens * experts * 16;
  op.kernels = 6;
  op.host_calls = 5;
}

// unpermute() without the fusion: a zeroed [tokens x h] buffer and scatter_add of every copy's row
// into its token's row (read and written per copy, atomically: 2 rows per copy more than the fused
// kernel's reduction, and the int64 indices read), 2 kernels from 2 calls. Its backward, scatter_add's
// gather, reads a token's row once per copy where the fused backward reads it once (the allgather
// dispatcher's fused backward, whose op already reads each of its fewer copies' rows, gains nothing).
void unfused_unpermute(Op& op, double tokens, double copies, double row, bool backward) {
  if (backward) {
    op.bytes += std::max(0.0, copies - tokens) * row;
    return;
  }
  op.bytes += 2 * copies * row + copies * 8;
  op.kernels = 2;
  op.host_calls = 2;
}

// Megatron-Core's allgather token dispatcher (MoEAllGatherTokenDispatcher), over the G = ep·etp
// ranks of its tp_ep group, whose G·R tokens (region R each) every rank then holds:
// dispatch: the routing map (a byte per token and expert), the routing probabilities (fp32, as the
// router computes them) and the hidden states are all-gathered (comm bytes: the output, as
// nccl-tests counts an all-gather); the CPU waits for the local experts' token counts (.cpu()
// after the gather; none when nothing is gathered, before the permutation); the permutation
// gathers the moe_rows rows of the rank's experts out of them.
// combine: the expert outputs are added back into a zeroed G·R-row buffer (unpermute), cast to the
// probabilities' fp32 and reduce-scattered over the group in fp32, then cast back to the rank's R
// rows (token_combine). The backward mirrors it: the output gradient all-gathered in fp32 and cast
// down, the moe_rows rows gathered for the experts, their input gradients and the probabilities'
// added into zeroed G·R-row buffers and reduce-scattered (hidden states in the compute dtype,
// probabilities in fp32).
void allgather_dispatch(std::vector<Op>& ops, const Dims& x) {
  const double g = x.group_tokens;
  if (x.ep * x.etp > 1)
    ops.push_back(comm("moe_dispatch_all_gather", Comm::all_gather, act(g, x.he, x.d) + g * x.experts * (4 + 1),
                       CommGroup::ep_etp));
  ops.back().host_sync = !x.drop_and_pad && x.cap_rows == 0;
  const std::size_t permute = ops.size();
  ops.push_back(memory("moe_permute", 2 * act(x.moe_rows, x.he, x.d)));
  if (!x.permute_fusion) unfused_permute(ops.back(), x, g, x.local_experts, x.moe_rows);
  graph(ops, permute, kGraphMoePreprocess);
}

void allgather_combine(std::vector<Op>& ops, const Dims& x) {
  const double g = x.group_tokens;
  const bool gathered = x.ep * x.etp > 1;
  ops.push_back(memory("moe_unpermute",
                       act(g, x.he, x.d) + 2 * act(x.moe_rows, x.he, x.d) + (gathered ? act(g, x.he, x.d + 4) : 0)));
  if (!x.permute_fusion) unfused_unpermute(ops.back(), g, x.moe_rows, x.he * x.d, false);
  if (!gathered) return;
  ops.push_back(comm("moe_combine_reduce_scatter", Comm::reduce_scatter, act(g, x.he, 4), CommGroup::ep_etp));
  ops.push_back(memory("moe_combine_cast", act(x.region, x.he, 4 + x.d)));
}

void allgather_combine_backward(std::vector<Op>& ops, const Dims& x) {
  const double g = x.group_tokens;
  const bool gathered = x.ep * x.etp > 1;
  if (gathered) {
    ops.push_back(memory("moe_combine_cast_backward", act(x.region, x.he, x.d + 4)));
    ops.push_back(comm("moe_combine_grad_all_gather", Comm::all_gather, act(g, x.he, 4), CommGroup::ep_etp));
  }
  ops.push_back(
      memory("moe_unpermute_backward", (gathered ? act(g, x.he, 4 + x.d) : 0) + 2 * act(x.moe_rows, x.he, x.d)));
  if (!x.permute_fusion) unfused_unpermute(ops.back(), g, x.moe_rows, x.he * x.d, true);
}

void allgather_dispatch_backward(std::vector<Op>& ops, const Dims& x) {
  const double g = x.group_tokens;
  const std::size_t preprocess = ops.size();
  ops.push_back(memory("moe_permute_backward", act(g, x.he, x.d) + 2 * act(x.moe_rows, x.he, x.d) + g * x.experts * 4));
  if (!x.permute_fusion) unfused_permute_backward(ops.back(), g, x.local_experts, x.moe_rows, x.he * x.d);
  graph(ops, preprocess, kGraphMoePreprocess);
  if (x.ep * x.etp > 1)
    ops.push_back(comm("moe_dispatch_grad_reduce_scatter", Comm::reduce_scatter, act(g, x.he, x.d) + g * x.experts * 4,
                       CommGroup::ep_etp));
}

// The alltoall dispatcher's second permutation: the rows a rank receives arrive grouped by source
// rank, then by local expert, and with more than one local expert they are sorted by local expert
// before the grouped GEMMs and back after them (Megatron-Core's token_dispatcher.py, "Permutation 2:
// Sort tokens by local expert" / "Unpermutation 2", sort_chunks_by_idxs; with token dropping and
// padding a transpose copy of the same rows). Each reads and writes the moe_rows rows, and the sort
// their fp32 routing weights too; autograd runs the inverse copy in the backward. Called on the
// paths that are not the allgather dispatcher's; the flex dispatcher's permutation already groups them.
void sort_by_local_expert(std::vector<Op>& ops, const Dims& x, const char* name, bool with_probs) {
  if (x.flex || x.local_experts <= 1) return;
  ops.push_back(memory(name, 2 * act(x.moe_rows, x.he, x.d) + (with_probs ? 2 * x.moe_rows * 4 : 0)));
}

// fc2's bias under Megatron-Core's TEGroupedMLP, which cannot add it in the grouped GEMM since each
// row's copy is scaled by its routing weight: fc2 returns it (skip_bias_add) and _apply_bias adds it
// in eager PyTorch, per local expert over that expert's rows t + b·p (a multiply and an add), then
// concatenates the pieces (torch.cat). The bias and the probabilities are taken in the compute dtype
// (GPT-OSS's provider leaves moe_router_dtype unset, so the router's probabilities are bf16; an fp32
// router would promote b·p and everything after it to fp32). Forward per element of the moe_rows
// rows: b·p written; t and b·p read, the sum written; the cat read and written: 6 elements. Backward
// (autograd): the multiply's two gradients, grad·p and grad·b, each written and read back by its
// sum (over the rows for the bias, over the width for the routing weight), 3 + 3; the cat of the
// pieces' gradients for t (split's backward), 2: 8 elements. fc1's bias runs in the grouped GEMM and the
// fused activation (skip_bias_add false, bias_activation_fusion), the attention's in the QKV GEMM's
// epilogue and the residual add, at no cost trainsim counts (GPT-OSS's unfused bias-dropout-add
// adds one element-wise pass over the layer's tokens, under 0.5% of a layer).
Op experts_fc2_bias(const Dims& x, bool backward) {
  const double elements = x.moe_rows * x.he;
  const auto per_expert = static_cast<std::int32_t>(x.local_experts);
  return backward ? memory("experts_fc2_bias_backward", 8 * elements * x.d, 0, 4 * per_expert + 2)
                  : memory("experts_fc2_bias", 6 * elements * x.d, 0, 2 * per_expert + 1);
}

// SequentialMLP's per-expert pieces: its activation called once per expert (a kernel each), and the
// experts' outputs joined by torch.cat (the forward; the backward's cat joins the input gradients that
// torch.split's backward gathers), reading and writing every row once.
void sequential_experts(Op& activation, const Dims& x) {
  if (!x.sequential) return;
  activation.kernels = activation.host_calls = static_cast<std::int32_t>(x.local_experts);
}
Op experts_cat(const Dims& x, const char* name) {
  return memory(name, 2 * act(x.moe_rows, x.he, x.d));
}

// The clamp of the experts' gated activation (ModelSpec::glu_clamp), as Megatron-Core's
// weighted_bias_quick_geglu_impl runs it before its fused kernel (megatron/core/fusions/
// fused_bias_geglu.py): fc1's output chunked in two halves, each clamped (a kernel reading and writing
// its half), then joined by torch.cat (reading and writing the whole): 4 passes over the 2·fe wide
// rows, 3 kernels. The clamps keep their input, fc1's output, for their backward (the fused kernel
// keeps the joined copy). Backward (autograd): cat's gradient is two views; each clamp's masked
// gradient reads the gradient and the kept input and writes (3 half passes each); chunk's gradient
// joins the halves (torch.cat, 2): 5 passes, 3 kernels. Under the moe_act recompute the checkpoint
// keeps fc1's output, the clamps' input, and the fused kernel's joined copy is made again.
Op experts_glu_clamp(const Dims& x, bool backward) {
  const double rows = act(x.moe_rows, 2 * x.fe, x.d);
  // SequentialMLP runs them once per expert.
  const std::int32_t kernels = 3 * (x.sequential ? static_cast<std::int32_t>(x.local_experts) : 1);
  if (backward) return memory("experts_glu_clamp_backward", 5 * rows, 0, kernels);
  Op op = memory("experts_glu_clamp", 4 * rows, act(x.kept_rows, 2 * x.fe, x.d), kernels);
  op.rerun |= kRecomputeMoeAct;
  op.offload = kOffloadMoeAct;
  return op;
}

void moe_forward(std::vector<Op>& ops, const Dims& x, double gemm_in_d) {
  const double d = x.d;
  const double routed = x.routed;  // token copies this rank sends (and receives)
  const std::size_t first = ops.size();
  ops.push_back(gemm("router", x.region, x.experts, x.h, d, act(x.region, x.h, d)));
  ops.back().discards |= kRecomputeLayernorm;  // it keeps the pre-MLP norm's bf16 output
  ops.push_back(
      memory("router_softmax_topk", x.region * x.experts * (d + 4 + 4) + routed * 8, x.region * x.experts * 4, 2));
  // The router's and the dispatcher's preprocessing kernels, fused as Megatron-Core's
  // --moe-router-fusion fuses them: 31 kernels with the router GEMM for the alltoall dispatcher, 17
  // with the permutation for the flex one (DeepEP's fused preprocess) (Megatron-LM's DeepSeek-V3
  // GB200 guide, sections 2.1.4 and 2.2.1). Their GPU time is the two kernels' above.
  ops.back().host_calls = x.flex ? 17 - 2 : 31 - 1;
  if (!x.router_fusion) unfused_router(ops.back(), x, false);
  graph(ops, first, kGraphMoeRouter);
  // A latent MoE projects the tokens down to the latent (replicated over TP, on the rank's region) [A].
  // It reads the pre-MLP norm's output, which the router keeps unless FP8 keeps a cast copy.
  if (x.latent > 0)
    ops.push_back(
        gemm("moe_latent_down_proj", x.region, x.latent, x.h, d, gemm_in_d < d ? act(x.region, x.h, gemm_in_d) : 0));
  bool shared_overlap = false;
  std::size_t after_dispatch = 0;
  if (x.allgather) {
    allgather_dispatch(ops, x);
    after_dispatch = ops.size();
  } else {
    const std::size_t preprocess = ops.size();
    ops.push_back(memory("moe_permute", act(x.region, x.he, d) + act(routed, x.he, d)));
    graph(ops, preprocess, kGraphMoePreprocess);
    // Dropless, the alltoall dispatcher copies the token counts to the CPU and waits for them before
    // the dispatch all-to-all (before the permutation without expert parallelism; token_dispatcher.py's
    // cuda_sync_point); the flex dispatcher's CPU waits for the counts its notify step exchanges
    // before it launches the dispatch's data movement (DeepEP's dispatch, HybridEP's blocking
    // dispatch; fused_a2a.py), which the model takes at the same point. The backward reuses the counts.
    // Dropping and padding to the capacity makes every count known in advance: no wait (the
    // dispatcher's "no_sync" point).
    // Sync-free experts size every buffer ahead: no wait either.
    ops[x.ep > 1 ? preprocess : preprocess - 1].host_sync = !x.drop_and_pad && x.cap_rows == 0;
    if (!x.permute_fusion) unfused_permute(ops[preprocess], x, x.region, x.experts, routed);
    if (x.ep > 1)
      ops.push_back(comm("moe_dispatch_all_to_all", Comm::all_to_all, act(x.a2a_rows, x.he, d), CommGroup::ep));
    // --moe-shared-expert-overlap: the shared expert runs here, beside the dispatch all-to-all; the
    // routed experts wait for the tokens.
    shared_overlap = x.shared_overlap && x.fsh > 0 && x.ep > 1;
    if (shared_overlap) {
      ops.back().comm_side = true;
      const std::size_t shared = ops.size();
      tp_mlp_forward(ops, x, shared_expert(x), gemm_in_d < d ? act(x.region, x.h, gemm_in_d) : 0, gemm_in_d);
      tag(ops, shared, kRecomputeSharedExperts);
      graph(ops, shared, kGraphMoeRouter);
    }
    after_dispatch = ops.size();
    if (x.etp > 1)
      ops.push_back(comm("moe_dispatch_all_gather", Comm::all_gather, act(x.moe_rows, x.he, d), CommGroup::etp));
    sort_by_local_expert(ops, x, "moe_sort_by_local_expert", true);
  }
  const double fc1_width = x.swiglu ? 2 * x.fe : x.fe;
  const double kept = x.kept_rows;
  ops.push_back(
      grouped(x, gemm("experts_fc1", x.expert_rows, fc1_width, x.he, d, act(kept, x.he, gemm_in_d), x.local_experts)));
  ops.back().offload = kOffloadExpertFc1;
  if (shared_overlap) ops[after_dispatch].comm_join = true;
  if (x.glu_clamp) ops.push_back(experts_glu_clamp(x, false));
  if (x.swiglu)
    ops.push_back(
        memory("experts_swiglu", 3 * act(x.moe_rows, x.fe, d) + x.moe_rows * 4, act(kept, 2 * x.fe, d) + kept * 4));
  else
    ops.push_back(memory("experts_" + x.activation, 2 * act(x.moe_rows, x.fe, d) + x.moe_rows * 4,
                         act(kept, x.fe, d) + kept * 4));
  ops.back().rerun |= kRecomputeMoeAct;
  ops.back().offload = kOffloadMoeAct;                       // moe_act: the activation runs again, fc2 keeps no input
  if (x.glu_clamp) ops.back().discards |= kRecomputeMoeAct;  // its input is the clamps' joined copy
  sequential_experts(ops.back(), x);
  ops.push_back(
      grouped(x, gemm("experts_fc2", x.expert_rows, x.he, x.fe, d, act(kept, x.fe, gemm_in_d), x.local_experts)));
  ops.back().discards |= kRecomputeMoeAct;
  if (x.sequential) ops.push_back(experts_cat(x, "experts_output_cat"));
  if (x.paged_stash) {
    // Paged stashing (Megatron-Core's moe_paged_stash): one copy kernel per kept tensor moves it out
    // of the capacity-sized buffers into pages (read and written at its real size); the buffers, a
    // layer's worth at the capacity, are held while it runs.
    const double stash = paged_stash_bytes(x, gemm_in_d);
    ops.push_back(memory("moe_paged_stash", 2 * stash, 0, 3));
    ops.back().workspace_bytes = to_bytes(stash * x.cap_rows / x.moe_rows);
  }
  if (x.bias) ops.push_back(experts_fc2_bias(x, false));
  if (x.allgather) {
    allgather_combine(ops, x);
  } else {
    sort_by_local_expert(ops, x, "moe_unsort_by_local_expert", false);
    if (x.etp > 1)
      ops.push_back(comm("moe_combine_reduce_scatter", Comm::reduce_scatter, act(x.moe_rows, x.he, d), CommGroup::etp));
    if (x.ep > 1)
      ops.push_back(comm("moe_combine_all_to_all", Comm::all_to_all, act(x.a2a_rows, x.he, d), CommGroup::ep));
    ops.push_back(memory("moe_unpermute", act(routed, x.he, d) + act(x.region, x.he, d)));
    if (!x.permute_fusion) unfused_unpermute(ops.back(), x.region, routed, x.he * d, false);
  }
  if (x.latent > 0)
    ops.push_back(gemm("moe_latent_up_proj", x.region, x.h, x.latent, d, act(x.region, x.latent, gemm_in_d)));
  if (x.fsh > 0) {
    // Its input is the router's (kept once, above) unless FP8 keeps a cast copy.
    const std::size_t shared = ops.size();
    if (!shared_overlap) {
      tp_mlp_forward(ops, x, shared_expert(x), gemm_in_d < d ? act(x.region, x.h, gemm_in_d) : 0, gemm_in_d);
      tag(ops, shared, kRecomputeSharedExperts);
    }
    ops.push_back(memory("shared_expert_add", 3 * act(x.region, x.h, d)));
    graph(ops, shared, kGraphMoeRouter);
  }
  tag(ops, first, kRecomputeMoe);
}

// The backward of moe_forward, in reverse: the shared expert, the per-token sum (its gradient copied
// to the k rows), the combine all-to-all's backward (an all-to-all), the experts' data and weight
// gradients (the activation's with the routing weights'), the dispatch all-to-all's backward, the
// sum over each token's k copies, and the router's softmax, data and weight gradients.
void moe_backward(std::vector<Op>& ops, const Dims& x, double gemm_in_d) {
  const double d = x.d;
  const double routed = x.routed;
  // --moe-shared-expert-overlap: the shared expert's backward runs beside the combine all-to-all's.
  const bool shared_overlap = x.shared_overlap && x.fsh > 0 && x.ep > 1 && !x.allgather;
  auto shared_backward = [&] {
    const std::size_t shared = ops.size();
    tp_mlp_backward(ops, x, shared_expert(x), act(x.region, x.h, gemm_in_d), gemm_in_d);
    graph(ops, shared, kGraphMoeRouter);
  };
  if (x.fsh > 0 && !shared_overlap) shared_backward();
  if (x.latent > 0) {
    ops.push_back(gemm("moe_latent_up_proj_dgrad", x.region, x.latent, x.h, d));
    ops.push_back(wgrad("moe_latent_up_proj_wgrad", x.latent, x.h, x.region, d, act(x.region, x.latent, gemm_in_d)));
  }
  std::size_t after_combine = 0;
  if (x.allgather) {
    allgather_combine_backward(ops, x);
    after_combine = ops.size();
  } else {
    ops.push_back(memory("moe_unpermute_backward", act(x.region, x.he, d) + act(routed, x.he, d)));
    if (!x.permute_fusion) unfused_unpermute(ops.back(), x.region, routed, x.he * d, true);
    if (x.ep > 1)
      ops.push_back(comm("moe_combine_grad_all_to_all", Comm::all_to_all, act(x.a2a_rows, x.he, d), CommGroup::ep));
    if (shared_overlap) {
      ops.back().comm_side = true;
      shared_backward();
    }
    after_combine = ops.size();
    if (x.etp > 1)
      ops.push_back(comm("moe_combine_grad_all_gather", Comm::all_gather, act(x.moe_rows, x.he, d), CommGroup::etp));
    sort_by_local_expert(ops, x, "moe_unsort_by_local_expert_backward", false);
  }
  const double fc1_width = x.swiglu ? 2 * x.fe : x.fe;
  if (x.bias) ops.push_back(experts_fc2_bias(x, true));
  if (x.paged_stash) {
    // Paged stashing: the kept tensors copied back from their pages before the experts' backward.
    ops.push_back(memory("moe_paged_stash_restore", 2 * paged_stash_bytes(x, gemm_in_d), 0, 3));
  }
  ops.push_back(grouped(x, gemm("experts_fc2_dgrad", x.expert_rows, x.fe, x.he, d, 0, x.local_experts)));
  if (shared_overlap) ops[after_combine].comm_join = true;
  ops.push_back(grouped(
      x, wgrad("experts_fc2_wgrad", x.fe, x.he, x.expert_rows, d, act(x.moe_rows, x.fe, gemm_in_d), x.local_experts)));
  // With the routing weights' gradient (one fp32 per row, read and written).
  ops.push_back(x.swiglu
                    ? memory("experts_swiglu_backward", 5 * act(x.moe_rows, x.fe, d) + x.moe_rows * 8)
                    : memory("experts_" + x.activation + "_backward", 3 * act(x.moe_rows, x.fe, d) + x.moe_rows * 8));
  sequential_experts(ops.back(), x);
  if (x.glu_clamp) ops.push_back(experts_glu_clamp(x, true));
  ops.push_back(grouped(x, gemm("experts_fc1_dgrad", x.expert_rows, x.he, fc1_width, d, 0, x.local_experts)));
  if (x.sequential) ops.push_back(experts_cat(x, "experts_input_grad_cat"));
  ops.push_back(grouped(x, wgrad("experts_fc1_wgrad", x.he, fc1_width, x.expert_rows, d,
                                 act(x.moe_rows, x.he, gemm_in_d), x.local_experts)));
  if (x.allgather) {
    allgather_dispatch_backward(ops, x);
  } else {
    sort_by_local_expert(ops, x, "moe_sort_by_local_expert_backward", true);
    if (x.etp > 1)
      ops.push_back(
          comm("moe_dispatch_grad_reduce_scatter", Comm::reduce_scatter, act(x.moe_rows, x.he, d), CommGroup::etp));
    if (x.ep > 1)
      ops.push_back(comm("moe_dispatch_grad_all_to_all", Comm::all_to_all, act(x.a2a_rows, x.he, d), CommGroup::ep));
    const std::size_t preprocess = ops.size();
    ops.push_back(memory("moe_permute_backward", act(routed, x.he, d) + act(x.region, x.he, d)));
    if (!x.permute_fusion) unfused_permute_backward(ops.back(), x.region, x.experts, routed, x.he * d);
    graph(ops, preprocess, kGraphMoePreprocess);
  }
  if (x.latent > 0) {
    ops.push_back(gemm("moe_latent_down_proj_dgrad", x.region, x.h, x.latent, d));
    ops.push_back(wgrad("moe_latent_down_proj_wgrad", x.h, x.latent, x.region, d, act(x.region, x.h, gemm_in_d)));
  }
  const std::size_t router = ops.size();
  ops.push_back(memory("router_softmax_topk_backward", x.region * x.experts * (4 + 4 + 4 + d) + routed * 8, 0, 2));
  ops.back().host_calls = x.flex ? 17 - 2 : 31 - 1;  // as many as the forward's (above)
  if (!x.router_fusion) unfused_router(ops.back(), x, true);
  ops.push_back(gemm("router_dgrad", x.region, x.h, x.experts, d));
  ops.push_back(wgrad("router_wgrad", x.h, x.experts, x.region, d, act(x.region, x.h, d)));
  graph(ops, router, kGraphMoeRouter);
}

bool is_lora(const Op& op) {
  return op.name.rfind("lora_", 0) == 0;
}

// The QuantModule a GEMM belongs to, by its op's name (its forward, data- and weight-gradient GEMMs
// share the name's stem); 0: none of them.
std::uint8_t quant_module(const Op& op) {
  const auto starts = [&](std::string_view stem) { return op.name.rfind(stem, 0) == 0; };
  if (starts("qkv") || starts("attention_output") || starts("q_down_proj") || starts("q_up_proj") ||
      starts("kv_proj") || starts("kv_up_proj"))
    return kQuantAttentionLinears;
  if (starts("mamba_out_proj")) return kQuantMambaOutProj;
  if (starts("moe_latent_")) return kQuantMoeLatentProj;
  return 0;
}

// The router's GEMMs stay in BF16 under FP8 and NVFP4 (Megatron-Core never quantises the router), as
// do LoRA adapters (Megatron-Core linears, not Transformer Engine ones), the Mamba scan's products and
// the modules LayerConfig::bf16_modules names; LayerConfig::fp8_modules run FP8 under NVFP4.
void mark_fp8(std::vector<Op>& ops, const LayerConfig& c) {
  for (Op& op : ops) {
    const std::uint8_t module = op.kind == OpKind::gemm ? quant_module(op) : 0;
    op.fp8 = op.kind == OpKind::gemm && !op.attention_core && op.name.rfind("router", 0) != 0 && !is_lora(op) &&
             op.name.rfind("ssd_", 0) != 0 && !op.bf16 && (module & c.bf16_modules) == 0;
    op.fp4 = op.fp8 && c.fp4 && (module & c.fp8_modules) == 0;
  }
}

// NVFP4: E2M1 values, two per byte, and an E4M3 scale per 16 of them.
constexpr double kNvfp4Bytes = 0.5 + 1.0 / 16;

// The bytes per element of a linear GEMM's input kept for its weight gradient. Transformer Engine
// keeps the quantised copy it made (te.Linear / LayerNormLinear / LayerNormMLP save it, not the BF16
// input): FP8's 1 byte, or NVFP4's column-wise copy.
double saved_gemm_input_bytes(const LayerConfig& c, double d) {
  if (c.frozen_weights) return 0;  // no weight gradient: Transformer Engine keeps no input for one
  if (!c.fp8) return d;
  return c.fp4 ? kNvfp4Bytes : 1.0;
}

// The memory traffic of quantising the GEMM operands of one layer pass: `own` elements quantised by
// kernels of their own, `fused` elements whose row-wise cast Transformer Engine fuses into the kernel
// that writes them (a norm, the activation). FP8: an own cast reads 2 bytes and writes 1 + 1 (row-wise
// and transposed); a fused one writes the transposed byte only. NVFP4 [A]: every operand quantised
// on its own, as Transformer Engine's NVFP4 quantiser runs it: the per-tensor amax (read 2 bytes),
// the amax after the 16x16 random Hadamard transform of the weight-gradient copy (read 2), then one
// kernel that reads the tensor (2) and writes the row-wise and the transformed column-wise NVFP4
// copies (2 x kNvfp4Bytes): three kernels for each of the pass's four operand groups.
// With frozen weights (LoRA) no weight gradient needs the column-wise copies: FP8 casts read 2 and
// write 1 byte, the fused ones nothing; NVFP4 reads twice (amax, quantisation) and writes the
// row-wise copy.
Op quantize(std::string name, const LayerConfig& c, double own, double fused, std::int32_t expert_kernels = 0) {
  if (c.fp4 && c.frozen_weights) return memory(std::move(name), (own + fused) * (2 * 2 + kNvfp4Bytes), 0, 8);
  if (c.fp4) return memory(std::move(name), (own + fused) * (3 * 2 + 2 * kNvfp4Bytes), 0, 12);
  Op op = c.frozen_weights ? memory(std::move(name), 3 * own, 0, 4) : memory(std::move(name), 4 * own + fused, 0, 4);
  op.kernels += expert_kernels;
  return op;
}

// The FP8 casts of a grouped GEMM's operands beyond the one kernel each that quantize() counts:
// Transformer Engine's GroupedLinear quantises its input (forward) and its output gradient (backward)
// with split_quantize, which runs one quantisation kernel per local expert for every FP8 recipe but
// delayed scaling (cast.cpp's multi_tensor_quantize_impl: "only have fused kernel for FP8 delayed
// scaling"; MXFP8, current scaling and block scaling loop over the splits; LayerConfig::
// fp8_split_casts), launched from C++ (the host side: set_host_costs, one cast per GEMM launch). Two
// grouped GEMMs per pass; sync-free experts (one grouped kernel per GEMM) and NVFP4 (grouped
// quantisation kernels, split_quantize_nvfp4_impl) add none. SequentialMLP (Dims::sequential) runs
// each expert's linears as modules of their own, each casting its own operand, whatever the recipe.
std::int32_t expert_cast_kernels(const Dims& x, const LayerConfig& c) {
  if (!x.moe || !(c.fp8_split_casts || x.sequential) || c.fp4 || x.cap_rows > 0 || x.local_experts <= 1) return 0;
  return 2 * (static_cast<std::int32_t>(x.local_experts) - 1);
}

// A linear a LoRA adapter can wrap: its forward and data-gradient ops' names, the target bit, and
// the widths of the base GEMM on this rank; `region`: A's input is the linear's norm output, kept
// sequence-sharded under SP (column-parallel linears), else the whole sequence.
struct LoraSite {
  std::string forward, backward;
  std::uint8_t target;
  double in, out;
  bool region;
};

std::vector<LoraSite> lora_sites(const Dims& x) {
  const double fc1 = x.swiglu ? 2 * x.f : x.f;
  const std::string fc1_name = x.swiglu ? "fc1_gate_up" : "fc1";
  return {{"qkv", "qkv_dgrad", kLoraQkv, x.h, x.q + 2 * x.kv, true},
          {"attention_output", "attention_output_dgrad", kLoraProj, x.q, x.h, false},
          {fc1_name, fc1_name + "_dgrad", kLoraFc1, x.h, fc1, true},
          {"fc2", "fc2_dgrad", kLoraFc2, x.f, x.h, false}};
}

// Megatron-Bridge's LoRA adapter beside a frozen linear (peft/lora.py, ParallelLinearAdapter): A and
// B as BF16 GEMMs over the rank's tokens, B's output scaled and added to the linear's (read 2, write
// 1 tensor of its width). Kept for backward: A's input (the linear's input, as BF16) and B's input.
// Backward: B's data and weight gradients, A's, and A's input gradient added to the linear's.
void insert_lora(std::vector<Op>& ops, const Dims& x, const LayerConfig& c, bool backward) {
  const double r = static_cast<double>(c.lora_rank);
  for (const LoraSite& site : lora_sites(x)) {
    if (!(c.lora_targets & site.target)) continue;
    const std::string& after = backward ? site.backward : site.forward;
    auto at = std::find_if(ops.begin(), ops.end(), [&](const Op& op) { return op.name == after; });
    TRAINSIM_ASSERT(at != ops.end());
    const auto pos = at - ops.begin();
    const std::uint8_t rerun = backward ? 0 : at->rerun, discards = backward ? 0 : at->discards, scope = at->graph;
    const std::string n = "lora_" + site.forward;
    const double kept = act(site.region ? x.region : x.tokens, site.in, x.d);
    std::vector<Op> adapter;
    if (backward) {
      adapter = {gemm(n + "_b_dgrad", x.tokens, r, site.out, x.d),
                 wgrad(n + "_b_wgrad", r, site.out, x.tokens, x.d, act(x.tokens, r, x.d)),
                 gemm(n + "_a_dgrad", x.tokens, site.in, r, x.d),
                 wgrad(n + "_a_wgrad", site.in, r, x.tokens, x.d, kept),
                 memory(n + "_grad_add", 3 * act(x.tokens, site.in, x.d))};
    } else {
      adapter = {gemm(n + "_a", x.tokens, r, site.in, x.d, kept),
                 gemm(n + "_b", x.tokens, site.out, r, x.d, act(x.tokens, r, x.d)),
                 memory(n + "_add", 3 * act(x.tokens, site.out, x.d))};
    }
    for (Op& op : adapter) {  // recomputed (forward) and captured with the linear it wraps
      op.rerun = rerun;
      op.discards = discards;
      op.graph = scope;
    }
    ops.insert(ops.begin() + pos + 1, adapter.begin(), adapter.end());
  }
}

// Multi-head latent attention up to the attention core, as Megatron-Core's MLASelfAttention runs
// it: the down projections (replicated over TP, on the rank's sequence shard under SP; one GEMM for
// the q latent and the kv latent with the key's rotary part) whose latents SP then all-gathers, the
// latents' RMSNorms, the column-parallel up projections (q heads of qk; k heads without position
// and v heads), and rotary plus the assembly of Q and K, which keeps Q, K, V for the core.
void mla_forward(std::vector<Op>& ops, const Dims& x, double gemm_in_d) {
  const double d = x.d;
  const double latent = x.ql + x.kvl + x.rope;
  const std::size_t down = ops.size();
  ops.push_back(gemm("qkv_down_proj", x.region, latent, x.h, d, act(x.region, x.h, gemm_in_d)));
  // Recomputing the layernorm drops the bf16 norm output this GEMM keeps (FP8 keeps its own copy).
  if (gemm_in_d == d) ops.back().discards |= kRecomputeLayernorm;
  if (x.sp) ops.push_back(comm("mla_latent_all_gather", Comm::all_gather, act(x.tokens, latent, d)));
  // mla_up_proj: the latent norms, up projections and rotary run again; Q, K, V are not kept.
  const std::size_t up = ops.size();
  double q_in = x.h;  // what the query up projection reads (the hidden state without a q latent)
  if (x.ql > 0) {
    ops.push_back(memory("q_latent_rmsnorm", 2 * act(x.tokens, x.ql, d), act(x.tokens, x.ql, d)));
    q_in = x.ql;
  }
  ops.push_back(memory("kv_latent_rmsnorm", 2 * act(x.tokens, x.kvl, d), act(x.tokens, x.kvl, d)));
  // Without a q latent the query projection reads the hidden state itself, all-gathered under SP.
  if (x.ql == 0 && x.sp) ops.push_back(comm("q_input_all_gather", Comm::all_gather, act(x.tokens, x.h, d)));
  ops.push_back(gemm("q_up_proj", x.tokens, x.q, q_in, d, x.ql > 0 ? act(x.tokens, q_in, gemm_in_d) : 0));
  const double kv_up = x.heads * (x.qk - x.rope + x.v);
  ops.push_back(gemm("kv_up_proj", x.tokens, kv_up, x.kvl, d, act(x.tokens, x.kvl, gemm_in_d)));
  // Reads q, k without position, the shared rotary key; writes Q and K whole; keeps Q, K, V.
  ops.push_back(memory("mla_rotary_assemble",
                       act(x.tokens, x.q + x.heads * (x.qk - x.rope) + x.rope, d) + act(x.tokens, 2 * x.q, d),
                       act(x.tokens, 2 * x.q + x.kv, d), 2));
  tag(ops, up, kRecomputeMlaUpProj, false);
  ops.back().discards |= kRecomputeMlaUpProj;
  // The projections' kept tensors are qkv_linear's; Q, K and V, which the attention keeps, core_attn's.
  for (std::size_t i = down; i + 1 < ops.size(); ++i) ops[i].offload = kOffloadQkvLinear;
  ops.back().offload = kOffloadCoreAttn;
}

// Its backward, from the core's input gradients to the layer input's: rotary, the up projections'
// data and weight gradients, the latent norms, SP's reduce-scatter of the latents' gradient (the
// all-reduce without SP), and the down projection's.
void mla_backward(std::vector<Op>& ops, const Dims& x, double gemm_in_d) {
  const double d = x.d;
  const double latent = x.ql + x.kvl + x.rope;
  const double q_in = x.ql > 0 ? x.ql : x.h;
  const double kv_up = x.heads * (x.qk - x.rope + x.v);
  ops.push_back(memory("mla_rotary_assemble_backward",
                       act(x.tokens, 2 * x.q, d) + act(x.tokens, x.q + x.heads * (x.qk - x.rope) + x.rope, d), 0, 2));
  ops.push_back(gemm("kv_up_proj_dgrad", x.tokens, x.kvl, kv_up, d));
  ops.push_back(wgrad("kv_up_proj_wgrad", x.kvl, kv_up, x.tokens, d, act(x.tokens, x.kvl, gemm_in_d)));
  ops.push_back(gemm("q_up_proj_dgrad", x.tokens, q_in, x.q, d));
  ops.push_back(wgrad("q_up_proj_wgrad", q_in, x.q, x.tokens, d, act(x.tokens, q_in, gemm_in_d)));
  ops.push_back(memory("kv_latent_rmsnorm_backward", 3 * act(x.tokens, x.kvl, d)));
  if (x.ql > 0) ops.push_back(memory("q_latent_rmsnorm_backward", 3 * act(x.tokens, x.ql, d)));
  if (x.t > 1) {
    // The query projection's input gradient joins the latents' when it read the hidden state.
    const double width = x.ql > 0 ? latent : latent + x.h;
    ops.push_back(x.sp ? comm("mla_latent_grad_reduce_scatter", Comm::reduce_scatter, act(x.tokens, width, d))
                       : comm("mla_latent_grad_all_reduce", Comm::all_reduce, act(x.tokens, width, d)));
  }
  ops.push_back(gemm("qkv_down_proj_dgrad", x.region, x.h, latent, d));
  ops.push_back(wgrad("qkv_down_proj_wgrad", x.h, latent, x.region, d, act(x.region, x.h, gemm_in_d)));
}

// DeepSeek V4's attention block (ModelSpec::csa) as Megatron-Core's DeepSeek-V4 hybrid attention
// runs it in Megatron-Bridge's DeepSeek V4 recipes (megatron/core/transformer/
// experimental_attention_variant: deepseek_v4_hybrid_attention.py, csa.py, csa_utils/
// fused_sparse_attention.py; tensor and context parallelism 1). trainsim's layers are uniform, so
// each layer runs the mean of the model's layers: the parts only some layers have (a compressor on
// those that compress, the indexer on ratio 4's) run over that share of the tokens.
//   Projections: the query latent (hidden -> q_lora_rank) and the key/value head (hidden -> head_dim),
//   each RMS-normed; the query up projection (q_lora_rank -> heads x head_dim), a weightless RMSNorm
//   per head and the fused rotary on the last qk_rope_head_dim of Q and K (mla_up_proj's module: a
//   selective recompute reruns them from the kept latents).
//   Compressor (a layer with a ratio): two BF16 GEMMs (its key/value and gate projections, hidden ->
//   2 x head_dim with ratio 4's overlapping windows, else head_dim; FP8 off in its module), then the
//   pooling: positional bias, overlap, softmax over each window, weighted sum, norm and rotary of the
//   entries. [A] Eager PyTorch on the unpacked sequences of pretraining (the fused cuDNN pooling
//   kernel serves the packed, THD path only): kCompressorKernels launches forward (about 40 in the
//   reference code), each passing over the fp32 projections: kCompressorBytes bytes per element of
//   the 2 x width projections (read the BF16 projections, 2; write and read back the fp32 sum with
//   the bias, 8; the overlap copy, 8; the softmax over the gate half, 4; the weighted product, 6).
//   Indexer (ratio 4): its query projection from the latent (q_lora_rank -> index_heads x
//   index_head_dim), the per-head weights (hidden -> index_heads, BF16) and a compressor of its own
//   at index_head_dim; its scores (index_heads x index_head_dim per query and valid entry, a GEMM's
//   work, written as an fp32 [tokens, entries] tensor) and the radix top-k. Its loss (the main heads'
//   scores on the selected entries) and its backward run during the forward (its inputs are detached:
//   no gradient reaches the layer): the scores' two gradient GEMMs and its projections' weight
//   gradients.
//   Sparse attention: FlashMLA's sparse kernel forward, cuDNN's sparse attention backward (2.5x, as
//   FlashAttention counts), 4 x head_dim FLOPs per query and key seen: the last sliding_window
//   tokens and the entries (ratio 4: the index_topk selected of the valid ones; others: all valid).
//   [A] Timed at the fused-attention efficiency of a dense kernel over the whole sequence: the kernel
//   tiles the query heads that share the one key head as the rows of one MMA, so few keys per query
//   do not starve it as they do a per-head FlashAttention kernel (FlashMLA's sparse prefill reaches
//   640 TFLOP/s on H800, 65% of its peak: deepseek-ai/FlashMLA README).
//   Output: the inverse rotary on each head's rotary part, the grouped low-rank projection (o_groups
//   BF16 GEMMs batched: heads x head_dim / o_groups -> o_lora_rank each) and the linear projection
//   (o_groups x o_lora_rank -> hidden).
constexpr std::int32_t kCompressorKernels = 40;
constexpr std::int32_t kCompressorBackwardKernels = 50;
constexpr double kCompressorBytes = 28;

// Mean over the causal queries j = 1..s of min(j, w): the window's keys.
double mean_window_keys(double s, double w) {
  if (s <= w) return (s + 1) / 2;
  return (w * (w + 1) / 2 + w * (s - w)) / s;
}

// Mean over j = 1..s of min(floor(j / r), cap): a query's valid compressed entries (cap < 0: none).
double mean_entries(double s, double r, double cap) {
  const auto sum_floor = [r](double n) {  // sum of floor(j / r) for j = 1..n
    const double q = std::floor(n / r);
    return r * q * (q - 1) / 2 + q * (n - q * r + 1);
  };
  if (cap < 0 || r * cap > s) return sum_floor(s) / s;
  return (sum_floor(r * cap - 1) + cap * (s - r * cap + 1)) / s;
}

struct CsaKind {
  double share;     // of the layers
  double ratio;     // 0: window only
  double coff;      // compressor width multiple: 2 (ratio 4's overlapping windows) or 1
  bool indexed;     // ratio 4: the indexer
  double entries;   // mean valid entries per query (causal)
  double selected;  // mean entries attended per query
};

std::vector<CsaKind> csa_kinds(const ModelSpec& m, const Dims& x) {
  std::vector<CsaKind> kinds;
  for (const auto& [r, layers] : m.compress_ratio_counts()) {
    CsaKind k{};
    k.share = static_cast<double>(layers) / static_cast<double>(m.compress_ratios.size());
    k.ratio = static_cast<double>(r);
    k.indexed = r == 4;
    k.coff = k.indexed ? 2 : 1;
    if (r > 0) {
      k.entries = mean_entries(x.s, k.ratio, -1);
      k.selected = k.indexed ? mean_entries(x.s, k.ratio, static_cast<double>(m.index_topk)) : k.entries;
    }
    kinds.push_back(k);
  }
  return kinds;
}

// The mean keys a query attends over the layers: its window and its layer's entries.
double csa_keys(const ModelSpec& m, const Dims& x) {
  double keys = mean_window_keys(x.s, static_cast<double>(m.sliding_window));
  for (const CsaKind& k : csa_kinds(m, x)) keys += k.share * k.selected;
  return keys;
}

// Tokens scaled by a share of the layers, at least one.
double share_rows(double tokens, double share) {
  return std::max(1.0, std::round(tokens * share));
}

Op bf16_gemm(Op op) {
  op.bf16 = true;
  return op;
}

Op sparse_attention(const ModelSpec& m, const Dims& x, const LayerConfig& c, bool backward) {
  Op op;
  op.kind = OpKind::attention;
  op.name = backward ? "sparse_attention_backward" : "sparse_attention";
  op.attention = {static_cast<std::int64_t>(x.b * x.heads),
                  static_cast<std::int64_t>(x.s),
                  static_cast<std::int64_t>(x.s),
                  static_cast<std::int64_t>(x.hd),
                  true,
                  backward,
                  c.attention,
                  0,
                  1.0};
  const double fwd = 4 * x.tokens * x.heads * x.hd * csa_keys(m, x);
  op.flops = backward ? 2.5 * fwd : fwd;
  const double lse = 4 * x.b * x.heads * x.s;
  // Forward reads Q and the key head, writes O; backward reads Q, K, O, dO, writes dQ, dK.
  op.bytes = (backward ? x.tokens * (4 * x.q + 2 * x.hd) : x.tokens * (2 * x.q + x.hd)) * x.d + lse;
  op.saved_bytes = backward ? 0 : to_bytes(lse);
  op.attention_core = true;
  op.rerun = op.discards = kRecomputeCoreAttn;
  return op;
}

void csa_forward(std::vector<Op>& ops, const ModelSpec& m, const Dims& x, const LayerConfig& c, double gemm_in_d) {
  const double d = x.d, t = x.tokens, h = x.h, hd = x.hd, ql = x.ql;
  ops.push_back(gemm("q_down_proj", t, ql, h, d, act(t, h, gemm_in_d)));
  ops.push_back(gemm("kv_proj", t, hd, h, d));  // reads the same normed input, kept once
  ops.push_back(memory("q_latent_rmsnorm", 2 * act(t, ql, d), act(t, ql, d)));
  ops.push_back(memory("kv_rmsnorm", 2 * act(t, hd, d), act(t, hd, d)));
  for (std::size_t i = ops.size() - 4; i < ops.size(); ++i) ops[i].offload = kOffloadQkvLinear;
  const std::size_t up = ops.size();
  ops.push_back(gemm("q_up_proj", t, x.q, ql, d, act(t, ql, gemm_in_d)));
  ops.push_back(memory("q_head_rmsnorm", 2 * act(t, x.q, d), act(t, x.q, d)));
  // Keeps the rotated Q and K for the attention.
  ops.push_back(memory("rotary_embedding", 2 * act(t, x.q + hd, d), act(t, x.q + hd, d), 2));
  tag(ops, up, kRecomputeMlaUpProj, false);
  ops[up + 1].discards |= kRecomputeMlaUpProj;
  ops.back().discards |= kRecomputeMlaUpProj;
  for (std::size_t i = up; i < ops.size(); ++i) ops[i].offload = kOffloadQkvLinear;
  ops.back().offload = kOffloadCoreAttn;
  const bool bf16_in = gemm_in_d != d;  // the BF16 modules keep the BF16 norm output beside the FP8 copy
  for (const CsaKind& k : csa_kinds(m, x)) {
    if (k.ratio == 0) continue;
    const double rows = share_rows(t, k.share);
    const std::string tag_name = k.indexed ? "_csa" : "_hca";
    const double width = 2 * k.coff * hd;
    ops.push_back(bf16_gemm(gemm("compressor" + tag_name, rows, width, h, d, bf16_in ? act(rows, h, d) : 0)));
    ops.push_back(memory("compressor_pool" + tag_name, rows * width * kCompressorBytes, rows * width * 4,
                         static_cast<std::int32_t>(std::lround(kCompressorKernels * k.share))));
    if (!k.indexed) continue;
    const double iw = static_cast<double>(m.index_heads * m.index_head_dim);
    const double ih = static_cast<double>(m.index_heads);
    const double iwidth = 2 * k.coff * static_cast<double>(m.index_head_dim);
    ops.push_back(gemm("indexer_q_proj", rows, iw, ql, d));
    ops.push_back(bf16_gemm(gemm("indexer_weights_proj", rows, ih, h, d)));
    ops.push_back(bf16_gemm(gemm("indexer_compressor", rows, iwidth, h, d)));
    ops.push_back(memory("indexer_compressor_pool", rows * iwidth * kCompressorBytes, 0,
                         static_cast<std::int32_t>(std::lround(kCompressorKernels * k.share))));
    ops.push_back(memory("indexer_rotary_hadamard", 2 * act(rows, iw, d), 0, 2));
    // Scores over the valid entries (fp32 out), the top-k, the loss on the main heads' scores of the
    // selected entries, and the indexer's backward: the scores' two gradients and its weights'.
    Op scores = bf16_gemm(gemm("indexer_scores", rows, std::max(1.0, k.entries), iw, d));
    scores.bytes += rows * k.entries * 4;
    ops.push_back(scores);
    ops.push_back(memory("indexer_topk", rows * (k.entries + static_cast<double>(m.index_topk)) * 4));
    Op loss = core(gemm("indexer_loss_scores", rows, std::max(1.0, k.selected), x.heads * hd, d));
    loss.rerun = loss.discards = 0;
    ops.push_back(loss);
    ops.push_back(bf16_gemm(gemm("indexer_scores_backward", rows, iw, std::max(1.0, k.entries), d, 0, 2)));
    ops.push_back(bf16_gemm(gemm("indexer_weights_grads", ql, iw, rows, d)));
    ops.push_back(bf16_gemm(gemm("indexer_compressor_weights_grads", h, iwidth + ih, rows, d)));
  }
  ops.push_back(sparse_attention(m, x, c, false));
  ops.push_back(memory("inverse_rotary", 2 * act(t, x.heads * x.rope, d)));
  const double og = static_cast<double>(m.o_groups), ol = static_cast<double>(m.o_lora_rank);
  // Keeps its input, the attention's output (BF16).
  ops.push_back(bf16_gemm(gemm("attention_output_grouped", t, ol, x.q / og, d, act(t, x.q, d), og)));
  ops.back().offload = kOffloadAttnProj | kOffloadCoreAttn;
  ops.push_back(gemm("attention_output", t, h, og * ol, d, act(t, og * ol, gemm_in_d)));
  ops.back().offload = kOffloadAttnProj;
}

void csa_backward(std::vector<Op>& ops, const ModelSpec& m, const Dims& x, const LayerConfig& c, double gemm_in_d) {
  const double d = x.d, t = x.tokens, h = x.h, hd = x.hd, ql = x.ql;
  const double og = static_cast<double>(m.o_groups), ol = static_cast<double>(m.o_lora_rank);
  ops.push_back(gemm("attention_output_dgrad", t, og * ol, h, d));
  ops.push_back(wgrad("attention_output_wgrad", og * ol, h, t, d, act(t, og * ol, gemm_in_d)));
  ops.push_back(bf16_gemm(gemm("attention_output_grouped_dgrad", t, x.q / og, ol, d, 0, og)));
  ops.push_back(bf16_gemm(wgrad("attention_output_grouped_wgrad", x.q / og, ol, t, d, act(t, x.q, d), og)));
  ops.push_back(memory("inverse_rotary_backward", 2 * act(t, x.heads * x.rope, d)));
  ops.push_back(sparse_attention(m, x, c, true));
  for (const CsaKind& k : csa_kinds(m, x)) {
    if (k.ratio == 0) continue;
    const double rows = share_rows(t, k.share);
    const std::string tag_name = k.indexed ? "_csa" : "_hca";
    const double width = 2 * k.coff * hd;
    ops.push_back(memory("compressor_pool" + tag_name + "_backward", 2 * rows * width * kCompressorBytes, 0,
                         static_cast<std::int32_t>(std::lround(kCompressorBackwardKernels * k.share))));
    ops.push_back(bf16_gemm(gemm("compressor" + tag_name + "_dgrad", rows, h, width, d)));
    ops.push_back(bf16_gemm(wgrad("compressor" + tag_name + "_wgrad", h, width, rows, d, act(rows, h, d))));
  }
  ops.push_back(memory("rotary_embedding_backward", 2 * act(t, x.q + hd, d)));
  ops.push_back(memory("q_head_rmsnorm_backward", 3 * act(t, x.q, d)));
  ops.push_back(gemm("q_up_proj_dgrad", t, ql, x.q, d));
  ops.push_back(wgrad("q_up_proj_wgrad", ql, x.q, t, d, act(t, ql, gemm_in_d)));
  ops.push_back(memory("kv_rmsnorm_backward", 3 * act(t, hd, d), 0, 2));
  ops.push_back(memory("q_latent_rmsnorm_backward", 3 * act(t, ql, d), 0, 2));
  ops.push_back(gemm("kv_proj_dgrad", t, h, hd, d));
  ops.push_back(wgrad("kv_proj_wgrad", h, hd, t, d, act(t, h, gemm_in_d)));
  ops.push_back(gemm("q_down_proj_dgrad", t, h, ql, d));
  ops.push_back(wgrad("q_down_proj_wgrad", h, ql, t, d, act(t, h, gemm_in_d)));
}

// Manifold-constrained hyper-connections around one block (ModelSpec::hc_streams > 1; Megatron-Core's
// hyper_connection.py with its fused kernels on Blackwell, fused_mhc_kernels.py). Before the block:
// the mapping of the flattened streams (streams x hidden -> streams x (streams + 2)) as a split-K
// TF32 matmul and its reduction, the Sinkhorn normalisation and the aggregation of the streams into
// the block's input (reads the streams twice, writes one hidden state): four kernels; it keeps the
// streams. After it: one kernel mixes the streams and the block's output into the new streams (reads
// both, writes the streams) and keeps the output. Backward: the aggregation's and the mapping's
// gradients read the streams and the output gradient twice and write the streams' gradient; the
// mixing's reads its gradient, the streams and the output and writes both gradients. [A] kernel
// counts from the fused path; every pass memory-bound (24 outputs per 4 x hidden inputs).
Op hc_pre(const Dims& x, bool backward) {
  const double streams = act(x.tokens, x.hc * x.h, x.d), one = act(x.tokens, x.h, x.d);
  return backward ? memory("hc_pre_backward", 3 * streams + one, 0, 4)
                  : memory("hc_pre", 2 * streams + one, streams, 4);
}
Op hc_post(const Dims& x, bool backward) {
  const double streams = act(x.tokens, x.hc * x.h, x.d), one = act(x.tokens, x.h, x.d);
  return backward ? memory("hc_post_backward", 3 * streams + 2 * one, 0, 2)
                  : memory("hc_post", 2 * streams + one, one, 1);
}

// A Mamba-2 mixer block as Megatron-Core's MambaLayer runs it (ssm/mamba_mixer.py with the mamba_ssm
// Triton kernels of Dao & Gu 2024, "Transformers are SSMs", arXiv:2405.21060): the input norm, the
// column-parallel in_proj (hidden -> z, x, B, C, dt; SP all-gathers its input first), the depthwise
// causal conv1d with SiLU over x, B and C, the chunked SSD scan, the gated RMSNorm (y · SiLU(z),
// normed per group) and the row-parallel out_proj, then the residual add. The scan over chunks of Q
// tokens runs as mamba_chunk_scan_combined's kernels: dt's softplus and the cumulative decay
// (chunk_cumsum), each chunk's final state B^T·x (chunk_state: N x P x Q per chunk and head), the
// states carried across chunks in fp32 (state_passing), C·B^T within each chunk (bmm_chunk: Q x Q x N
// per chunk and group) and the output from the masked C·B^T times x and C times the carried state
// (chunk_scan: Q x P x (Q + N) per chunk and head). The tensor-core parts are batched GEMMs of those
// shapes, the GEMM model's efficiency for small shapes standing for the Triton kernels' [A]; they stay
// BF16 under FP8 (Transformer Engine quantises only the projections). Kept for backward (the
// memory-efficient path, which recomputes the convolution and the states): the norm input, in_proj's
// output z, x, B, C, dt, the scan output y and out_proj's input.
// The Mamba-2 mixer's own kernels (the causal conv1d, the SSD scan's Triton kernels, the gated RMSNorm;
// forward, recompute and backward) run at the GPU's share of the roofline model's speed
// (hardware::GpuSpec::mamba_scan_achieved: Blackwell's fitted on Nemotron 3 Nano GB300 runs, Hopper's
// on three hybrid models measured on H100; gpu_catalog.cc).

// One of the Mamba mixer's own kernels (see above), as core() and grouped() mark theirs.
Op scan_kernel(Op op) {
  op.mamba_scan = true;
  return op;
}

// Context parallelism (Megatron-Core's MambaContextParallel, ssm/mamba_context_parallel.py): in_proj
// runs on the rank's s/cp tokens; all-to-alls over the CP group then give each rank the whole
// sequence of 1/cp of the heads (z, x, B, C and dt, B and C repeated where a group spans CP ranks),
// with the attention layers' load-balancing order undone (a copy); the convolution, the scan and the
// gated norm run there, on as many elements as without CP; one all-to-all brings the output back to
// the sequence shards (the order redone) for out_proj. The backward mirrors them. [A] The scan's
// chunks are counted on the rank's tokens (b·s/cp of all heads, the same work as b·s of heads/cp up
// to the last chunk's padding).
//
// A tensor of `width` channels per token from the rank's sequence shard to its head shard (the
// all-to-all, then the copy that undoes the load-balancing order), and back (the reverse).
void mamba_cp_to_heads(std::vector<Op>& ops, const Dims& x, std::string_view what, double width) {
  if (x.cp <= 1) return;
  ops.push_back(
      comm(fmt::format("mamba_{}_cp_all_to_all", what), Comm::all_to_all, act(x.tokens, width, x.d), CommGroup::cp));
  ops.push_back(memory(fmt::format("mamba_{}_cp_reorder", what), 2 * act(x.tokens, width, x.d)));
}
void mamba_cp_to_sequence(std::vector<Op>& ops, const Dims& x, std::string_view what, double width) {
  if (x.cp <= 1) return;
  ops.push_back(memory(fmt::format("mamba_{}_cp_reorder", what), 2 * act(x.tokens, width, x.d)));
  ops.push_back(
      comm(fmt::format("mamba_{}_cp_all_to_all", what), Comm::all_to_all, act(x.tokens, width, x.d), CommGroup::cp));
}

void mamba_forward(std::vector<Op>& ops, const Dims& x, double gemm_in_d) {
  // Each sequence is scanned in chunks of Q tokens, the last one padded to Q.
  const double d = x.d, tok = x.tokens, chunks = x.b * std::ceil(x.sl / x.chunk);
  const double states = chunks * x.mh * x.mp * x.mn * 4;  // fp32 state per chunk and head
  if (x.t > 1 && x.sp) ops.push_back(comm("mamba_in_proj_input_all_gather", Comm::all_gather, act(tok, x.h, d)));
  ops.push_back(gemm("mamba_in_proj", tok, x.min_w, x.h, d, act(x.region, x.h, gemm_in_d) + act(tok, x.min_w, d)));
  mamba_cp_to_heads(ops, x, "in_proj_output", x.mamba_cp_w);
  ops.push_back(scan_kernel(memory("mamba_conv1d", 2 * act(tok, x.xbc, d) + x.xbc * (x.conv + 1) * d)));
  ops.push_back(scan_kernel(memory("ssd_chunk_cumsum", tok * x.mh * (d + 8))));
  ops.push_back(scan_kernel(gemm("ssd_chunk_state", x.mn, x.mp, x.chunk, d, 0, chunks * x.mh)));
  ops.push_back(scan_kernel(memory("ssd_state_passing", 2 * states)));
  ops.push_back(scan_kernel(gemm("ssd_bmm_chunk", x.chunk, x.chunk, x.mn, d, 0, chunks * x.mg)));
  ops.push_back(
      scan_kernel(gemm("ssd_chunk_scan", x.chunk, x.mp, x.chunk + x.mn, d, act(tok, x.mi, d), chunks * x.mh)));
  ops.push_back(scan_kernel(memory("mamba_gated_rmsnorm", 3 * act(tok, x.mi, d))));
  mamba_cp_to_sequence(ops, x, "output", x.mi);
  ops.push_back(gemm("mamba_out_proj", tok, x.h, x.mi, d, act(tok, x.mi, gemm_in_d)));
  if (x.t > 1) {
    ops.push_back(x.sp ? comm("mamba_reduce_scatter", Comm::reduce_scatter, act(tok, x.h, d))
                       : comm("mamba_all_reduce", Comm::all_reduce, act(tok, x.h, d)));
  }
}

// Its backward: out_proj's data and weight gradients, the gated norm's, the recomputed convolution
// and states, the scan's backward kernels (each forward product's two operand gradients: twice the
// forward's batched GEMMs, and the states carried back), the convolution's, and in_proj's with its
// input gradient's TP communication.
void mamba_backward(std::vector<Op>& ops, const Dims& x, double gemm_in_d) {
  const double d = x.d, tok = x.tokens, chunks = x.b * std::ceil(x.sl / x.chunk);
  const double states = chunks * x.mh * x.mp * x.mn * 4;
  const double full = act(tok, x.h, d);
  if (x.t > 1 && x.sp) ops.push_back(comm("mamba_output_grad_all_gather", Comm::all_gather, full));
  ops.push_back(gemm("mamba_out_proj_dgrad", tok, x.mi, x.h, d));
  ops.push_back(wgrad("mamba_out_proj_wgrad", x.mi, x.h, tok, d, act(tok, x.mi, gemm_in_d)));
  mamba_cp_to_heads(ops, x, "output_grad", x.mi);
  ops.push_back(scan_kernel(memory("mamba_gated_rmsnorm_backward", 5 * act(tok, x.mi, d))));
  ops.push_back(scan_kernel(memory("mamba_conv1d_recompute", 2 * act(tok, x.xbc, d))));
  ops.push_back(scan_kernel(gemm("ssd_chunk_state_recompute", x.mn, x.mp, x.chunk, d, 0, chunks * x.mh)));
  ops.push_back(scan_kernel(memory("ssd_state_passing_recompute", 2 * states)));
  ops.push_back(scan_kernel(gemm("ssd_chunk_scan_backward", x.chunk, x.mp, x.chunk + x.mn, d, 0, 2 * chunks * x.mh)));
  ops.push_back(scan_kernel(memory("ssd_state_passing_backward", 3 * states)));
  ops.push_back(scan_kernel(gemm("ssd_chunk_state_backward", x.mn, x.mp, x.chunk, d, 0, 2 * chunks * x.mh)));
  ops.push_back(scan_kernel(gemm("ssd_bmm_chunk_backward", x.chunk, x.chunk, x.mn, d, 0, 2 * chunks * x.mg)));
  ops.push_back(scan_kernel(memory("ssd_chunk_cumsum_backward", tok * x.mh * (2 * d + 16))));
  ops.push_back(scan_kernel(memory("mamba_conv1d_backward", 3 * act(tok, x.xbc, d))));
  mamba_cp_to_sequence(ops, x, "in_proj_output_grad", x.mamba_cp_w);
  if (x.t > 1 && x.sp) ops.push_back(comm("mamba_in_proj_input_all_gather", Comm::all_gather, full));
  ops.push_back(gemm("mamba_in_proj_dgrad", tok, x.h, x.min_w, d));
  if (x.t > 1) {
    ops.push_back(x.sp ? comm("mamba_input_grad_reduce_scatter", Comm::reduce_scatter, full)
                       : comm("mamba_input_grad_all_reduce", Comm::all_reduce, full));
  }
  ops.push_back(wgrad("mamba_in_proj_wgrad", x.h, x.min_w, tok, d, act(x.region, x.h, gemm_in_d)));
}

}  // namespace

std::vector<Op> layer_forward(const ModelSpec& model, const LayerConfig& c, LayerBlock block) {
  // A hybrid model's '-' block is a dense MLP whatever experts its 'E' blocks have.
  const ModelSpec m = block == LayerBlock::mlp ? model.dense_variant() : model;
  const Dims x = dims(m, c);
  const bool with_attention = block == LayerBlock::transformer || block == LayerBlock::attention;
  const bool with_mlp = block == LayerBlock::transformer || block == LayerBlock::mlp || block == LayerBlock::moe;
  const bool tp = c.tp > 1;
  const double full = act(x.tokens, x.h, x.d);  // b·s·h·dtype: tp_comm size (nccl-tests convention)
  const double region_act = act(x.region, x.h, x.d);
  const double mask = x.region * x.h;  // 1-byte dropout mask over the hidden state
  const std::string norm = x.rms ? "rmsnorm" : "layernorm";
  // Each GEMM's input kept for its weight gradient is the quantised copy under FP8 and NVFP4
  // (saved_gemm_input_bytes); tensors kept for other ops stay BF16.
  const double gemm_in_d = saved_gemm_input_bytes(c, x.d);
  const double region_gemm_in = act(x.region, x.h, gemm_in_d);
  std::vector<Op> ops;
  // The output projection reads the heads' context: heads·head_dim, or MLA's value heads.
  const double context = x.mla ? x.kv : x.q;

  if (block == LayerBlock::mamba) {
    ops.push_back(memory("input_" + norm, 2 * region_act, region_act));
    mamba_forward(ops, x, gemm_in_d);
    ops.push_back(memory("mamba_residual_add", region_act * 3));
    graph(ops, 0, kGraphMamba);
    if (c.fp8) {
      // in_proj's input cast in the norm, out_proj's on its own (as the attention's projections).
      ops.push_back(quantize(c.fp4 ? "nvfp4_quantize" : "fp8_cast_transpose", c, x.tokens * x.mi, x.tokens * x.h));
      mark_fp8(ops, c);
    }
    return ops;
  }
  if (with_attention) {
    // Norm: reads x, writes y; keeps its input. (Recomputing "layernorm" reruns the norms Megatron-Core
    // runs as modules of their own: MLA's input norm, a MoE layer's pre-MLP norm; Transformer Engine
    // fuses the others into the next GEMM.)
    if (x.hc > 1) ops.push_back(hc_pre(x, false));
    ops.push_back(memory("input_" + norm, 2 * region_act, region_act));
    if (x.mla || x.csa) ops.back().rerun |= kRecomputeLayernorm;
    // A separate norm module (MLA's) is attn_norm's; fused into the QKV projection, qkv_linear's.
    ops.back().offload = x.mla || x.csa ? kOffloadAttnNorm : kOffloadQkvLinear;
    if (x.csa) {
      csa_forward(ops, m, x, c, gemm_in_d);
    } else if (x.mla) {
      mla_forward(ops, x, gemm_in_d);
    } else {
      if (tp && x.sp) ops.push_back(comm("qkv_input_all_gather", Comm::all_gather, full));
      // Column-parallel QKV: keeps its input (sharded under SP) and Q, K, V for the attention core.
      const double qkv_width = x.q + 2 * x.kv;
      ops.push_back(gemm("qkv", x.tokens, qkv_width, x.h, x.d, region_gemm_in + act(x.tokens, qkv_width, x.d)));
      ops.back().offload = kOffloadQkvLinear;
      ops.back().offload_tail = kOffloadCoreAttn;
      ops.back().offload_tail_bytes = to_bytes(act(x.tokens, qkv_width, x.d));
      // Qwen3's per-head RMSNorms of Q and K (Megatron-Core's q_layernorm and k_layernorm, two
      // Transformer Engine norm modules): read Q and K, write them; each keeps its input.
      if (x.qk_norm) {
        ops.push_back(memory("qk_rmsnorm", 2 * act(x.tokens, x.q + x.kv, x.d), act(x.tokens, x.q + x.kv, x.d), 2));
        ops.back().host_calls = 2;
        ops.back().offload = kOffloadQkvLinear;
      }
      // Llama-family (swiglu) models rotate Q and K; GPT models add learned positions at the embedding.
      if (x.rotary) ops.push_back(memory("rotary_embedding", 2 * act(x.tokens, x.q + x.kv, x.d)));
    }

    if (x.csa) {
      // csa_forward ran the attention and the output projections.
    } else if (c.attention != AttentionImpl::softmax) {
      flash(ops, x, c, false);
    } else {
      const double batch = x.b * x.heads;
      TRAINSIM_ASSERT(c.cp == 1);               // context parallelism runs fused attention only
      const double scores = batch * x.s * x.s;  // elements of one s x s score tensor on this rank
      // Grouped-query attention: Megatron-Core's unfused attention (and Gemma 2's) repeat_interleaves
      // K and V to the query heads; the two score GEMMs keep the copies (the originals are then free).
      if (x.kv < x.q) {
        ops.push_back(core(memory("attention_kv_repeat", act(x.tokens, 2 * (x.kv + x.q), x.d),
                                  act(x.tokens, 2 * (x.q - x.kv), x.d), 2)));
      }
      ops.push_back(core(gemm("attention_scores", x.s, x.s, x.hd, x.d, 0, batch)));
      // Gemma 2's soft-cap, cap·tanh(scores / cap): three element-wise kernels over the scores (div,
      // tanh, mul; each reads and writes them), tanh's output kept for its backward.
      if (x.softcap) ops.push_back(core(memory("attention_logit_softcap", 6 * scores * x.d, scores * x.d, 3)));
      ops.push_back(core(memory("scale_mask_softmax", 2 * scores * x.d, scores * x.d)));
      if (x.drop) ops.push_back(core(memory("attention_probs_dropout", scores * (2 * x.d + 1), scores)));
      // Keeps its inputs: the dropout output (the softmax output without dropout, already kept) and V
      // (kept with Q and K by the QKV projection).
      ops.push_back(core(gemm("attention_context", x.s, x.hd, x.s, x.d, x.drop ? scores * x.d : 0, batch)));
    }

    if (!x.csa) {
      ops.push_back(gemm("attention_output", x.tokens, x.h, context, x.d, act(x.tokens, context, gemm_in_d)));
      // Its input is the attention's output, which the attention keeps too: either module's offload
      // moves it (the softmax statistics the attention also keeps are below Megatron-Core's
      // min_offloaded_tensor_size and stay).
      ops.back().offload = kOffloadAttnProj | kOffloadCoreAttn;
    }
    if (tp) {
      ops.push_back(x.sp ? comm("attention_reduce_scatter", Comm::reduce_scatter, full)
                         : comm("attention_all_reduce", Comm::all_reduce, full));
    }
    // Gemma's post-attention norm (Megatron-Bridge's TERowParallelLinearLayerNorm: a Transformer
    // Engine norm on the projection's reduced output, the sequence shard under SP): reads the branch,
    // writes it normed, keeps its input.
    if (x.post_norms) ops.push_back(memory("attention_output_" + norm, 2 * region_act, region_act));
    // Bias + dropout + residual add: reads the branch and the residual, writes the sum and the mask.
    if (x.hc > 1)
      ops.push_back(hc_post(x, false));
    else
      ops.push_back(x.drop ? memory("attention_dropout_add", region_act * 3 + mask, mask)
                           : memory("attention_residual_add", region_act * 3));
    graph(ops, 0, kGraphAttn);
  }  // with_attention

  if (with_mlp) {
    // A checkpointed MLP keeps its input, the residual stream (its norm is fused into fc1 and runs
    // again); a checkpointed MoE layer keeps the pre-MLP norm's output.
    const std::uint8_t modules = c.recompute_modules;
    if (!x.moe && (modules & kRecomputeMlp)) ops.push_back(checkpoint_input("mlp_checkpoint_input", region_act));
    if (x.hc > 1) ops.push_back(hc_pre(x, false));
    const std::size_t mlp = ops.size();
    ops.push_back(
        memory((block == LayerBlock::transformer ? "post_attention_" : "pre_mlp_") + norm, 2 * region_act, region_act));
    if (x.moe) {
      ops.back().rerun |= kRecomputeLayernorm;
      ops.back().offload = kOffloadMlpNorm;  // a module of its own before the router
      if (modules & kRecomputeMoe) ops.push_back(checkpoint_input("moe_checkpoint_input", region_act));
      moe_forward(ops, x, gemm_in_d);
      ops[mlp].graph = kGraphMoeRouter;
    } else {
      tp_mlp_forward(ops, x, dense_mlp(x), region_gemm_in, gemm_in_d);
    }
    if (x.post_norms) ops.push_back(memory("mlp_output_" + norm, 2 * region_act, region_act));
    // The post-norm sits in fc2's module, so a dense MLP's checkpoint reruns it.
    if (!x.moe) tag(ops, mlp, kRecomputeMlp);
    if (x.hc > 1)
      ops.push_back(hc_post(x, false));
    else
      ops.push_back(x.drop ? memory("mlp_dropout_add", region_act * 3 + mask, mask)
                           : memory("mlp_residual_add", region_act * 3));
    if (!x.moe) graph(ops, mlp, kGraphMlp);
  }  // with_mlp
  if (c.lora_rank > 0) insert_lora(ops, x, c, false);
  if (c.fp8) {
    // TE fuses the casts of the QKV and fc1 inputs into the norms and of the fc2 input into the
    // activation; the projection input is cast on its own (read 2, write 1 byte per element), and
    // every GEMM input is also written transposed in FP8 for the weight gradient (1 byte). The
    // experts' permuted input is cast on its own too (2 + 1 + 1 bytes), and so is their fc2 input:
    // Megatron-Core's TEGroupedMLP runs its own activation kernel (weighted_bias_swiglu_impl, BF16
    // out) and GroupedLinear quantises what it gets (split_quantize). A MoE layer's norm is a module
    // of its own (TENorm, BF16 out: no linear to fuse into), so the shared expert's fc1 input is cast
    // on its own, and its fc2 input too (Megatron's bias_swiglu_impl before a TE linear).
    // A latent MoE's down projection casts the norm output on its own, its up projection the
    // combined latent.
    double own = 0, fused = 0;
    if (with_attention && x.csa) {
      // DeepSeek V4: the down projections' input cast in the input norm; the query up projection's
      // latent, the indexer's query projection's and the linear projection's inputs on their own.
      own += x.tokens * (2 * x.ql + static_cast<double>(m.o_groups * m.o_lora_rank));
      fused += x.tokens * x.h;
    } else if (with_attention) {
      own += x.tokens * context;
      fused += x.tokens * x.h;
      if (x.mla) fused += x.tokens * (x.ql + x.kvl);  // the up projections' inputs, cast in their norms
    }
    if (with_mlp && x.moe) {
      own += x.moe_rows * (x.he + x.fe) + (x.latent > 0 ? x.region * (x.h + x.latent) : 0) +
             (x.fsh > 0 ? x.tokens * (x.h + x.fsh) : 0);
    } else if (with_mlp) {
      fused += x.tokens * (x.h + x.f);
    }
    ops.push_back(quantize(c.fp4 ? "nvfp4_quantize" : "fp8_cast_transpose", c, own, fused,
                           with_mlp ? expert_cast_kernels(x, c) : 0));
    mark_fp8(ops, c);
  }
  return ops;
}

namespace {

// Megatron's backward TP communication per layer (tensor_parallel/layers.py, mappings.py):
//   no SP: all-reduce of the input grad of fc1 and of QKV (the backward of the column-parallel
//          input copy); the row-parallel all-reduces' backward is the identity.
//   SP:    all-gather of the output grad before fc2's and the output projection's backward (the
//          backward of the forward reduce-scatters); all-gather of the saved, sharded input of
//          fc1 and of QKV for their weight-grad GEMMs; reduce-scatter of the input grad of fc1 and
//          of QKV. Four all-gathers and two reduce-scatters.
std::vector<Op> layer_backward_ops(const ModelSpec& model, const LayerConfig& c, LayerBlock block) {
  const ModelSpec m = block == LayerBlock::mlp ? model.dense_variant() : model;
  const Dims x = dims(m, c);
  const bool with_attention = block == LayerBlock::transformer || block == LayerBlock::attention;
  const bool with_mlp = block == LayerBlock::transformer || block == LayerBlock::mlp || block == LayerBlock::moe;
  const bool tp = c.tp > 1;
  const double full = act(x.tokens, x.h, x.d);
  const double region_act = act(x.region, x.h, x.d);
  const double mask = x.region * x.h;
  const std::string norm = x.rms ? "rmsnorm" : "layernorm";
  const double gemm_in_d = saved_gemm_input_bytes(c, x.d);  // the saved GEMM inputs, as layer_forward keeps them
  const double region_gemm_in = act(x.region, x.h, gemm_in_d);
  std::vector<Op> ops;

  if (block == LayerBlock::mamba) {
    mamba_backward(ops, x, gemm_in_d);
    ops.push_back(memory("input_" + norm + "_backward", 4 * region_act, 0, 2));
    graph(ops, 0, kGraphMamba);
    if (c.frozen_weights) std::erase_if(ops, [](const Op& op) { return op.weight_grad; });
    if (c.fp8) {
      ops.push_back(
          quantize(c.fp4 ? "nvfp4_grad_quantize" : "fp8_grad_cast_transpose", c, x.tokens * (x.min_w + x.h), 0));
      mark_fp8(ops, c);
    }
    return ops;
  }

  auto input_grad_comm = [&](const std::string& what) {
    if (!tp) return;
    ops.push_back(x.sp ? comm(what + "_grad_reduce_scatter", Comm::reduce_scatter, full)
                       : comm(what + "_grad_all_reduce", Comm::all_reduce, full));
  };

  if (with_mlp) {
    if (x.hc > 1) ops.push_back(hc_post(x, true));
    // Dropout backward reads the grad and the mask, writes the grad; the residual grad passes on.
    if (x.drop) ops.push_back(memory("mlp_dropout_add_backward", region_act * 2 + mask));
    // A post-norm's backward reads the output gradient and its kept input, writes the input gradient
    // (and reduces its weight's gradient: two kernels, as the pre-norms').
    if (x.post_norms) ops.push_back(memory("mlp_output_" + norm + "_backward", 3 * region_act, 0, 2));
    if (x.moe) {
      moe_backward(ops, x, gemm_in_d);
    } else {
      tp_mlp_backward(ops, x, dense_mlp(x), region_gemm_in, gemm_in_d);
    }
    // Norm backward reads its input, the output grad and the residual grad it is summed with.
    ops.push_back(memory((block == LayerBlock::transformer ? "post_attention_" : "pre_mlp_") + norm + "_backward",
                         4 * region_act, 0, 2));
    if (x.moe)
      ops.back().graph = kGraphMoeRouter;
    else
      graph(ops, 0, kGraphMlp);
    if (x.hc > 1) ops.push_back(hc_pre(x, true));
  }  // with_mlp
  const std::size_t attention = ops.size();
  const double qkv_width = x.q + 2 * x.kv;
  if (with_attention && x.csa) {
    if (x.hc > 1) ops.push_back(hc_post(x, true));
    csa_backward(ops, m, x, c, gemm_in_d);
    ops.push_back(memory("input_" + norm + "_backward", 4 * region_act, 0, 2));
    if (x.hc > 1) ops.push_back(hc_pre(x, true));
    graph(ops, attention, kGraphAttn);
  } else if (with_attention) {
    if (x.drop) ops.push_back(memory("attention_dropout_add_backward", region_act * 2 + mask));
    if (x.post_norms) ops.push_back(memory("attention_output_" + norm + "_backward", 3 * region_act, 0, 2));
    if (tp && x.sp) ops.push_back(comm("attention_output_grad_all_gather", Comm::all_gather, full));
    const double context = x.mla ? x.kv : x.q;
    ops.push_back(gemm("attention_output_dgrad", x.tokens, context, x.h, x.d));
    ops.push_back(wgrad("attention_output_wgrad", context, x.h, x.tokens, x.d, act(x.tokens, context, gemm_in_d)));

    if (c.attention != AttentionImpl::softmax) {
      flash(ops, x, c, true);
    } else {
      const double batch = x.b * x.heads;
      const double scores = batch * x.s * x.s;
      ops.push_back(core(gemm("attention_context_probs_grad", x.s, x.s, x.hd, x.d, 0, batch)));
      ops.push_back(core(gemm("attention_context_value_grad", x.s, x.hd, x.s, x.d, 0, batch)));
      if (x.drop) ops.push_back(core(memory("attention_probs_dropout_backward", scores * (2 * x.d + 1))));
      ops.push_back(core(memory("scale_mask_softmax_backward", 3 * scores * x.d)));
      // mul's and div's backward read and write the gradient; tanh's reads it and the kept output.
      if (x.softcap) ops.push_back(core(memory("attention_logit_softcap_backward", 7 * scores * x.d, 0, 3)));
      ops.push_back(core(gemm("attention_scores_query_grad", x.s, x.hd, x.s, x.d, 0, batch)));
      ops.push_back(core(gemm("attention_scores_key_grad", x.s, x.hd, x.s, x.d, 0, batch)));
      // The repeated heads' gradients summed back onto K and V.
      if (x.kv < x.q)
        ops.push_back(core(memory("attention_kv_repeat_backward", act(x.tokens, 2 * (x.q + x.kv), x.d), 0, 2)));
    }
    if (x.mla) {
      mla_backward(ops, x, gemm_in_d);
    } else {
      if (x.rotary) ops.push_back(memory("rotary_embedding_backward", 2 * act(x.tokens, x.q + x.kv, x.d)));
      if (x.qk_norm) {  // reads the output gradient and the kept input, writes the input gradient
        ops.push_back(memory("qk_rmsnorm_backward", 3 * act(x.tokens, x.q + x.kv, x.d), 0, 2));
        ops.back().host_calls = 2;
      }
      if (tp && x.sp) ops.push_back(comm("qkv_input_all_gather", Comm::all_gather, full));
      ops.push_back(gemm("qkv_dgrad", x.tokens, x.h, qkv_width, x.d));
      input_grad_comm("qkv_input");
      ops.push_back(wgrad("qkv_wgrad", x.h, qkv_width, x.tokens, x.d, region_gemm_in));
    }
    ops.push_back(memory("input_" + norm + "_backward", 4 * region_act, 0, 2));
    graph(ops, attention, kGraphAttn);
  }  // with_attention
  if (c.frozen_weights) std::erase_if(ops, [](const Op& op) { return op.weight_grad && !is_lora(op); });
  if (c.lora_rank > 0) insert_lora(ops, x, c, true);
  if (c.fp8) {
    // Each GEMM's output gradient is cast and transposed to FP8 once for its data and weight
    // gradients: read 2, write 1 + 1 bytes per element. MLA: the down projection's (on the region),
    // the up projections' and the output projection's.
    double grads = 0;
    if (with_attention && x.csa)  // the down, up, indexer query and linear projections'
      grads += x.tokens * (x.ql + x.hd + x.q + static_cast<double>(m.index_heads * m.index_head_dim) + x.h);
    else if (with_attention)
      grads += x.mla ? x.region * (x.ql + x.kvl + x.rope) + x.tokens * (x.q + x.heads * (x.qk - x.rope + x.v) + x.h)
                     : x.tokens * (qkv_width + x.h);
    if (with_mlp && x.moe) {
      grads += x.moe_rows * ((x.swiglu ? 2 * x.fe : x.fe) + x.he) + (x.latent > 0 ? x.region * (x.latent + x.h) : 0);
      if (x.fsh > 0) grads += x.tokens * ((x.swiglu ? 2 * x.fsh : x.fsh) + x.h);
    } else if (with_mlp) {
      grads += x.tokens * ((x.swiglu ? 2 * x.f : x.f) + x.h);
    }
    ops.push_back(quantize(c.fp4 ? "nvfp4_grad_quantize" : "fp8_grad_cast_transpose", c, grads, 0,
                           with_mlp ? expert_cast_kernels(x, c) : 0));
    mark_fp8(ops, c);
  }
  return ops;
}

// The accumulation (GradAccumulation, ops.h) of `weights` weights of `elements` elements in all: its
// name, bytes, kernels and what it holds while it runs (the 16-bit gradient, and BF16_Optimizer's
// fp32 copy of it).
Op accumulation(const std::string& weight, double elements, const LayerConfig& c, std::int32_t weights = 1) {
  const double d = static_cast<double>(c.dtype_bytes), g = static_cast<double>(c.grad_bytes);
  Op op;
  switch (c.grad_accumulation) {
    case GradAccumulation::fused:
    case GradAccumulation::main_grad_add:
      op = memory(weight + "_main_grad_add", elements * (d + 2 * g), 0, weights);
      op.workspace_bytes = to_bytes(elements * d);
      break;
    case GradAccumulation::autograd:
      op = memory(weight + "_grad_accumulate", elements * 3 * d, 0, weights);
      op.workspace_bytes = to_bytes(elements * d);
      break;
    case GradAccumulation::fp32_buffer:
      op = memory(weight + "_fp32_grad_accumulate", elements * (d + 4 + 3 * 4), 0, 2 * weights);
      op.workspace_bytes = to_bytes(elements * (d + 4));
      break;
  }
  op.weight_grad = true;
  return op;
}

// Unless gradient accumulation is fused into the GEMMs, each linear's weight-gradient GEMM is
// followed by its accumulation (one per weight: a grouped GEMM's experts are weights of their own),
// which runs where its GEMM runs (the W pass of zero-bubble schedules, a CUDA graph's scope).
void accumulate_weight_grads(std::vector<Op>& ops, const LayerConfig& c) {
  if (c.grad_accumulation == GradAccumulation::fused) return;
  std::vector<Op> out;
  out.reserve(2 * ops.size());
  for (Op& op : ops) {
    const bool linear = op.kind == OpKind::gemm && op.weight_grad;
    const GemmShape shape = op.gemm;
    const std::string name = op.name;
    const std::uint8_t scope = op.graph;
    out.push_back(std::move(op));
    if (!linear) continue;
    const double elements =
        static_cast<double>(shape.batch) * static_cast<double>(shape.m) * static_cast<double>(shape.n);
    Op accumulate = accumulation(name, elements, c, static_cast<std::int32_t>(shape.batch));
    accumulate.graph = scope;
    out.push_back(std::move(accumulate));
  }
  ops = std::move(out);
}

}  // namespace

std::vector<Op> layer_backward(const ModelSpec& model, const LayerConfig& c, LayerBlock block) {
  std::vector<Op> ops = layer_backward_ops(model, c, block);
  accumulate_weight_grads(ops, c);
  return ops;
}

std::int64_t ring_attention_kv_bytes(const ModelSpec& m, const LayerConfig& c) {
  const Dims x = dims(m, c);
  // Multi-head latent attention: K of the query-key head dim (nope + rope), V of the value head dim.
  if (x.mla) return to_bytes(x.tokens * x.heads * (x.qk + x.v) * x.d);
  return to_bytes(2 * x.tokens * x.kv * x.d);
}

std::int64_t attention_q_bytes(const ModelSpec& m, const LayerConfig& c) {
  const Dims x = dims(m, c);
  return to_bytes(x.tokens * x.q * x.d);
}

std::int64_t layer_input_bytes(const ModelSpec& m, const LayerConfig& c) {
  const Dims x = dims(m, c);
  return to_bytes(act(x.region, x.hc * x.h, x.d));  // hyper-connections: every residual stream
}

std::vector<Op> embedding_forward(const ModelSpec& m, const LayerConfig& c) {
  const Dims x = dims(m, c);
  const double full = act(x.tokens, x.h, x.d);
  const double region_act = act(x.region, x.h, x.d);
  std::vector<Op> ops;
  // Vocab-parallel lookup: every rank writes a full b·s·h tensor (zeros for tokens outside its
  // vocabulary shard). GPT (gelu) models also read and add the learned position embedding.
  const bool positions = !x.rms;
  ops.push_back(memory("embedding_lookup", full * (positions ? 3 : 2), 0, positions ? 2 : 1));
  if (c.tp > 1) {
    ops.push_back(x.sp ? comm("embedding_reduce_scatter", Comm::reduce_scatter, full)
                       : comm("embedding_all_reduce", Comm::all_reduce, full));
  }
  if (x.drop) {
    const double mask = x.region * x.h;
    ops.push_back(memory("embedding_dropout", 2 * region_act + mask, mask));
  }
  return ops;
}

std::vector<Op> embedding_backward(const ModelSpec& m, const LayerConfig& c) {
  const Dims x = dims(m, c);
  const double full = act(x.tokens, x.h, x.d);
  const double region_act = act(x.region, x.h, x.d);
  std::vector<Op> ops;
  if (x.drop) ops.push_back(memory("embedding_dropout_backward", 2 * region_act + x.region * x.h));
  if (c.frozen_weights) return ops;  // a frozen embedding takes no gradient
  if (c.tp > 1 && x.sp) ops.push_back(comm("embedding_grad_all_gather", Comm::all_gather, full));
  // VocabParallelEmbedding's F.embedding: its backward (ATen's embedding_dense_backward) builds a
  // dense bf16 gradient of the rank's whole table, zeroed, then the token rows summed into it
  // (read grad, read and write the touched rows), which is then accumulated: Megatron's DDP hook
  // adds it to main_grad (the embedding has no fused gradient accumulation), DeepSpeed as its other
  // gradients (LayerConfig::grad_accumulation). The dense table lives until the accumulation.
  const double table = static_cast<double>(embedding_params_per_rank(m, c.tp));
  for (Op op : {memory("embedding_grad_zero", table * x.d), memory("embedding_grad", 3 * full),
                accumulation("embedding_grad", table, c)}) {
    op.weight_grad = true;
    op.workspace_bytes = std::max(op.workspace_bytes, to_bytes(table * x.d));
    ops.push_back(op);
  }
  ops[ops.size() - 2].grad_output_bytes = to_bytes(full);  // the scatter reads the output gradient
  return ops;
}

std::vector<Op> head_forward(const ModelSpec& m, const LayerConfig& c) {
  const Dims x = dims(m, c);
  const bool tp = c.tp > 1;
  const double full = act(x.tokens, x.h, x.d);
  const double region_act = act(x.region, x.h, x.d);
  const double vocab = static_cast<double>((m.vocab + c.tp - 1) / c.tp);
  const double logits = x.tokens * vocab;  // elements of this rank's logit shard
  const double stats = x.tokens * 4;       // one fp32 value per token
  std::vector<Op> ops;
  ops.push_back(memory(x.rms ? "final_rmsnorm" : "final_layernorm", 2 * region_act, region_act));
  if (tp && x.sp) ops.push_back(comm("output_input_all_gather", Comm::all_gather, full));
  ops.push_back(gemm("output_layer", x.tokens, vocab, x.h, x.d, c.frozen_weights ? 0 : region_act));
  // Gemma 2's final soft-cap (Megatron-Bridge's Gemma2OutputLayer): div, tanh, mul over the logits,
  // tanh's output kept; the loss then keeps the capped logits as it kept the raw ones.
  if (m.logit_softcap > 0) ops.push_back(memory("output_logit_softcap", 6 * logits * x.d, logits * x.d, 3));
  if (c.fused_cross_entropy) {
    // One kernel reads each bf16 logit once (2 B) and writes one fp32 statistic per token; the
    // logits stay saved for the backward. Under TP the same three per-token all-reduces.
    ops.push_back(memory("cross_entropy_fused", logits * x.d + stats, logits * x.d));
    if (tp) {
      ops.push_back(comm("cross_entropy_max_all_reduce", Comm::all_reduce, stats));
      ops.push_back(comm("cross_entropy_target_all_reduce", Comm::all_reduce, stats));
      ops.push_back(comm("cross_entropy_sum_all_reduce", Comm::all_reduce, stats));
    }
    ops.push_back(memory("cross_entropy_loss", 3 * stats));
    return ops;
  }
  // Megatron's unfused vocab-parallel cross-entropy (core/tensor_parallel/cross_entropy.py, with
  // GPTModel's [b, s] transpose of the logits), bytes per logit element: transpose copy 2+2, cast to
  // fp32 2+4, max 4, subtract max in place 4+4, exp in place 4+4, sum 4, divide by the sum in place
  // 4+4 = 42; the fp32 softmax (4 B) is kept for backward. Three all-reduces of one fp32 per token
  // (max, target logit, sum of exponentials) under TP.
  ops.push_back(memory("logits_transpose", logits * 2 * x.d));
  ops.push_back(memory("cross_entropy_max", logits * (x.d + 4 + 4), 0, 2));
  if (tp) ops.push_back(comm("cross_entropy_max_all_reduce", Comm::all_reduce, stats));
  ops.push_back(memory("cross_entropy_softmax", logits * (8 + 8 + 4 + 8), logits * 4, 4));
  if (tp) {
    ops.push_back(comm("cross_entropy_target_all_reduce", Comm::all_reduce, stats));
    ops.push_back(comm("cross_entropy_sum_all_reduce", Comm::all_reduce, stats));
  }
  ops.push_back(memory("cross_entropy_loss", 3 * stats));
  return ops;
}

std::vector<Op> head_backward(const ModelSpec& m, const LayerConfig& c) {
  const Dims x = dims(m, c);
  const bool tp = c.tp > 1;
  const double full = act(x.tokens, x.h, x.d);
  const double region_act = act(x.region, x.h, x.d);
  const double vocab = static_cast<double>((m.vocab + c.tp - 1) / c.tp);
  const double logits = x.tokens * vocab;
  std::vector<Op> ops;
  // The saved fp32 softmax becomes the gradient in place (one-hot subtract, scale by the loss grad:
  // 4+4), then autograd casts it to bf16 (4+2) and undoes the transpose (2+2): 18 bytes per logit.
  if (c.fused_cross_entropy)  // read the saved bf16 logit, write its gradient in place: 2 + 2 B
    ops.push_back(memory("cross_entropy_backward", logits * 2 * x.d));
  else
    ops.push_back(memory("cross_entropy_backward", logits * (8 + 4 + 3 * x.d), 0, 3));
  if (m.logit_softcap > 0) ops.push_back(memory("output_logit_softcap_backward", 7 * logits * x.d, 0, 3));
  if (tp && x.sp) ops.push_back(comm("output_input_all_gather", Comm::all_gather, full));
  ops.push_back(gemm("output_layer_dgrad", x.tokens, x.h, vocab, x.d));
  if (tp) {
    ops.push_back(x.sp ? comm("output_input_grad_reduce_scatter", Comm::reduce_scatter, full)
                       : comm("output_input_grad_all_reduce", Comm::all_reduce, full));
  }
  // dW[vocab x h] = dY^T X: here dY is the bf16 logits gradient, tokens x vocab.
  Op out_wgrad = wgrad("output_layer_wgrad", vocab, x.h, x.tokens, x.d, region_act);
  out_wgrad.grad_output_bytes = to_bytes(logits * x.d);
  if (!c.frozen_weights) ops.push_back(out_wgrad);
  ops.push_back(memory(x.rms ? "final_rmsnorm_backward" : "final_layernorm_backward", 3 * region_act));
  accumulate_weight_grads(ops, c);
  return ops;
}

// Megatron-Core's MultiTokenPredictionLayer: the shifted tokens' embedding (as the first stage's),
// enorm on it and hnorm on the previous depth's hidden state, their concatenation projected by the
// column-parallel eh_proj (2h -> h; its output all-gathered back to the hidden width under TP, and
// under SP split by sequence again). Kept for backward: the norms' inputs and the projection's
// input.
std::vector<Op> mtp_forward(const ModelSpec& m, const LayerConfig& c) {
  const Dims x = dims(m, c);
  const double full = act(x.tokens, x.h, x.d);
  const double region_act = act(x.region, x.h, x.d);
  const double gemm_in_d = saved_gemm_input_bytes(c, x.d);
  std::vector<Op> ops = embedding_forward(m, c);
  for (Op& op : ops) op.name = "mtp_" + op.name;
  ops.push_back(memory("mtp_enorm_hnorm", 4 * region_act, 2 * region_act, 2));
  if (x.sp) ops.push_back(comm("mtp_eh_proj_input_all_gather", Comm::all_gather, 2 * full));
  ops.push_back(gemm("mtp_eh_proj", x.tokens, x.h / x.t, 2 * x.h, x.d, act(x.region, 2 * x.h, gemm_in_d)));
  // Gathered back to the whole hidden width (then split by sequence again under SP, locally).
  if (x.t > 1) ops.push_back(comm("mtp_eh_proj_output_all_gather", Comm::all_gather, full));
  if (c.fp8) mark_fp8(ops, c);
  return ops;
}

std::vector<Op> mtp_backward(const ModelSpec& m, const LayerConfig& c) {
  const Dims x = dims(m, c);
  const double full = act(x.tokens, x.h, x.d);
  const double region_act = act(x.region, x.h, x.d);
  const double gemm_in_d = saved_gemm_input_bytes(c, x.d);
  std::vector<Op> ops;
  if (x.sp) ops.push_back(comm("mtp_eh_proj_output_grad_all_gather", Comm::all_gather, full));
  ops.push_back(gemm("mtp_eh_proj_dgrad", x.tokens, 2 * x.h, x.h / x.t, x.d));
  ops.push_back(wgrad("mtp_eh_proj_wgrad", x.h / x.t, 2 * x.h, x.tokens, x.d, act(x.region, 2 * x.h, gemm_in_d)));
  if (x.t > 1)
    ops.push_back(comm(x.sp ? "mtp_eh_proj_input_grad_reduce_scatter" : "mtp_eh_proj_input_grad_all_reduce",
                       x.sp ? Comm::reduce_scatter : Comm::all_reduce, 2 * full));
  ops.push_back(memory("mtp_enorm_hnorm_backward", 6 * region_act, 0, 2));
  if (c.fp8) mark_fp8(ops, c);
  accumulate_weight_grads(ops, c);
  for (Op op : embedding_backward(m, c)) {
    op.name = "mtp_" + op.name;
    ops.push_back(op);
  }
  return ops;
}

std::int64_t offloaded_bytes(const std::vector<Op>& forward, std::uint8_t modules, std::uint8_t recompute_modules,
                             bool saves_none) {
  if (saves_none) return 0;
  if (recompute_modules & kRecomputeCoreAttn) modules &= static_cast<std::uint8_t>(~kOffloadCoreAttn);
  std::int64_t n = 0;
  for (const Op& op : forward) {
    if (op.discards & recompute_modules) continue;
    const std::int64_t tail = op.offload_tail != 0 ? op.offload_tail_bytes : 0;
    if (op.offload & modules) n += op.saved_bytes - tail;
    if (op.offload_tail & modules) n += tail;
  }
  return n;
}

std::int64_t mtp_params_per_rank(const ModelSpec& m, std::int64_t tp) {
  TRAINSIM_ASSERT(tp >= 1);
  const std::int64_t norm = m.mlp == MlpKind::gelu ? 2 * m.hidden : m.hidden;
  return 3 * norm + 2 * m.hidden * m.hidden / tp;
}

// Bytes per parameter: the master weight, first and second moments each read and written, the
// gradient read, the 16-bit weight written (also read, when it holds half of the master weight):
// 8 + 8 + 8 + 4 + 2 = 30 with Megatron's default fp32 states. The gradient-norm pass of
// clip_grad_norm reads the gradients once more (4 with fp32 gradients).
Op optimizer_step(std::int64_t params, const AdamStates& states, std::int64_t norm_params) {
  if (norm_params < 0) norm_params = params;
  const std::int64_t weight_io = states.remainders ? 2 + 2 : 2;
  const std::int64_t adam = 2 * states.state_bytes() + states.grad + weight_io;
  return memory("adam_step",
                static_cast<double>(adam) * static_cast<double>(params) +
                    static_cast<double>(states.grad) * static_cast<double>(norm_params),
                0, 2);
}

Op zero_grad_buffer(std::int64_t params, std::int64_t bytes_per_param) {
  // Megatron zeroes the gradient buffer (main_grad, in its grad_dtype) at the start of every step.
  return memory("zero_grad_buffer", static_cast<double>(bytes_per_param) * static_cast<double>(params));
}

std::int64_t layer_params_per_rank(const ModelSpec& model, std::int64_t tp, LayerBlock block) {
  TRAINSIM_ASSERT(tp >= 1);
  if (block == LayerBlock::mamba) {
    // Everything but the input norm is split over TP with the heads and groups.
    TRAINSIM_ASSERT(model.mamba_heads % tp == 0 && model.mamba_groups % tp == 0);
    const std::int64_t norm = model.hidden;
    return (model.params_per_block(LayerBlock::mamba) - norm) / tp + norm;
  }
  const ModelSpec m = block == LayerBlock::mlp ? model.dense_variant() : model;
  const bool with_attention = block == LayerBlock::transformer || block == LayerBlock::attention;
  const bool with_mlp = block != LayerBlock::attention;
  TRAINSIM_ASSERT(m.heads % tp == 0 && m.kv_heads % tp == 0 && m.ffn_hidden % tp == 0 &&
                  m.shared_expert_ffn_hidden % tp == 0);
  const std::int64_t q = m.heads * m.head_dim;
  const std::int64_t kv = m.kv_heads * m.head_dim;
  const std::int64_t mats = m.mlp == MlpKind::swiglu ? 3 : 2;
  // The MLP: dense, or a mixture of experts' shared expert (TP-split) and router and latent
  // projections (replicated).
  const std::int64_t mlp_width = m.moe() ? m.shared_expert_ffn_hidden : m.ffn_hidden;
  // Attention: split over TP, except MLA's down projections and latent norms (replicated).
  std::int64_t attention = with_attention ? m.attention_params_per_layer() : 0;
  std::int64_t replicated = 0;
  if (with_attention && m.mla()) {
    replicated = m.hidden * ((m.q_lora_rank > 0 ? m.q_lora_rank : 0) + m.kv_lora_rank + m.qk_rope_head_dim) +
                 m.q_lora_rank + m.kv_lora_rank;
    attention -= replicated;
  }
  std::int64_t n = (attention + (with_mlp ? mats * m.hidden * mlp_width : 0)) / tp + replicated;
  if (with_mlp && m.moe()) n += m.hidden * m.experts + 2 * m.hidden * m.moe_latent;
  // LayerNorm weight + bias per block, or RMSNorm's weight (replicated); twice with post-norms.
  const std::int64_t norm = (m.mlp == MlpKind::gelu ? 2 * m.hidden : m.hidden) * (m.post_norms ? 2 : 1);
  n += (with_attention ? norm : 0) + (with_mlp ? norm : 0);
  if (m.biased()) {
    // Column-parallel biases split, row-parallel ones not; a router's bias (one per expert) replicated.
    if (with_attention) n += (q + 2 * kv) / tp + m.hidden;
    if (with_mlp && mlp_width > 0) n += (mats - 1) * mlp_width / tp + m.hidden;
    if (with_mlp && m.moe()) n += m.experts;
  }
  return n;
}

std::int64_t layer_expert_params_per_rank(const ModelSpec& m, std::int64_t ep, std::int64_t etp) {
  if (!m.moe()) return 0;
  TRAINSIM_ASSERT(ep >= 1 && etp >= 1 && m.experts % ep == 0 && m.moe_ffn_hidden % etp == 0);
  const std::int64_t mats = m.mlp == MlpKind::swiglu ? 3 : 2;
  std::int64_t per_expert = mats * (m.moe_latent > 0 ? m.moe_latent : m.hidden) * m.moe_ffn_hidden / etp;
  // fc1's biases (split, SwiGLU's gate and up halves), fc2's (at the width the experts work at).
  if (m.biased()) per_expert += (mats - 1) * m.moe_ffn_hidden / etp + (m.moe_latent > 0 ? m.moe_latent : m.hidden);
  return m.experts / ep * per_expert;
}

std::int64_t embedding_params_per_rank(const ModelSpec& m, std::int64_t tp) {
  TRAINSIM_ASSERT(tp >= 1);
  return (m.vocab + tp - 1) / tp * m.hidden;
}

std::int64_t head_params_per_rank(const ModelSpec& m, std::int64_t tp) {
  TRAINSIM_ASSERT(tp >= 1);
  const std::int64_t final_norm = m.mlp == MlpKind::gelu ? 2 * m.hidden : m.hidden;
  return final_norm + (m.tied_embeddings ? 0 : embedding_params_per_rank(m, tp));
}

std::int64_t lora_params_per_rank(const ModelSpec& m, const LayerConfig& c) {
  std::int64_t n = 0;
  for (const LoraSite& site : lora_sites(dims(m, c)))
    if (c.lora_targets & site.target) n += c.lora_rank * static_cast<std::int64_t>(site.in + site.out);
  return n;
}

}  // namespace trainsim::workload
