#pragma once
// A device without a GPU: every timing comes from the model's own formulas with known parameters,
// so tests can check that the fits recover them and that the interpolation reproduces them.

#include "calibrate/device.h"

namespace trainsim::calibrate {

struct FakeParams {
  std::int64_t gpus = 8;
  bool fp8 = true;
  bool fp8_fails = false;  // FP8 GEMMs throw DeviceError (a cuBLASLt failure)
  // GEMM: t = 2mnk / (F · g(m) g(n) g(k)) + t0, g(x) = x / (x + x0).
  double bf16_flops_per_s = 700e12;
  double fp8_flops_per_s = 1400e12;
  double half_dim = 120;
  double gemm_overhead_s = 6e-6;
  // Memory-bound kernels: t = latency + bytes / bandwidth.
  double copy_Bps = 4.0e12, elementwise_Bps = 4.1e12, reduction_Bps = 3.8e12;
  double memory_latency_s = 3e-6;
  double launch_s = 2.5e-6;
  double host_Bps = 50e9, host_latency_s = 20e-6;
  // Attention: t = flops / attention_flops_per_s + t0 (flops = 4 · bh · s² · d).
  double attention_flops_per_s = 400e12;
  // Collectives: t = latency + bytes · busbw_factor / busbw.
  double collective_latency_s = 20e-6;
  double collective_busbw_Bps = 360e9;
  // A GEMM beside all-reduces runs at 1 - this of its speed.
  double overlap_slowdown = 0.1;
};

class FakeDevice final : public Device {
 public:
  explicit FakeDevice(FakeParams params = {}) : p_(params) {}
  const FakeParams& params() const { return p_; }

  hardware::DeviceInfo info() const override;
  bool has_fp8() const override { return p_.fp8; }
  double max_buffer_bytes() const override { return 40e9; }
  double gemm_s(std::int64_t m, std::int64_t n, std::int64_t k, Dtype dtype, int repeats) override;
  double memory_s(MemoryKernel kernel, std::int64_t bytes, int repeats) override;
  double launch_s(int repeats) override;
  double host_copy_s(HostCopy direction, std::int64_t bytes, int repeats) override;
  std::string attention_impl() const override { return "fake: flops / rate + overhead"; }
  double attention_s(std::int64_t batch_heads, std::int64_t seq, std::int64_t head_dim, bool causal, double& flops,
                     int repeats) override;
  std::string collective_algo_note() const override { return "fake: always ring"; }
  CollectiveTiming collective(std::string_view op, std::int64_t gpus, std::int64_t bytes, int repeats) override;
  double gemm_beside_all_reduce_s(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t gpus, std::int64_t bytes,
                                  int repeats) override;

  // The formula itself, for tests.
  double gemm_formula_s(double m, double n, double k, bool fp8) const;
  double collective_formula_s(std::string_view op, std::int64_t gpus, double bytes) const;

 private:
  FakeParams p_;
};

}  // namespace trainsim::calibrate
