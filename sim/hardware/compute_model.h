#pragma once
// Roofline compute model with shape-dependent efficiencies:
//   time = max(flops / (peak * efficiency(op)), bytes / (hbm_Bps * hbm_efficiency)) / achieved + launches
// (achieved is 1 except for the Mamba-2 mixer's own kernels, Op::mamba_scan, which run at the GPU's
// GpuSpec::mamba_scan_achieved.)
// GEMM efficiency falls as shapes shrink; attention has its own efficiency; memory-bound kernels
// run at an achieved fraction of HBM bandwidth. Constants and fits are documented in
// gpu_catalog.cc and sim/hardware/README.md.

#include "hardware/gpu.h"
#include "workload/ops.h"

namespace trainsim::hardware {

// One op's time and what bounds it: total_s = max(compute_s, memory_s) + fixed_s, where compute_s is
// its FLOPs at the modelled efficiency (0 for memory-bound kernels) and memory_s its bytes at the
// achieved HBM bandwidth, both over the Mamba kernels' share (GpuSpec::mamba_scan_achieved), and fixed_s its launches
// and fixed per-GEMM cost. A calibrated profile's measured GEMM holds its fixed costs in compute_s.
struct OpTime {
  double compute_s = 0;
  double memory_s = 0;
  double fixed_s = 0;
  double total_s = 0;
  // "compute", "memory" or "launch": the largest of the three parts.
  const char* bound() const;
};

class ComputeModel {
 public:
  explicit ComputeModel(const GpuSpec& gpu) : gpu_(gpu) {}
  // Seconds one op takes on one GPU. tp_comm ops are not compute: asking is a bug.
  double time_s(const workload::Op& op) const { return breakdown(op).total_s; }
  OpTime breakdown(const workload::Op& op) const;
  double gemm_efficiency(const workload::GemmShape& shape) const;
  double attention_efficiency(const workload::AttentionShape& shape) const;
  const GpuSpec& gpu() const { return gpu_; }

 private:
  GpuSpec gpu_;
};

}  // namespace trainsim::hardware
