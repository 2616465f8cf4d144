#include "workload/eager_ops.h"

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "util/error.h"
#include "workload/eager_kernels.h"

// The model (tools/device/torch_steps.py), per layer, x the residual stream [b, s, h] in bf16:
//   rmsnorm(x)  = x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w        6 kernels
//   qkv         = linear(rmsnorm(x), Wqkv); q, k, v = split(qkv)               views
//   rope(t)     = t * cos + cat(-t2, t1) * sin  (t1, t2 the halves of t)        5 kernels each
//   a           = sdpa(rope(q), rope(k), v, is_causal=True[, enable_gqa=True])  1 fused kernel
//   h           = x + linear(a, Wo)
//   g, u        = chunk(linear(rmsnorm(h), Wgate_up), 2); out = h + linear(silu(g) * u, Wdown)
// and the head: logits = linear(rmsnorm(x), Wout); loss = cross_entropy(logits.float(), targets).
//
// Saved per layer (T = b·s tokens; bf16 2 bytes; W = q + 2kv the QKV width):
//   each rmsnorm: its input (pow, and the mul x·r) 2Th, rsqrt's result 2T, x·r (for dw) 2Th
//   the QKV and gate/up GEMMs: their input, the norm output, 2Th each
//   attention: rotated q 2Tq and k 2Tkv, v (a view: the whole qkv tensor 2TW stays), the output
//              2Tq (also the o-projection's input), the fp32 logsumexp 4·b·heads·s
//   MLP: silu's input g (a chunk view: the whole gate/up output 4Tf), silu(g) 2Tf, silu(g)·u 2Tf
//   = 2·(4Th + 2T) + 4Th + 2T(2q + kv + W) + 4·b·heads·s + 8Tf
// RoPE saves nothing new (cos and sin are constants), nor do the residual adds.

namespace trainsim::workload {

namespace {

using eager::gemm;
using eager::kAdamInitPerTensor_s;
using eager::kBf16;
using eager::kEmbeddingBackwardKernels;
using eager::kernel;
using eager::kFp32;
using eager::kInt64;
using eager::kZeroGradPerTensor_s;
using eager::to_bytes;

struct Dims {
  double b, s, T;   // micro-batch, sequence, tokens
  double h, n, hd;  // hidden, heads, head dim
  double q, kv, W;  // query width, key/value width, fused QKV width
  double f, V;      // FFN hidden, vocabulary
};

Dims dims(const ModelSpec& m, const LayerConfig& c) {
  TRAINSIM_ASSERT(c.tp == 1 && c.cp == 1 && !c.sequence_parallel && !c.fp8);
  TRAINSIM_ASSERT(m.mlp == MlpKind::swiglu && m.dropout == 0 && c.dtype_bytes == 2);
  TRAINSIM_ASSERT(m.head_dim % 2 == 0);
  Dims x{};
  x.b = static_cast<double>(c.micro_batch);
  x.s = static_cast<double>(c.seq_len);
  x.T = x.b * x.s;
  x.h = static_cast<double>(m.hidden);
  x.n = static_cast<double>(m.heads);
  x.hd = static_cast<double>(m.head_dim);
  x.q = x.n * x.hd;
  x.kv = static_cast<double>(m.kv_heads) * x.hd;
  x.W = x.q + 2 * x.kv;
  x.f = static_cast<double>(m.ffn_hidden);
  x.V = static_cast<double>(m.vocab);
  return x;
}

// AccumulateGrad into an existing bf16 gradient of `params` elements: grad += new (read 2, write 1).
Op accumulate(const std::string& name, double params, double host) {
  return kernel(name + "_grad_accumulate", 2 * params * kBf16, params * kBf16, host);
}

// x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w on [T, h].
void rmsnorm_forward(std::vector<Op>& ops, const std::string& p, const Dims& x, double host) {
  const double act = x.T * x.h * kBf16, row = x.T * kBf16;
  ops.push_back(kernel(p + "_pow", act, act, host, act));  // saves its input x
  ops.push_back(kernel(p + "_mean", act, row, host));
  ops.push_back(kernel(p + "_add_eps", row, row, host));
  ops.push_back(kernel(p + "_rsqrt", row, row, host, row));                     // saves its result r
  ops.push_back(kernel(p + "_mul_rsqrt", act + row, act, host));                // x and r, saved already
  ops.push_back(kernel(p + "_mul_weight", act + x.h * kBf16, act, host, act));  // saves y = x·r for dw
}

// The backward of rmsnorm_forward; the norm's input x has `uses` consumers (the norm's pow and mul,
// and a residual add when there is one), whose gradients autograd adds up: uses - 1 adds.
void rmsnorm_backward(std::vector<Op>& ops, const std::string& p, const Dims& x, double host, int uses) {
  const double act = x.T * x.h * kBf16, row = x.T * kBf16, w = x.h * kBf16;
  // MulBackward0 of y·w: grad·w and grad·y, then the broadcast sum of the latter to [h].
  ops.push_back(kernel(p + "_mul_weight_backward", 3 * act + w, 2 * act, host, 0, 2));
  ops.push_back(kernel(p + "_weight_grad_sum", act, w, host));
  ops.push_back(kernel(p + "_weight_grad_accumulate", 2 * w, w, host));
  // MulBackward0 of x·r: grad·r and grad·x, then the sum of the latter to [T, 1].
  ops.push_back(kernel(p + "_mul_rsqrt_backward", 3 * act + row, 2 * act, host, 0, 2));
  ops.push_back(kernel(p + "_rsqrt_grad_sum", act, row, host));
  // RsqrtBackward0: -0.5 * grad * r.pow(3), three kernels on [T, 1]; the eps add passes through.
  ops.push_back(kernel(p + "_rsqrt_backward", 4 * row, 3 * row, host, 0, 3));
  // MeanBackward1: grad expanded to [T, h], divided by h.
  ops.push_back(kernel(p + "_mean_backward", row, act, host));
  // PowBackward0: grad * (2 * x.pow(1)): a copy (pow with exponent 1), a scale and a product.
  ops.push_back(kernel(p + "_pow_backward", 4 * act, 3 * act, host, 0, 3));
  const int adds = uses - 1;
  ops.push_back(kernel(p + "_input_grad_accumulate", 2 * act * adds, act * adds, host, 0, adds));
}

// t * cos + cat(-t2, t1) * sin on [T, width] (cos and sin [s, head_dim], read once each).
void rope_forward(std::vector<Op>& ops, const std::string& p, const Dims& x, double width, double host) {
  const double t = x.T * width * kBf16, cs = x.s * x.hd * kBf16;
  ops.push_back(kernel(p + "_neg", t / 2, t / 2, host));
  ops.push_back(kernel(p + "_cat", t, t, host));
  ops.push_back(kernel(p + "_mul_cos", t + cs, t, host));  // saves cos only: t is not needed for it
  ops.push_back(kernel(p + "_mul_sin", t + cs, t, host));
  ops.push_back(kernel(p + "_add", 2 * t, t, host));
}

void rope_backward(std::vector<Op>& ops, const std::string& p, const Dims& x, double width, double host) {
  const double t = x.T * width * kBf16, cs = x.s * x.hd * kBf16;
  ops.push_back(kernel(p + "_mul_sin_backward", t + cs, t, host));
  ops.push_back(kernel(p + "_mul_cos_backward", t + cs, t, host));
  ops.push_back(kernel(p + "_neg_backward", t / 2, t / 2, host));  // cat's backward is two views
  // SliceBackward0 of each half: zeros of the whole [T, width], then the half copied in.
  ops.push_back(kernel(p + "_slice_backward", t, 3 * t, host, 0, 4));
  // t has three consumers (the cos product and the two slices): two adds.
  ops.push_back(kernel(p + "_grad_accumulate", 4 * t, 2 * t, host, 0, 2));
}

Op attention(const Dims& x, const LayerConfig& c, bool backward, double host) {
  const double qo = x.T * x.q * kBf16, kv = x.T * x.kv * kBf16, lse = kFp32 * x.b * x.n * x.s;
  Op op = eager::sdpa(x.b, x.s, x.s, x.n, x.hd, qo, kv, c.attention, backward, host);
  // Saved: rotated q and k, v (a view keeping the whole qkv output), the output and the logsumexp.
  if (!backward) op.saved_bytes = to_bytes(2 * qo + kv + x.T * x.W * kBf16 + lse);
  // Grouped-query attention (enable_gqa) under the FlashAttention-2 backend: its backward writes dK
  // and dV for every query head (PyTorch's copy of flash-attn's mha_bwd allocates them expanded) and
  // sums them over each group afterwards (gqa_dkv_sum below); cuDNN's reduces them itself.
  if (backward && x.kv < x.q && c.attention == AttentionImpl::flash2) {
    op.bytes += 2 * (qo - kv);
    op.workspace_bytes = to_bytes(2 * qo);
  }
  return op;
}

}  // namespace

std::vector<Op> eager_layer_forward(const ModelSpec& m, const LayerConfig& c, const EagerHost& host) {
  const Dims x = dims(m, c);
  const double hf = host.forward_s;
  const double act = x.T * x.h * kBf16;
  std::vector<Op> ops;
  rmsnorm_forward(ops, "input_rmsnorm", x, hf);
  ops.push_back(gemm("qkv", x.T, x.W, x.h, hf, act));  // saves its input, the norm output
  rope_forward(ops, "rope_q", x, x.q, hf);
  rope_forward(ops, "rope_k", x, x.kv, hf);
  ops.push_back(attention(x, c, false, hf));
  ops.push_back(gemm("attention_output", x.T, x.h, x.q, hf));  // its input is the saved output
  ops.push_back(kernel("attention_residual_add", 2 * act, act, hf));
  rmsnorm_forward(ops, "post_attention_rmsnorm", x, hf);
  ops.push_back(gemm("gate_up", x.T, 2 * x.f, x.h, hf, act));
  const double ff = x.T * x.f * kBf16;
  ops.push_back(kernel("silu", ff, ff, hf, 2 * ff));      // saves g, a chunk of the whole gate/up output
  ops.push_back(kernel("silu_mul", 2 * ff, ff, hf, ff));  // saves silu(g); u belongs to gate/up
  ops.push_back(gemm("down", x.T, x.h, x.f, hf, ff));     // saves silu(g)·u
  ops.push_back(kernel("mlp_residual_add", 2 * act, act, hf));
  return ops;
}

// In autograd's order; each weight gradient is added into the persistent .grad (AccumulateGrad).
std::vector<Op> eager_layer_backward(const ModelSpec& m, const LayerConfig& c, const EagerHost& host) {
  const Dims x = dims(m, c);
  const double hb = host.backward_s;
  const double ff = x.T * x.f * kBf16;
  std::vector<Op> ops;
  ops.push_back(gemm("down_dgrad", x.T, x.f, x.h, hb));
  ops.push_back(gemm("down_wgrad", x.h, x.f, x.T, hb));
  ops.push_back(accumulate("down", x.h * x.f, hb));
  ops.push_back(kernel("silu_mul_backward", 4 * ff, 2 * ff, hb, 0, 2));  // grad·u and grad·silu(g)
  ops.push_back(kernel("silu_backward", 2 * ff, ff, hb));
  ops.push_back(kernel("gate_up_chunk_backward", 2 * ff, 2 * ff, hb));  // cat of the two halves' grads
  ops.push_back(gemm("gate_up_dgrad", x.T, x.h, 2 * x.f, hb));
  ops.push_back(gemm("gate_up_wgrad", 2 * x.f, x.h, x.T, hb));
  ops.push_back(accumulate("gate_up", 2 * x.f * x.h, hb));
  rmsnorm_backward(ops, "post_attention_rmsnorm", x, hb, 3);
  ops.push_back(gemm("attention_output_dgrad", x.T, x.q, x.h, hb));
  ops.push_back(gemm("attention_output_wgrad", x.h, x.q, x.T, hb));
  ops.push_back(accumulate("attention_output", x.h * x.q, hb));
  ops.push_back(attention(x, c, true, hb));
  if (x.kv < x.q && c.attention == AttentionImpl::flash2) {
    // at::sum_out over each group of the expanded dK and dV (read 2·T·q, write 2·T·kv, bf16).
    ops.push_back(
        kernel("sdpa_gqa_dkv_sum", 2 * x.T * x.q * kBf16, 2 * x.T * x.kv * kBf16, hb, 0, 2, 2 * x.T * x.q * kBf16));
  }
  rope_backward(ops, "rope_q", x, x.q, hb);
  rope_backward(ops, "rope_k", x, x.kv, hb);
  const double qkv = x.T * x.W * kBf16;
  ops.push_back(kernel("qkv_split_backward", qkv, qkv, hb));  // cat of dq, dk, dv
  ops.push_back(gemm("qkv_dgrad", x.T, x.h, x.W, hb));
  ops.push_back(gemm("qkv_wgrad", x.W, x.h, x.T, hb));
  ops.push_back(accumulate("qkv", x.W * x.h, hb));
  rmsnorm_backward(ops, "input_rmsnorm", x, hb, 3);
  return ops;
}

std::vector<Op> eager_embedding_forward(const ModelSpec& m, const LayerConfig& c, const EagerHost& host) {
  const Dims x = dims(m, c);
  const double act = x.T * x.h * kBf16;
  // index_select of the token rows; saves only the token ids (the input batch, not new memory).
  return {kernel("embedding", x.T * kInt64 + act, act, host.forward_s)};
}

std::vector<Op> eager_embedding_backward(const ModelSpec& m, const LayerConfig& c, const EagerHost& host) {
  const Dims x = dims(m, c);
  const double act = x.T * x.h * kBf16, table = x.V * x.h * kBf16;
  const double sort = 2 * 2 * 16 * x.T;          // two passes over (id, position) pairs, read + write
  const double partial = 2 * x.T * x.h * kFp32;  // fp32 segment sums, written and read
  std::vector<Op> ops;
  ops.push_back(kernel("embedding_dense_backward", act + sort + partial, table + act, host.backward_s, 0,
                       kEmbeddingBackwardKernels, table + x.T * x.h * kFp32));
  ops.push_back(accumulate("embedding", x.V * x.h, host.backward_s));
  return ops;
}

std::vector<Op> eager_head_forward(const ModelSpec& m, const LayerConfig& c, const EagerHost& host) {
  const Dims x = dims(m, c);
  const double hf = host.forward_s;
  const double act = x.T * x.h * kBf16;
  const double l16 = x.T * x.V * kBf16, l32 = x.T * x.V * kFp32;  // logits in bf16 and fp32
  std::vector<Op> ops;
  rmsnorm_forward(ops, "final_rmsnorm", x, hf);
  ops.push_back(gemm("lm_head", x.T, x.V, x.h, hf, act, l16));  // saves the norm output
  // logits.float(): the bf16 logits are dropped once the copy exists.
  ops.push_back(kernel("logits_to_fp32", l16, l32, hf, 0, 1, l16 + l32));
  // cross_entropy = log_softmax (saves its fp32 output) + nll_loss; the fp32 logits live until the
  // loss returns.
  ops.push_back(kernel("log_softmax", l32, l32, hf, l32, 1, l32));
  ops.push_back(kernel("nll_loss", x.T * (kInt64 + kFp32), 2 * kFp32, hf));
  return ops;
}

std::vector<Op> eager_head_backward(const ModelSpec& m, const LayerConfig& c, const EagerHost& host) {
  const Dims x = dims(m, c);
  const double hb = host.backward_s;
  const double l16 = x.T * x.V * kBf16, l32 = x.T * x.V * kFp32;
  std::vector<Op> ops;
  ops.push_back(kernel("loss_grad_fill", 0, kFp32, hb));  // torch.ones_like(loss)
  // NllLossBackward0: the fp32 [T, V] gradient zeroed, then -1/T scattered at the targets.
  ops.push_back(kernel("nll_loss_backward", x.T * (kInt64 + kFp32), l32, hb, 0, 2, l32));
  // LogSoftmaxBackward0: grad - exp(out) * sum(grad) into a new fp32 tensor, while the incoming
  // gradient and the saved output are alive: the step's largest transient.
  ops.push_back(kernel("log_softmax_backward", 2 * l32, l32, hb, 0, 1, 2 * l32));
  ops.push_back(kernel("logits_grad_to_bf16", l32, l16, hb, 0, 1, l32 + l16));
  ops.push_back(gemm("lm_head_dgrad", x.T, x.h, x.V, hb, 0, l16));
  ops.push_back(gemm("lm_head_wgrad", x.V, x.h, x.T, hb, 0, l16 + x.V * x.h * kBf16));
  ops.push_back(accumulate("lm_head", x.V * x.h, hb));
  rmsnorm_backward(ops, "final_rmsnorm", x, hb, 2);
  return ops;
}

std::vector<std::int64_t> eager_param_sizes(const ModelSpec& m) {
  const std::int64_t h = m.hidden, q = m.heads * m.head_dim, kv = m.kv_heads * m.head_dim;
  // nn.Module.parameters(): the model's own (embedding, final norm, LM head), then each layer's.
  std::vector<std::int64_t> sizes{m.vocab * h, h, m.vocab * h};
  for (std::int64_t l = 0; l < m.layers; ++l) {
    for (std::int64_t n : {h * (q + 2 * kv), h * q, 2 * m.ffn_hidden * h, m.ffn_hidden * h, h, h}) sizes.push_back(n);
  }
  return sizes;
}

// The launch loop of multi_tensor_apply: blocks of kChunkSize elements; a launch when a kernel's
// tensor table (depth_to_max_tensors) or block table (depth_to_max_blocks) is full, or at the end.
std::int64_t multi_tensor_apply_launches(const std::vector<std::int64_t>& sizes, int depth) {
  // ATen/native/cuda/MultiTensorApply.cuh (PyTorch 2.x).
  static constexpr std::array<int, 5> kMaxTensors = {110, 64, 48, 36, 30};
  constexpr int kMaxBlocks = 320;
  constexpr std::int64_t kChunkSize = 65536;
  TRAINSIM_ASSERT(depth >= 1 && depth <= 5);
  std::int64_t launches = 0;
  int tensors = 0, blocks = 0;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    if (sizes[t] == 0) continue;
    ++tensors;
    const std::int64_t chunks = (sizes[t] + kChunkSize - 1) / kChunkSize;
    for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
      ++blocks;
      const bool last_chunk = chunk == chunks - 1;
      const bool tensors_full = tensors == kMaxTensors[static_cast<std::size_t>(depth - 1)] && last_chunk;
      if (tensors_full || blocks == kMaxBlocks || (t + 1 == sizes.size() && last_chunk)) {
        ++launches;
        blocks = 0;
        tensors = last_chunk ? 0 : 1;
      }
    }
  }
  return launches;
}

Op eager_zero_grad(const ModelSpec& m, const EagerHost& host) {
  const std::vector<std::int64_t> sizes = eager_param_sizes(m);
  const auto launches = static_cast<std::int32_t>(multi_tensor_apply_launches(sizes, 1));
  const double params = static_cast<double>(m.total_params());
  Op op = kernel("zero_grad", 0, params * kBf16, host.forward_s, 0, launches);
  op.host_s += kZeroGradPerTensor_s * static_cast<double>(sizes.size());
  return op;
}

Op eager_adamw_step(const ModelSpec& m, const EagerHost& host) {
  const std::vector<std::int64_t> sizes = eager_param_sizes(m);
  // One fp32 step counter per tensor, incremented by _foreach_add_ (depth 1), then the fused kernel
  // over four lists; it reads param, grad and both moments (8 bytes) and writes param and the
  // moments (6 bytes) per parameter, and reads each counter.
  const std::vector<std::int64_t> counters(sizes.size(), 1);
  const auto launches =
      static_cast<std::int32_t>(multi_tensor_apply_launches(counters, 1) + multi_tensor_apply_launches(sizes, 4));
  const double params = static_cast<double>(m.total_params());
  const double steps = static_cast<double>(sizes.size()) * kFp32;
  Op op = kernel("adamw_step", 4 * params * kBf16 + 2 * steps, 3 * params * kBf16 + steps, host.forward_s, 0, launches);
  op.host_s += kAdamInitPerTensor_s * static_cast<double>(sizes.size());
  return op;
}

}  // namespace trainsim::workload
