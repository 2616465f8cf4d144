#include "hardware/compute_model.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "hardware/profile.h"
#include "util/error.h"

namespace trainsim::hardware {

namespace {

struct Point {
  double x, y;
};

// Piecewise-linear in log(x); extrapolates the first segment below, clamps above.
double interpolate_log(std::span<const Point> pts, double x) {
  const double lx = std::log(std::max(x, 1.0));
  for (std::size_t i = 1; i < pts.size(); ++i) {
    if (x <= pts[i].x || i + 1 == pts.size()) {
      if (x > pts[i].x) return pts[i].y;
      const double l0 = std::log(pts[i - 1].x), l1 = std::log(pts[i].x);
      return pts[i - 1].y + (pts[i].y - pts[i - 1].y) * (lx - l0) / (l1 - l0);
    }
  }
  return pts.back().y;
}

// Attention throughput relative to 16k tokens, causal, head dim 128: the mean of A100
// FlashAttention-2 fwd+bwd and H100 cuDNN/FA3 fwd (published-runs.md §9b), which agree to 5%.
constexpr std::array<Point, 6> kAttentionSeqCurve{
    {{512, 0.525}, {1024, 0.713}, {2048, 0.845}, {4096, 0.932}, {8192, 0.971}, {16384, 1.0}}};
// Head dim 64 vs 128: the GPU's attention_hd64 / flash2_hd64 (gpu_catalog.cc), log-linear between 64
// and 128 and beyond 128 held at 128's rate.
// FlashAttention (v1) relative to its 16k rate: A100, causal, head dim 128, fwd+bwd 55 / 62 / 69 / 76 / 80
// / 83 TFLOP/s at 512 ... 16k (published-runs.md §9b). Flatter than FlashAttention-2's curve: v1
// parallelises over batch x heads only, so it gains less from long sequences.
// Beyond 16k no kernel was measured. [FIT] kFlash1LongSeqGain per doubling (under kFlash1MaxFactor
// below), the best of 1.10 / 1.13 / 1.16 / 1.19 / 1.22 for the 18 A100 MPT runs of 32k and 64k tokens
// (llm-foundry's Triton FlashAttention, whose grid also spans query blocks): their step-time MAPE
// 17.2% held at 16k -> 5.5%; the 8 H100 runs, not used in the fit, 18.6% -> 3.2% (validation/README.md).
// Held at its 64k value above, the longest sequence fitted.
constexpr double kFlash1LongSeqGain = 1.19;
constexpr std::array<Point, 8> kFlash1SeqCurve{{{512, 55.0 / 83},
                                                {1024, 62.0 / 83},
                                                {2048, 69.0 / 83},
                                                {4096, 76.0 / 83},
                                                {8192, 80.0 / 83},
                                                {16384, 1.0},
                                                {32768, kFlash1LongSeqGain},
                                                {65536, kFlash1LongSeqGain* kFlash1LongSeqGain}}};
// FlashAttention v1 runs head dim 64 faster than 128, unlike v2 (published-runs.md §9b, A100): causal
// head dim 64 is not published, so it is estimated as v1's non-causal head-dim-64 rate times
// FlashAttention-2's causal / non-causal ratio at head dim 64, at 16k: 110 x 171/176 = 106.9 TFLOP/s,
// 1.288 x v1's causal head-dim-128 rate (83). v1's non-causal head-dim-64 rate is flat from 8k to 16k
// (110, 110), so 106.9 is also the most v1 is taken to reach at any sequence length or head dim.
constexpr double kFlash1MaxFactor = 110.0 * 171 / 176 / 83;
constexpr std::array<Point, 2> kFlash1HeadDimCurve{{{64, kFlash1MaxFactor}, {128, 1.0}}};
constexpr double kMinAttentionFactor = 0.1;

}  // namespace

// e_max · g(m) · g(n) · g(k), g(x) = x / (x + x0): each dimension short of x0 leaves tiles and
// waves partly empty. Fitted with a fixed per-GEMM time (gemm_overhead_s + launch_s) to the A100
// cuBLASLt sweep; see README.md for the fit and its residuals.
double ComputeModel::gemm_efficiency(const workload::GemmShape& shape) const {
  if (gpu_.profile)
    if (auto f = gpu_.profile->gemm_flops_per_s(shape.m, shape.n, shape.k, false)) return *f / gpu_.bf16_flops;
  auto g = [this](std::int64_t dim) {
    const double x = static_cast<double>(std::max<std::int64_t>(dim, 1));
    return x / (x + gpu_.gemm_half_dim);
  };
  return gpu_.gemm_efficiency * g(shape.m) * g(shape.n) * g(shape.k);
}

double ComputeModel::attention_efficiency(const workload::AttentionShape& shape) const {
  const bool fa1 = shape.impl == workload::AttentionImpl::flash1;
  const double seq = interpolate_log(fa1 ? std::span<const Point>(kFlash1SeqCurve) : kAttentionSeqCurve,
                                     static_cast<double>(shape.seq_kv));
  const double hd64 = shape.impl == workload::AttentionImpl::flash2 ? gpu_.flash2_hd64 : gpu_.attention_hd64;
  const std::array<Point, 2> head_dim_curve{{{64, hd64}, {128, 1.0}}};
  const double hd = interpolate_log(fa1 ? std::span<const Point>(kFlash1HeadDimCurve) : head_dim_curve,
                                    static_cast<double>(shape.head_dim));
  const double factor = fa1 ? std::min(seq * hd, kFlash1MaxFactor) : seq * hd;
  // The FlashAttention v1 / v2 figures are fwd+bwd rates, used for both passes; the fused kernels'
  // figure is a forward rate with its own backward ratio.
  double base = gpu_.attention_efficiency;
  double pass = shape.backward ? gpu_.attention_backward_ratio : 1.0;
  if (shape.impl == workload::AttentionImpl::flash2 || fa1) {
    base = fa1 ? gpu_.flash1_efficiency : gpu_.flash2_efficiency;
    pass = 1.0;
  }
  return base * pass * std::max(factor, kMinAttentionFactor);
}

const char* OpTime::bound() const {
  if (fixed_s > compute_s && fixed_s > memory_s) return "launch";
  return compute_s >= memory_s ? "compute" : "memory";
}

OpTime ComputeModel::breakdown(const workload::Op& op) const {
  TRAINSIM_ASSERT(op.kind != workload::OpKind::tp_comm);
  // A calibrated profile replaces the achieved HBM bandwidth, the launch overhead and, for GEMMs it
  // measured, the whole GEMM time (its back-to-back timings hold the launch and fixed costs).
  const GpuProfile* profile = gpu_.profile.get();
  const double launch_s = profile != nullptr ? profile->launch_s : gpu_.launch_s;
  double memory_s = op.bytes / (profile != nullptr ? profile->hbm_Bps : gpu_.hbm_Bps * gpu_.hbm_efficiency);
  double compute_s = 0;
  double fixed_s = op.kernels * launch_s;
  switch (op.kind) {
    case workload::OpKind::gemm:
      // A profile measures BF16 and FP8 GEMMs; NVFP4 ones come from the datasheet model.
      if (profile != nullptr && !op.fp4) {
        if (auto f = profile->gemm_flops_per_s(op.gemm.m, op.gemm.n, op.gemm.k, op.fp8)) {
          compute_s = op.flops / *f;
          fixed_s = 0;
          break;
        }
      }
      if (op.fp4) {
        TRAINSIM_ASSERT(gpu_.fp4_flops > 0);
        compute_s =
            op.flops / (gpu_.fp4_flops * gpu_.fp4_gemm_efficiency * gemm_efficiency(op.gemm) / gpu_.gemm_efficiency);
      } else if (op.fp8) {
        TRAINSIM_ASSERT(gpu_.fp8_flops > 0);
        compute_s =
            op.flops / (gpu_.fp8_flops * gpu_.fp8_gemm_efficiency * gemm_efficiency(op.gemm) / gpu_.gemm_efficiency);
      } else {
        compute_s = op.flops / (gpu_.bf16_flops * gemm_efficiency(op.gemm));
      }
      fixed_s += gpu_.gemm_overhead_s * op.kernels;  // each kernel of a grouped GEMM is a GEMM of its own
      break;
    case workload::OpKind::attention:
      compute_s = op.flops / (gpu_.bf16_flops * attention_efficiency(op.attention));
      break;
    case workload::OpKind::memory:
    case workload::OpKind::tp_comm:
      break;
  }
  if (op.mamba_scan) {
    compute_s /= gpu_.mamba_scan_achieved;
    memory_s /= gpu_.mamba_scan_achieved;
  }
  return {compute_s, memory_s, fixed_s, std::max(compute_s, memory_s) + fixed_s};
}

}  // namespace trainsim::hardware
