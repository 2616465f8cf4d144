#pragma once
// The op builders the PyTorch models (eager_ops.cc, torchtitan_ops.cc) share: a memory-bound kernel,
// a bf16 cuBLAS GEMM, and multi_tensor_apply's launch count. Each op carries `host_s`, the CPU time
// to issue its kernels.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "workload/ops.h"

namespace trainsim::workload::eager {

inline constexpr double kBf16 = 2;
inline constexpr double kFp32 = 4;
inline constexpr double kInt64 = 8;

// [A] Python work per parameter tensor outside any kernel, from the loops in torch/optim:
// Optimizer.zero_grad (detach, requires_grad_(False), grouping by device and dtype) and
// AdamW._init_group (gradient checks, state lookup, list appends): about 1.5 and 3 µs of CPython per
// tensor. Small next to the step; a host profile would replace them.
inline constexpr double kZeroGradPerTensor_s = 1.5e-6;
inline constexpr double kAdamInitPerTensor_s = 3e-6;

// [A] embedding_dense_backward's sort-based path (ATen/native/cuda/Embedding.cu and
// EmbeddingBackwardKernel.cu, taken for more than 3072 indices): zero the [V, h] gradient, radix-sort
// the indices with their positions (16 bytes a token, read and written, two passes), find segments,
// sum each segment's rows in fp32 (4·T·h written and read), write the rows: about 12 kernels.
inline constexpr std::int32_t kEmbeddingBackwardKernels = 12;

inline std::int64_t to_bytes(double v) {
  return static_cast<std::int64_t>(v);
}

// A memory-bound step of `kernels` kernels reading `read` and writing `write` bytes.
inline Op kernel(std::string name, double read, double write, double host_per_kernel, double saved = 0,
                 std::int32_t kernels = 1, double workspace = 0) {
  Op op;
  op.name = std::move(name);
  op.kind = OpKind::memory;
  op.bytes = read + write;
  op.kernels = kernels;
  op.saved_bytes = to_bytes(saved);
  op.workspace_bytes = to_bytes(workspace);
  op.host_s = host_per_kernel * kernels;
  return op;
}

// A bf16 cuBLAS GEMM (m x k) * (k x n).
inline Op gemm(std::string name, double m, double n, double k, double host, double saved = 0, double workspace = 0) {
  Op op;
  op.name = std::move(name);
  op.kind = OpKind::gemm;
  op.gemm = {static_cast<std::int64_t>(m), static_cast<std::int64_t>(n), static_cast<std::int64_t>(k), 1};
  op.flops = 2 * m * n * k;
  op.bytes = (m * k + k * n + m * n) * kBf16;
  op.saved_bytes = to_bytes(saved);
  op.workspace_bytes = to_bytes(workspace);
  op.host_s = host;
  return op;
}

// scaled_dot_product_attention's fused kernel, causal, over `heads` heads of `hd` for b sequences; q_bytes and kv_bytes
// the bf16 query (and output) and key (and value) tensors it reads. FlashAttention's count, as ops.cc: 4·b·s²·heads·hd
// forward, halved by the causal mask; backward 2.5x. The forward reads Q, K, V and writes O and the fp32 logsumexp; the
// backward (FlashAttention-2: dot(dO, O), the main kernel accumulating dQ in fp32, dQ converted to bf16) reads Q, K, V,
// O, dO, writes dQ, dK, dV and the fp32 dQ accumulator, which it reads back. Saves nothing: the caller says what its
// autograd keeps. With context parallelism the rank's s_q = s/cp queries (load-balanced chunks) meet all s_kv = s keys:
// half of them on average, causal.
inline Op sdpa(double b, double s_q, double s_kv, double heads, double hd, double q_bytes, double kv_bytes,
               AttentionImpl impl, bool backward, double host) {
  Op op;
  op.kind = OpKind::attention;
  op.name = backward ? "sdpa_backward" : "sdpa";
  op.attention = {static_cast<std::int64_t>(b * heads),
                  static_cast<std::int64_t>(s_q),
                  static_cast<std::int64_t>(s_kv),
                  static_cast<std::int64_t>(hd),
                  true,
                  backward,
                  impl};
  const double fwd = 4 * b * s_q * s_kv * heads * hd * 0.5;
  op.flops = backward ? 2.5 * fwd : fwd;
  const double lse = kFp32 * b * heads * s_q, acc = 2 * q_bytes;
  op.bytes = backward ? 4 * q_bytes + 4 * kv_bytes + 2 * acc + 2 * lse : 2 * q_bytes + 2 * kv_bytes + lse;
  op.kernels = backward ? 3 : 1;
  op.host_s = host * op.kernels;
  op.attention_core = true;
  return op;
}

}  // namespace trainsim::workload::eager
