#include "calibrate/fake_device.h"

#include "network/collective.h"

namespace trainsim::calibrate {

hardware::DeviceInfo FakeDevice::info() const {
  hardware::DeviceInfo d;
  d.name = "Fake H200";
  d.count = p_.gpus;
  d.compute_capability = "9.0";
  d.memory_bytes = 141e9;
  d.multiprocessors = 132;
  d.driver = "fake";
  d.cuda_runtime = "fake";
  d.cublaslt = "fake";
  d.cudnn = "fake";
  d.nccl = "fake";
  return d;
}

double FakeDevice::gemm_formula_s(double m, double n, double k, bool fp8) const {
  auto g = [this](double x) { return x / (x + p_.half_dim); };
  const double f = fp8 ? p_.fp8_flops_per_s : p_.bf16_flops_per_s;
  return 2.0 * m * n * k / (f * g(m) * g(n) * g(k)) + p_.gemm_overhead_s;
}

double FakeDevice::gemm_s(std::int64_t m, std::int64_t n, std::int64_t k, Dtype dtype, int /*repeats*/) {
  if (dtype == Dtype::fp8 && (!p_.fp8 || p_.fp8_fails)) throw DeviceError("fake device: no FP8");
  return gemm_formula_s(static_cast<double>(m), static_cast<double>(n), static_cast<double>(k), dtype == Dtype::fp8);
}

double FakeDevice::memory_s(MemoryKernel kernel, std::int64_t bytes, int /*repeats*/) {
  const double bw = kernel == MemoryKernel::copy          ? p_.copy_Bps
                    : kernel == MemoryKernel::elementwise ? p_.elementwise_Bps
                                                          : p_.reduction_Bps;
  return p_.memory_latency_s + static_cast<double>(bytes) / bw;
}

double FakeDevice::launch_s(int /*repeats*/) {
  return p_.launch_s;
}

double FakeDevice::host_copy_s(HostCopy /*direction*/, std::int64_t bytes, int /*repeats*/) {
  return p_.host_latency_s + static_cast<double>(bytes) / p_.host_Bps;
}

double FakeDevice::attention_s(std::int64_t batch_heads, std::int64_t seq, std::int64_t head_dim, bool /*causal*/,
                               double& flops, int /*repeats*/) {
  flops = 4.0 * static_cast<double>(batch_heads) * static_cast<double>(seq) * static_cast<double>(seq) *
          static_cast<double>(head_dim);
  return flops / p_.attention_flops_per_s + p_.launch_s;
}

double FakeDevice::collective_formula_s(std::string_view op, std::int64_t gpus, double bytes) const {
  double factor = 1.0;
  if (auto c = network::collective_from_string(op)) factor = network::busbw_factor(*c, gpus);
  return p_.collective_latency_s + bytes * factor / p_.collective_busbw_Bps;
}

CollectiveTiming FakeDevice::collective(std::string_view op, std::int64_t gpus, std::int64_t bytes, int /*repeats*/) {
  if (gpus > p_.gpus) throw DeviceError("fake device: not that many GPUs");
  return {collective_formula_s(op, gpus, static_cast<double>(bytes)), "ring"};
}

double FakeDevice::gemm_beside_all_reduce_s(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t gpus,
                                            std::int64_t bytes, int /*repeats*/) {
  if (gpus < 2 || gpus > p_.gpus || bytes <= 0) throw DeviceError("gemm_beside_all_reduce: bad arguments");
  return gemm_formula_s(static_cast<double>(m), static_cast<double>(n), static_cast<double>(k), false) /
         (1 - p_.overlap_slowdown);
}

}  // namespace trainsim::calibrate
