#pragma once
// A Llama-style decoder trained on one GPU in eager PyTorch, as the kernels PyTorch launches: the
// model of tools/device/torch_steps.py, op for op. Every element-wise operation is its own kernel
// (nothing fused), memory-bound; the GEMMs are cuBLAS bf16 GEMMs; attention is
// scaled_dot_product_attention's fused kernel; the loss is cross-entropy in fp32 over the vocabulary;
// the optimizer is torch.optim.AdamW(fused=True). Parameters, gradients and both AdamW moments are
// bf16 ("pure bf16": AdamW keeps its states in the parameter dtype); gradients live from step to step
// (zero_grad(set_to_none=False)), so each backward accumulates into them with one add per parameter.
//
// Saved activations follow autograd's rules: an op saves what its derivative formula reads
// (derivatives.yaml), only for inputs that require grad, and a saved view keeps its whole base
// alive. Each saved storage is counted once, at the first op that saves it. Temporaries that live
// only while an op runs (e.g. the fp32 logit gradients) are `workspace_bytes`.
//
// Each op also carries `host_s`, the CPU time to issue its kernels: PyTorch eager dispatches every
// kernel from the CPU, and small kernels wait for it (the step builder's host stream).
//
// Not modelled: the CPU time of Python operations that launch no kernel (split, view, transpose,
// chunk, the RoPE slices: about 14 per layer forward, and their backward nodes), which matters only
// where the CPU rather than the GPU sets the pace; reductions over the token dimension (the norm
// weights' gradients) are taken to stream at the same HBM rate as element-wise kernels; the caching
// allocator's 512-byte rounding, the cuBLAS workspaces and the token batch (a few tens of MiB).

#include <cstdint>
#include <vector>

#include "workload/ops.h"

namespace trainsim::workload {

// CPU time to issue one kernel: in the forward (Python, dispatcher, autograd recording) and in the
// backward (the C++ autograd engine).
struct EagerHost {
  double forward_s = 0;
  double backward_s = 0;
};

// Layer ops for micro-batch c.micro_batch of c.seq_len tokens; c.tp, c.cp must be 1 and the model a
// SwiGLU (Llama-style) model without dropout.
std::vector<Op> eager_layer_forward(const ModelSpec& m, const LayerConfig& c, const EagerHost& host);
std::vector<Op> eager_layer_backward(const ModelSpec& m, const LayerConfig& c, const EagerHost& host);
std::vector<Op> eager_embedding_forward(const ModelSpec& m, const LayerConfig& c, const EagerHost& host);
std::vector<Op> eager_embedding_backward(const ModelSpec& m, const LayerConfig& c, const EagerHost& host);
// Final RMSNorm, LM head (untied) and the fp32 cross-entropy loss.
std::vector<Op> eager_head_forward(const ModelSpec& m, const LayerConfig& c, const EagerHost& host);
std::vector<Op> eager_head_backward(const ModelSpec& m, const LayerConfig& c, const EagerHost& host);

// optimizer.zero_grad(set_to_none=False): torch._foreach_zero_ over every bf16 gradient.
Op eager_zero_grad(const ModelSpec& m, const EagerHost& host);
// torch.optim.AdamW(fused=True).step(): torch._foreach_add_ on the step counters, then
// torch._fused_adamw_ over (param, grad, exp_avg, exp_avg_sq), all bf16.
Op eager_adamw_step(const ModelSpec& m, const EagerHost& host);

// Element counts of the model's parameter tensors in the order the optimizer sees them: the
// embedding, the final norm and the LM head, then 6 per layer (QKV, output, gate/up and down
// projections, the two norms).
std::vector<std::int64_t> eager_param_sizes(const ModelSpec& m);
// Kernel launches of PyTorch's multi_tensor_apply over tensors of these sizes with `depth` tensor
// lists (ATen/native/cuda/MultiTensorApply.cuh).
std::int64_t multi_tensor_apply_launches(const std::vector<std::int64_t>& sizes, int depth);

// Bytes per parameter held from step to step: bf16 weights, gradients and two AdamW moments.
inline constexpr std::int64_t kEagerWeightBytes = 2;
inline constexpr std::int64_t kEagerGradBytes = 2;
inline constexpr std::int64_t kEagerOptimizerBytes = 4;

}  // namespace trainsim::workload
