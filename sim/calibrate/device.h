#pragma once
// What the calibration asks of the GPUs it measures. The CUDA implementation
// (cuda/cuda_device.cc, a plugin built only where CMake finds the CUDA toolkit) times real kernels
// with CUDA events; FakeDevice (fake_device.h) returns timings from formulas so the fitting and
// interpolation are tested on CPU. Every timing is the median of `repeats` samples taken after a
// warm-up, each sample the mean of back-to-back launches between two events (nccl-tests style).
// A call that cannot run (out of memory, a library error) throws DeviceError naming the call.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "hardware/profile.h"

namespace trainsim::calibrate {

enum class Dtype : std::uint8_t { bf16, fp8 };
// copy: y = x; elementwise: z = x + y; reduction: a layer-norm-like pass (row mean and variance,
// normalised output) over rows of kReductionRow elements.
enum class MemoryKernel : std::uint8_t { copy, elementwise, reduction };
enum class HostCopy : std::uint8_t { h2d, d2h };

// Row length of the reduction kernel: a hidden size of 8192 (Llama-3 70B), 4-byte floats.
inline constexpr std::int64_t kReductionRow = 8192;

class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CollectiveTiming {
  double time_s = 0;
  std::string algo = "unknown";
};

class Device {
 public:
  virtual ~Device() = default;
  virtual hardware::DeviceInfo info() const = 0;
  virtual bool has_fp8() const = 0;
  // Largest single buffer the device can hold for a benchmark (shapes needing more are skipped).
  virtual double max_buffer_bytes() const = 0;

  // One (m x k) · (k x n) GEMM, row-major output, FP32 accumulation.
  virtual double gemm_s(std::int64_t m, std::int64_t n, std::int64_t k, Dtype dtype, int repeats) = 0;
  // One kernel moving `bytes` of HBM traffic (reads + writes).
  virtual double memory_s(MemoryKernel kernel, std::int64_t bytes, int repeats) = 0;
  // One empty kernel launched back to back.
  virtual double launch_s(int repeats) = 0;
  // One pinned host <-> device copy.
  virtual double host_copy_s(HostCopy direction, std::int64_t bytes, int repeats) = 0;
  // Which attention kernels attention_s times, in words (stored in the profile).
  virtual std::string attention_impl() const = 0;
  // One attention pass; returns the seconds and sets `flops` to what the kernels executed.
  virtual double attention_s(std::int64_t batch_heads, std::int64_t seq, std::int64_t head_dim, bool causal,
                             double& flops, int repeats) = 0;
  // How the collectives' `algo` is known (stored in the profile).
  virtual std::string collective_algo_note() const = 0;
  // One collective (all_reduce, all_gather, reduce_scatter, all_to_all, send_recv) over the first
  // `gpus` local GPUs; `bytes` is the nccl-tests total size (send_recv: the message).
  virtual CollectiveTiming collective(std::string_view op, std::int64_t gpus, std::int64_t bytes, int repeats) = 0;
  // One BF16 GEMM on the first GPU while all-reduces of `bytes` run back to back over the first
  // `gpus` GPUs on their communication streams (started before the GEMMs are timed and kept running
  // past them): the GEMM's time with communication beside it.
  virtual double gemm_beside_all_reduce_s(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t gpus,
                                          std::int64_t bytes, int repeats) = 0;
};

}  // namespace trainsim::calibrate
