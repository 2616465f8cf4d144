#pragma once
// The GPU catalog (datasheet figures) and the parameters of the compute model for each GPU.
// Every number carries its source in gpu_catalog.cc.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace trainsim::hardware {

struct GpuProfile;  // hardware/profile.h

enum class Arch : std::uint8_t { ampere, hopper, blackwell };

struct GpuSpec {
  std::string id;  // a catalog id (gpu_catalog.cc), or a topology's own for a GPU derived from one
  std::string name;
  Arch arch = Arch::ampere;
  bool grace_host = false;  // a Grace-Blackwell superchip (GB200, GB300): its host CPU is Grace
  double bf16_flops = 0;    // dense peak FLOP/s
  double fp8_flops = 0;     // dense peak FLOP/s; 0 if the GPU has no FP8
  double fp4_flops = 0;     // dense peak FLOP/s of NVFP4 (Blackwell); 0 if the GPU has no FP4
  double hbm_bytes = 0;     // capacity
  double hbm_Bps = 0;       // peak bandwidth
  double nvlink_Bps = 0;    // per direction
  // Compute-model parameters (see compute_model.h for how each is used).
  double gemm_efficiency = 0;           // ceiling for large GEMMs, fraction of bf16_flops
  double fp8_gemm_efficiency = 0;       // ceiling for large FP8 GEMMs, fraction of fp8_flops (0: no FP8)
  double fp4_gemm_efficiency = 0;       // ceiling for large NVFP4 GEMMs, fraction of fp4_flops (0: no FP4)
  double gemm_half_dim = 0;             // x0 of the per-dimension saturation g(x) = x / (x + x0)
  double gemm_overhead_s = 0;           // fixed cost per GEMM beyond launch
  double attention_efficiency = 0;      // fused attention, fraction of bf16_flops at long sequences
  double attention_backward_ratio = 1;  // backward efficiency relative to forward
  double flash2_efficiency = 0;         // FlashAttention-2 fwd+bwd, fraction of bf16_flops at long sequences
  double flash1_efficiency = 0;         // FlashAttention (v1) fwd+bwd, fraction of bf16_flops at long sequences
  double attention_hd64 = 1;            // fused attention at head dim 64 relative to 128
  double flash2_hd64 = 1;               // FlashAttention-2 at head dim 64 relative to 128
  double hbm_efficiency = 0;            // achieved fraction of hbm_Bps for streaming kernels
  double mamba_scan_achieved = 1;       // the Mamba-2 mixer's own kernels, share of the roofline model
  double launch_s = 0;                  // per-kernel launch overhead
  // A calibrated profile (`gpu_profile` in a scenario or topology): where set, the compute model and
  // the analytical network take GEMM, HBM, launch and intra-node collective times from it.
  std::shared_ptr<const GpuProfile> profile;
};

std::span<const GpuSpec> gpu_catalog();
// The bytes CUDA exposes of an HBM capacity quoted in (binary) gigabytes, as the catalog counts them.
double usable_hbm_bytes(double hbm_gb);
// nullptr when unknown.
const GpuSpec* find_gpu(std::string_view id);

}  // namespace trainsim::hardware
