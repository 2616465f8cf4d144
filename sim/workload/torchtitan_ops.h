#pragma once
// A Llama decoder as torchtitan trains it (pytorch/torchtitan, torchtitan/models/llama/model.py and
// the parallelize_llama.py that wraps it; the versions of its docs/performance.md benchmarks,
// 2024-12): the kernels PyTorch runs for one transformer block, the embedding and the output layer.
//
// Eager: every element-wise operation is its own kernel. RMSNorm runs in fp32 (`_norm(x.float())
// .type_as(x) * weight`: 8 kernels); wq, wk and wv are three GEMMs; the rotary embedding multiplies
// the fp32 query and key, viewed as complex numbers, by the precomputed frequencies (cast, complex
// product, cast back: 3 kernels each); grouped-query attention copies the keys and values once per
// query head of their group (repeat_kv: expand and reshape, one copy each) before
// scaled_dot_product_attention's fused kernel; the feed-forward is w2(silu(w1(x)) * w3(x)); the loss
// is cross_entropy over the fp32 logits.
//
// Compiled loss (training.torch_compile_loss: torchtitan's build_cross_entropy_loss compiles
// cross_entropy(pred.flatten(0, 1).float(), labels) with compile on, since early 2025; the Dec 2024
// train.py left it eager, "compiling loss function causes CUDA errors"): [A] Inductor fuses the cast
// into the reductions, one kernel reading the bf16 logits twice (the row maximum, then the sum of
// exponentials and the target logit) and writing the fp32 logsumexp, which the backward keeps with
// the logits; the backward one kernel reading them and writing the bf16 gradient of the logits
// (softmax - one-hot, scaled): no fp32 copy of the logits exists. Under tensor parallelism the loss-
// parallel all-reduces of the row maxima, sums and target logits stay between its kernels.
//
// Compiled (training.torch_compile: torchtitan compiles each transformer block with torch.compile):
// Inductor fuses the element-wise work between the GEMMs and the attention kernel, [A] one kernel
// per fused group: each RMSNorm with the residual add before it, the query's rotation, the key's
// rotation with its repeat, the value's repeat, SiLU with the gate product, the last residual add;
// in the backward the mirror groups. Its partitioner keeps the GEMMs' inputs and the attention's
// tensors for the backward and recomputes the rest inside the fused backward kernels. The
// embedding, the final norm, the output layer and the loss stay eager (torchtitan compiles blocks).
//
// FSDP2 (fully_shard per block, bf16 param_dtype): each gathered unit is copied out of the
// all-gather buffer into its parameters on the compute stream (split_with_sizes_copy) after each
// gather (torchtitan_copy_out, which the step builder issues: before the forward, and before the
// backward of a unit resharded after its forward); the unsharded gradients are fresh tensors each backward
// (no accumulation kernel), reduce-scattered by the step builder after the copy into the
// reduce-scatter's input buffer (torchtitan_reduce_scatter_copy_in, on the compute stream; with
// pipelining after each micro-batch's accumulation, torchtitan_grad_accumulate). The all-gather's
// copy-in (the shard's cast to bf16, on FSDP2's all-gather stream) is not modelled, nor is the CPU
// time of FSDP2's hooks.
//
// Float8 (torchao's Float8Linear with tensorwise dynamic scaling, compiled, as torchtitan's float8
// converter swaps it into every linear of the blocks; the output layer stays bf16): each GEMM runs on
// FP8 operands at the FP8 rate (torch._scaled_mm, bf16 output). [A] Inductor's casts: for each
// distinct GEMM input in the forward an amax reduction (reads it) and a scale-and-cast kernel (reads
// it, writes its e4m3 copy, which the backward keeps in place of the bf16 input); in the backward
// for each GEMM's output gradient an amax and a cast writing the e5m2 copy in both layouts the two
// GEMMs read, and a transposed copy of each fp8 input for the weight gradient and of each fp8
// weight for the input gradient. With FSDP float8 all-gather (torchtitan's
// enable_fsdp_float8_all_gather and precompute_float8_dynamic_scale_for_fsdp) the blocks' linear
// weights are gathered and copied out in fp8, one byte each, and the optimizer step ends with one
// pass over the fp32 shard for their scales.
//
// Activation checkpointing (the step builder's `recompute`): full recomputes each block from its
// input; selective is torchtitan's op-level policy (`_save_list`): the outputs of every other
// matrix multiply (the first, third, ... of a block in forward order: wq, wv, w1, w2) and of the
// attention kernel are kept, everything else is run again before the block's backward. The ops of
// the `sac` list say so through kRecomputeTorchtitanOp (rerun: run again; discards: what autograd
// saves is dropped in the forward and allocated again by the recompute) and a last zero-time op
// holding the kept outputs and the block's input.

#include <cstdint>
#include <vector>

#include "workload/eager_ops.h"
#include "workload/ops.h"

namespace trainsim::workload {

struct TorchtitanOptions {
  bool compile = false;       // torch.compile'd blocks
  bool sac = false;           // torchtitan's selective (op) activation checkpointing
  EagerHost host;             // CPU time per kernel issued
  bool float8 = false;        // torchao Float8 linears (needs compile)
  bool compile_loss = false;  // the loss compiled (torchtitan's build_cross_entropy_loss, 2025)
};

// FSDP2's copy of a gathered unit out of the all-gather buffer into its parameters, `bytes` (the
// unit's gathered weights) read and written once; the step builder issues one after each gather.
Op torchtitan_copy_out(double bytes, double host_s);

// FSDP2's gradient kernels on the compute stream after a unit's backward (`params` of it, its
// gradients computed in bf16): the reduce-scatter's copy-in of `grad_bytes`-byte gradients into the
// `reduce_bytes`-byte input buffer (foreach_reduce_scatter_copy_in; bf16 gradients, or with
// pipelining the accumulated ones); and with pipelining each micro-batch's accumulation of its bf16
// gradients into the unsharded reduce-dtype ones (to_accumulated_grad_if_needed: the first
// micro-batch's a cast, none when the reduce dtype is bf16; then +=).
Op torchtitan_reduce_scatter_copy_in(double params, double grad_bytes, double reduce_bytes, double host_s);
Op torchtitan_grad_accumulate(double params, bool first, double reduce_bytes, double host_s);

std::vector<Op> torchtitan_layer_forward(const ModelSpec& m, const LayerConfig& c, const TorchtitanOptions& o);
std::vector<Op> torchtitan_layer_backward(const ModelSpec& m, const LayerConfig& c, const TorchtitanOptions& o);
std::vector<Op> torchtitan_embedding_forward(const ModelSpec& m, const LayerConfig& c, const TorchtitanOptions& o);
std::vector<Op> torchtitan_embedding_backward(const ModelSpec& m, const LayerConfig& c, const TorchtitanOptions& o);
// The final RMSNorm, the output layer and the fp32 cross-entropy loss.
std::vector<Op> torchtitan_head_forward(const ModelSpec& m, const LayerConfig& c, const TorchtitanOptions& o);
std::vector<Op> torchtitan_head_backward(const ModelSpec& m, const LayerConfig& c, const TorchtitanOptions& o);

// The optimizer step on a rank's fp32 shards (its tensor-parallel shard, over `dp` ranks):
// clip_grad_norm_ (foreach norms of the gradients, their all-reduce taken as latency only, a foreach
// scale), then AdamW (torchtitan's default fused implementation: reads param, gradient and both
// moments, writes param and moments, fp32). torchtitan's zero_grad sets the gradients to None: no
// kernel.
Op torchtitan_optimizer_step(const ModelSpec& m, std::int64_t dp, std::int64_t tp, const EagerHost& host,
                             bool float8 = false);

// Context parallelism (PyTorch's context_parallel, which torchtitan applies to
// scaled_dot_product_attention): the bytes of the keys and values one rank holds, repeated to the
// query heads as the attention receives them, which its allgather rotation gathers (and its
// all-to-all ring passes on).
std::int64_t torchtitan_cp_kv_bytes(const ModelSpec& m, const LayerConfig& c);

// The kernels PyTorch's context_parallel runs around each attention step
// (torch/distributed/tensor/experimental/_attention.py, _templated_ring_attention and its backward,
// with its defaults convert_to_f32 and causal load balancing), eager, for the rank that waits longest,
// the last of the CP group (every later step of it attends with all its queries, none only with the
// second half). T·q elements make one of its Q, K, V, output tensors (o bytes in bf16, 2o in fp32).
// Forward: before each of the first cp - 1 exchanges, the keys and values concatenated into one
// buffer (torch.cat); after each step's attention, _SDPAMerger.step: the step's output cast to fp32
// and, from the second step on, merged, out - sigmoid(lse_b - lse)·(out - out_b) and lse -
// logsigmoid(lse - lse_b) (4 kernels on the output, 5 on the logsumexp); at the end the merged
// output cast back. Backward: fp32 dQ, dK, dV zeroed; after each step's attention backward, dK and dV
// accumulated (the first step into the zeros; later into the buffer received from the previous rank,
// the step's half-sequence gradient added into its first half and the halves concatenated again,
// _partial_update), concatenated (torch.cat) and sent on around the ring in fp32, and dQ accumulated;
// at the end the dK and dV received last and dQ cast to bf16.
struct TorchtitanCpKernels {
  Op kv_cat;
  Op first_merge, merge, out_to_bf16;
  Op grad_zeros, first_grad_kv_accumulate, grad_kv_accumulate, grad_kv_cat, grad_q_accumulate, grad_to_bf16;
  std::int64_t grad_kv_bytes = 0;  // the fp32 dK and dV a step sends on
};
TorchtitanCpKernels torchtitan_cp_kernels(const ModelSpec& m, const LayerConfig& c, const EagerHost& host);

// The parameters of one transformer block's linears a tensor-parallel rank holds (FSDP2 gathers them
// in fp8 under Float8 with FSDP float8 all-gather; the block's two norms stay bf16).
std::int64_t torchtitan_block_linear_params(const ModelSpec& m, std::int64_t tp);
// The bytes FSDP2 gathers (and copies out) for one block on a tensor-parallel rank: its linears'
// parameters in fp8 under Float8 (FSDP float8 all-gather), else bf16, and its two norms in bf16.
std::int64_t torchtitan_block_gather_bytes(const ModelSpec& m, std::int64_t tp, bool float8);

// Bytes per parameter held from step to step, on the rank's 1/dp shard: fp32 master weights (FSDP2's
// sharded parameters), fp32 gradients (the reduce-scatter's output in the parameters' dtype) and
// AdamW's two fp32 moments.
inline constexpr std::int64_t kTorchtitanWeightBytes = 4;
inline constexpr std::int64_t kTorchtitanGradBytes = 4;
inline constexpr std::int64_t kTorchtitanOptimizerBytes = 8;

}  // namespace trainsim::workload
