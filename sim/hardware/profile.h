#pragma once
// A calibrated GPU profile: what `trainsim calibrate` measured on real GPUs (cuBLASLt GEMMs, HBM
// kernels, launch overhead, host copies, attention, NCCL collectives inside one node) and the model
// parameters fitted to it. The compute model and the analytical network read it through the
// lookups below instead of the datasheet curves:
//   * GEMM: achieved FLOP/s interpolated trilinearly in (log m, log n, log k) over the measured grid;
//     above the grid each dimension is clamped (GEMMs saturate), below it the value at the grid's
//     edge is scaled by g(x) / g(x_min) with g(x) = x / (x + x0) and the fitted x0 (the catalog's
//     form, sim/hardware/README.md).
//   * memory-bound kernels: the fitted copy bandwidth; launch overhead: the measured one.
//   * collectives inside one NVLink domain: time interpolated piecewise linearly in (log bytes,
//     log time) over the measured sizes for that op and GPU count; below the smallest size its
//     time; above the largest, that time scaled by bytes (bandwidth-bound).
// A lookup "far outside" what was measured (a GEMM dimension beyond a factor kFarFactor of the
// grid, a collective over kFarFactor times the largest size) logs one spdlog warning per distinct
// case and is listed in warnings().
// The file format is described in topologies/profiles/README.md.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/json_node.h"

namespace trainsim::hardware {

// Beyond this factor outside the measured range a lookup warns. A choice: one doubling step of the
// calibration grids past their edge is still interpolation-like; two are guesswork.
inline constexpr double kFarFactor = 2.0;

// t = flops / (max_flops_per_s · g(m) g(n) g(k)) + overhead_s, g(x) = x / (x + half_dim): the
// catalog's GEMM form (sim/hardware/README.md) with the peak folded into max_flops_per_s.
struct GemmFit {
  double max_flops_per_s = 0;
  double half_dim = 0;
  double overhead_s = 0;
  double rms_error = 0;  // root mean square of the relative time residuals
};

// A full grid of GEMM timings: time_s[(i * n.size() + j) * k.size() + l] for (m[i], n[j], k[l]).
struct GemmTable {
  std::vector<double> m, n, k;  // ascending
  std::vector<double> time_s;
  GemmFit fit;
  double flops_per_s(std::size_t i, std::size_t j, std::size_t l) const;
};

// t = latency_s + bytes / Bps, fitted by relative least squares.
struct BandwidthFit {
  double Bps = 0;
  double latency_s = 0;
  double rms_error = 0;
};

struct SizeSeries {
  std::vector<double> bytes;  // ascending
  std::vector<double> time_s;
  BandwidthFit fit;
};

struct AttentionPoint {
  std::int64_t batch_heads = 0, seq = 0, head_dim = 0;
  bool causal = true;
  bool backward = false;
  double flops = 0;  // executed by the timed kernels (attention_impl says which)
  double time_s = 0;
};

struct CollectivePoint {
  double bytes = 0;  // nccl-tests convention: the total buffer size
  double time_s = 0;
  std::string algo;  // what NCCL ran, or "unknown"
};

struct CollectiveSeries {
  std::string op;  // all_reduce, all_gather, reduce_scatter, all_to_all, send_recv
  std::int64_t gpus = 0;
  std::vector<CollectivePoint> points;  // ascending bytes
  BandwidthFit fit;                     // Bps is the bus bandwidth (nccl-tests busbw)
};

struct DeviceInfo {
  std::string name;  // as the driver reports it, e.g. "NVIDIA H200"
  std::string gpu;   // catalog id it matches (h200-sxm), or empty
  std::int64_t count = 0;
  std::string compute_capability;
  double memory_bytes = 0;
  std::int64_t multiprocessors = 0;
  std::string driver, cuda_runtime, cublaslt, cudnn, nccl;
};

// Records lookups that fell far outside the measurements; each distinct message is logged once.
class ProfileWarnings {
 public:
  void warn(const std::string& message);
  std::vector<std::string> list() const;

 private:
  mutable std::mutex mutex_;
  std::set<std::string> seen_;
  std::vector<std::string> ordered_;
};

// Compute slowed by communication beside it: a GEMM timed alone and again while NCCL all-reduces run
// on another stream over `gpus` GPUs (their kernels holding SMs and memory bandwidth); fraction = 1 -
// alone / beside, the share of compute speed lost while a collective runs (the engine's
// ComputeSlowdown).
struct OverlapMeasurement {
  std::int64_t m = 0, n = 0, k = 0;
  double all_reduce_bytes = 0;
  std::int64_t gpus = 0;
  double gemm_alone_s = 0, gemm_beside_s = 0;
  double fraction() const { return gemm_beside_s > gemm_alone_s ? 1 - gemm_alone_s / gemm_beside_s : 0.0; }
};

struct GpuProfile {
  std::string file;  // where it was read from (names it in warnings)
  DeviceInfo device;
  std::string date;                                    // ISO 8601, UTC
  nlohmann::json settings = nlohmann::json::object();  // how it was measured (grid, repeats, ...)
  std::optional<GemmTable> gemm_bf16, gemm_fp8;
  std::map<std::string, SizeSeries> memory;       // copy, elementwise, reduction
  double hbm_Bps = 0;                             // achieved streaming bandwidth used by the model (copy fit)
  double launch_s = 0;                            // back-to-back kernel launch overhead
  std::map<std::string, SizeSeries> host_copies;  // h2d, d2h (pinned)
  std::string attention_impl;                     // what the attention timings ran
  std::vector<AttentionPoint> attention;
  std::string collective_algo_note;  // how `algo` was obtained
  std::vector<CollectiveSeries> collectives;
  std::optional<OverlapMeasurement> overlap;  // measured with 2 GPUs or more
  std::shared_ptr<ProfileWarnings> warnings = std::make_shared<ProfileWarnings>();

  // Achieved FLOP/s of one (m, n, k) GEMM; nullopt when the profile has no table for that dtype.
  std::optional<double> gemm_flops_per_s(std::int64_t m, std::int64_t n, std::int64_t k, bool fp8) const;
  // Seconds of one collective over `gpus` GPUs of one node; nullopt when that op and GPU count were
  // not measured.
  std::optional<double> collective_time_s(std::string_view op, std::int64_t gpus, double bytes) const;
  const CollectiveSeries* find_collective(std::string_view op, std::int64_t gpus) const;
};

// Strict parse (unknown keys are errors naming file and JSON path).
GpuProfile parse_profile(const util::JsonNode& root);
GpuProfile load_profile(const std::string& file);
nlohmann::json profile_to_json(const GpuProfile& profile);

}  // namespace trainsim::hardware
