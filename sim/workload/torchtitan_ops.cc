#include "workload/torchtitan_ops.h"

#include <string>

#include "util/error.h"
#include "workload/eager_kernels.h"

// Per block, T = b·s tokens; bf16 activations A = 2Th, their fp32 copies 2A, Q = 2T·q (q = heads ·
// head_dim), K = 2T·kv, F = 2T·f, R = 4T an fp32 value per token, L the fp32 logsumexp 4·b·heads·s.
// Saved for the backward (no checkpointing):
//   eager:    each RMSNorm x.float() 2A, rsqrt's result R, the normalised bf16 A (for the weight's
//             gradient); wq/wk/wv's and w1/w3's inputs A each; the attention's rotated query, repeated
//             keys and values and output 4Q and L (wo's input is the output itself); silu's input,
//             the gate product's two inputs and w2's input 4F.
//   compiled: the block input A, both norms' outputs 2A and rstd 2R, the residual h A; the attention's
//             4Q and L; w1's and w3's outputs and the gate product (w2's input) 3F.

namespace trainsim::workload {

namespace {

using eager::gemm;
using eager::kBf16;
using eager::kernel;
using eager::kFp32;
using eager::kInt64;
using eager::to_bytes;

struct Dims {
  double b, s, sl, T;  // micro-batch, sequence, the rank's s/cp of it, its tokens b·s/cp
  double tp, Ts;       // tensor parallelism; the tokens a rank holds between the blocks' GEMMs, T/tp
  double h, n, hd;     // hidden, the rank's heads (heads/tp), head dim
  double q, kv, f;     // the rank's query, key/value and FFN widths (their 1/tp)
  double V, Vr;        // vocabulary, the rank's share of it
};

Dims dims(const ModelSpec& m, const LayerConfig& c) {
  TRAINSIM_ASSERT(c.tp == 1 || c.sequence_parallel);  // (c.fp8 unused: Float8 is TorchtitanOptions::float8)
  TRAINSIM_ASSERT(c.cp >= 1 && c.seq_len % c.cp == 0);
  TRAINSIM_ASSERT(m.mlp == MlpKind::swiglu && m.dropout == 0 && c.dtype_bytes == 2);
  TRAINSIM_ASSERT(m.head_dim % 2 == 0 && m.heads % m.kv_heads == 0 && m.kv_heads % c.tp == 0);
  Dims x{};
  x.b = static_cast<double>(c.micro_batch);
  x.s = static_cast<double>(c.seq_len);
  x.sl = x.s / static_cast<double>(c.cp);
  x.T = x.b * x.sl;
  x.tp = static_cast<double>(c.tp);
  x.Ts = x.T / x.tp;
  x.h = static_cast<double>(m.hidden);
  x.n = static_cast<double>(m.heads) / x.tp;
  x.hd = static_cast<double>(m.head_dim);
  x.q = x.n * x.hd;
  x.kv = static_cast<double>(m.kv_heads) / x.tp * x.hd;
  x.f = static_cast<double>(m.ffn_hidden) / x.tp;
  x.V = static_cast<double>(m.vocab);
  x.Vr = x.V / x.tp;
  return x;
}

// A [Ts, h] activation in bf16: the residual stream and the norms, sharded over the sequence under
// tensor parallelism.
double act(const Dims& x) {
  return x.Ts * x.h * kBf16;
}
// A whole [T, h] activation in bf16: a GEMM's gathered input, a row-parallel GEMM's partial output.
double full(const Dims& x) {
  return x.T * x.h * kBf16;
}
double lse(const Dims& x) {
  return kFp32 * x.b * x.n * x.sl;
}

// A collective over the tensor-parallel group, `bytes` the whole tensor's (ops.h's convention).
Op tp_comm(std::string name, Comm what, double bytes, double host) {
  Op op;
  op.name = std::move(name);
  op.kind = OpKind::tp_comm;
  op.comm = what;
  op.group = CommGroup::tp;
  op.comm_bytes = to_bytes(bytes);
  op.kernels = 1;
  op.host_s = host;
  return op;
}

// RMSNorm in fp32 (torchtitan's norms.py): x.float(), pow, mean, + eps, rsqrt, * rsqrt, .type_as(x),
// * weight. Saves the fp32 input, rsqrt's result and the bf16 normalised input.
void rmsnorm_forward(std::vector<Op>& ops, const std::string& p, const Dims& x, double host) {
  const double a = act(x), a32 = 2 * a, row = x.Ts * kFp32, w = x.h * kBf16;
  ops.push_back(kernel(p + "_to_fp32", a, a32, host, a32));
  ops.push_back(kernel(p + "_pow", a32, a32, host));
  ops.push_back(kernel(p + "_mean", a32, row, host));
  ops.push_back(kernel(p + "_add_eps", row, row, host));
  ops.push_back(kernel(p + "_rsqrt", row, row, host, row));
  ops.push_back(kernel(p + "_mul_rsqrt", a32 + row, a32, host));
  ops.push_back(kernel(p + "_to_bf16", a32, a, host));
  ops.push_back(kernel(p + "_mul_weight", a + w, a, host, a));
}

// Its backward, and the gradient of its input summed with the input's other uses (`uses` - 1 adds).
void rmsnorm_backward(std::vector<Op>& ops, const std::string& p, const Dims& x, double host, int uses) {
  const double a = act(x), a32 = 2 * a, row = x.Ts * kFp32, w = x.h * kBf16;
  ops.push_back(kernel(p + "_mul_weight_backward", 3 * a + w, 2 * a, host, 0, 2));
  ops.push_back(kernel(p + "_weight_grad_sum", a, w, host));
  ops.push_back(kernel(p + "_to_bf16_backward", a, a32, host));
  ops.push_back(kernel(p + "_mul_rsqrt_backward", 3 * a32 + row, 2 * a32, host, 0, 2));
  ops.push_back(kernel(p + "_rsqrt_grad_sum", a32, row, host));
  ops.push_back(kernel(p + "_rsqrt_backward", 4 * row, 3 * row, host, 0, 3));
  ops.push_back(kernel(p + "_mean_backward", row, a32, host));
  ops.push_back(kernel(p + "_pow_backward", 4 * a32, 3 * a32, host, 0, 3));
  ops.push_back(kernel(p + "_fp32_grad_accumulate", 2 * a32, a32, host));  // pow's and the product's
  ops.push_back(kernel(p + "_to_fp32_backward", a32, a, host));
  const int adds = uses - 1;
  if (adds > 0) ops.push_back(kernel(p + "_input_grad_accumulate", 2 * a * adds, a * adds, host, 0, adds));
}

// The rotary embedding of a [T, width] projection: .float(), the complex product with the
// frequencies (complex64 [s, head_dim / 2]), .type_as(); nothing saved (the frequencies are a buffer).
void rope_forward(std::vector<Op>& ops, const std::string& p, const Dims& x, double width, double host) {
  const double t = x.T * width * kBf16, freqs = x.sl * x.hd / 2 * 8;
  ops.push_back(kernel(p + "_to_fp32", t, 2 * t, host));
  ops.push_back(kernel(p + "_complex_mul", 2 * t + freqs, 2 * t, host));
  ops.push_back(kernel(p + "_to_bf16", 2 * t, t, host));
}

void rope_backward(std::vector<Op>& ops, const std::string& p, const Dims& x, double width, double host) {
  const double t = x.T * width * kBf16, freqs = x.sl * x.hd / 2 * 8;
  ops.push_back(kernel(p + "_to_bf16_backward", t, 2 * t, host));
  ops.push_back(kernel(p + "_complex_mul_backward", 2 * t + freqs, 2 * t, host));
  ops.push_back(kernel(p + "_to_fp32_backward", 2 * t, t, host));
}

// scaled_dot_product_attention's fused kernel over the full query heads (the keys and values
// repeated), causal; with context parallelism the rank's s/cp load-balanced queries against all s
// keys.
Op attention(const Dims& x, const LayerConfig& c, bool backward, double host) {
  const double qo = x.T * x.q * kBf16;
  // Context parallelism: the rank's queries against the whole sequence's keys and values (the step
  // builder gathers them, or passes them around the ring).
  Op op = eager::sdpa(x.b, x.sl, x.s, x.n, x.hd, qo, qo * x.s / x.sl, c.attention, backward, host);
  if (!backward) op.saved_bytes = to_bytes(4 * qo + lse(x));  // rotated q, repeated k and v, output, lse
  return op;
}

// Float8's forward cast of a GEMM input of `bytes` bf16 bytes: an amax reduction and a scale-and-cast
// kernel writing its e4m3 copy.
void float8_cast_input(std::vector<Op>& ops, const std::string& p, double bytes, double host) {
  ops.push_back(kernel(p + "_amax", bytes, 0, host));
  ops.push_back(kernel(p + "_to_float8", bytes, bytes / 2, host));
}

// Float8's backward casts around one linear: its output gradient's amax and its e5m2 copy in both
// layouts (go, go^T), and the transposed fp8 copies of its weight (for dgrad); the transposed fp8
// input (for wgrad) is cast once per distinct input (float8_input_transpose).
void float8_cast_grad(std::vector<Op>& ops, const std::string& p, double grad_bytes, double weight_params,
                      double host) {
  ops.push_back(kernel(p + "_grad_amax", grad_bytes, 0, host));
  ops.push_back(kernel(p + "_grad_to_float8", grad_bytes, grad_bytes, host));
  ops.push_back(kernel(p + "_weight_float8_transpose", weight_params, weight_params, host));
}

void float8_input_transpose(std::vector<Op>& ops, const std::string& p, double bytes, double host) {
  ops.push_back(kernel(p + "_float8_transpose", bytes / 2, bytes / 2, host));
}

// Builds a block's forward list, recording which ops the selective policy keeps (not run again).
struct Block {
  std::vector<Op> ops;
  std::vector<bool> kept;
  void push(Op op, bool keep = false) {
    ops.push_back(std::move(op));
    kept.push_back(keep);
  }
};

}  // namespace

Op torchtitan_copy_out(double bytes, double host_s) {
  Op op = kernel("fsdp_copy_out", bytes, bytes, host_s);
  op.skip_in_recompute = true;
  return op;
}

Op torchtitan_reduce_scatter_copy_in(double params, double grad_bytes, double reduce_bytes, double host_s) {
  // The input buffer it fills is held while the copy runs (and then by the reduce-scatter).
  return kernel("fsdp_reduce_scatter_copy_in", params * grad_bytes, params * reduce_bytes, host_s, 0, 1,
                params * reduce_bytes);
}

Op torchtitan_grad_accumulate(double params, bool first, double reduce_bytes, double host_s) {
  if (first)
    return kernel("fsdp_grad_to_reduce_dtype", reduce_bytes > kBf16 ? params * kBf16 : 0,
                  reduce_bytes > kBf16 ? params * reduce_bytes : 0, host_s, 0, reduce_bytes > kBf16 ? 1 : 0);
  return kernel("fsdp_grad_accumulate", params * (reduce_bytes + kBf16), params * reduce_bytes, host_s);
}

std::vector<Op> torchtitan_layer_forward(const ModelSpec& m, const LayerConfig& c, const TorchtitanOptions& o) {
  const Dims x = dims(m, c);
  const double hf = o.host.forward_s;
  const double a = act(x), A = full(x), Q = x.T * x.q * kBf16, K = x.T * x.kv * kBf16, F = x.T * x.f * kBf16;
  const double row = x.Ts * kFp32, w = x.h * kBf16, freqs = x.sl * x.hd / 2 * 8;
  const bool tp = x.tp > 1;
  Block b;
  // The matrix multiplies in forward order, numbered from 1: the policy keeps the odd ones' outputs.
  auto mm = [&](const char* name, double n, double k, double saved, int index) {
    Op op = gemm(name, x.T, n, k, hf, saved);
    op.fp8 = o.float8;
    b.push(op, index % 2 == 1);
  };
  // Float8: a GEMM input's e4m3 copy (cast before the all-gather under tensor parallelism), which the
  // backward keeps in place of the bf16 input unless the gathered copy is kept.
  const double f8 = o.float8 ? 1.0 : 0.0;
  auto cast = [&](const char* name, double bytes, bool kept) {
    if (!o.float8) return;
    float8_cast_input(b.ops, name, bytes, hf);
    b.ops.back().saved_bytes = kept ? to_bytes(bytes / 2) : 0;
    b.kept.resize(b.ops.size(), false);
  };
  // Sequence parallelism: the norm's output gathered to the column-parallel GEMMs (in fp8 under
  // Float8), which keep the gathered tensor; a row-parallel GEMM's partial output reduce-scattered.
  auto gather = [&](const char* name) {
    if (tp) b.push(tp_comm(name, Comm::all_gather, A * (1 - f8 / 2), hf));
  };
  // (The op policy keeps the reduce-scatters' outputs: _c10d_functional.reduce_scatter_tensor is in
  // its save list.)
  auto scatter = [&](const char* name) {
    if (tp) b.push(tp_comm(name, Comm::reduce_scatter, A, hf), true);
  };
  const double gathered_kept = tp ? A * (1 - f8 / 2) : 0;  // kept by wq (by w1) in place of the norm's
  if (o.compile) {
    // Keeps x, rstd and its output (under Float8 the output's fp8 copy; under TP the gathered copy).
    b.push(kernel("attention_norm", a + w, a + row, hf, a + row + (tp ? 0 : (1 - f8) * a)));
    cast("qkv_input", a, !tp);
    gather("qkv_input_all_gather");
    mm("wq", x.q, x.h, gathered_kept, 1);
    mm("wk", x.kv, x.h, 0, 2);
    mm("wv", x.kv, x.h, 0, 3);
    b.push(kernel("rope_q", Q + freqs, Q, hf));
    b.push(kernel("rope_k_repeat_kv", K + freqs, Q, hf));
    b.push(kernel("repeat_kv_v", K, Q, hf));
    b.push(attention(x, c, false, hf), true);
    cast("wo_input", Q, true);
    mm("wo", x.h, x.q, 0, 4);
    scatter("wo_output_reduce_scatter");
    b.push(kernel("attention_residual_add_ffn_norm", 2 * a + w, 2 * a + row, hf, a + row + (tp ? 0 : (1 - f8) * a)));
    cast("w1_w3_input", a, !tp);
    gather("w1_w3_input_all_gather");
    mm("w1", x.f, x.h, F + gathered_kept, 5);                // its output (silu's input)
    mm("w3", x.f, x.h, F, 6);                                // its output (the product's other input)
    b.push(kernel("silu_mul", 2 * F, F, hf, (1 - f8) * F));  // w2's input
    cast("w2_input", F, true);
    mm("w2", x.h, x.f, 0, 7);
    scatter("w2_output_reduce_scatter");
    b.push(kernel("ffn_residual_add", 2 * a, a, hf));
  } else {
    rmsnorm_forward(b.ops, "attention_norm", x, hf);
    b.kept.resize(b.ops.size(), false);
    gather("qkv_input_all_gather");
    mm("wq", x.q, x.h, tp ? A : a, 1);  // keeps its (gathered) input, the input of all three
    mm("wk", x.kv, x.h, 0, 2);
    mm("wv", x.kv, x.h, 0, 3);
    rope_forward(b.ops, "rope_q", x, x.q, hf);
    rope_forward(b.ops, "rope_k", x, x.kv, hf);
    b.kept.resize(b.ops.size(), false);
    b.push(kernel("repeat_kv_k", K, Q, hf));
    b.push(kernel("repeat_kv_v", K, Q, hf));
    b.push(attention(x, c, false, hf), true);
    mm("wo", x.h, x.q, 0, 4);  // its input is the attention's output, kept already
    scatter("wo_output_reduce_scatter");
    b.push(kernel("attention_residual_add", 2 * a, a, hf));
    rmsnorm_forward(b.ops, "ffn_norm", x, hf);
    b.kept.resize(b.ops.size(), false);
    gather("w1_w3_input_all_gather");
    mm("w1", x.f, x.h, tp ? A : a, 5);
    mm("w3", x.f, x.h, 0, 6);
    b.push(kernel("silu", F, F, hf, F));              // keeps its input, w1's output
    b.push(kernel("silu_mul", 2 * F, F, hf, 2 * F));  // keeps silu's output and w3's
    mm("w2", x.h, x.f, F, 7);                         // keeps the product
    scatter("w2_output_reduce_scatter");
    b.push(kernel("ffn_residual_add", 2 * a, a, hf));
  }
  std::vector<Op> ops;
  if (o.sac) {
    // What autograd saves is dropped and saved again by the recompute; what the policy keeps is held
    // by the last op: the block's input and the kept outputs (wq, wv, w1, w2's partial output, the
    // attention's output and logsumexp, the reduce-scatters'). The recompute runs the all-gathers
    // again.
    for (std::size_t i = 0; i < b.ops.size(); ++i) {
      b.ops[i].discards |= kRecomputeTorchtitanOp;
      if (!b.kept[i]) b.ops[i].rerun |= kRecomputeTorchtitanOp;
    }
    Op kept = kernel("sac_kept_outputs", 0, 0, 0, a + A + 2 * Q + K + F + lse(x) + (tp ? 2 * a : 0), 0);
    b.ops.push_back(kept);
  }
  ops.insert(ops.end(), b.ops.begin(), b.ops.end());
  return ops;
}

std::vector<Op> torchtitan_layer_backward(const ModelSpec& m, const LayerConfig& c, const TorchtitanOptions& o) {
  const Dims x = dims(m, c);
  const double hb = o.host.backward_s;
  const double a = act(x), A = full(x), Q = x.T * x.q * kBf16, K = x.T * x.kv * kBf16, F = x.T * x.f * kBf16;
  const double row = x.Ts * kFp32, w = x.h * kBf16, freqs = x.sl * x.hd / 2 * 8;
  const bool tp = x.tp > 1;
  std::vector<Op> ops;
  auto linear = [&](const std::string& name, double n, double k) {
    if (o.float8) float8_cast_grad(ops, name, x.T * n * kBf16, n * k, hb);
    ops.push_back(gemm(name + "_dgrad", x.T, k, n, hb));
    ops.push_back(gemm(name + "_wgrad", n, k, x.T, hb));
    ops.back().fp8 = ops[ops.size() - 2].fp8 = o.float8;
  };
  auto input_transpose = [&](const char* name, double bytes) {
    if (o.float8) float8_input_transpose(ops, name, bytes, hb);
  };
  // The backward of the reduce-scatter after a row-parallel GEMM, and of the all-gather before the
  // column-parallel ones (their input gradients summed first).
  auto gather = [&](const char* name) {
    if (tp) ops.push_back(tp_comm(name, Comm::all_gather, A, hb));
  };
  auto scatter = [&](const char* name, int grads) {
    if (!tp) return;
    ops.push_back(kernel(std::string(name) + "_sum", grads * A, A, hb, 0, grads - 1));
    ops.push_back(tp_comm(std::string(name) + "_reduce_scatter", Comm::reduce_scatter, A, hb));
  };
  gather("w2_output_grad_all_gather");
  input_transpose("w2_input", F);
  linear("w2", x.h, x.f);
  if (o.compile) {
    ops.push_back(kernel("silu_mul_backward", 3 * F, 2 * F, hb));
  } else {
    ops.push_back(kernel("silu_mul_backward", 4 * F, 2 * F, hb, 0, 2));
    ops.push_back(kernel("silu_backward", 2 * F, F, hb));
  }
  input_transpose("w1_w3_input", tp ? A : a);
  linear("w3", x.f, x.h);
  linear("w1", x.f, x.h);
  scatter("ffn_input_grad", 2);
  if (o.compile) {
    // The input gradients (summed before the reduce-scatter under TP) with the residual's, the
    // norm's backward, its weight's gradient.
    ops.push_back(kernel("ffn_norm_backward", (tp ? 3 : 5) * a + row, a + w, hb, 0, 2));
  } else {
    if (!tp) ops.push_back(kernel("ffn_norm_input_grad_sum", 2 * a, a, hb));
    rmsnorm_backward(ops, "ffn_norm", x, hb, 2);
  }
  gather("wo_output_grad_all_gather");
  input_transpose("wo_input", Q);
  linear("wo", x.h, x.q);
  ops.push_back(attention(x, c, true, hb));
  if (o.compile) {
    ops.push_back(kernel("rope_q_backward", Q + freqs, Q, hb));
    ops.push_back(kernel("rope_k_repeat_kv_backward", Q + freqs, K, hb));
    ops.push_back(kernel("repeat_kv_v_backward", Q, K, hb));
  } else {
    ops.push_back(kernel("repeat_kv_k_backward", Q, K, hb));
    ops.push_back(kernel("repeat_kv_v_backward", Q, K, hb));
    rope_backward(ops, "rope_q", x, x.q, hb);
    rope_backward(ops, "rope_k", x, x.kv, hb);
  }
  input_transpose("qkv_input", tp ? A : a);
  linear("wv", x.kv, x.h);
  linear("wk", x.kv, x.h);
  linear("wq", x.q, x.h);
  scatter("qkv_input_grad", 3);
  if (o.compile) {
    ops.push_back(kernel("attention_norm_backward", (tp ? 3 : 6) * a + row, a + w, hb, 0, 2));
  } else {
    if (!tp) ops.push_back(kernel("attention_norm_input_grad_sum", 4 * a, 2 * a, hb, 0, 2));
    rmsnorm_backward(ops, "attention_norm", x, hb, 2);
  }
  return ops;
}

// Under tensor parallelism the embedding is vocabulary-parallel (each rank looks up the tokens of
// its vocabulary shard; the partial rows reduce-scattered to the sequence shards) and the output
// layer column-parallel over the vocabulary, its input gathered, the loss computed over the sharded
// logits (torchtitan's loss_parallel: the row maxima, the exponentials' sums and the target logits
// all-reduced, [T] fp32 each).
std::vector<Op> torchtitan_embedding_forward(const ModelSpec& m, const LayerConfig& c, const TorchtitanOptions& o) {
  const Dims x = dims(m, c);
  std::vector<Op> ops{kernel("embedding", x.T * kInt64 + full(x), full(x), o.host.forward_s)};
  if (x.tp > 1)
    ops.push_back(tp_comm("embedding_output_reduce_scatter", Comm::reduce_scatter, full(x), o.host.forward_s));
  return ops;
}

std::vector<Op> torchtitan_embedding_backward(const ModelSpec& m, const LayerConfig& c, const TorchtitanOptions& o) {
  const Dims x = dims(m, c);
  const double table = x.Vr * x.h * kBf16;
  const double sort = 2 * 2 * 16 * x.T;          // two passes over (id, position) pairs, read + write
  const double partial = 2 * x.T * x.h * kFp32;  // fp32 segment sums, written and read
  std::vector<Op> ops;
  if (x.tp > 1)
    ops.push_back(tp_comm("embedding_output_grad_all_gather", Comm::all_gather, full(x), o.host.backward_s));
  ops.push_back(kernel("embedding_dense_backward", full(x) + sort + partial, table + full(x), o.host.backward_s, 0,
                       eager::kEmbeddingBackwardKernels, table + x.T * x.h * kFp32));
  return ops;
}

std::vector<Op> torchtitan_head_forward(const ModelSpec& m, const LayerConfig& c, const TorchtitanOptions& o) {
  const Dims x = dims(m, c);
  const double hf = o.host.forward_s;
  const double l16 = x.T * x.Vr * kBf16, l32 = x.T * x.Vr * kFp32;
  const bool tp = x.tp > 1;
  std::vector<Op> ops;
  rmsnorm_forward(ops, "final_norm", x, hf);
  if (tp) ops.push_back(tp_comm("output_input_all_gather", Comm::all_gather, full(x), hf));
  ops.push_back(gemm("output", x.T, x.Vr, x.h, hf, full(x), l16));  // keeps its (gathered) input
  const double rows = x.T * kFp32;
  if (o.compile_loss) {
    // Inductor's cross-entropy: the row maxima, then the sums of exponentials and the target logits
    // (one kernel reading the logits twice; under loss parallelism split by the all-reduces); the
    // bf16 logits and the fp32 logsumexp kept for the backward.
    if (tp) {
      ops.push_back(kernel("cross_entropy_row_max", l16, rows, hf));
      ops.push_back(tp_comm("loss_parallel_max_all_reduce", Comm::all_reduce, rows, hf));
      ops.push_back(kernel("cross_entropy_sum_exp_target", l16 + x.T * kInt64, 2 * rows, hf, l16 + rows));
      ops.push_back(tp_comm("loss_parallel_sum_all_reduce", Comm::all_reduce, rows, hf));
      ops.push_back(tp_comm("loss_parallel_target_all_reduce", Comm::all_reduce, rows, hf));
    } else {
      ops.push_back(kernel("cross_entropy_fused", 2 * l16 + x.T * kInt64, 2 * rows, hf, l16 + rows));
    }
    return ops;
  }
  // cross_entropy(pred.flatten(0, 1).float(), labels): the fp32 copy, log_softmax (keeps its output),
  // nll_loss; the bf16 logits die with the copy.
  ops.push_back(kernel("logits_to_fp32", l16, l32, hf, 0, 1, l16 + l32));
  if (tp) ops.push_back(tp_comm("loss_parallel_max_all_reduce", Comm::all_reduce, x.T * kFp32, hf));
  ops.push_back(kernel("log_softmax", l32, l32, hf, l32, 1, l32));
  if (tp) ops.push_back(tp_comm("loss_parallel_sum_all_reduce", Comm::all_reduce, x.T * kFp32, hf));
  ops.push_back(kernel("nll_loss", x.T * (kInt64 + kFp32), 2 * kFp32, hf));
  if (tp) ops.push_back(tp_comm("loss_parallel_target_all_reduce", Comm::all_reduce, x.T * kFp32, hf));
  return ops;
}

std::vector<Op> torchtitan_head_backward(const ModelSpec& m, const LayerConfig& c, const TorchtitanOptions& o) {
  const Dims x = dims(m, c);
  const double hb = o.host.backward_s;
  const double l16 = x.T * x.Vr * kBf16, l32 = x.T * x.Vr * kFp32;
  std::vector<Op> ops;
  ops.push_back(kernel("loss_grad_fill", 0, kFp32, hb));
  if (o.compile_loss) {
    // The gradient of the logits from the kept logits and logsumexp: softmax - one-hot, in bf16.
    ops.push_back(kernel("cross_entropy_fused_backward", l16 + x.T * (kFp32 + kInt64), l16, hb, 0, 1, 2 * l16));
  } else {
    ops.push_back(kernel("nll_loss_backward", x.T * (kInt64 + kFp32), l32, hb, 0, 2, l32));
    ops.push_back(kernel("log_softmax_backward", 2 * l32, l32, hb, 0, 1, 2 * l32));
    ops.push_back(kernel("logits_grad_to_bf16", l32, l16, hb, 0, 1, l32 + l16));
  }
  ops.push_back(gemm("output_dgrad", x.T, x.h, x.Vr, hb, 0, l16));
  if (x.tp > 1) ops.push_back(tp_comm("output_input_grad_reduce_scatter", Comm::reduce_scatter, full(x), hb));
  ops.push_back(gemm("output_wgrad", x.Vr, x.h, x.T, hb, 0, l16 + x.Vr * x.h * kBf16));
  rmsnorm_backward(ops, "final_norm", x, hb, 1);
  return ops;
}

std::int64_t torchtitan_cp_kv_bytes(const ModelSpec& m, const LayerConfig& c) {
  const Dims x = dims(m, c);
  return to_bytes(2 * x.T * x.q * kBf16);
}

TorchtitanCpKernels torchtitan_cp_kernels(const ModelSpec& m, const LayerConfig& c, const EagerHost& host) {
  const Dims x = dims(m, c);
  const double hf = host.forward_s, hb = host.backward_s;
  const double o = x.T * x.q * kBf16, o32 = 2 * o, l = lse(x);
  TorchtitanCpKernels k;
  k.kv_cat = kernel("cp_kv_cat", 2 * o, 2 * o, hf, 0, 1, 2 * o);
  // The accumulated fp32 output is held through the steps (the workspace of each merge).
  k.first_merge = kernel("cp_merge_out_to_fp32", o, o32, hf, 0, 1, o32);
  k.merge = kernel("cp_merge", o + 5 * o32 + 9 * l, 4 * o32 + 5 * l, hf, 0, 9, 3 * o32);
  k.out_to_bf16 = kernel("cp_merged_out_to_bf16", o32, o, hf);
  // Backward: the three fp32 accumulators, the buffer sent on and the one received held through it.
  const double held = 3 * o32 + 4 * o32;
  k.grad_zeros = kernel("cp_grad_zeros", 0, 3 * o32, hb, 0, 3, held);
  k.first_grad_kv_accumulate = kernel("cp_grad_kv_accumulate", 2 * (o32 + o), 2 * o32, hb, 0, 2, held);
  // _partial_update of dK and of dV: the first half += the step's, then the halves concatenated.
  k.grad_kv_accumulate =
      kernel("cp_grad_kv_partial_update", 2 * (o32 / 2 + o / 2 + o32), 2 * (o32 / 2 + o32), hb, 0, 4, held);
  k.grad_kv_cat = kernel("cp_grad_kv_cat", 2 * o32, 2 * o32, hb, 0, 1, held);
  k.grad_q_accumulate = kernel("cp_grad_q_accumulate", o32 + o, o32, hb, 0, 1, held);
  k.grad_to_bf16 = kernel("cp_grad_to_bf16", 3 * o32, 3 * o, hb, 0, 2, held);
  k.grad_kv_bytes = to_bytes(2 * o32);
  return k;
}

std::int64_t torchtitan_block_linear_params(const ModelSpec& m, std::int64_t tp) {
  const std::int64_t h = m.hidden, q = m.heads * m.head_dim, kv = m.kv_heads * m.head_dim;
  return (h * (q + 2 * kv) + q * h + 3 * m.ffn_hidden * h) / tp;
}

std::int64_t torchtitan_block_gather_bytes(const ModelSpec& m, std::int64_t tp, bool float8) {
  return torchtitan_block_linear_params(m, tp) * (float8 ? 1 : 2) + 2 * m.hidden * 2;
}

Op torchtitan_optimizer_step(const ModelSpec& m, std::int64_t dp, std::int64_t tp, const EagerHost& host, bool float8) {
  TRAINSIM_ASSERT(dp >= 1 && tp >= 1);
  const std::int64_t h = m.hidden, q = m.heads * m.head_dim / tp, kv = m.kv_heads * m.head_dim / tp;
  const std::int64_t f = m.ffn_hidden / tp, v = m.vocab / tp;
  // model.parameters(): tok_embeddings, each block's wq, wk, wv, wo, w1, w2, w3 and two norms, norm,
  // output, each the rank's tensor-parallel shard (the norms whole); FSDP2 shards each along its
  // first dimension.
  std::vector<std::int64_t> full{v * h};
  for (std::int64_t l = 0; l < m.layers; ++l)
    for (std::int64_t n : {q * h, kv * h, kv * h, h * q, f * h, h * f, f * h, h, h}) full.push_back(n);
  full.push_back(h);
  full.push_back(v * h);
  std::vector<std::int64_t> shards;
  double params = 0;
  for (std::int64_t n : full) {
    shards.push_back((n + dp - 1) / dp);
    params += static_cast<double>(shards.back());
  }
  const std::vector<std::int64_t> counters(shards.size(), 1);
  // clip_grad_norm_: _foreach_norm (depth 1), _foreach_mul_ (depth 1); AdamW: the step counters'
  // _foreach_add_, then _fused_adamw_ over (param, grad, exp_avg, exp_avg_sq).
  const std::int64_t launches = 2 * multi_tensor_apply_launches(shards, 1) + multi_tensor_apply_launches(counters, 1) +
                                multi_tensor_apply_launches(shards, 4);
  const double steps = static_cast<double>(shards.size()) * kFp32;
  // Float8 with FSDP float8 all-gather: precompute_float8_dynamic_scale_for_fsdp reads the blocks'
  // linear weights once more (their amaxes; the all-reduce of the scales taken as latency only).
  const double linear_shard =
      float8 ? static_cast<double>(m.layers * torchtitan_block_linear_params(m, tp)) / static_cast<double>(dp) : 0;
  const double read = params * (kFp32 + kFp32 + 4 * kFp32) + 2 * steps + linear_shard * kFp32;
  const double write = params * (kFp32 + 3 * kFp32) + steps;
  Op op = kernel("clip_grad_norm_adamw_step", read, write, host.forward_s, 0, static_cast<std::int32_t>(launches));
  op.host_s += eager::kAdamInitPerTensor_s * static_cast<double>(shards.size());
  return op;
}

}  // namespace trainsim::workload
