#pragma once
// Roofline compute model with shape-dependent efficiencies:
//   time = max(flops / (peak * efficiency(op)), bytes / (hbm_Bps * hbm_efficiency)) / achieved + launches
// (Op::achieved is 1 except for kernels measured slower than the roofline: the Mamba-2 scan's.)
// GEMM efficiency falls as shapes shrink; attention has its own efficiency; memory-bound kernels
// run at an achieved fraction of HBM bandwidth. Constants and fits are documented in
// gpu_catalog.cc and sim/hardware/README.md.

#include "hardware/gpu.h"
#include "workload/ops.h"

namespace trainsim::hardware {

class ComputeModel {
 public:
  explicit ComputeModel(const GpuSpec& gpu) : gpu_(gpu) {}
  // Seconds one op takes on one GPU. tp_comm ops are not compute: asking is a bug.
  double time_s(const workload::Op& op) const;
  double gemm_efficiency(const workload::GemmShape& shape) const;
  double attention_efficiency(const workload::AttentionShape& shape) const;
  const GpuSpec& gpu() const { return gpu_; }

 private:
  GpuSpec gpu_;
};

}  // namespace trainsim::hardware
