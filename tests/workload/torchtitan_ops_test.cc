// torchtitan's op lists (workload/torchtitan_ops.h) against hand counts: the GEMM FLOPs of a block
// against 2·T·(its linear parameters) per pass, the kernels eager PyTorch and Inductor launch, the
// activations a block saves with and without the op-level checkpointing policy, and the optimizer's
// bytes on an FSDP shard.

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "workload/torchtitan_ops.h"

using namespace trainsim::workload;

namespace {

// A small Llama 3 style model with grouped-query attention: b = 2, s = 1024 (T = 2048 tokens),
// h = 1024, 8 query heads and 2 KV heads of 128, FFN 2816, vocabulary 32000.
ModelSpec tiny_llama3() {
  ModelSpec m;
  m.name = "tiny-llama3";
  m.layers = 4;
  m.hidden = 1024;
  m.heads = 8;
  m.kv_heads = 2;
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

TorchtitanOptions options(bool compile, bool sac) {
  return {compile, sac, {8e-6, 4e-6}};
}

constexpr double T = 2048, h = 1024, q = 1024, kv = 256, f = 2816;

double flops(const std::vector<Op>& ops, OpKind kind) {
  double sum = 0;
  for (const Op& op : ops)
    if (op.kind == kind) sum += op.flops;
  return sum;
}

std::int64_t saved(const std::vector<Op>& ops) {
  std::int64_t sum = 0;
  for (const Op& op : ops) sum += op.saved_bytes;
  return sum;
}

const Op& find(const std::vector<Op>& ops, const std::string& name) {
  const auto it = std::find_if(ops.begin(), ops.end(), [&](const Op& op) { return op.name == name; });
  REQUIRE(it != ops.end());
  return *it;
}

}  // namespace

TEST_CASE("torchtitan block: GEMM FLOPs are 2·T·params forward and twice that backward, eager or compiled") {
  const double linear = h * (q + 2 * kv) + q * h + 3 * f * h;  // wq wk wv, wo, w1 w2 w3
  for (bool compile : {false, true}) {
    const auto fwd = torchtitan_layer_forward(tiny_llama3(), config(), options(compile, false));
    const auto bwd = torchtitan_layer_backward(tiny_llama3(), config(), options(compile, false));
    CHECK(flops(fwd, OpKind::gemm) == Approx(2 * T * linear));
    CHECK(flops(bwd, OpKind::gemm) == Approx(4 * T * linear));
    // Attention over all 8 query heads (the keys and values repeated): 4·b·s²·heads·hd / 2 forward.
    CHECK(flops(fwd, OpKind::attention) == Approx(4.0 * 2 * 1024 * 1024 * 8 * 128 / 2));
  }
}

TEST_CASE("torchtitan block: eager launches every element-wise op, Inductor one kernel per fused group") {
  const auto eager = torchtitan_layer_forward(tiny_llama3(), config(), options(false, false));
  const auto compiled = torchtitan_layer_forward(tiny_llama3(), config(), options(true, false));
  auto kernels = [](const std::vector<Op>& ops) {
    int n = 0;
    for (const Op& op : ops) n += op.kernels;
    return n;
  };
  // Two fp32 RMSNorms 8 each; wq, wk, wv, wo, w1, w3, w2 7; the rotary embedding of q and k 3
  // each; repeat_kv of k and v 2; attention 1; two residual adds; silu, mul. (FSDP2's copy-out
  // after each gather is the step builder's.)
  CHECK(kernels(eager) == 16 + 7 + 6 + 2 + 1 + 2 + 2);
  // Norm, add+norm, rope_q, rope_k+repeat, repeat_v, silu·mul, the last add: 7 fused; 7 GEMMs;
  // attention.
  CHECK(kernels(compiled) == 7 + 7 + 1);
  // The eager query rotation: bf16 -> fp32 (read 2Tq, write 4Tq), complex product (read 4Tq and the
  // complex64 [s, hd/2] table, write 4Tq), back to bf16 (read 4Tq, write 2Tq).
  CHECK(find(eager, "rope_q_complex_mul").bytes == Approx(8 * T * q + 1024 * 64 * 8));
  CHECK(find(eager, "repeat_kv_k").bytes == Approx(2 * T * kv + 2 * T * q));
  // The copy-out of a block reads and writes its bf16 parameters, the bytes it is gathered in.
  const double block_bytes = 2.0 * static_cast<double>(h * (q + 2 * kv) + q * h + 3 * f * h + 2 * h);
  CHECK(static_cast<double>(torchtitan_block_gather_bytes(tiny_llama3(), 1, false)) == block_bytes);
  const Op copy = torchtitan_copy_out(block_bytes, 0);
  CHECK(copy.bytes == Approx(2 * block_bytes));
  CHECK(copy.skip_in_recompute);
}

TEST_CASE("torchtitan block: what the forward saves, without checkpointing and under the op policy") {
  const double A = 2 * T * h, R = 4 * T, Q = 2 * T * q, K = 2 * T * kv, F = 2 * T * f, L = 4.0 * 2 * 8 * 1024;
  // Eager: each fp32 norm its fp32 input 2A, rsqrt R and the bf16 normalised A; the QKV and w1/w3
  // inputs A each; attention q, repeated k and v, output 4Q and L; silu's input, the product's two,
  // w2's input 4F.
  const auto eager = torchtitan_layer_forward(tiny_llama3(), config(), options(false, false));
  CHECK(saved(eager) == static_cast<std::int64_t>(2 * (3 * A + R) + 2 * A + 4 * Q + L + 4 * F));
  // Compiled: the block input, both norms' outputs, the residual h, two rstd; attention 4Q + L; w1's
  // and w3's outputs and the product 3F.
  const auto compiled = torchtitan_layer_forward(tiny_llama3(), config(), options(true, false));
  CHECK(saved(compiled) == static_cast<std::int64_t>(4 * A + 2 * R + 4 * Q + L + 3 * F));
  // The op policy keeps the block input, the outputs of wq (Q), wv (K), w1 (F), w2 (A) and of the
  // attention (Q + L) on its last op; every other op's saved bytes are dropped and saved again by
  // the recompute, which runs everything but the odd GEMMs and the attention.
  for (bool compile : {false, true}) {
    const auto sac = torchtitan_layer_forward(tiny_llama3(), config(), options(compile, true));
    const Op& kept = sac.back();
    CHECK(kept.name == "sac_kept_outputs");
    CHECK(kept.saved_bytes == static_cast<std::int64_t>(2 * A + 2 * Q + K + F + L));
    CHECK(kept.discards == 0);
    CHECK(kept.rerun == 0);
    for (const char* name : {"wq", "wv", "w1", "w2", "sdpa"}) {
      CHECK(find(sac, name).rerun == 0);
      CHECK(find(sac, name).discards == kRecomputeTorchtitanOp);
    }
    for (const char* name : {"wk", "wo", "w3"}) CHECK(find(sac, name).rerun == kRecomputeTorchtitanOp);
    CHECK(saved(sac) - kept.saved_bytes ==
          saved(torchtitan_layer_forward(tiny_llama3(), config(), options(compile, false))));
  }
}

TEST_CASE("torchtitan optimizer step: clip_grad_norm_ and fused AdamW over the fp32 shard, 40 bytes a parameter") {
  const ModelSpec m = tiny_llama3();
  const Op step = torchtitan_optimizer_step(m, 8, 1, {8e-6, 4e-6});
  // Each tensor sharded along its first dimension over 8 ranks (every size here divides by 8).
  const double shard = static_cast<double>(m.total_params()) / 8;
  const double tensors = 1 + 9 * 4 + 2;  // embedding, 9 per block, norm, output
  // Norms read 4 bytes; the clip scale reads and writes 4; AdamW reads 16 and writes 12; each step
  // counter (fp32) is read twice and written once.
  CHECK(step.bytes == Approx(shard * 40 + tensors * 4 * 3));
  CHECK(step.host_s > 8e-6 * step.kernels);
}

TEST_CASE("torchtitan Float8: FP8 GEMMs in the blocks, the casts around them, fp8 weights gathered") {
  TorchtitanOptions o = options(true, false);
  o.float8 = true;
  const auto fwd = torchtitan_layer_forward(tiny_llama3(), config(), o);
  const auto bwd = torchtitan_layer_backward(tiny_llama3(), config(), o);
  for (const auto* list : {&fwd, &bwd})
    for (const Op& op : *list)
      if (op.kind == OpKind::gemm) CHECK(op.fp8);
  const double A = 2 * T * h, Q = 2 * T * q, F = 2 * T * f;
  // Four distinct GEMM inputs (the QKV input, wo's, w1/w3's, w2's), each an amax (reads it) and a
  // cast (reads it, writes the e4m3 copy the backward keeps).
  double cast_bytes = 0, kept = 0;
  int casts = 0;
  for (const Op& op : fwd)
    if (op.name.find("_amax") != std::string::npos || op.name.find("_to_float8") != std::string::npos) {
      cast_bytes += op.bytes;
      kept += static_cast<double>(op.saved_bytes);
      ++casts;
    }
  CHECK(casts == 8);
  CHECK(cast_bytes == Approx(2.5 * (A + Q + A + F)));
  CHECK(kept == Approx((A + Q + A + F) / 2));
  // Without Float8 the compiled block saves the norms' bf16 outputs and w2's bf16 input instead.
  CHECK(saved(torchtitan_layer_forward(tiny_llama3(), config(), options(true, false))) - saved(fwd) ==
        static_cast<std::int64_t>(2 * A + F - kept));
  // The blocks' linears are gathered and copied out in fp8, the norms in bf16.
  const double linear = h * (q + 2 * kv) + q * h + 3 * f * h;
  CHECK(static_cast<double>(torchtitan_block_gather_bytes(tiny_llama3(), 1, true)) == linear + 2 * 2 * h);
  CHECK(static_cast<double>(torchtitan_block_linear_params(tiny_llama3(), 1)) == linear);
  // Backward: per linear its gradient's amax and e5m2 cast (both layouts), its fp8 weight transposed.
  const Op& go = find(bwd, "w2_grad_to_float8");
  CHECK(go.bytes == Approx(2 * 2 * T * h));
  CHECK(find(bwd, "w2_weight_float8_transpose").bytes == Approx(2 * h * f));
}

TEST_CASE("torchtitan with context parallelism: the rank's s/cp queries against all s keys") {
  LayerConfig c = config();
  c.cp = 4;
  const auto fwd = torchtitan_layer_forward(tiny_llama3(), c, options(false, false));
  const Op& attn = find(fwd, "sdpa");
  CHECK(attn.attention.seq_q == 256);
  CHECK(attn.attention.seq_kv == 1024);
  // 1/cp of the whole sequence's causal work: 4·b·(s/cp)·s·heads·hd / 2.
  CHECK(attn.flops == Approx(4.0 * 2 * 256 * 1024 * 8 * 128 / 2));
  // The GEMMs run on the rank's b·s/cp tokens.
  CHECK(find(fwd, "wq").gemm.m == 2 * 256);
  // The K and V one rank holds, repeated to the 8 query heads: 2 · 512 tokens · 1024 · 2 bytes.
  CHECK(torchtitan_cp_kv_bytes(tiny_llama3(), c) == 2 * 512 * 1024 * 2);
}

TEST_CASE("torchtitan context parallelism: PyTorch's fp32 merges and gradient accumulators by hand") {
  // cp 4, b 2, s 1024: the rank's T = 512 tokens of q = 8 heads x 128 (K and V repeated to them):
  // o = 512 * 1024 * 2 bytes a bf16 tensor, twice that in fp32; the logsumexp 4 * b * heads * s/cp.
  LayerConfig c = config();
  c.cp = 4;
  const TorchtitanCpKernels k = torchtitan_cp_kernels(tiny_llama3(), c, EagerHost{});
  const double o = 512.0 * 1024 * 2, o32 = 2 * o, lse = 4.0 * 2 * 8 * 256;
  CHECK(k.kv_cat.bytes == Approx(4 * o));  // torch.cat([key, value]): both read and written
  CHECK(k.first_merge.bytes == Approx(o + o32));
  // On the output, bytes read and written by kernel: out_b.to(fp32) (o, o32), out - out_b (2 o32, o32),
  // sigmoid(lse_b - lse) * (...) (o32, o32), out - (...) (2 o32, o32); on the logsumexp (lse bytes
  // each) lse_b - lse (2, 1), sigmoid (1, 1), lse - lse_b (2, 1), logsigmoid (1, 1), lse - (...)
  // (2, 1), and the product's broadcast read of the sigmoid: 9 read and 5 written.
  CHECK(k.merge.bytes == Approx(o + 5 * o32 + 4 * o32 + 14 * lse));
  CHECK(k.merge.kernels == 9);
  CHECK(k.out_to_bf16.bytes == Approx(o32 + o));
  CHECK(k.grad_zeros.bytes == Approx(3 * o32));
  // dK and dV: the received fp32 buffer's first half += the step's half-sequence bf16 gradient, then
  // the halves concatenated again (_partial_update), for each of the two.
  CHECK(k.grad_kv_accumulate.bytes == Approx(2 * (o32 / 2 + o / 2 + o32 / 2) + 2 * 2 * o32));
  CHECK(k.grad_kv_cat.bytes == Approx(4 * o32));
  CHECK(k.grad_q_accumulate.bytes == Approx(o32 + o + o32));
  CHECK(k.grad_kv_bytes == static_cast<std::int64_t>(2 * o32));
}

TEST_CASE("torchtitan compiled loss: one fused kernel each way over the bf16 logits, no fp32 copy") {
  // T = 2048 tokens, V = 32000: the bf16 logits l16 = 2·T·V bytes, the fp32 per-row values 4·T.
  const double T = 2048, V = 32000, l16 = 2 * T * V, rows = 4 * T;
  TorchtitanOptions o = options(true, false);
  o.compile_loss = true;
  const auto fwd = torchtitan_head_forward(tiny_llama3(), config(), o);
  const auto bwd = torchtitan_head_backward(tiny_llama3(), config(), o);
  const Op& ce = find(fwd, "cross_entropy_fused");
  CHECK(ce.bytes == Approx(2 * l16 + 8 * T + 2 * rows));           // the logits read twice, the labels, two row values
  CHECK(ce.saved_bytes == static_cast<std::int64_t>(l16 + rows));  // the logits and the logsumexp
  CHECK(find(bwd, "cross_entropy_fused_backward").bytes == Approx(l16 + 12 * T + l16));
  auto none_named = [](const std::vector<Op>& ops, const std::string& name) {
    return std::none_of(ops.begin(), ops.end(), [&](const Op& op) { return op.name == name; });
  };
  CHECK(none_named(fwd, "logits_to_fp32"));
  CHECK(none_named(fwd, "log_softmax"));
  CHECK(none_named(bwd, "log_softmax_backward"));
  // Eager, the fp32 copy and log_softmax's output (kept for the backward) are 2·l16 each.
  const auto eager = torchtitan_head_forward(tiny_llama3(), config(), options(true, false));
  CHECK(find(eager, "log_softmax").saved_bytes == static_cast<std::int64_t>(2 * l16));
}

TEST_CASE("torchtitan with tensor parallelism: sharded GEMMs and heads, the sequence-parallel collectives") {
  LayerConfig c = config();
  c.tp = 2;
  c.sequence_parallel = true;
  for (bool compile : {false, true}) {
    const auto fwd = torchtitan_layer_forward(tiny_llama3(), c, options(compile, false));
    const auto bwd = torchtitan_layer_backward(tiny_llama3(), c, options(compile, false));
    // Each rank's GEMMs: all T tokens, half of every linear's output (column-parallel) or input
    // (row-parallel) width.
    CHECK(flops(fwd, OpKind::gemm) == Approx(2 * T * (h * (q + 2 * kv) + q * h + 3 * f * h) / 2));
    CHECK(find(fwd, "wq").gemm.n == 512);
    CHECK(find(fwd, "w2").gemm.k == 1408);
    CHECK(find(fwd, "sdpa").attention.batch_heads == 2 * 4);
    // Forward: the norms' outputs gathered before the column-parallel GEMMs, the row-parallel GEMMs'
    // partial outputs reduce-scattered: whole [T, h] bf16 tensors (2·T·h bytes).
    std::vector<std::string> comms;
    for (const Op& op : fwd)
      if (op.kind == OpKind::tp_comm) {
        comms.push_back(op.name);
        CHECK(op.comm_bytes == static_cast<std::int64_t>(2 * T * h));
        CHECK(op.group == CommGroup::tp);
      }
    CHECK(comms == std::vector<std::string>{"qkv_input_all_gather", "wo_output_reduce_scatter",
                                            "w1_w3_input_all_gather", "w2_output_reduce_scatter"});
    // Backward: the mirror collectives.
    comms.clear();
    for (const Op& op : bwd)
      if (op.kind == OpKind::tp_comm) comms.push_back(op.name);
    CHECK(comms == std::vector<std::string>{"w2_output_grad_all_gather", "ffn_input_grad_reduce_scatter",
                                            "wo_output_grad_all_gather", "qkv_input_grad_reduce_scatter"});
    // The norms run on the rank's T/tp tokens.
    const Op& norm = compile ? find(fwd, "attention_norm") : find(fwd, "attention_norm_to_fp32");
    CHECK(norm.bytes == Approx(compile ? (T / 2 * h * 2 + h * 2) + (T / 2 * h * 2 + T / 2 * 4) : 3 * T / 2 * h * 2));
  }
  // Under the op policy the reduce-scatters' outputs are kept (its save list has them) and the
  // all-gathers run again; the kept set adds the partial w2 output at its whole [T, h] size and the two
  // scattered outputs.
  const auto sac = torchtitan_layer_forward(tiny_llama3(), c, options(true, true));
  CHECK(find(sac, "wo_output_reduce_scatter").rerun == 0);
  CHECK(find(sac, "qkv_input_all_gather").rerun == kRecomputeTorchtitanOp);
  const double a = T / 2 * h * 2, A = 2 * T * h, Qr = 2 * T * 512, Kr = 2 * T * 128, Fr = 2 * T * 1408;
  CHECK(sac.back().saved_bytes == static_cast<std::int64_t>(a + A + 2 * Qr + Kr + Fr + 4.0 * 2 * 4 * 1024 + 2 * a));
  // Float8 gathers the norms' outputs in fp8: half the bytes.
  TorchtitanOptions o = options(true, false);
  o.float8 = true;
  CHECK(find(torchtitan_layer_forward(tiny_llama3(), c, o), "qkv_input_all_gather").comm_bytes ==
        static_cast<std::int64_t>(T * h));
}
