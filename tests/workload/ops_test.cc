#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <tuple>

#include "workload/ops.h"

using namespace trainsim::workload;

namespace {

ModelSpec gpt(std::int64_t layers, std::int64_t hidden, std::int64_t heads) {
  ModelSpec m;
  m.name = "gpt";
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = heads;
  m.head_dim = hidden / heads;
  m.ffn_hidden = 4 * hidden;
  m.vocab = 51200;
  m.mlp = MlpKind::gelu;
  m.tied_embeddings = true;
  m.dropout = 0.1;
  return m;
}

ModelSpec llama70b() {
  ModelSpec m;
  m.name = "llama3.1-70b";
  m.layers = 80;
  m.hidden = 8192;
  m.heads = 64;
  m.kv_heads = 8;
  m.head_dim = 128;
  m.ffn_hidden = 28672;
  m.vocab = 128256;
  m.mlp = MlpKind::swiglu;
  return m;
}

// One micro-batch of 8,192 tokens at TP 8, the setting of the Llama-3.1-70B memory tests.
LayerConfig llama70b_tp8_8k() {
  LayerConfig c;
  c.micro_batch = 1;
  c.seq_len = 8192;
  c.tp = 8;
  return c;
}

double saved(const std::vector<Op>& ops, bool core_only = false) {
  double sum = 0;
  for (const Op& op : ops) {
    if (!core_only || op.attention_core) sum += static_cast<double>(op.saved_bytes);
  }
  return sum;
}

double flops_of(const std::vector<Op>& ops, OpKind kind) {
  double sum = 0;
  for (const Op& op : ops) {
    if (op.kind == kind) sum += op.flops;
  }
  return sum;
}

int count_comm(const std::vector<Op>& ops, Comm c) {
  int n = 0;
  for (const Op& op : ops) n += op.kind == OpKind::tp_comm && op.comm == c ? 1 : 0;
  return n;
}

struct Paper {
  const char* name;
  std::int64_t heads, hidden, layers, micro_batch;
};

}  // namespace

// Korthikanti et al. 2022, Eqs. 1, 2 and 4, for the four models of their Table 3 (t = 8,
// s = 2048, softmax attention with dropout, 16-bit activations and 1-byte masks): one layer keeps
// sbh(34 + 5as/h) without TP, sbh(10 + 24/t + 5as/(ht)) with TP and sbh/t(34 + 5as/h) with TP+SP;
// the attention-core ops hold exactly 5as²b/t, so selective recompute leaves sbh(10 + 24/t).
// (Approx only absorbs the rounding of the formulas' non-integer 5as/h; the sums are integers.)
TEST_CASE("saved activations reproduce Korthikanti et al. 2022") {
  for (const Paper& p : {Paper{"22B", 64, 6144, 48, 4}, Paper{"175B", 96, 12288, 96, 1},
                         Paper{"530B", 128, 20480, 105, 1}, Paper{"1T", 160, 25600, 128, 1}}) {
    INFO(p.name);
    const ModelSpec m = gpt(p.layers, p.hidden, p.heads);
    const double s = 2048, b = static_cast<double>(p.micro_batch), h = static_cast<double>(p.hidden);
    const double a = static_cast<double>(p.heads), t = 8;
    const double sbh = s * b * h;
    LayerConfig c;
    c.micro_batch = p.micro_batch;
    c.seq_len = 2048;
    c.attention = AttentionImpl::softmax;

    c.tp = 1;
    CHECK(saved(layer_forward(m, c)) == Approx(sbh * (34 + 5 * a * s / h)).epsilon(1e-12));
    c.tp = 8;
    CHECK(saved(layer_forward(m, c)) == Approx(sbh * (10 + 24 / t + 5 * a * s / (h * t))).epsilon(1e-12));
    CHECK(saved(layer_forward(m, c), true) == 5 * a * s * s * b / t);
    CHECK(saved(layer_forward(m, c)) - saved(layer_forward(m, c), true) == sbh * (10 + 24 / t));
    c.sequence_parallel = true;
    CHECK(saved(layer_forward(m, c)) == Approx(sbh / t * (34 + 5 * a * s / h)).epsilon(1e-12));
    CHECK(saved(layer_forward(m, c)) - saved(layer_forward(m, c), true) == 34 * sbh / t);
    CHECK(static_cast<double>(layer_input_bytes(m, c)) == 2 * sbh / t);
    c.sequence_parallel = false;
    CHECK(static_cast<double>(layer_input_bytes(m, c)) == 2 * sbh);
  }
}

// The same rules applied to Llama-3.1-70B (GQA, SwiGLU, no dropout, flash attention, t = 8):
// replicated: norm inputs 4sbh + QKV and fc1 inputs 4sbh; split: Q, K, V 2sb(h + 2·h/8), output
// projection input 2sbh, SwiGLU input 4sbF, down-projection input 2sbF; flash keeps only its
// fp32 logsumexp 4·b·a·s (divided by t).
TEST_CASE("saved activations for GQA, SwiGLU, no dropout and flash attention") {
  const ModelSpec m = llama70b();
  const LayerConfig c = llama70b_tp8_8k();
  const double s = 8192, h = 8192, F = 28672, t = 8, kv = 8 * 128;
  const double expected = s * h * 8 + (2 * s * (h + 2 * kv) + 2 * s * h + 4 * s * F + 2 * s * F) / t + 4 * 64 * s / t;
  CHECK(saved(layer_forward(m, c)) == expected);
  CHECK(saved(layer_forward(m, c), true) == 4 * 64 * s / t);
}

// ecosystem.md §6.4: one layer's forward GEMM + attention FLOPs, summed over the TP group with
// full (non-causal) attention: GPT-3 24Th² + 4Bs²h; GQA/SwiGLU 4Th²(1 + n_kv/n_q) + 4Bs²h + 6Thf.
// Backward GEMMs (data and weight gradients) are twice the forward GEMMs.
TEST_CASE("layer FLOPs match the textbook counts") {
  LayerConfig c;
  c.micro_batch = 2;
  c.seq_len = 2048;
  c.causal = false;
  c.tp = 8;
  for (AttentionImpl impl : {AttentionImpl::flash, AttentionImpl::softmax}) {
    c.attention = impl;
    const ModelSpec g = gpt(96, 12288, 96);
    const double B = 2, s = 2048, T = B * s, h = 12288;
    auto fwd = layer_forward(g, c);
    CHECK((flops_of(fwd, OpKind::gemm) + flops_of(fwd, OpKind::attention)) * 8 ==
          Approx(24 * T * h * h + 4 * B * s * s * h).epsilon(1e-12));
    CHECK(flops_of(layer_backward(g, c), OpKind::gemm) == Approx(2 * flops_of(fwd, OpKind::gemm)).epsilon(1e-12));

    const ModelSpec l = llama70b();
    const double hl = 8192, f = 28672;
    auto lf = layer_forward(l, c);
    CHECK((flops_of(lf, OpKind::gemm) + flops_of(lf, OpKind::attention)) * 8 ==
          Approx(4 * T * hl * hl * (1 + 8.0 / 64) + 4 * B * s * s * hl + 6 * T * hl * f).epsilon(1e-12));
    CHECK(flops_of(layer_backward(l, c), OpKind::gemm) == Approx(2 * flops_of(lf, OpKind::gemm)).epsilon(1e-12));
  }
}

// FlashAttention's convention: causal halves the forward; backward is 2.5x forward.
TEST_CASE("flash attention FLOPs: causal halves, backward is 2.5x") {
  const ModelSpec g = gpt(1, 4096, 32);
  LayerConfig c;
  c.seq_len = 4096;
  auto fwd = layer_forward(g, c);
  auto bwd = layer_backward(g, c);
  const double full = 4.0 * 4096 * 4096 * 32 * 128;
  CHECK(flops_of(fwd, OpKind::attention) == full / 2);
  CHECK(flops_of(bwd, OpKind::attention) == 2.5 * full / 2);
}

// Megatron's TP communication: without SP two all-reduces forward and two backward; with SP two
// all-gathers and two reduce-scatters forward, four all-gathers and two reduce-scatters backward;
// none at t = 1. Each moves the full b·s·h tensor.
TEST_CASE("tensor-parallel communication sits where Megatron puts it") {
  const ModelSpec g = gpt(1, 4096, 32);
  LayerConfig c;
  c.micro_batch = 2;
  c.tp = 4;
  auto fwd = layer_forward(g, c);
  auto bwd = layer_backward(g, c);
  CHECK(count_comm(fwd, Comm::all_reduce) == 2);
  CHECK(count_comm(bwd, Comm::all_reduce) == 2);
  for (const Op& op : fwd) {
    if (op.kind == OpKind::tp_comm) CHECK(op.comm_bytes == 2 * 2048 * 4096 * 2);
  }
  c.sequence_parallel = true;
  fwd = layer_forward(g, c);
  bwd = layer_backward(g, c);
  CHECK(count_comm(fwd, Comm::all_gather) == 2);
  CHECK(count_comm(fwd, Comm::reduce_scatter) == 2);
  CHECK(count_comm(fwd, Comm::all_reduce) == 0);
  CHECK(count_comm(bwd, Comm::all_gather) == 4);
  CHECK(count_comm(bwd, Comm::reduce_scatter) == 2);
  c.tp = 1;
  c.sequence_parallel = false;
  for (const Op& op : layer_forward(g, c)) CHECK(op.kind != OpKind::tp_comm);
  for (const Op& op : layer_backward(g, c)) CHECK(op.kind != OpKind::tp_comm);
}

// Under SP the norm and dropout kernels touch s/t tokens; without it every rank does the full
// sequence (replicated). GEMMs see the full sequence either way.
TEST_CASE("sequence parallelism shrinks the memory-bound regions by t") {
  const ModelSpec g = gpt(1, 4096, 32);
  LayerConfig c;
  c.tp = 8;
  auto find = [](const std::vector<Op>& ops, const std::string& name) {
    for (const Op& op : ops) {
      if (op.name == name) return op;
    }
    FAIL("no op " << name);
    return Op{};
  };
  const Op norm = find(layer_forward(g, c), "input_layernorm");
  const Op qkv = find(layer_forward(g, c), "qkv");
  c.sequence_parallel = true;
  CHECK(find(layer_forward(g, c), "input_layernorm").bytes == norm.bytes / 8);
  CHECK(find(layer_forward(g, c), "qkv").flops == qkv.flops);
  CHECK(qkv.gemm.m == 2048);
  CHECK(qkv.gemm.n == 3 * 4096 / 8);
  CHECK(qkv.gemm.k == 4096);
}

// The head keeps its norm input, its GEMM input and the fp32 logits 4·b·s·v/t (Korthikanti §4.3).
TEST_CASE("output layer keeps fp32 logits") {
  const ModelSpec g = gpt(1, 4096, 32);
  LayerConfig c;
  c.tp = 8;
  c.sequence_parallel = true;
  const double s = 2048, h = 4096, v = 51200, t = 8;
  CHECK(saved(head_forward(g, c)) == 4 * s * h / t + 4 * s * v / t);
  int all_reduces = 0;
  for (const Op& op : head_forward(g, c)) {
    if (op.kind == OpKind::tp_comm && op.comm == Comm::all_reduce) {
      ++all_reduces;
      CHECK(op.comm_bytes == 2048 * 4);
    }
  }
  CHECK(all_reduces == 3);
  CHECK(saved(embedding_forward(g, c)) == s * h / t);
}

// Adam moves 30 bytes per parameter: fp32 weight, m and v read and written (24), fp32 grad read
// (4), bf16 weight written (2); the gradient-norm pass reads the fp32 grad once more (4).
TEST_CASE("optimizer step is memory-bound at 34 bytes per parameter") {
  const Op op = optimizer_step(1'000'000);
  CHECK(op.kind == OpKind::memory);
  CHECK(op.bytes == (24 + 4 + 2 + 4) * 1e6);
  CHECK(zero_grad_buffer(1'000'000).bytes == 4e6);
  // A bf16 gradient buffer (grad_reduce_in_fp32 false) is half as many bytes to zero.
  CHECK(zero_grad_buffer(1'000'000, 2).bytes == 2e6);
}

// Megatron's unfused vocab-parallel cross-entropy streams the logits many times: per logit element
// 42 bytes forward (transpose, fp32 cast, max, subtract, exp, sum, divide) and 18 backward.
TEST_CASE("cross-entropy traffic follows Megatron's unfused kernels") {
  const ModelSpec g = gpt(96, 12288, 96);
  LayerConfig c;
  c.tp = 8;
  const double logits = 2048.0 * (51200 / 8);
  double fwd = 0, bwd = 0;
  for (const Op& op : head_forward(g, c))
    if (op.name.rfind("cross_entropy", 0) == 0 || op.name == "logits_transpose") fwd += op.bytes;
  for (const Op& op : head_backward(g, c))
    if (op.name == "cross_entropy_backward") bwd += op.bytes;
  CHECK(fwd == Approx(42 * logits + 3 * 4 * 2048));  // + the per-token loss pass
  CHECK(bwd == Approx(18 * logits));
}

// A fused cross-entropy (Megatron's --cross-entropy-loss-fusion, TE's, apex xentropy) reads each bf16
// logit once forward (2 B, plus one fp32 statistic per token) and rewrites it as its gradient
// backward (2 + 2 B); it keeps the bf16 logits instead of an fp32 softmax, and under TP the same
// three per-token all-reduces remain.
TEST_CASE("fused cross-entropy streams each logit once per pass") {
  const ModelSpec g = gpt(96, 12288, 96);
  LayerConfig c;
  c.tp = 8;
  c.sequence_parallel = true;
  c.fused_cross_entropy = true;
  const double s = 2048, h = 12288, t = 8, logits = s * (51200 / t);
  double fwd = 0, bwd = 0;
  int all_reduces = 0;
  for (const Op& op : head_forward(g, c)) {
    if (op.name.rfind("cross_entropy", 0) == 0 && op.kind == OpKind::memory) fwd += op.bytes;
    CHECK(op.name != "logits_transpose");
    all_reduces += op.kind == OpKind::tp_comm && op.comm == Comm::all_reduce;
  }
  for (const Op& op : head_backward(g, c))
    if (op.name == "cross_entropy_backward") bwd += op.bytes;
  CHECK(fwd == Approx(2 * logits + 4 * s + 3 * 4 * s));  // + the per-token loss pass
  CHECK(bwd == Approx(4 * logits));
  CHECK(all_reduces == 3);
  // Saved: the norm's and the GEMM's inputs as with the unfused loss (4·s·h/t), then the bf16 logits
  // (2 B each) where the unfused loss keeps an fp32 softmax (4 B).
  CHECK(saved(head_forward(g, c)) == 4 * s * h / t + 2 * logits);
}

// Per-rank parameters: weight matrices split by t; norms and row-parallel biases replicated.
TEST_CASE("parameters per TP rank add up to the model") {
  const ModelSpec l = llama70b();
  CHECK(layer_params_per_rank(l, 8) * 8 - 7 * 2 * 8192 == l.params_per_layer());
  CHECK(embedding_params_per_rank(l, 8) * 8 == l.embedding_params());
  CHECK(head_params_per_rank(l, 8) == 8192 + 128256 / 8 * 8192);
  const ModelSpec g = gpt(96, 12288, 96);
  CHECK(layer_params_per_rank(g, 1) == g.params_per_layer());
  CHECK(head_params_per_rank(g, 8) == 2 * 12288);
}

// Transformer Engine FP8: the four linear GEMMs of a layer (forward, data and weight gradients) run
// in FP8, the attention core and the output layer stay in BF16; the casts are extra memory-bound
// kernels: forward 3 B per projection-input element plus 1 B per GEMM-input element (transposed
// copies), backward 4 B per output-gradient element of the four GEMMs.
TEST_CASE("fp8 marks the layers' linear GEMMs and adds their casts") {
  const ModelSpec m = llama70b();
  LayerConfig c;
  c.seq_len = 4096;
  c.tp = 8;
  c.fp8 = true;
  int fwd_fp8 = 0, bwd_fp8 = 0;
  double cast_fwd = 0, cast_bwd = 0;
  for (const Op& op : layer_forward(m, c)) {
    fwd_fp8 += op.fp8 ? 1 : 0;
    CHECK((op.fp8 == (op.kind == OpKind::gemm)));
    if (op.name == "fp8_cast_transpose") cast_fwd = op.bytes;
  }
  for (const Op& op : layer_backward(m, c)) {
    bwd_fp8 += op.fp8 ? 1 : 0;
    if (op.name == "fp8_grad_cast_transpose") cast_bwd = op.bytes;
  }
  CHECK(fwd_fp8 == 4);
  CHECK(bwd_fp8 == 8);
  const double tokens = 4096, h = 8192, q = 8192.0 / 8, kv = 8 * 128.0 / 8, f = 28672.0 / 8;
  CHECK(cast_fwd == Approx(3 * tokens * q + tokens * (2 * h + q + f)));
  CHECK(cast_bwd == Approx(4 * tokens * ((q + 2 * kv) + h + 2 * f + h)));
  for (const Op& op : head_forward(m, c)) CHECK_FALSE(op.fp8);
}

// Transformer Engine keeps the FP8 copy of each GEMM input for the weight gradient: the four GEMM
// inputs of the Llama-3.1-70B layer above (QKV and fc1 inputs sbh each, output projection input
// sbh/t, down-projection input sbF/t) drop from 2 bytes to 1; everything else stays BF16.
TEST_CASE("fp8 keeps the GEMM inputs in 1 byte") {
  const ModelSpec m = llama70b();
  LayerConfig c = llama70b_tp8_8k();
  const double bf16 = saved(layer_forward(m, c));
  c.fp8 = true;
  const double s = 8192, h = 8192, F = 28672, t = 8;
  CHECK(saved(layer_forward(m, c)) == bf16 - (s * h + s * h + s * h / t + s * F / t));
  // Zero-bubble weight-gradient passes hold the same 1-byte inputs.
  double held = 0;
  for (const Op& op : layer_backward(m, c)) held += static_cast<double>(op.held_input_bytes);
  CHECK(held == s * h + s * h + s * h / t + s * F / t);
}

// Transformer Engine's NVFP4 recipe marks the same GEMMs as FP8 (fp4 on each), keeps each GEMM
// input for the weight gradient as its column-wise NVFP4 copy (half a byte per element plus an E4M3
// scale per 16: 0.5625 bytes), and quantises every operand on its own: per element, three reads of
// the BF16 tensor (amax, amax after the Hadamard transform, quantisation) and two NVFP4 writes,
// 3 x 2 + 2 x 0.5625 = 7.125 bytes; forward over the four GEMM inputs, backward over the four output
// gradients (SwiGLU's fc1 gradient twice the width).
TEST_CASE("nvfp4 runs the fp8 GEMMs in FP4, keeps their inputs in 0.5625 bytes and quantises every operand") {
  const ModelSpec m = llama70b();
  LayerConfig c = llama70b_tp8_8k();
  const double bf16 = saved(layer_forward(m, c));
  c.fp8 = true;
  c.fp4 = true;
  const double s = 8192, h = 8192, F = 28672, t = 8, q = h / t, kv = 8 * 128.0 / t, f = F / t;
  const double inputs = s * h + s * h + s * h / t + s * F / t;
  CHECK(saved(layer_forward(m, c)) == Approx(bf16 - inputs * (2 - 0.5625)));
  double quantize_fwd = 0, quantize_bwd = 0;
  int fp4 = 0;
  for (const Op& op : layer_forward(m, c)) {
    CHECK(op.fp4 == op.fp8);
    fp4 += op.fp4 ? 1 : 0;
    if (op.name == "nvfp4_quantize") quantize_fwd = op.bytes;
  }
  for (const Op& op : layer_backward(m, c)) {
    CHECK(op.fp4 == op.fp8);
    fp4 += op.fp4 ? 1 : 0;
    if (op.name == "nvfp4_grad_quantize") quantize_bwd = op.bytes;
  }
  CHECK(fp4 == 4 + 8);
  CHECK(quantize_fwd == Approx(7.125 * inputs));
  CHECK(quantize_bwd == Approx(7.125 * s * ((q + 2 * kv) + h + 2 * f + h)));
}

// LoRA (Megatron-Bridge's peft "lora") on the Llama-3.1-70B layer at TP 8: the frozen base computes
// no weight gradient and keeps no GEMM input for one; an adapter of rank 32 on linear_qkv adds two
// forward GEMMs (A: h -> r, B: r -> the rank's q + 2kv), the scaled add, and in the backward B's and
// A's data and weight gradients and the input-gradient add. Its kept tensors: A's input (the norm
// output, s x h) and B's input (s x r), both BF16.
TEST_CASE("lora freezes the base linears and adds adapters to the targeted ones") {
  const ModelSpec m = llama70b();
  LayerConfig c = llama70b_tp8_8k();
  const std::vector<Op> base_fwd = layer_forward(m, c);
  const double base_saved = saved(base_fwd);
  c.frozen_weights = true;
  c.lora_rank = 32;
  c.lora_targets = kLoraQkv;
  const double s = 8192, h = 8192, F = 28672, t = 8, r = 32, qkv = (8192.0 + 2 * 8 * 128) / t, d = 2;
  const std::vector<Op> fwd = layer_forward(m, c);
  double adapter_flops = 0, adapter_saved = 0;
  for (const Op& op : fwd) {
    if (op.name.rfind("lora_", 0) != 0) continue;
    adapter_flops += op.flops;
    adapter_saved += static_cast<double>(op.saved_bytes);
  }
  CHECK(adapter_flops == Approx(2 * s * h * r + 2 * s * r * qkv));
  CHECK(adapter_saved == Approx(d * (s * h + s * r)));
  // The base keeps none of its four GEMM inputs (2 bytes each without FP8).
  const double inputs = s * h + s * h + s * h / t + s * F / t;
  CHECK(saved(fwd) == Approx(base_saved - d * inputs + adapter_saved));
  int wgrads = 0, lora_ops = 0;
  double lora_bwd_flops = 0;
  for (const Op& op : layer_backward(m, c)) {
    if (op.weight_grad) {
      ++wgrads;
      CHECK(op.name.rfind("lora_qkv_", 0) == 0);
    }
    if (op.name.rfind("lora_", 0) == 0) {
      ++lora_ops;
      lora_bwd_flops += op.flops;
    }
  }
  CHECK(wgrads == 2);
  CHECK(lora_ops == 5);
  CHECK(lora_bwd_flops == Approx(2 * adapter_flops));
  // Adapters per rank: A (h x r) and B (r x the rank's QKV width).
  CHECK(lora_params_per_rank(m, c) == static_cast<std::int64_t>(r * (h + qkv)));
  c.lora_targets = kLoraQkv | kLoraProj | kLoraFc1 | kLoraFc2;
  CHECK(lora_params_per_rank(m, c) ==
        static_cast<std::int64_t>(r * ((h + qkv) + (h / t + h) + (h + 2 * F / t) + (F / t + h))));
}

// Packed sequences: 8192 tokens holding documents of 512, each attended causally on its own. The
// forward count is 4·b·heads·hd·(s/L)·L²/2 instead of 4·b·heads·hd·s²/2: 1/16 of it here; with a
// sliding window of 128 inside each document, (s/L)·(W·L − W(W−1)/2) pairs. The kernel runs at the
// efficiency of L-token keys.
TEST_CASE("packed documents attend within themselves") {
  const ModelSpec m = llama70b();
  LayerConfig c = llama70b_tp8_8k();
  auto core = [&](const LayerConfig& lc) {
    for (const Op& op : layer_forward(m, lc))
      if (op.kind == OpKind::attention) return op;
    return Op{};
  };
  const Op whole = core(c);
  c.document_tokens = 512;
  const Op packed = core(c);
  const double s = 8192, l = 512, heads = 64.0 / 8, hd = 128;
  CHECK(whole.flops == Approx(4 * heads * hd * s * s / 2));
  CHECK(packed.flops == Approx(4 * heads * hd * (s / l) * l * l / 2));
  CHECK(packed.attention.seq_kv == 512);
  ModelSpec windowed = m;
  windowed.sliding_window = 128;
  windowed.sliding_window_pattern = 1;
  double window_flops = 0;
  for (const Op& op : layer_forward(windowed, c))
    if (op.kind == OpKind::attention) window_flops += op.flops;
  CHECK(window_flops == Approx(4 * heads * hd * (s / l) * (128 * l - 128.0 * 127 / 2)));
  // A document as long as the sequence is no packing at all.
  c.document_tokens = 8192;
  CHECK(core(c).flops == whole.flops);
}

// A frozen base casts no transposed FP8 copies: forward, the projection input's own cast (read 2,
// write 1 byte); backward, each output gradient's (read 2, write 1).
TEST_CASE("lora with fp8 casts no transposed copies") {
  const ModelSpec m = llama70b();
  LayerConfig c;
  c.seq_len = 4096;
  c.tp = 8;
  c.fp8 = true;
  c.frozen_weights = true;
  c.lora_rank = 16;
  c.lora_targets = kLoraQkv;
  double cast_fwd = 0, cast_bwd = 0;
  for (const Op& op : layer_forward(m, c)) {
    if (op.name == "fp8_cast_transpose") cast_fwd = op.bytes;
    if (op.name.rfind("lora_", 0) == 0) CHECK_FALSE(op.fp8);
  }
  for (const Op& op : layer_backward(m, c))
    if (op.name == "fp8_grad_cast_transpose") cast_bwd = op.bytes;
  const double tokens = 4096, h = 8192, q = 8192.0 / 8, kv = 8 * 128.0 / 8, f = 28672.0 / 8;
  CHECK(cast_fwd == Approx(3 * tokens * q));
  CHECK(cast_bwd == Approx(3 * tokens * ((q + 2 * kv) + h + 2 * f + h)));
  // The frozen embedding takes no gradient, the frozen output layer no weight gradient.
  for (const Op& op : embedding_backward(m, c)) CHECK(op.name != "embedding_grad");
  for (const Op& op : head_backward(m, c)) CHECK_FALSE(op.weight_grad);
}

namespace {

// A Qwen3-MoE-like model: 32 experts of width 512, top 4, GQA.
ModelSpec moe_model(std::int64_t shared = 0) {
  ModelSpec m;
  m.name = "moe";
  m.layers = 4;
  m.hidden = 1024;
  m.heads = 16;
  m.kv_heads = 4;
  m.head_dim = 64;
  m.vocab = 32000;
  m.mlp = MlpKind::swiglu;
  m.experts = 32;
  m.experts_per_token = 4;
  m.moe_ffn_hidden = 512;
  m.shared_expert_ffn_hidden = shared;
  return m;
}

// 4,096 tokens over tp 2 with SP (2,048 per rank), ep 4 x etp 2.
LayerConfig tp2_ep4_etp2() {
  LayerConfig c;
  c.seq_len = 4096;
  c.tp = 2;
  c.sequence_parallel = true;
  c.ep = 4;
  c.etp = 2;
  return c;
}

double gemm_flops(const std::vector<Op>& ops, const std::string& prefix) {
  double f = 0;
  for (const Op& op : ops)
    if (op.kind == OpKind::gemm && op.name.rfind(prefix, 0) == 0) f += op.flops;
  return f;
}

}  // namespace

// Balanced routing: every rank's R tokens make R·k copies, and every rank receives R·k copies for
// its E/ep experts, so the experts' GEMM work per rank is 2·R·k·h·(2F) + 2·R·k·F·h whatever ep is;
// the router adds 2·R·h·E. Dispatch and combine each move R·k·h·2 bytes per rank over the EP group.
TEST_CASE("MoE layer: expert FLOPs follow the tokens routed, all-to-alls move R·k·h per rank") {
  const ModelSpec m = moe_model();
  LayerConfig c;
  c.micro_batch = 2;
  c.seq_len = 2048;
  const double R = 2 * 2048, k = 4, h = 1024, F = 512, E = 32;
  for (std::int64_t ep : {1, 4, 8}) {
    c.ep = ep;
    INFO("ep " << ep);
    const auto fwd = layer_forward(m, c);
    const auto bwd = layer_backward(m, c);
    CHECK(gemm_flops(fwd, "experts_") == Approx(2 * R * k * h * 2 * F + 2 * R * k * F * h));
    CHECK(gemm_flops(bwd, "experts_") == Approx(2 * (2 * R * k * h * 2 * F + 2 * R * k * F * h)));
    CHECK(gemm_flops(fwd, "router") == Approx(2 * R * h * E));
    // Grouped GEMM: E/ep local experts of R·k·ep/E rows each, one cuBLAS GEMM (kernel and host
    // launch) per expert, in the forward and in both backward GEMMs.
    for (const Op& op : fwd)
      if (op.name == "experts_fc1") {
        CHECK(op.gemm.batch == 32 / ep);
        CHECK(op.gemm.m == static_cast<std::int64_t>(R * k * static_cast<double>(ep) / E));
        CHECK(op.gemm.n == 2 * 512);
      }
    int grouped = 0;
    for (const auto* ops : {&fwd, &bwd})
      for (const Op& op : *ops)
        if (op.kind == OpKind::gemm && op.name.starts_with("experts_fc")) {
          CHECK(op.kernels == 32 / ep);
          CHECK(op.host_launches == 32 / ep);
          ++grouped;
        }
    CHECK(grouped == 6);
    int a2a = 0;
    for (const auto* ops : {&fwd, &bwd})
      for (const Op& op : *ops)
        if (op.kind == OpKind::tp_comm) {
          CHECK(op.comm == Comm::all_to_all);
          CHECK(op.group == CommGroup::ep);
          CHECK(op.comm_bytes == static_cast<std::int64_t>(R * k * h * 2));
          ++a2a;
        }
    CHECK(a2a == (ep > 1 ? 4 : 0));
  }
  // No dense MLP is left.
  for (const Op& op : layer_forward(m, c)) CHECK(op.name.rfind("fc", 0) != 0);
}

// The alltoall dispatcher sorts the R·k rows a rank receives by local expert after the dispatch and
// back before the combine, and autograd runs both copies again in the backward: each reads and writes
// R·k·h·2 bytes, and the sorts also the rows' fp32 routing weights (R·k·4, read and written). With one
// local expert (ep = E) the rows already are in order, and the flex dispatcher permutes once each
// way (moe_permute): no sort either.
TEST_CASE("MoE layer: the alltoall dispatcher sorts the received rows by local expert and back") {
  const ModelSpec m = moe_model();
  LayerConfig c;
  c.micro_batch = 2;
  c.seq_len = 2048;
  const double rows = 2 * 2048 * 4, h = 1024;
  auto bytes_of = [](const std::vector<Op>& ops, const std::string& name) {
    double b = 0;
    int n = 0;
    for (const Op& op : ops)
      if (op.name == name) {
        CHECK(op.kind == OpKind::memory);
        b += op.bytes;
        ++n;
      }
    return std::pair{n, b};
  };
  for (std::int64_t ep : {1, 8}) {
    INFO("ep " << ep);
    c.ep = ep;
    const auto fwd = layer_forward(m, c), bwd = layer_backward(m, c);
    CHECK(bytes_of(fwd, "moe_sort_by_local_expert") == std::pair{1, 2 * rows * h * 2 + 2 * rows * 4});
    CHECK(bytes_of(fwd, "moe_unsort_by_local_expert") == std::pair{1, 2 * rows * h * 2});
    CHECK(bytes_of(bwd, "moe_unsort_by_local_expert_backward") == std::pair{1, 2 * rows * h * 2});
    CHECK(bytes_of(bwd, "moe_sort_by_local_expert_backward") == std::pair{1, 2 * rows * h * 2 + 2 * rows * 4});
  }
  auto sorts = [](const std::vector<Op>& ops) {
    return std::ranges::count_if(
        ops, [](const Op& op) { return op.name.find("sort_by_local_expert") != std::string::npos; });
  };
  c.ep = 32;  // one local expert
  CHECK(sorts(layer_forward(m, c)) + sorts(layer_backward(m, c)) == 0);
  c.ep = 8;
  c.moe_flex_dispatch = true;
  CHECK(sorts(layer_forward(m, c)) + sorts(layer_backward(m, c)) == 0);
  c.moe_flex_dispatch = false;
  c.moe_allgather_dispatch = true;
  CHECK(sorts(layer_forward(m, c)) + sorts(layer_backward(m, c)) == 0);
}

// Without --moe-router-fusion the router runs as eager PyTorch ops: 41 kernels and calls more than the
// fused path's (72 against 31, Megatron-LM's DeepSeek-V3 GB200 guide), and per element of the R x E
// scores 2d + 34 bytes instead of d + 8 forward (d = 2: 26 + d more), 44 + d instead of 12 + d
// backward (32 more). Without --moe-permute-fusion, permute() transposes and masked_selects the
// routing map, the token indices and the probabilities (24 bytes per map element, 8 per token (arange)
// and 12 per copy more; 10 kernels from 7 calls); unpermute() is zeros + scatter_add (each copy's row
// read and written into its token's, 2·R·k·h·d bytes more, and its int64 index; 2 kernels, 2 calls);
// autograd's permute backward is an index_add into zeros (2·R·k·h·d more) with the probabilities'
// masked_scatter and transpose (16 per map element; 6 kernels from 5 calls); unpermute's backward,
// a gather, reads a token's row once per copy ((R·k − R)·h·d more). Nothing else changes.
TEST_CASE("MoE layer without the router and permute fusions: eager PyTorch's kernels and passes") {
  const ModelSpec m = moe_model();
  LayerConfig c;
  c.micro_batch = 2;
  c.seq_len = 2048;
  c.ep = 8;
  const double R = 2 * 2048, k = 4, h = 1024, E = 32, d = 2;
  const auto fused_fwd = layer_forward(m, c), fused_bwd = layer_backward(m, c);
  c.moe_router_fusion = false;
  c.moe_permute_fusion = false;
  const auto fwd = layer_forward(m, c), bwd = layer_backward(m, c);
  struct Change {
    const char* name;
    double bytes;
    std::int32_t kernels, calls;  // 0: unchanged
  };
  auto check = [](const std::vector<Op>& fused, const std::vector<Op>& unfused, const std::vector<Change>& changes) {
    REQUIRE(fused.size() == unfused.size());
    for (std::size_t i = 0; i < fused.size(); ++i) {
      const Op &a = fused[i], &b = unfused[i];
      INFO(a.name);
      REQUIRE(a.name == b.name);
      const auto it = std::ranges::find_if(changes, [&](const Change& ch) { return a.name == ch.name; });
      if (it == changes.end()) {
        CHECK(b.bytes == a.bytes);
        CHECK(b.kernels == a.kernels);
        CHECK(b.host_calls == a.host_calls);
        continue;
      }
      CHECK(b.bytes - a.bytes == Approx(it->bytes));
      if (it->name == std::string_view("router_softmax_topk") ||
          it->name == std::string_view("router_softmax_topk_backward")) {
        CHECK(b.kernels == a.kernels + 41);
        CHECK(b.host_calls == a.host_calls + 41);
      } else {
        CHECK(b.kernels == (it->kernels > 0 ? it->kernels : a.kernels));
        CHECK(b.host_calls == (it->calls > 0 ? it->calls : a.host_calls));
      }
    }
  };
  check(fused_fwd, fwd,
        {{"router_softmax_topk", R * E * (26 + d), 0, 0},
         {"moe_permute", R * E * 24 + R * 8 + R * k * 12, 10, 7},
         {"moe_unpermute", 2 * R * k * h * d + R * k * 8, 2, 2}});
  check(fused_bwd, bwd,
        {{"router_softmax_topk_backward", R * E * 32, 0, 0},
         {"moe_permute_backward", 2 * R * k * h * d + R * E * 16, 6, 5},
         {"moe_unpermute_backward", (R * k - R) * h * d, 0, 0}});
  // The allgather dispatcher permutes the G = ep·R gathered tokens over its E/ep local experts into its
  // R·k rows: the same passes over that map; its fused unpermute backward already reads every row.
  {
    LayerConfig a = c;
    a.moe_allgather_dispatch = true;
    a.moe_router_fusion = a.moe_permute_fusion = true;
    const auto ag_fused_fwd = layer_forward(m, a), ag_fused_bwd = layer_backward(m, a);
    a.moe_permute_fusion = false;
    const double G = R * 8, local = E / 8;
    check(ag_fused_fwd, layer_forward(m, a),
          {{"moe_permute", G * local * 24 + G * 8 + R * k * 12, 10, 7},
           {"moe_unpermute", 2 * R * k * h * d + R * k * 8, 2, 2}});
    check(ag_fused_bwd, layer_backward(m, a),
          {{"moe_permute_backward", 2 * R * k * h * d + G * local * 16, 6, 5}, {"moe_unpermute_backward", 0, 0, 0}});
  }
  // Sync-free buffers spare the CPU its wait for the token counts, but the unfused permutation's
  // masked_select copies its output size to the CPU all the same.
  c.moe_flex_dispatch = true;
  c.moe_rank_capacity_factor = 1.5;
  auto permute_syncs = [&] {
    const auto ops = layer_forward(m, c);
    const auto it = std::ranges::find_if(ops, [](const Op& op) { return op.name == "moe_permute"; });
    REQUIRE(it != ops.end());
    return it->host_sync;
  };
  CHECK(permute_syncs());
  c.moe_permute_fusion = true;
  CHECK_FALSE(permute_syncs());
  // With the token counts on the GPU the experts' GEMMs are one grouped kernel, not one per expert.
  for (const auto& ops : {layer_forward(m, c), layer_backward(m, c)})
    for (const Op& op : ops)
      if (op.kind == OpKind::gemm && op.name.starts_with("experts_fc")) {
        CHECK(op.gemm.batch == static_cast<std::int64_t>(E / 8));
        CHECK(op.kernels == 1);
        CHECK(op.host_launches == 1);
      }
}

// Transformer Engine's split_quantize casts a grouped GEMM's operand one local expert at a time for
// MXFP8 (and current or block scaling), a kernel each; delayed scaling casts them all in one
// multi-tensor kernel. Per pass two grouped GEMMs quantise an operand each (forward: fc1's and fc2's
// inputs; backward: their output gradients), so the layer's cast op runs 2·(E/ep − 1) kernels more
// than its 4. Sync-free experts and NVFP4 use grouped kernels: none more. The bytes do not change.
TEST_CASE("MoE layer under MXFP8: one cast kernel per local expert and grouped GEMM operand") {
  const ModelSpec m = moe_model();
  LayerConfig c;
  c.micro_batch = 2;
  c.seq_len = 2048;
  c.ep = 4;  // 8 local experts
  c.fp8 = true;
  const auto cast = [&](bool backward) {
    const auto ops = backward ? layer_backward(m, c) : layer_forward(m, c);
    const auto it =
        std::ranges::find_if(ops, [](const Op& op) { return op.name.find("cast_transpose") != std::string::npos; });
    REQUIRE(it != ops.end());
    return *it;
  };
  c.moe_grouped_gemm = false;  // SequentialMLP: each expert's linears cast their own operands
  CHECK(cast(false).kernels == 4 + 2 * (8 - 1));
  c.moe_grouped_gemm = true;
  const Op delayed_fwd = cast(false), delayed_bwd = cast(true);
  // Cast on their own (read 2 bytes, write 1 + 1): the projection's input (R·q) and both expert GEMMs'
  // inputs (R·k·h and R·k·F, TEGroupedMLP's activation being a kernel of its own); fused into the
  // norm (the transposed byte only): the QKV input (R·h). R = 4096 tokens, k = 4, h = q = 1024, F = 512.
  const double R = 2 * 2048, k = 4, h = 1024, F = 512;
  CHECK(delayed_fwd.bytes == Approx(4 * (R * h + R * k * (h + F)) + R * h));
  CHECK(delayed_fwd.kernels == 4);
  CHECK(delayed_bwd.kernels == 4);
  c.fp8_split_casts = true;
  for (bool backward : {false, true}) {
    INFO("backward " << backward);
    const Op split = cast(backward);
    CHECK(split.kernels == 4 + 2 * (8 - 1));
    CHECK(split.bytes == (backward ? delayed_bwd : delayed_fwd).bytes);
    CHECK(split.host_calls == 4);  // launched from C++ with the GEMMs (set_host_costs), no Python call each
  }
  c.moe_flex_dispatch = true;  // sync-free experts: the flex dispatcher's fixed-size buffers
  c.moe_rank_capacity_factor = 1.5;
  c.moe_permute_fusion = true;
  CHECK(cast(false).kernels == 4);
  c.moe_flex_dispatch = false;
  c.moe_rank_capacity_factor = 0;
  c.ep = 32;  // one local expert
  CHECK(cast(true).kernels == 4);
}

// Without --moe-grouped-gemm Megatron-Core runs SequentialMLP: the same expert GEMMs (a kernel each),
// but every expert's linear is a module call of its own (its weight gradient a launch), its activation
// a call and kernel per expert, and torch.cat joins the experts' outputs (forward) and the input
// gradients (backward): R·k rows of h in bf16 read and written once each.
TEST_CASE("MoE layer as SequentialMLP: a module call per expert and linear, the outputs concatenated") {
  const ModelSpec m = moe_model();
  LayerConfig c;
  c.micro_batch = 2;
  c.seq_len = 2048;
  c.ep = 8;  // 4 local experts
  const double R = 2 * 2048, k = 4, h = 1024;
  const auto grouped_fwd = layer_forward(m, c), grouped_bwd = layer_backward(m, c);
  c.moe_grouped_gemm = false;
  const auto fwd = layer_forward(m, c), bwd = layer_backward(m, c);
  CHECK(fwd.size() == grouped_fwd.size() + 1);
  CHECK(bwd.size() == grouped_bwd.size() + 1);
  for (const auto* ops : {&fwd, &bwd})
    for (const Op& op : *ops) {
      if (op.kind == OpKind::gemm && op.name.starts_with("experts_fc")) {
        INFO(op.name);
        CHECK(op.kernels == 4);
        CHECK(op.host_calls == 4);
        CHECK(op.host_launches == (op.weight_grad ? 4 : 0));
      }
      if (op.name.starts_with("experts_swiglu")) {
        CHECK(op.kernels == 4);
        CHECK(op.host_calls == 4);
      }
    }
  const auto cat = [](const std::vector<Op>& ops, const std::string& name) {
    const auto it = std::ranges::find_if(ops, [&](const Op& op) { return op.name == name; });
    REQUIRE(it != ops.end());
    return *it;
  };
  CHECK(cat(fwd, "experts_output_cat").bytes == Approx(2 * R * k * h * 2));
  CHECK(cat(bwd, "experts_input_grad_cat").bytes == Approx(2 * R * k * h * 2));
  CHECK(cat(fwd, "experts_output_cat").kernels == 1);
}

// Biased experts (GPT-OSS; ModelSpec::linear_bias): Megatron-Core's TEGroupedMLP adds fc2's bias,
// scaled by each row's routing weight, in eager PyTorch after the grouped GEMM (_apply_bias): per
// local expert a multiply and an add, then a cat, reading and writing 6 bf16 elements per element of
// the R·k x h rows; autograd's backward 8 (the two gradients of the multiply, each written and read
// back by its sum, and split's cat), in 4 kernels per local expert and 2 cats. Without biases, no op.
TEST_CASE("MoE layer with biased experts: fc2's bias added per expert in eager PyTorch") {
  ModelSpec m = moe_model();
  LayerConfig c;
  c.micro_batch = 2;
  c.seq_len = 2048;
  c.ep = 8;  // 4 local experts
  const double rows = 2 * 2048 * 4, h = 1024;
  auto find = [](const std::vector<Op>& ops, const std::string& name) {
    return std::ranges::find_if(ops, [&](const Op& op) { return op.name == name; });
  };
  {
    const auto fwd = layer_forward(m, c), bwd = layer_backward(m, c);
    CHECK(find(fwd, "experts_fc2_bias") == fwd.end());
    CHECK(find(bwd, "experts_fc2_bias_backward") == bwd.end());
  }
  m.linear_bias = true;
  const auto fwd = layer_forward(m, c), bwd = layer_backward(m, c);
  const auto f = find(fwd, "experts_fc2_bias"), b = find(bwd, "experts_fc2_bias_backward");
  REQUIRE(f != fwd.end());
  REQUIRE(b != bwd.end());
  CHECK(f->bytes == 6 * rows * h * 2);
  CHECK(f->kernels == 2 * 4 + 1);
  CHECK(b->bytes == 8 * rows * h * 2);
  CHECK(b->kernels == 4 * 4 + 2);
  // Right after fc2 in the forward, right before fc2's data gradient in the backward.
  CHECK(std::prev(f)->name == "experts_fc2");
  CHECK(std::next(b)->name == "experts_fc2_dgrad");
}

// Clamped experts (GPT-OSS; ModelSpec::glu_clamp): Megatron-Core's weighted quick-GeGLU clamps fc1's
// output in eager PyTorch before its fused kernel. Forward: each half of the R·k x 2F rows clamped
// (read and written) and the halves joined by torch.cat (read and written): 4 passes of the 2F-wide
// bf16 rows, 3 kernels, keeping fc1's output (2F wide) for the clamps' backward. Backward: each
// clamp's masked gradient reads the gradient and the kept input and writes (3 half passes each), and
// chunk's gradient joins the halves (2): 5 passes, 3 kernels. Under the moe_act recompute the fused
// kernel's joined copy is dropped and made again; the clamps' input (fc1's output) stays.
TEST_CASE("MoE layer with clamped experts: the clamps and the cat run in eager PyTorch") {
  ModelSpec m = moe_model();
  LayerConfig c;
  c.micro_batch = 2;
  c.seq_len = 2048;
  c.ep = 8;
  const double rows = 2 * 2048 * 4, F = 512, wide = rows * 2 * F * 2;  // bytes of the 2F-wide bf16 rows
  auto find = [](const std::vector<Op>& ops, const std::string& name) {
    return std::ranges::find_if(ops, [&](const Op& op) { return op.name == name; });
  };
  {
    const auto fwd = layer_forward(m, c), bwd = layer_backward(m, c);
    CHECK(find(fwd, "experts_glu_clamp") == fwd.end());
    CHECK(find(bwd, "experts_glu_clamp_backward") == bwd.end());
  }
  m.glu_clamp = 7;
  const auto fwd = layer_forward(m, c), bwd = layer_backward(m, c);
  const auto f = find(fwd, "experts_glu_clamp"), b = find(bwd, "experts_glu_clamp_backward");
  REQUIRE(f != fwd.end());
  REQUIRE(b != bwd.end());
  CHECK(f->bytes == Approx(4 * wide));
  CHECK(f->kernels == 3);
  CHECK(f->saved_bytes == static_cast<std::int64_t>(wide));
  CHECK(b->bytes == Approx(5 * wide));
  CHECK(b->kernels == 3);
  // Between fc1 and the fused activation; after the activation's backward, before fc1's data gradient.
  CHECK(std::prev(f)->name == "experts_fc1");
  CHECK(std::next(f)->name == "experts_swiglu");
  CHECK(std::prev(b)->name == "experts_swiglu_backward");
  CHECK(std::next(b)->name == "experts_fc1_dgrad");
  // moe_act: the clamps run again and keep their input; the fused kernel's joined copy is discarded.
  CHECK((f->rerun & kRecomputeMoeAct) != 0);
  CHECK((f->discards & kRecomputeMoeAct) == 0);
  CHECK((std::next(f)->discards & kRecomputeMoeAct) != 0);
}

// One rank of the moe_model() layer for the routing tests below: micro-batch 2 of 2,048 tokens (R =
// 4,096 routed with k = 4 of E = 32 experts), ep 8, hidden 1,024, expert width 512; a GEMM pass over
// `rows` routed copies costs the SwiGLU experts' fc1 (2F wide) and fc2.
struct MoeRank {
  ModelSpec m = moe_model();
  LayerConfig c;
  static constexpr double R = 2 * 2048, k = 4, h = 1024, F = 512, E = 32;
  MoeRank() {
    c.micro_batch = 2;
    c.seq_len = 2048;
    c.ep = 8;
  }
  static double expert_flops(double rows) { return 2 * rows * h * 2 * F + 2 * rows * F * h; }
  // The forward's expert GEMM rows and all-to-all bytes carry `copies`; the backward runs twice the FLOPs.
  void check_copies(double copies) const {
    const auto fwd = layer_forward(m, c);
    CHECK(gemm_flops(fwd, "experts_") == Approx(expert_flops(copies)));
    CHECK(gemm_flops(layer_backward(m, c), "experts_") == Approx(2 * expert_flops(copies)));
    for (const Op& op : fwd) {
      if (op.name == "experts_fc1") CHECK(op.gemm.m == static_cast<std::int64_t>(copies * 8 / E));
      if (op.kind == OpKind::tp_comm) CHECK(op.comm_bytes == static_cast<std::int64_t>(copies * h * 2));
    }
  }
};

// Token dropping (Megatron-Core's capacity factor): each of the E experts takes at most
// ceil(f·R·k/E) of a rank's R·k copies. Here R·k/E = 4096·4/32 = 512: factor 1.5 gives 768 per
// expert, 1.5 times the balanced work and all-to-all bytes when padded, the balanced ones when not
// (balanced routing drops nothing then); factor 0.5 drops half the copies, padded or not; 1.001
// rounds up, ceil(512.512) = 513 per expert when padded. Padding makes the token counts static: the
// CPU no longer waits for them.
TEST_CASE("MoE layer with a capacity factor: padded to the capacity, or dropping what exceeds it") {
  MoeRank x;
  constexpr double R = MoeRank::R, k = MoeRank::k, E = MoeRank::E;
  auto synced = [](const std::vector<Op>& ops) {
    return std::count_if(ops.begin(), ops.end(), [](const Op& op) { return op.host_sync; });
  };
  CHECK(synced(layer_forward(x.m, x.c)) == 1);  // dropless: the counts go to the CPU
  for (auto [factor, pad, copies] :
       {std::tuple{1.5, true, 1.5 * R * k}, std::tuple{1.5, false, R * k}, std::tuple{0.5, true, 0.5 * R * k},
        std::tuple{0.5, false, 0.5 * R * k}, std::tuple{1.001, true, 513 * E}, std::tuple{1.0, true, R * k}}) {
    x.c.moe_capacity_factor = factor;
    x.c.moe_pad_to_capacity = pad;
    INFO("factor " << factor << " pad " << pad);
    x.check_copies(copies);
    CHECK(synced(layer_forward(x.m, x.c)) == (pad ? 0 : 1));
  }
}

// Routing imbalance: the busiest rank receives moe_load_imbalance times the mean R·k copies; its
// grouped GEMMs run that many rows and the all-to-alls carry that many (its side bounds them). A
// capacity caps each expert at ceil(f·R·k/E): with f = 1.2, 1.5 times the mean is cut to
// ceil(1.2·512)·32 = 615·32 copies; f = 0.5 drops to 256·32 whatever the imbalance.
TEST_CASE("MoE layer with a load imbalance: the busiest rank's rows, capped by a capacity") {
  MoeRank x;
  constexpr double R = MoeRank::R, k = MoeRank::k, E = MoeRank::E;
  for (auto [imbalance, factor, copies] :
       {std::tuple{1.0, 0.0, R * k}, std::tuple{1.5, 0.0, 1.5 * R * k}, std::tuple{1.5, 1.2, 615 * E},
        std::tuple{1.1, 1.2, 1.1 * R * k}, std::tuple{1.5, 0.5, 256 * E}}) {
    x.c.moe_load_imbalance = imbalance;
    x.c.moe_capacity_factor = factor;
    INFO("imbalance " << imbalance << " factor " << factor);
    x.check_copies(copies);
  }
  // The flex dispatcher's copies per token grow by the same factor.
  x.c.moe_capacity_factor = 0;
  x.c.moe_flex_dispatch = true;
  x.c.moe_load_imbalance = 1;
  std::int64_t balanced = 0;
  for (const Op& op : layer_forward(x.m, x.c))
    if (op.kind == OpKind::tp_comm) balanced = op.comm_bytes;
  x.c.moe_load_imbalance = 1.25;
  for (const Op& op : layer_forward(x.m, x.c))
    if (op.kind == OpKind::tp_comm) CHECK(op.comm_bytes == Approx(1.25 * static_cast<double>(balanced)).epsilon(1e-6));
}

// Flex dispatch (DeepEP / HybridEP): a token goes once to each destination that holds any of its k
// experts, not once per expert. With 32 experts and top 4, uniform routing misses a given group of g
// experts with probability C(32 - g, 4) / C(32, 4). Inside one node (ep 8, groups of 4 experts):
// C(28,4)/C(32,4) = 20475/35960, so 8·(1 - 20475/35960) = 3.4455 copies per token instead of 4.
// Across 2 nodes (ep 16, 16 experts per node): C(16,4)/C(32,4) = 1820/35960, so 2·(1 - 1820/35960)
// = 1.8988 copies, the all-to-all sending half of them over the NICs: each token crosses once to
// the other node when any of its experts is there.
TEST_CASE("MoE layer with the flex dispatcher: all-to-alls move one copy per destination rank or node") {
  const ModelSpec m = moe_model();
  LayerConfig c;
  c.seq_len = 2048;
  c.moe_flex_dispatch = true;
  const double R = 2048, h = 1024;
  for (auto [ep, nodes, copies] :
       {std::tuple{8, 1, 8 * (1 - 20475.0 / 35960)}, std::tuple{16, 2, 2 * (1 - 1820.0 / 35960)}}) {
    c.ep = ep;
    c.ep_nodes = nodes;
    INFO("ep " << ep << " nodes " << nodes);
    int a2a = 0;
    for (const auto& ops : {layer_forward(m, c), layer_backward(m, c)})
      for (const Op& op : ops)
        if (op.kind == OpKind::tp_comm && op.group == CommGroup::ep) {
          CHECK(op.comm_bytes == static_cast<std::int64_t>(R * copies * h * 2));
          ++a2a;
        }
    CHECK(a2a == 4);
  }
}

// Group-limited routing (DeepSeek-V3's node-limited routing) with the flex dispatcher: the 32
// experts form 8 groups of 4 and each token takes its 4 experts within 2 groups. Inside one node
// (ep 8, a group per rank) the token reaches both groups' ranks unless all 4 experts fall in one
// group, C(4,4)/C(8,4) = 1/70 for each: 2 - 2/70 = 69/35 copies (3.4455 unlimited, above). Across 2
// nodes (ep 16, 4 groups per node) the 2 groups share a node with probability 2·C(4,2)/C(8,2) = 3/7,
// one copy; otherwise 69/35 as before: 3/7 + (4/7)·(69/35) = 381/245 copies (1.8988 unlimited).
TEST_CASE("MoE layer with the flex dispatcher and group-limited routing: fewer destinations per token") {
  ModelSpec m = moe_model();
  m.router_groups = 8;
  m.router_group_topk = 2;
  LayerConfig c;
  c.seq_len = 2048;
  c.moe_flex_dispatch = true;
  const double R = 2048, h = 1024;
  for (auto [ep, nodes, copies] : {std::tuple{8, 1, 69.0 / 35}, std::tuple{16, 2, 381.0 / 245}}) {
    c.ep = ep;
    c.ep_nodes = nodes;
    INFO("ep " << ep << " nodes " << nodes);
    for (const Op& op : layer_forward(m, c))
      if (op.kind == OpKind::tp_comm && op.group == CommGroup::ep)
        CHECK(op.comm_bytes == static_cast<std::int64_t>(R * copies * h * 2));
  }
  // Every group picked (8 of 8) limits nothing: uniform routing's 8·(1 - C(28,4)/C(32,4)) at ep 8.
  m.router_group_topk = 8;
  c.ep = 8;
  c.ep_nodes = 1;
  for (const Op& op : layer_forward(m, c))
    if (op.kind == OpKind::tp_comm && op.group == CommGroup::ep)
      CHECK(op.comm_bytes == static_cast<std::int64_t>(R * 8 * (1 - 20475.0 / 35960) * h * 2));
  // The alltoall dispatcher sends one copy per expert whatever the groups: R·k rows.
  m.router_group_topk = 2;
  c.moe_flex_dispatch = false;
  for (const Op& op : layer_forward(m, c))
    if (op.kind == OpKind::tp_comm && op.group == CommGroup::ep)
      CHECK(op.comm_bytes == static_cast<std::int64_t>(R * 4 * h * 2));
}

// The allgather dispatcher over ep 4 × etp 2 = 8 ranks, tp 2 with SP (R = 4096/2 tokens per rank,
// hidden 1024, 32 experts, top 4): the forward all-gathers the 8·R tokens with a byte of routing map
// and 4 of probability per expert, 8R·(1024·2 + 32·5) bytes, over the ep x etp group, and
// reduce-scatters the outputs in fp32, 8R·1024·4; the backward all-gathers the output gradient in
// fp32 and reduce-scatters 8R·(1024·2 + 32·4). No all-to-all, no separate ETP collective; the experts
// run the alltoall dispatcher's rows, etp·R·k = 2·2048·4, and the CPU waits after the gather.
TEST_CASE("MoE layer with the allgather dispatcher: the ep x etp group's tokens gathered and scattered") {
  const ModelSpec m = moe_model(1024);
  LayerConfig c = tp2_ep4_etp2();
  c.moe_allgather_dispatch = true;
  const double G = 8, R = 2048, h = 1024, E = 32;
  const auto fwd = layer_forward(m, c), bwd = layer_backward(m, c);
  auto moe_comms = [](const std::vector<Op>& ops) {
    std::vector<const Op*> out;
    for (const Op& op : ops)
      if (op.kind == OpKind::tp_comm && op.group != CommGroup::tp) out.push_back(&op);
    return out;
  };
  const auto f = moe_comms(fwd), b = moe_comms(bwd);
  REQUIRE(f.size() == 2);
  REQUIRE(b.size() == 2);
  for (const Op* op : {f[0], f[1], b[0], b[1]}) CHECK(op->group == CommGroup::ep_etp);
  CHECK((f[0]->comm == Comm::all_gather && f[0]->comm_bytes == static_cast<std::int64_t>(G * R * (h * 2 + E * 5))));
  CHECK(f[0]->host_sync);
  CHECK((f[1]->comm == Comm::reduce_scatter && f[1]->comm_bytes == static_cast<std::int64_t>(G * R * h * 4)));
  CHECK((b[0]->comm == Comm::all_gather && b[0]->comm_bytes == static_cast<std::int64_t>(G * R * h * 4)));
  CHECK((b[1]->comm == Comm::reduce_scatter && b[1]->comm_bytes == static_cast<std::int64_t>(G * R * (h * 2 + E * 4))));
  for (const Op& op : fwd)
    if (op.name == "experts_fc1") CHECK(op.gemm.m * 32 / 4 == static_cast<std::int64_t>(2 * R * 4));  // 8 local experts
  // Without expert parallelism nothing is gathered: the permutations only.
  c.tp = 1;
  c.sequence_parallel = false;
  c.ep = 1;
  c.etp = 1;
  CHECK(moe_comms(layer_forward(m, c)).empty());
  CHECK(moe_comms(layer_backward(m, c)).empty());
}

// Expert tensor parallelism: the R·k copies each rank receives are all-gathered over its etp ranks
// (etp·R·k rows), each of which runs F/etp of every local expert; the ETP all-gather and
// reduce-scatter carry etp·R·k·h·2 bytes.
TEST_CASE("MoE layer with etp: ETP all-gather and reduce-scatter around experts split F/etp") {
  const ModelSpec m = moe_model(1024);
  const LayerConfig c = tp2_ep4_etp2();
  const double R = 4096.0 / 2, k = 4, h = 1024;
  const auto fwd = layer_forward(m, c);
  int etp_ops = 0, shared = 0;
  for (const Op& op : fwd) {
    if (op.kind == OpKind::tp_comm && op.group == CommGroup::etp) {
      CHECK(op.comm_bytes == static_cast<std::int64_t>(2 * R * k * h * 2));
      ++etp_ops;
    }
    if (op.name == "experts_fc1") CHECK(op.gemm.n == 2 * 512 / 2);
    if (op.name.rfind("shared_expert_fc", 0) == 0) {
      CHECK(op.gemm.m == 4096);  // the whole sequence after the SP all-gather
      ++shared;
    }
  }
  CHECK(etp_ops == 2);
  CHECK(shared == 2);
  CHECK(gemm_flops(fwd, "experts_") == Approx(2 * (2 * R * k) * h * 2 * 256 + 2 * (2 * R * k) * 256 * h));
  CHECK(gemm_flops(fwd, "shared_expert_") == Approx(2 * 4096 * h * 2 * 512 + 2 * 4096 * 512 * h));
  // Parameters: every expert once over ep x etp ranks; the shared expert split over tp.
  CHECK(layer_expert_params_per_rank(m, 4, 2) * 4 * 2 == m.expert_params_per_layer());
  CHECK(layer_params_per_rank(m, 2) * 2 + layer_expert_params_per_rank(m, 1, 1) ==
        m.params_per_layer() + 2 * 1024 + 1024 * 32);  // norms and router are replicated on both TP ranks
}

TEST_CASE("MoE under FP8: expert GEMMs in FP8, the router in BF16") {
  const ModelSpec m = moe_model();
  LayerConfig c;
  c.fp8 = true;
  c.ep = 2;
  for (const auto& ops : {layer_forward(m, c), layer_backward(m, c)})
    for (const Op& op : ops) {
      if (op.kind != OpKind::gemm || op.attention_core) continue;
      CHECK(op.fp8 == (op.name.rfind("router", 0) != 0));
    }
}

// A causal window of W keys: query i sees min(i + 1, W) keys, W·s − W(W − 1)/2 pairs; with half the
// layers windowed, the mean layer runs half its heads full and half windowed.
TEST_CASE("sliding-window attention: windowed FLOPs, alternating layers as half the heads each") {
  ModelSpec m = llama70b();
  m.sliding_window = 1024;
  m.sliding_window_pattern = 2;
  LayerConfig c;
  c.seq_len = 8192;
  c.tp = 8;
  c.sequence_parallel = true;
  const double s = 8192, w = 1024, hd = 128, heads = 64.0 / 8;
  double full = 0, windowed = 0;
  for (const Op& op : layer_forward(m, c)) {
    if (op.kind != OpKind::attention) continue;
    if (op.attention.seq_kv == 1024) {
      windowed += op.flops;
    } else {
      CHECK(op.attention.seq_kv == 8192);
      full += op.flops;
    }
  }
  CHECK(full == Approx(4 * s * s * heads / 2 * hd * 0.5));
  CHECK(windowed == Approx(4 * heads / 2 * hd * (w * s - w * (w - 1) / 2)));
  m.sliding_window_pattern = 1;  // every layer windowed: one kernel
  int kernels = 0;
  for (const Op& op : layer_backward(m, c)) kernels += op.kind == OpKind::attention;
  CHECK(kernels == 1);
}

namespace {

// Nemotron 3 Nano's blocks (Megatron-Bridge's Nemotron3NanoProvider): hidden 2688, 32 query heads of
// 128 in 2 groups, Mamba-2 with 64 heads of 64, state 128, 8 groups; 128 squared-ReLU experts of
// 1856, 6 per token, a shared expert of 3712.
ModelSpec nemotron_nano() {
  ModelSpec m;
  m.name = "nemotron-3-nano";
  m.hybrid_pattern = "MEM*E";
  m.layers = 5;
  m.hidden = 2688;
  m.heads = 32;
  m.kv_heads = 2;
  m.head_dim = 128;
  m.vocab = 131072;
  m.mlp = MlpKind::squared_relu;
  m.experts = 128;
  m.experts_per_token = 6;
  m.moe_ffn_hidden = 1856;
  m.shared_expert_ffn_hidden = 3712;
  m.mamba_heads = 64;
  m.mamba_head_dim = 64;
  m.mamba_state = 128;
  m.mamba_groups = 8;
  return m;
}

// Nemotron 3 Super's MoE layers on Nano's blocks: hidden 4096, 512 experts of 2688, 22 per token, a
// shared expert of 5376 and a 1024-wide latent.
ModelSpec nemotron_super_moe() {
  ModelSpec m = nemotron_nano();
  m.hidden = 4096;
  m.experts = 512;
  m.experts_per_token = 22;
  m.moe_ffn_hidden = 2688;
  m.shared_expert_ffn_hidden = 5376;
  m.moe_latent = 1024;
  return m;
}

const Op& op_named(const std::vector<Op>& ops, const std::string& name) {
  for (const Op& op : ops)
    if (op.name == name) return op;
  FAIL("no op " << name);
  return ops.front();
}

}  // namespace

// A Mamba-2 block at TP 2, micro-batch 1 of 8192 tokens: in_proj maps h to z and x (inner 32·64 =
// 2048 each per rank), B and C (4 groups · 128 each) and 32 dt: 5152 wide; the scan's chunk state
// is N x P x Q = 128 x 64 x 128 per chunk (64 of them) and head (32), C·B^T Q x Q x N per chunk and
// group (4), the chunk scan Q x P x (Q + N) per chunk and head. The scan stays BF16 under FP8.
TEST_CASE("Mamba block: projections, scan products and communication per TP rank") {
  const ModelSpec m = nemotron_nano();
  LayerConfig c;
  c.micro_batch = 1;
  c.seq_len = 8192;
  c.tp = 2;
  c.sequence_parallel = true;
  c.fp8 = true;
  const auto fwd = layer_forward(m, c, LayerBlock::mamba);
  const double t = 8192, h = 2688, in_w = 2 * 2048 + 2 * 4 * 128 + 32, chunks = 64;
  CHECK(op_named(fwd, "mamba_in_proj").flops == Approx(2 * t * in_w * h));
  CHECK(op_named(fwd, "mamba_out_proj").flops == Approx(2 * t * h * 2048));
  CHECK(op_named(fwd, "ssd_chunk_state").flops == Approx(2.0 * 128 * 64 * 128 * chunks * 32));
  CHECK(op_named(fwd, "ssd_bmm_chunk").flops == Approx(2.0 * 128 * 128 * 128 * chunks * 4));
  CHECK(op_named(fwd, "ssd_chunk_scan").flops == Approx(2.0 * 128 * 64 * 256 * chunks * 32));
  CHECK(op_named(fwd, "mamba_in_proj").fp8);
  // The scan's own kernels are marked for the GPU's share of the roofline (gpu_catalog.cc), the
  // projections not.
  CHECK(op_named(fwd, "ssd_chunk_scan").mamba_scan);
  CHECK(op_named(fwd, "mamba_conv1d").mamba_scan);
  CHECK_FALSE(op_named(fwd, "mamba_in_proj").mamba_scan);
  CHECK_FALSE(op_named(fwd, "ssd_chunk_scan").fp8);
  // SP: the input all-gathered, the output reduce-scattered; backward mirrors them.
  CHECK(count_comm(fwd, Comm::all_gather) == 1);
  CHECK(count_comm(fwd, Comm::reduce_scatter) == 1);
  const auto bwd = layer_backward(m, c, LayerBlock::mamba);
  CHECK(count_comm(bwd, Comm::all_gather) == 2);
  CHECK(count_comm(bwd, Comm::reduce_scatter) == 1);
  // Backward: each projection's data and weight gradient; the scan's products twice plus the
  // recomputed chunk state.
  CHECK(op_named(bwd, "mamba_in_proj_dgrad").flops == Approx(2 * t * in_w * h));
  CHECK(op_named(bwd, "mamba_in_proj_wgrad").weight_grad);
  CHECK(op_named(bwd, "ssd_chunk_scan_backward").flops == Approx(2 * op_named(fwd, "ssd_chunk_scan").flops));
  // Kept: the norm input (sequence-sharded), in_proj's FP8 input and BF16 output, the scan output y
  // and out_proj's FP8 input.
  const double region = t / 2;
  CHECK(saved(fwd) == Approx(region * h * 2 + region * h * 1 + t * in_w * 2 + t * 2048 * 2 + t * 2048 * 1));
  // A sequence shorter than a chunk is scanned as one padded chunk: 100 tokens, 2 sequences, 32 heads.
  LayerConfig short_seq = c;
  short_seq.seq_len = 100;
  short_seq.micro_batch = 2;
  CHECK(op_named(layer_forward(m, short_seq, LayerBlock::mamba), "ssd_chunk_state").gemm.batch == 2 * 32);
  // The "mamba" CUDA graph scope captures the block (not the FP8 casts, which the step builder issues).
  CHECK(op_named(fwd, "ssd_chunk_scan").graph == kGraphMamba);
  CHECK(op_named(fwd, "mamba_residual_add").graph == kGraphMamba);
}

// Context parallelism 2 at TP 2 (Megatron-Core's MambaContextParallel): each rank holds 4096 of the
// 8192 tokens; after in_proj one all-to-all over the CP group moves z and x (2048 each per TP rank), B
// and C (4 groups of 128 per TP rank: no repeat, 4 >= 2) and 32 dt, 5152 wide, of its 4096 tokens, and
// one brings the scan's 2048-wide output back; the backward mirrors both. With CP 8 each of the 4
// groups spans 2 CP ranks, so B and C go twice: 2·2048 + 2·4·2·128 + 32 = 6176 wide. The scan's work
// is the same as without CP, per rank half of it.
TEST_CASE("Mamba block under context parallelism: all-to-alls between sequence and head shards") {
  const ModelSpec m = nemotron_nano();
  LayerConfig c;
  c.micro_batch = 1;
  c.seq_len = 8192;
  c.tp = 2;
  c.sequence_parallel = true;
  c.cp = 2;
  const auto fwd = layer_forward(m, c, LayerBlock::mamba);
  const double t = 4096;
  const Op& in = op_named(fwd, "mamba_in_proj_output_cp_all_to_all");
  CHECK(in.group == CommGroup::cp);
  CHECK(in.comm == Comm::all_to_all);
  CHECK(in.comm_bytes == static_cast<std::int64_t>(t * (2 * 2048 + 2 * 4 * 128 + 32) * 2));
  CHECK(op_named(fwd, "mamba_output_cp_all_to_all").comm_bytes == static_cast<std::int64_t>(t * 2048 * 2));
  const auto bwd = layer_backward(m, c, LayerBlock::mamba);
  CHECK(op_named(bwd, "mamba_output_grad_cp_all_to_all").comm_bytes == static_cast<std::int64_t>(t * 2048 * 2));
  CHECK(op_named(bwd, "mamba_in_proj_output_grad_cp_all_to_all").comm_bytes == in.comm_bytes);
  LayerConfig one = c;
  one.cp = 1;
  one.seq_len = 4096;  // the same tokens per rank without CP
  CHECK(op_named(fwd, "ssd_chunk_scan").flops ==
        Approx(op_named(layer_forward(m, one, LayerBlock::mamba), "ssd_chunk_scan").flops));
  LayerConfig eight = c;
  eight.cp = 8;
  CHECK(op_named(layer_forward(m, eight, LayerBlock::mamba), "mamba_in_proj_output_cp_all_to_all").comm_bytes ==
        static_cast<std::int64_t>(1024.0 * (2 * 2048 + 2 * 4 * 2 * 128 + 32) * 2));
  // No CP, no CP communication.
  for (const Op& op : layer_forward(m, one, LayerBlock::mamba)) CHECK(op.group != CommGroup::cp);
}

// Attention-only and MoE-only blocks are the two halves of a transformer layer: their ops add up to
// the layer's (with the MoE block's pre-MLP norm in place of the post-attention norm), and a hybrid
// model's attention uses no rotary embedding.
TEST_CASE("hybrid attention and MoE blocks split a transformer layer") {
  const ModelSpec m = nemotron_nano();
  LayerConfig c;
  c.seq_len = 8192;
  c.ep = 8;
  const auto attention = layer_forward(m, c, LayerBlock::attention);
  const auto moe = layer_forward(m, c, LayerBlock::moe);
  const auto whole = layer_forward(m, c, LayerBlock::transformer);
  CHECK(attention.size() + moe.size() == whole.size());
  CHECK(flops_of(attention, OpKind::gemm) + flops_of(moe, OpKind::gemm) == Approx(flops_of(whole, OpKind::gemm)));
  CHECK(saved(attention) + saved(moe) == Approx(saved(whole)));
  for (const Op& op : attention) CHECK(op.name != "rotary_embedding");
  CHECK(op_named(moe, "pre_mlp_rmsnorm").bytes > 0);
  // Squared ReLU: no gate, fc1 as wide as the expert.
  CHECK(op_named(moe, "experts_fc1").gemm.n == 1856);
  CHECK(op_named(moe, "experts_squared_relu").bytes > 0);
}

// A '-' block of a hybrid model is a dense MLP even when the model has experts elsewhere: squared
// ReLU without a gate, fc1 h -> ffn and fc2 back, and its own pre-MLP norm.
TEST_CASE("hybrid MLP block: a dense squared-ReLU MLP") {
  ModelSpec m = nemotron_nano();
  m.hybrid_pattern = "M-E";
  m.layers = 3;
  m.ffn_hidden = 21504;
  LayerConfig c;
  c.seq_len = 4096;
  const auto fwd = layer_forward(m, c, LayerBlock::mlp);
  const double t = 4096, h = 2688;
  CHECK(flops_of(fwd, OpKind::gemm) == Approx(2 * (2 * t * h * 21504)));
  CHECK(op_named(fwd, "fc1").gemm.n == 21504);
  CHECK(op_named(fwd, "squared_relu").bytes == Approx(2 * t * 21504 * 2));
  for (const Op& op : fwd) CHECK(op.name.find("expert") == std::string::npos);
  CHECK(layer_params_per_rank(m, 1, LayerBlock::mlp) == 2 * 2688 * 21504 + 2688);
}

// Nemotron 3 Super's latent MoE (hidden 4096, latent 1024): the router reads the hidden state, the
// tokens go down to the latent before the dispatch, which then moves R·k·latent elements, the experts
// read and write the latent, and the combined latent goes back up.
TEST_CASE("latent MoE: dispatch and experts at the latent width") {
  const ModelSpec m = nemotron_super_moe();
  LayerConfig c;
  c.seq_len = 8192;
  c.ep = 64;
  const auto fwd = layer_forward(m, c, LayerBlock::moe);
  const double r = 8192, k = 22;
  CHECK(op_named(fwd, "router").gemm.k == 4096);
  CHECK(op_named(fwd, "moe_latent_down_proj").flops == Approx(2 * r * 1024 * 4096));
  CHECK(op_named(fwd, "moe_latent_up_proj").flops == Approx(2 * r * 4096 * 1024));
  CHECK(op_named(fwd, "moe_dispatch_all_to_all").comm_bytes == static_cast<std::int64_t>(r * k * 1024 * 2));
  CHECK(op_named(fwd, "experts_fc1").gemm.k == 1024);
  CHECK(op_named(fwd, "experts_fc2").gemm.n == 1024);
  CHECK(op_named(fwd, "shared_expert_fc1").gemm.k == 4096);
  // 8 local experts of 1024 x 2688 (fc1) and 2688 x 1024 (fc2); the projections are not experts.
  CHECK(layer_expert_params_per_rank(m, 64, 1) == 8 * 2 * 1024 * 2688);
  CHECK(layer_params_per_rank(m, 1, LayerBlock::moe) ==
        4096 * 512 + 2 * 4096 * 1024 + 2 * 4096 * 5376 + 4096);  // router, projections, shared expert, norm
}

// Transformer Engine's per-module recipes (LayerConfig::bf16_modules, fp8_modules; training.
// module_precision): under NVFP4 the named modules' GEMMs, forward and both gradients, leave FP4 (for
// FP8) or leave quantisation altogether (BF16); every other GEMM keeps the run's NVFP4.
TEST_CASE("module precision: the named modules' GEMMs run FP8 or BF16 under NVFP4, the rest NVFP4") {
  const ModelSpec m = nemotron_super_moe();
  LayerConfig c;
  c.seq_len = 8192;
  c.ep = 64;
  c.fp8 = true;
  c.fp4 = true;
  c.bf16_modules = kQuantAttentionLinears | kQuantMoeLatentProj;
  c.fp8_modules = kQuantMambaOutProj;
  int checked = 0;
  for (LayerBlock block : {LayerBlock::mamba, LayerBlock::attention, LayerBlock::moe}) {
    std::vector<Op> ops = layer_forward(m, c, block);
    const std::vector<Op> bwd = layer_backward(m, c, block);
    ops.insert(ops.end(), bwd.begin(), bwd.end());
    for (const Op& op : ops) {
      if (op.kind != OpKind::gemm) continue;
      const auto starts = [&](const char* stem) { return op.name.rfind(stem, 0) == 0; };
      INFO(op.name);
      if (starts("qkv") || starts("attention_output") || starts("moe_latent_")) {
        CHECK(!op.fp8);
        ++checked;
      } else if (starts("mamba_out_proj")) {
        CHECK((op.fp8 && !op.fp4));
        ++checked;
      } else if (starts("mamba_in_proj") || starts("experts_fc") || starts("shared_expert_fc")) {
        CHECK((op.fp8 && op.fp4));
      }
    }
  }
  // qkv and the output projection, the latent down and up projections, and Mamba's output
  // projection: forward, data and weight gradients each.
  CHECK(checked == 3 * 2 + 3 * 2 + 3);
}

// Qwen3's per-head query and key RMSNorms: on a TP rank of 8 with 8,192 tokens, Q is 64/8 heads of
// 128 (1,024 wide) and K 8/8 heads (128 wide). The forward reads and writes Q and K in bf16:
// 2 · 8192 · 1152 · 2 bytes; it keeps its input, 8192 · 1152 · 2 bytes; the backward reads the
// gradient and the input and writes the input's gradient, 3 · 8192 · 1152 · 2. Two norm modules, two
// kernels each pass. Without the switch the layer has no such op and is otherwise the same.
TEST_CASE("Qwen3's q/k norms: Q and K read and written once each way, their input kept") {
  ModelSpec m = llama70b();
  LayerConfig c = llama70b_tp8_8k();
  const auto plain_fwd = layer_forward(m, c);
  m.qk_norm = true;
  const auto fwd = layer_forward(m, c);
  const auto bwd = layer_backward(m, c);
  const double qk = 8192.0 * (1024 + 128) * 2;
  const Op& norm = op_named(fwd, "qk_rmsnorm");
  CHECK(norm.bytes == Approx(2 * qk));
  CHECK(norm.saved_bytes == static_cast<std::int64_t>(qk));
  CHECK(norm.kernels == 2);
  CHECK(op_named(bwd, "qk_rmsnorm_backward").bytes == Approx(3 * qk));
  CHECK(fwd.size() == plain_fwd.size() + 1);
  // It runs between the QKV projection and the rotary embedding.
  for (std::size_t i = 0; i < fwd.size(); ++i)
    if (fwd[i].name == "qk_rmsnorm") {
      CHECK(fwd[i - 1].name == "qkv");
      CHECK(fwd[i + 1].name == "rotary_embedding");
    }
}

// Gemma 2's and 3's post-norms on a TP rank of 8 with 8,192 tokens under sequence parallelism: each
// norms its block's output on the rank's sequence shard, 8192 / 8 = 1,024 tokens of 8,192 (Llama 70B's
// hidden), after the reduce-scatter and before the residual add: it reads and writes 1024 · 8192 · 2
// bytes and keeps its input; its backward reads the gradient and the input and writes the input's
// gradient (3 ·), before the all-gather of the projection's output gradient. Four ops more per layer.
TEST_CASE("post-norms: a norm on each block's output, on the sequence shard, before the residual add") {
  ModelSpec m = llama70b();
  LayerConfig c = llama70b_tp8_8k();
  c.sequence_parallel = true;
  const auto plain_fwd = layer_forward(m, c);
  const auto plain_bwd = layer_backward(m, c);
  m.post_norms = true;
  const auto fwd = layer_forward(m, c);
  const auto bwd = layer_backward(m, c);
  const double shard = 1024.0 * 8192 * 2;
  for (const char* name : {"attention_output_rmsnorm", "mlp_output_rmsnorm"}) {
    const Op& norm = op_named(fwd, name);
    CHECK(norm.bytes == Approx(2 * shard));
    CHECK(norm.saved_bytes == static_cast<std::int64_t>(shard));
    CHECK(op_named(bwd, std::string(name) + "_backward").bytes == Approx(3 * shard));
  }
  CHECK(fwd.size() == plain_fwd.size() + 2);
  CHECK(bwd.size() == plain_bwd.size() + 2);
  for (std::size_t i = 0; i < fwd.size(); ++i) {
    if (fwd[i].name == "attention_output_rmsnorm") {
      CHECK(fwd[i - 1].name == "attention_reduce_scatter");
      CHECK(fwd[i + 1].name == "attention_residual_add");
    }
    if (fwd[i].name == "mlp_output_rmsnorm") CHECK(fwd[i + 1].name == "mlp_residual_add");
  }
  for (std::size_t i = 0; i < bwd.size(); ++i)
    if (bwd[i].name == "attention_output_rmsnorm_backward")
      CHECK(bwd[i + 1].name == "attention_output_grad_all_gather");
  // Two more replicated norm weights per layer on each rank.
  ModelSpec plain = llama70b();
  CHECK(layer_params_per_rank(m, 8) - layer_params_per_rank(plain, 8) == 2 * 8192);
}

// Fine-grained activation offloading's bytes per layer, Llama 70B on a TP rank of 8 with 8,192
// tokens in bf16 (no SP: the norm region is every token): qkv_linear moves the fused norm's input
// and the QKV projection's input, 2 · 8192 · 8192 · 2 bytes; core_attn Q, K, V (8192 · (1024 + 2 ·
// 128) · 2) and the attention's output, 8192 · 1024 · 2, which attn_proj (the projection's input)
// moves too; the MLP's tensors belong to no module of a dense layer. Recomputing core_attn leaves
// its tensors on the GPU (Megatron-Core's checkpointed branch bypasses the offload); full
// recompute offloads nothing.
TEST_CASE("fine-grained offloading: the bytes each module's saved tensors take") {
  const ModelSpec m = llama70b();
  const LayerConfig c = llama70b_tp8_8k();
  const auto fwd = layer_forward(m, c);
  const std::int64_t norm_and_qkv_input = 2LL * 8192 * 8192 * 2;
  const std::int64_t qkv = 8192LL * (1024 + 2 * 128) * 2;
  const std::int64_t out = 8192LL * 1024 * 2;
  CHECK(offloaded_bytes(fwd, kOffloadQkvLinear, 0) == norm_and_qkv_input);
  CHECK(offloaded_bytes(fwd, kOffloadCoreAttn, 0) == qkv + out);
  CHECK(offloaded_bytes(fwd, kOffloadCoreAttn | kOffloadAttnProj, 0) == qkv + out);
  CHECK(offloaded_bytes(fwd, kOffloadQkvLinear | kOffloadCoreAttn, kRecomputeCoreAttn) == norm_and_qkv_input);
  CHECK(offloaded_bytes(fwd, kOffloadQkvLinear, 0, true) == 0);
  CHECK(offloaded_bytes(fwd, kOffloadMlpNorm | kOffloadExpertFc1 | kOffloadMoeAct, 0) == 0);
}

// The mixture-of-experts modules on one rank of ep 4 with 4,096 tokens (tp 1): the rank's 8 experts
// receive 4096 · 4 = 16,384 rows under balanced routing. expert_fc1 moves their permuted input,
// 16384 · 1024 · 2 bytes; moe_act fc1's output, the activation's input, 16384 · 2 · 512 · 2, and the
// routing weights it keeps, 16384 · 4; mlp_norm the pre-MLP norm's input, 4096 · 1024 · 2.
TEST_CASE("fine-grained offloading: the experts' modules and the separate pre-MLP norm") {
  const ModelSpec m = moe_model();
  LayerConfig c;
  c.seq_len = 4096;
  c.ep = 4;
  const auto fwd = layer_forward(m, c);
  CHECK(offloaded_bytes(fwd, kOffloadExpertFc1, 0) == 16384LL * 1024 * 2);
  CHECK(offloaded_bytes(fwd, kOffloadMoeAct, 0) == 16384LL * 2 * 512 * 2 + 16384LL * 4);
  CHECK(offloaded_bytes(fwd, kOffloadMlpNorm, 0) == 4096LL * 1024 * 2);
  // Recomputing moe_act keeps (and offloads) the activation's input; recomputing the whole MoE
  // layer keeps neither module's tensors.
  CHECK(offloaded_bytes(fwd, kOffloadMoeAct, kRecomputeMoeAct) == 16384LL * 2 * 512 * 2 + 16384LL * 4);
  CHECK(offloaded_bytes(fwd, kOffloadExpertFc1 | kOffloadMoeAct, kRecomputeMoe) == 0);
}

// Gemma 2 as Megatron-Bridge runs it (Gemma2DotProductAttention, Gemma2OutputLayer), by hand for
// 16 query and 8 KV heads of 256 at TP 2 over one 8,192-token sequence (a = 8 heads, q = 2048 and
// kv = 1024 channels per rank; bf16): K and V repeated to the query heads (read 2·kv, write 2·q per
// token; the copies are kept, 2·(q − kv) more than Q, K, V), the scores soft-capped by div, tanh and
// mul (each reads and writes a·s² bf16 scores; tanh's output kept), the softmax as before; every
// score computed, windowed layer or not. The backward: 7 score passes for the cap, the repeated
// gradients summed back (read 2·q, write 2·kv). The output layer's logits capped the same way.
TEST_CASE("Gemma 2's unfused attention: repeated K and V, soft-capped scores and logits, by hand") {
  ModelSpec m;
  m.name = "gemma2-like";
  m.layers = 2;
  m.hidden = 3584;
  m.heads = 16;
  m.kv_heads = 8;
  m.head_dim = 256;
  m.ffn_hidden = 14336;
  m.vocab = 256000;
  m.mlp = MlpKind::swiglu;
  m.tied_embeddings = true;
  m.sliding_window = 4096;
  m.sliding_window_pattern = 2;
  m.attention_softcap = 50;
  m.logit_softcap = 30;
  LayerConfig c;
  c.micro_batch = 1;
  c.seq_len = 8192;
  c.tp = 2;
  c.attention = AttentionImpl::softmax;
  const double s = 8192, a = 8, q = 2048, kv = 1024, scores = a * s * s;
  const auto fwd = layer_forward(m, c);
  CHECK(op_named(fwd, "attention_kv_repeat").bytes == s * 2 * (kv + q) * 2);
  CHECK(op_named(fwd, "attention_kv_repeat").saved_bytes == static_cast<std::int64_t>(s * 2 * (q - kv) * 2));
  CHECK(op_named(fwd, "attention_logit_softcap").bytes == 6 * scores * 2);
  CHECK(op_named(fwd, "attention_logit_softcap").kernels == 3);
  CHECK(op_named(fwd, "attention_scores").flops == 2 * scores * 256);  // the whole s x s, window or not
  // The attention core keeps the repeated K and V's extra, tanh's output and the softmax's.
  CHECK(saved(fwd, true) == s * 2 * (q - kv) * 2 + 2 * scores * 2);
  const auto bwd = layer_backward(m, c);
  CHECK(op_named(bwd, "attention_logit_softcap_backward").bytes == 7 * scores * 2);
  CHECK(op_named(bwd, "attention_kv_repeat_backward").bytes == s * 2 * (q + kv) * 2);
  const double logits = s * 256000 / 2;
  CHECK(op_named(head_forward(m, c), "output_logit_softcap").bytes == 6 * logits * 2);
  CHECK(op_named(head_forward(m, c), "output_logit_softcap").saved_bytes == static_cast<std::int64_t>(logits * 2));
  CHECK(op_named(head_backward(m, c), "output_logit_softcap_backward").bytes == 7 * logits * 2);
  // Without the caps and with as many KV heads as query heads, none of these ops.
  m.attention_softcap = m.logit_softcap = 0;
  m.sliding_window = 0;
  m.sliding_window_pattern = 1;
  m.kv_heads = 16;
  for (const Op& op : layer_forward(m, c)) {
    CHECK(op.name.find("softcap") == std::string::npos);
    CHECK(op.name.find("kv_repeat") == std::string::npos);
  }
}

// Megatron's embedding gradient (VocabParallelEmbedding's F.embedding, then the DDP hook): a dense
// bf16 gradient of the rank's V/t·h table zeroed (2 B written per element), the token rows summed
// into it (3·b·s·h·2 B), and the table added to main_grad (read 2 + g, write g B per element; g = 4,
// or 2 with gradients reduced in bf16); the dense table alive as workspace meanwhile. Llama 3.1 70B
// at TP 8, 8,192 tokens: V/t = 16,032 rows of 8,192.
TEST_CASE("the embedding's dense weight gradient is zeroed, filled and added to main_grad") {
  const ModelSpec m = llama70b();
  LayerConfig c = llama70b_tp8_8k();
  const double table = 16032.0 * 8192, tokens = 8192, h = 8192;
  for (const std::int64_t g : {4, 2}) {
    c.grad_bytes = g;
    const auto ops = embedding_backward(m, c);
    CHECK(op_named(ops, "embedding_grad_zero").bytes == table * 2);
    CHECK(op_named(ops, "embedding_grad").bytes == 3 * tokens * h * 2);
    CHECK(op_named(ops, "embedding_grad_main_grad_add").bytes == table * (2 + 2 * static_cast<double>(g)));
    for (const Op& op : ops) CHECK(op.workspace_bytes == static_cast<std::int64_t>(table * 2));
  }
}

// Megatron's --no-gradient-accumulation-fusion: every weight-gradient GEMM writes a bf16 gradient
// that the DDP hook then adds to main_grad (read 2 + g bytes, write g per element of the weight).
TEST_CASE("without gradient accumulation fusion each weight gradient is added to main_grad") {
  const ModelSpec m = llama70b();
  LayerConfig c = llama70b_tp8_8k();
  const auto fused = layer_backward(m, c);
  c.grad_accumulation = GradAccumulation::main_grad_add;
  // Per TP-8 rank: QKV 8192 x (8192 + 2·1024) / 8, the output projection 8192 x 8192 / 8, fc1
  // 8192 x 2·28672 / 8, fc2 28672 x 8192 / 8: 1024 x 104,448 weights.
  const double weights = 1024.0 * (10240 + 8192 + 57344 + 28672);
  for (const std::int64_t g : {4, 2}) {
    c.grad_bytes = g;
    const auto ops = layer_backward(m, c);
    REQUIRE(ops.size() == fused.size() + 4);
    double bytes = 0;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].name.find("_main_grad_add") == std::string::npos) continue;
      // Right after its GEMM, in the weight-gradient pass, its 16-bit gradient alive meanwhile.
      REQUIRE(i > 0);
      const Op& gemm = ops[i - 1];
      CHECK(ops[i].name == gemm.name + "_main_grad_add");
      CHECK(gemm.weight_grad);
      CHECK(ops[i].weight_grad);
      CHECK(ops[i].kind == OpKind::memory);
      CHECK(ops[i].kernels == 1);
      CHECK(ops[i].workspace_bytes == gemm.gemm.m * gemm.gemm.n * 2);
      bytes += ops[i].bytes;
    }
    CHECK(bytes == weights * (2 + 2 * static_cast<double>(g)));
  }
  // The output layer: 128,256 / 8 = 16,032 rows of 8,192.
  c.grad_bytes = 4;
  CHECK(op_named(head_backward(m, c), "output_layer_wgrad_main_grad_add").bytes == 16032.0 * 8192 * 10);
  // A grouped GEMM's experts are weights of their own: ep 4 leaves 8 of the 32 experts, etp 2 half
  // of fc1's 2 x 512 outputs: 8 adds of 1024 x 512.
  LayerConfig e = tp2_ep4_etp2();
  e.grad_accumulation = GradAccumulation::main_grad_add;
  const auto moe = layer_backward(moe_model(), e);
  const Op& experts = op_named(moe, "experts_fc1_wgrad_main_grad_add");
  CHECK(experts.kernels == 8);
  CHECK(experts.bytes == 8.0 * 1024 * 512 * 10);
  // Fused (the default) adds nothing.
  for (const Op& op : fused) CHECK(op.name.find("_main_grad_add") == std::string::npos);
}

// DeepSpeed's engine accumulates the weight gradients itself (Megatron-DeepSpeed's linears run plain
// F.linear): autograd adds each micro-batch's 16-bit gradient into .grad in place (read 2 + 2, write 2
// bytes per element), or BF16_Optimizer's update_hp_grads casts it to fp32 (read 2, write 4) and adds
// that to the fp32 gradient (read 4 + 4, write 4) in two kernels.
TEST_CASE("DeepSpeed's gradient accumulation: autograd's in-place add, BF16_Optimizer's fp32 add") {
  const ModelSpec m = llama70b();
  LayerConfig c = llama70b_tp8_8k();
  const double fc2 = 28672.0 / 8 * 8192;  // fc2's weight on a TP-8 rank
  const double table = 16032.0 * 8192;    // the embedding's rows on it
  c.grad_accumulation = GradAccumulation::autograd;
  const auto autograd = layer_backward(m, c);
  CHECK(op_named(autograd, "fc2_wgrad_grad_accumulate").bytes == fc2 * 6);
  CHECK(op_named(autograd, "fc2_wgrad_grad_accumulate").kernels == 1);
  CHECK(op_named(autograd, "fc2_wgrad_grad_accumulate").workspace_bytes == static_cast<std::int64_t>(fc2 * 2));
  CHECK(op_named(embedding_backward(m, c), "embedding_grad_grad_accumulate").bytes == table * 6);
  c.grad_accumulation = GradAccumulation::fp32_buffer;
  const auto fp32 = layer_backward(m, c);
  const Op& add = op_named(fp32, "fc2_wgrad_fp32_grad_accumulate");
  CHECK(add.bytes == fc2 * (2 + 4 + 12));
  CHECK(add.kernels == 2);
  CHECK(add.weight_grad);
  CHECK(add.workspace_bytes == static_cast<std::int64_t>(fc2 * 6));  // the bf16 gradient and its fp32 copy
  const auto emb = embedding_backward(m, c);
  CHECK(op_named(emb, "embedding_grad_fp32_grad_accumulate").bytes == table * 18);
  CHECK(op_named(emb, "embedding_grad_fp32_grad_accumulate").workspace_bytes == static_cast<std::int64_t>(table * 6));
  // As many accumulations as weight-gradient GEMMs, whatever the mode.
  const auto count = [](const std::vector<Op>& ops, const std::string& suffix) {
    return std::count_if(ops.begin(), ops.end(), [&](const Op& op) {
      return op.name.size() > suffix.size() &&
             op.name.compare(op.name.size() - suffix.size(), suffix.size(), suffix) == 0;
    });
  };
  CHECK(count(autograd, "_wgrad_grad_accumulate") == 4);
  CHECK(count(fp32, "_wgrad_fp32_grad_accumulate") == 4);
}

// DeepSeek V4's attention on a small model, by hand: 64 tokens, a window of 8, layers compressing
// 0, 4, 16 and 4 (index_topk 4). A query at position j (1..64) sees min(j, 8) window keys: their mean
// is (8·9/2 + 8·56) / 64 = 7.5625. Ratio 4 with the top 4: min(floor(j/4), 4) sums to 0·3 + 1·4 + 2·4
// + 3·4 = 24 over j < 16 and 4 · 49 = 196 from 16 on, mean 220/64 = 3.4375. Ratio 16, every entry:
// floor(j/16) sums to 16 + 32 + 48 + 4 = 100, mean 1.5625. Over the layers (shares 1/4, 1/2, 1/4):
// 7.5625 + 3.4375 / 2 + 1.5625 / 4 = 9.671875 keys per query; 4 · head_dim FLOPs per query and key.
TEST_CASE("DeepSeek V4's attention: sparse-attention FLOPs by hand, hyper-connections around each block") {
  ModelSpec m;
  m.name = "dsv4-small";
  m.layers = 4;
  m.hidden = 256;
  m.heads = 8;
  m.kv_heads = 1;
  m.head_dim = 64;
  m.qk_rope_head_dim = 16;
  m.q_lora_rank = 128;
  m.o_groups = 2;
  m.o_lora_rank = 64;
  m.sliding_window = 8;
  m.compress_ratios = {0, 4, 16, 4};
  m.index_heads = 4;
  m.index_head_dim = 32;
  m.index_topk = 4;
  m.hc_streams = 4;
  m.experts = 8;
  m.experts_per_token = 2;
  m.moe_ffn_hidden = 128;
  m.vocab = 1000;
  m.mlp = MlpKind::swiglu;
  LayerConfig c;
  c.micro_batch = 1;
  c.seq_len = 64;
  const auto fwd = layer_forward(m, c, LayerBlock::transformer);
  const auto bwd = layer_backward(m, c, LayerBlock::transformer);
  const double keys = 7.5625 + 3.4375 / 2 + 1.5625 / 4;
  CHECK(flops_of(fwd, OpKind::attention) == Approx(4.0 * 64 * 8 * 64 * keys));
  CHECK(flops_of(bwd, OpKind::attention) == Approx(2.5 * 4.0 * 64 * 8 * 64 * keys));
  auto count = [](const std::vector<Op>& ops, const std::string& name) {
    return std::count_if(ops.begin(), ops.end(), [&name](const Op& op) { return op.name == name; });
  };
  // A mapping before and a mix after each of the two blocks; no plain residual add.
  CHECK(count(fwd, "hc_pre") == 2);
  CHECK(count(fwd, "hc_post") == 2);
  CHECK(count(fwd, "attention_residual_add") == 0);
  CHECK(count(bwd, "hc_pre_backward") == 2);
  // Two layers of four compress by 4 (the indexer's), one by 16: their compressors run over that
  // share of the 64 tokens, at 2 x head_dim (ratio 4's overlapping windows: 4 x 64) or head_dim.
  for (const Op& op : fwd) {
    if (op.name == "compressor_csa") CHECK((op.gemm.m == 32 && op.gemm.n == 256 && op.gemm.k == 256 && op.bf16));
    if (op.name == "compressor_hca") CHECK((op.gemm.m == 16 && op.gemm.n == 128 && op.bf16));
    // The grouped output projection: 2 groups of 4 heads x 64 -> 64 each, in BF16.
    if (op.name == "attention_output_grouped")
      CHECK((op.gemm.batch == 2 && op.gemm.k == 256 && op.gemm.n == 64 && op.bf16));
  }
  CHECK(count(fwd, "indexer_scores") == 1);
  // The residual streams travel between pipeline stages: 4 x hidden per token.
  CHECK(layer_input_bytes(m, c) == 4 * 64 * 256 * 2);
  // Under FP8 the BF16 modules stay BF16, the projections quantise.
  c.fp8 = true;
  for (const Op& op : layer_forward(m, c, LayerBlock::transformer)) {
    if (op.name == "compressor_csa" || op.name == "indexer_scores") CHECK_FALSE(op.fp8);
    if (op.name == "q_up_proj" || op.name == "attention_output") CHECK(op.fp8);
  }
}
