// The eager-PyTorch op lists (workload/eager_ops.h) against hand counts: GEMM and attention FLOPs
// against the 6·N·tokens formula, the bytes of single element-wise kernels, the activations a layer
// and the head save for backward, and PyTorch's multi_tensor_apply launch loop.

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "workload/eager_ops.h"

using namespace trainsim::workload;

namespace {

// A small Llama-style model: b = 2, s = 1024 (T = 2048 tokens), h = 1024, 8 heads of 128, FFN 2816,
// vocabulary 32000.
ModelSpec tiny_llama() {
  ModelSpec m;
  m.name = "tiny-llama";
  m.layers = 4;
  m.hidden = 1024;
  m.heads = 8;
  m.kv_heads = 8;
  m.head_dim = 128;
  m.ffn_hidden = 2816;
  m.vocab = 32000;
  m.mlp = MlpKind::swiglu;
  return m;
}

LayerConfig config() {
  LayerConfig c;
  c.micro_batch = 2;
  c.seq_len = 1024;
  c.attention = AttentionImpl::flash2;
  return c;
}

const EagerHost kHost{8e-6, 4e-6};

double sum_flops(const std::vector<Op>& ops) {
  double s = 0;
  for (const Op& op : ops) s += op.flops;
  return s;
}

std::int64_t sum_saved(const std::vector<Op>& ops) {
  std::int64_t s = 0;
  for (const Op& op : ops) s += op.saved_bytes;
  return s;
}

const Op& find(const std::vector<Op>& ops, const std::string& name) {
  for (const Op& op : ops)
    if (op.name == name) return op;
  FAIL("no op " << name);
  return ops.front();
}

}  // namespace

TEST_CASE("Eager step FLOPs: 6 x GEMM parameters x tokens, plus causal attention at 3.5 x its forward") {
  // Every weight but the embedding table and the norm vectors is a GEMM operand: its forward does
  // 2·T FLOPs per parameter, the data and weight gradients 4·T. Causal flash attention: forward
  // 4·b·s²·heads·hd / 2, backward 2.5 times that.
  const ModelSpec m = tiny_llama();
  const LayerConfig c = config();
  const double T = 2048, b = 2, s = 1024;
  const double gemm_params = static_cast<double>(m.total_params() - m.vocab * m.hidden - (2 * m.layers + 1) * m.hidden);
  const double attention = 3.5 * 4 * b * s * s * 8 * 128 / 2;
  const double layers = static_cast<double>(m.layers);
  const double total =
      layers * (sum_flops(eager_layer_forward(m, c, kHost)) + sum_flops(eager_layer_backward(m, c, kHost))) +
      sum_flops(eager_embedding_forward(m, c, kHost)) + sum_flops(eager_embedding_backward(m, c, kHost)) +
      sum_flops(eager_head_forward(m, c, kHost)) + sum_flops(eager_head_backward(m, c, kHost));
  CHECK(total == Approx(6 * gemm_params * T + layers * attention).epsilon(1e-12));
}

TEST_CASE("Eager element-wise kernels move the bytes of their operands, 2 bytes per bf16 and 4 per fp32 element") {
  const ModelSpec m = tiny_llama();
  const LayerConfig c = config();
  const double T = 2048, h = 1024, f = 2816, V = 32000;
  const auto fwd = eager_layer_forward(m, c, kHost);
  const auto bwd = eager_layer_backward(m, c, kHost);
  // x.pow(2): read and write [T, h] in bf16.
  CHECK(find(fwd, "input_rmsnorm_pow").bytes == 2 * T * h * 2);
  // mean over h: read [T, h], write [T, 1].
  CHECK(find(fwd, "input_rmsnorm_mean").bytes == T * h * 2 + T * 2);
  // silu(g): read g, write silu(g), both [T, f]; silu(g) * u: read two, write one.
  CHECK(find(fwd, "silu").bytes == 2 * T * f * 2);
  CHECK(find(fwd, "silu_mul").bytes == 3 * T * f * 2);
  // cat(-q2, q1): read both halves, write [T, 1024].
  CHECK(find(fwd, "rope_q_cat").bytes == 2 * T * 1024 * 2);
  // q * cos: q plus cos [s, hd] read once, the product written.
  CHECK(find(fwd, "rope_q_mul_cos").bytes == 2 * T * 1024 * 2 + 1024 * 128 * 2);
  // Residual add: two [T, h] read, one written.
  CHECK(find(fwd, "mlp_residual_add").bytes == 3 * T * h * 2);
  // Backward: AccumulateGrad of the down projection's [h, f] gradient (grad += new: 2 read, 1 written).
  CHECK(find(bwd, "down_grad_accumulate").bytes == 3 * h * f * 2);
  // The gate/up chunk's backward concatenates the two [T, f] gradients into [T, 2f].
  CHECK(find(bwd, "gate_up_chunk_backward").bytes == 4 * T * f * 2);
  // The layer input has three consumers (pow, x·r, the residual add): two adds of [T, h].
  CHECK(find(bwd, "input_rmsnorm_input_grad_accumulate").bytes == 2 * 3 * T * h * 2);
  CHECK(find(bwd, "input_rmsnorm_input_grad_accumulate").kernels == 2);
  // Loss: log_softmax reads and writes [T, V] in fp32; its backward reads the gradient and the
  // saved output and writes the input gradient.
  const auto head = eager_head_forward(m, c, kHost);
  CHECK(find(head, "log_softmax").bytes == 2 * T * V * 4);
  CHECK(find(eager_head_backward(m, c, kHost), "log_softmax_backward").bytes == 3 * T * V * 4);
  // Fused AdamW: param, grad, exp_avg, exp_avg_sq read (8 B), three written (6 B) per parameter, plus
  // one fp32 step counter per tensor read and written.
  const double P = static_cast<double>(m.total_params());
  const double tensors = 6 * 4 + 3;
  CHECK(eager_adamw_step(m, kHost).bytes == 14 * P + 3 * 4 * tensors);
  CHECK(eager_zero_grad(m, kHost).bytes == 2 * P);
}

TEST_CASE("Eager layer saves what autograd keeps: 24Th + 8Tf + 4T + 4·b·heads·s bytes without GQA") {
  // By tensor (T = 2048, h = 1024, f = 2816, b = 2, 8 heads, s = 1024; bf16 unless noted):
  //   input norm: its input 2Th, rsqrt's result 2T, x·r 2Th          = 4Th + 2T
  //   QKV GEMM input (the norm output)                               = 2Th
  //   attention: rotated q 2Th and k 2Th, v's base (all of qkv) 6Th,
  //              the output 2Th, the fp32 logsumexp 4·b·heads·s      = 12Th + 4·b·heads·s
  //   post-attention norm and the gate/up GEMM input                 = 4Th + 2T + 2Th
  //   gate/up output (kept by silu's chunk view) 4Tf, silu(g) 2Tf, the down input 2Tf = 8Tf
  const ModelSpec m = tiny_llama();
  const std::int64_t T = 2048, h = 1024, f = 2816;
  const std::int64_t expected = 24 * T * h + 8 * T * f + 4 * T + 4 * 2 * 8 * 1024;
  CHECK(expected == 96'542'720);
  CHECK(sum_saved(eager_layer_forward(m, config(), kHost)) == expected);
  // Attention holds the same in its single op (the flash kernel saves q, k, v, out, logsumexp).
  CHECK(find(eager_layer_forward(m, config(), kHost), "sdpa").saved_bytes == 12 * T * h + 4 * 2 * 8 * 1024);
  // The backward saves nothing.
  CHECK(sum_saved(eager_layer_backward(m, config(), kHost)) == 0);
}

TEST_CASE("Eager head: the fp32 log-probabilities are saved, and the logit gradients are the largest transient") {
  // Saved: the final norm (4Th + 2T), the LM head input 2Th, log_softmax's fp32 output 4TV.
  // In LogSoftmaxBackward the incoming fp32 gradient and the new one (4TV each) are alive beside the
  // saved output: 8TV of workspace, more than the forward's bf16 + fp32 logits (6TV).
  const ModelSpec m = tiny_llama();
  const std::int64_t T = 2048, h = 1024, V = 32000;
  const auto fwd = eager_head_forward(m, config(), kHost);
  const auto bwd = eager_head_backward(m, config(), kHost);
  CHECK(sum_saved(fwd) == 6 * T * h + 2 * T + 4 * T * V);
  std::int64_t fwd_ws = 0, bwd_ws = 0;
  for (const Op& op : fwd) fwd_ws = std::max(fwd_ws, op.workspace_bytes);
  for (const Op& op : bwd) bwd_ws = std::max(bwd_ws, op.workspace_bytes);
  CHECK(fwd_ws == 6 * T * V);
  CHECK(bwd_ws == 8 * T * V);
}

TEST_CASE(
    "Eager kernel counts: 31 launches per layer forward and 70 backward; host time is launches x the per-kernel CPU "
    "cost") {
  // 2 norms x 6, 2 rotary x 5, 4 GEMMs, attention, 2 residual adds, silu, silu·u.
  const auto fwd = eager_layer_forward(tiny_llama(), config(), kHost);
  int kernels = 0;
  double host = 0;
  for (const Op& op : fwd) {
    kernels += op.kernels;
    host += op.host_s;
  }
  CHECK(kernels == 31);
  CHECK(host == Approx(31 * 8e-6));
  // Backward: 8 GEMMs, 4 gradient accumulations, silu·u (2), silu, the gate/up concatenation, 2 norms
  // x 16, the 3 attention kernels, 2 rotary x 9, the QKV concatenation. (torch_steps.py --count-ops
  // shows the same per block on a real PyTorch: tests/validate/torch_steps_dry_run_test.sh.)
  int backward = 0;
  for (const Op& op : eager_layer_backward(tiny_llama(), config(), kHost)) backward += op.kernels;
  CHECK(backward == 8 + 4 + 2 + 1 + 1 + 2 * 16 + 3 + 2 * 9 + 1);
  CHECK(backward == 70);
}

TEST_CASE("multi_tensor_apply launches a kernel when 320 blocks or the depth's tensor table fill up") {
  // Chunks of 65536 elements; depth 1 holds 110 tensors, depth 4 holds 36.
  constexpr std::int64_t chunk = 65536;
  CHECK(multi_tensor_apply_launches(std::vector<std::int64_t>(110, 1), 1) == 1);
  CHECK(multi_tensor_apply_launches(std::vector<std::int64_t>(111, 1), 1) == 2);
  CHECK(multi_tensor_apply_launches(std::vector<std::int64_t>(36, 1), 4) == 1);
  CHECK(multi_tensor_apply_launches(std::vector<std::int64_t>(37, 1), 4) == 2);
  // 3 x 100 chunks = 300 blocks: one launch; 4 x 100 = 400 blocks: 320, then 80.
  CHECK(multi_tensor_apply_launches(std::vector<std::int64_t>(3, 100 * chunk), 4) == 1);
  CHECK(multi_tensor_apply_launches(std::vector<std::int64_t>(4, 100 * chunk), 4) == 2);
  // One tensor of 1000 chunks: 320, 320, 320, 40.
  CHECK(multi_tensor_apply_launches({1000 * chunk}, 1) == 4);
}

TEST_CASE("Eager parameter tensors are the model's parameters: 6 per layer, embedding, final norm, LM head") {
  const ModelSpec m = tiny_llama();
  const auto sizes = eager_param_sizes(m);
  CHECK(sizes.size() == 6 * 4 + 3);
  std::int64_t total = 0;
  for (std::int64_t n : sizes) total += n;
  CHECK(total == m.total_params());
}

// Grouped-query attention (SDPA's enable_gqa), the tiny model with 2 KV heads of 128 (kv = 256
// channels, q = 1024): the QKV width is q + 2kv = 1536, so v's base (the whole qkv output) is 2T·1536
// and the rotated k 2T·256. Under the FlashAttention-2 backend the backward writes dK and dV for every
// query head and sums each group: the expanded pair 2·2T·q bytes instead of 2·2T·kv, then one sum per
// tensor reading 2·2T·q and writing 2·2T·kv, the expanded pair alive meanwhile. cuDNN reduces in its
// own kernels: no sum op.
TEST_CASE("Eager grouped-query attention: K and V kept at their own width, FA2's expanded dK and dV summed") {
  ModelSpec m = tiny_llama();
  const ModelSpec mha = m;
  m.kv_heads = 2;
  const double T = 2048, q = 1024, kv = 256;
  const Op sdpa = find(eager_layer_forward(m, config(), kHost), "sdpa");
  CHECK(sdpa.saved_bytes ==
        static_cast<std::int64_t>(2 * T * q * 2 + 2 * T * kv + 2 * T * (q + 2 * kv) + 4 * 2 * 8 * 1024));
  const auto bwd = eager_layer_backward(m, config(), kHost);
  const Op& back = find(bwd, "sdpa_backward");
  // The MHA backward moves 4 bytes-of-q + 4 bytes-of-kv + accumulators + lse; here kv shrinks and the
  // expanded dK, dV come back.
  const auto bwd_mha = eager_layer_backward(mha, config(), kHost);
  const Op& back_mha = find(bwd_mha, "sdpa_backward");
  CHECK(back_mha.bytes - back.bytes == Approx(4 * (T * q * 2 - T * kv * 2) - 2 * (T * q * 2 - T * kv * 2)));
  CHECK(back.workspace_bytes == static_cast<std::int64_t>(2 * T * q * 2));
  const Op& sum = find(bwd, "sdpa_gqa_dkv_sum");
  CHECK(sum.bytes == 2 * T * q * 2 + 2 * T * kv * 2);
  CHECK(sum.kernels == 2);
  LayerConfig cudnn = config();
  cudnn.attention = AttentionImpl::flash;
  for (const Op& op : eager_layer_backward(m, cudnn, kHost)) CHECK(op.name != "sdpa_gqa_dkv_sum");
}
