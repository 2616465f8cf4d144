#pragma once
// The calibration run: which shapes and sizes are measured, in what order, and how the timings
// become a profile (raw measurements plus the fits of fit.h). Device-independent: the same code
// drives the CUDA device on a GPU machine and the fake device in tests.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "calibrate/device.h"
#include "hardware/profile.h"

namespace trainsim::calibrate {

struct Options {
  // GEMM grid: m, n and k each take gemm_points powers of two from kGemmMinDim (128, 256, ...).
  // The default 9 reaches 32768: transformer GEMMs at TP 1-8 have m = micro-batch tokens (2k-32k),
  // n and k = hidden or FFN size over TP (128 for a GQA K/V projection at TP 8, up to 16k-53k).
  int gemm_points = 9;
  int repeats = 10;  // samples per median
  int warmup = 3;    // untimed runs before the samples
  // Memory-bound kernels and host copies: doubling sizes from 1 MiB up to these.
  std::int64_t memory_max_bytes = std::int64_t{2} << 30;
  std::int64_t host_copy_max_bytes = std::int64_t{1} << 30;
  // Collectives: nccl-tests' default factor-2 steps from 1 KiB up to this, every GPU count from 2 to
  // all local GPUs (none with one GPU).
  std::int64_t collective_max_bytes = std::int64_t{1} << 30;
  // Attention: sequence lengths 512 ... attention_max_seq (doubling), head dim 128, causal,
  // attention_batch_heads (micro-batch x heads, 1 x 32: Llama-3 8B at TP 1).
  std::int64_t attention_max_seq = 8192;
  std::int64_t attention_batch_heads = 32;
  std::string gpu;                                   // catalog id; empty: matched from the device name
  std::function<void(const std::string&)> progress;  // one line per stage (e.g. spdlog::info)
};

inline constexpr std::int64_t kGemmMinDim = 128;
inline constexpr std::int64_t kMemoryMinBytes = std::int64_t{1} << 20;
inline constexpr std::int64_t kCollectiveMinBytes = std::int64_t{1} << 10;
inline constexpr std::int64_t kAttentionMinSeq = 512;
inline constexpr std::int64_t kAttentionHeadDim = 128;
// The overlap measurement: an 8192^3 BF16 GEMM (1.1 TFLOP, about 1 ms on an H100) beside all-reduces
// of 256 MiB (a data-parallel bucket; about 1 ms at 400 GB/s of bus bandwidth).
inline constexpr std::int64_t kOverlapGemmDim = 8192;
inline constexpr std::int64_t kOverlapAllReduceBytes = std::int64_t{256} << 20;

// The GEMM dimensions the grid measures.
std::vector<double> gemm_dims(const Options& options);

// The catalog id a device name stands for ("NVIDIA H200" -> h200-sxm), or empty.
std::string match_gpu(const std::string& device_name, double memory_bytes);

// Measures everything the options ask for on `device` and fits the model parameters. `date` is the
// ISO 8601 time stamp the profile records.
hardware::GpuProfile run_calibration(Device& device, const Options& options, const std::string& date);

}  // namespace trainsim::calibrate
