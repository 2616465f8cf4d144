#include "calibrate/calibration.h"

#include <algorithm>
#include <array>
#include <cctype>

#include <fmt/format.h>

#include "calibrate/fit.h"
#include "hardware/gpu.h"

namespace trainsim::calibrate {

namespace {

void say(const Options& o, const std::string& line) {
  if (o.progress) o.progress(line);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::vector<double> doubling(std::int64_t from, std::int64_t to) {
  std::vector<double> out;
  for (std::int64_t b = from; b <= to; b *= 2) out.push_back(static_cast<double>(b));
  return out;
}

hardware::GemmTable measure_gemm(Device& d, const Options& o, Dtype dtype) {
  hardware::GemmTable t;
  t.m = t.n = t.k = gemm_dims(o);
  for (double m : t.m)
    for (double n : t.n)
      for (double k : t.k) {
        // The largest operand must fit; the grid's top is sized for an 80 GB GPU (32768² BF16 = 2 GiB).
        if (std::max({m * k, k * n, m * n}) * 2.0 > d.max_buffer_bytes())
          throw DeviceError(fmt::format("a {}x{}x{} GEMM does not fit in GPU memory; lower --grid", m, n, k));
        t.time_s.push_back(d.gemm_s(static_cast<std::int64_t>(m), static_cast<std::int64_t>(n),
                                    static_cast<std::int64_t>(k), dtype, o.repeats));
      }
  return t;
}

hardware::SizeSeries measure_sizes(const std::vector<double>& sizes, const std::function<double(std::int64_t)>& f) {
  hardware::SizeSeries s;
  for (double b : sizes) {
    s.bytes.push_back(b);
    s.time_s.push_back(f(static_cast<std::int64_t>(b)));
  }
  return s;
}

}  // namespace

std::vector<double> gemm_dims(const Options& o) {
  std::vector<double> dims;
  for (int i = 0; i < o.gemm_points; ++i) dims.push_back(static_cast<double>(kGemmMinDim << i));
  return dims;
}

std::string match_gpu(const std::string& device_name, double memory_bytes) {
  const std::string n = lower(device_name);
  // Names as nvidia-smi prints them ("NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB",
  // "NVIDIA B200", "NVIDIA GB200"); the 40 GB and 80 GB A100 differ only in memory.
  if (n.find("gb200") != std::string::npos) return "gb200";
  if (n.find("gb300") != std::string::npos) return "gb300";
  if (n.find("b200") != std::string::npos) return "b200";
  if (n.find("b300") != std::string::npos) return "b300";
  if (n.find("h200") != std::string::npos) return "h200-sxm";
  if (n.find("h100") != std::string::npos) return "h100-sxm";
  if (n.find("a100") != std::string::npos) return memory_bytes > 50e9 ? "a100-sxm-80gb" : "a100-sxm-40gb";
  return {};
}

hardware::GpuProfile run_calibration(Device& d, const Options& o, const std::string& date) {
  hardware::GpuProfile p;
  p.device = d.info();
  p.device.gpu = o.gpu.empty() ? match_gpu(p.device.name, p.device.memory_bytes) : o.gpu;
  p.date = date;
  p.settings = {{"gemm_dims", gemm_dims(o)},
                {"repeats", o.repeats},
                {"warmup", o.warmup},
                {"timing", "CUDA events around back-to-back launches after warm-up; median of the repeats"},
                {"gemm_layout", "cuBLASLt, A transposed (TN), FP32 accumulation; BF16 output (also for FP8 inputs)"},
                {"memory_max_bytes", o.memory_max_bytes},
                {"host_copy_max_bytes", o.host_copy_max_bytes},
                {"collective_max_bytes", o.collective_max_bytes},
                {"attention_batch_heads", o.attention_batch_heads},
                {"reduction_row_elements", kReductionRow}};

  say(o, fmt::format("calibrating {} x {} ({} GEMM shapes per dtype)", p.device.count, p.device.name,
                     o.gemm_points * o.gemm_points * o.gemm_points));
  p.gemm_bf16 = measure_gemm(d, o, Dtype::bf16);
  // Past the BF16 GEMMs (which every profile needs) a failing benchmark is recorded under
  // settings.skipped and the rest still runs: one call on a lent GPU should not lose everything.
  nlohmann::json skipped = nlohmann::json::array();
  auto optional = [&](const char* what, const std::function<void()>& measure) {
    try {
      measure();
    } catch (const DeviceError& e) {
      skipped.push_back(fmt::format("{}: {}", what, e.what()));
      say(o, fmt::format("skipped {}: {}", what, e.what()));
    }
  };
  if (d.has_fp8()) {
    say(o, "FP8 GEMMs");
    optional("FP8 GEMMs", [&] { p.gemm_fp8 = measure_gemm(d, o, Dtype::fp8); });
  }

  say(o, "memory-bound kernels and launch overhead");
  const std::vector<double> mem_sizes = doubling(kMemoryMinBytes, o.memory_max_bytes);
  constexpr std::array<std::pair<MemoryKernel, const char*>, 3> kKernels = {{{MemoryKernel::copy, "copy"},
                                                                             {MemoryKernel::elementwise, "elementwise"},
                                                                             {MemoryKernel::reduction, "reduction"}}};
  for (const auto& [kernel, name] : kKernels)
    p.memory[name] = measure_sizes(mem_sizes, [&](std::int64_t b) { return d.memory_s(kernel, b, o.repeats); });
  p.launch_s = d.launch_s(o.repeats);

  say(o, "host-device copies");
  const std::vector<double> copy_sizes = doubling(kMemoryMinBytes, o.host_copy_max_bytes);
  optional("host copies", [&] {
    p.host_copies["h2d"] =
        measure_sizes(copy_sizes, [&](std::int64_t b) { return d.host_copy_s(HostCopy::h2d, b, o.repeats); });
    p.host_copies["d2h"] =
        measure_sizes(copy_sizes, [&](std::int64_t b) { return d.host_copy_s(HostCopy::d2h, b, o.repeats); });
  });

  say(o, "attention");
  p.attention_impl = d.attention_impl();
  optional("attention", [&] {
    for (std::int64_t seq = kAttentionMinSeq; seq <= o.attention_max_seq; seq *= 2) {
      hardware::AttentionPoint a;
      a.batch_heads = o.attention_batch_heads;
      a.seq = seq;
      a.head_dim = kAttentionHeadDim;
      a.causal = true;
      a.time_s = d.attention_s(a.batch_heads, a.seq, a.head_dim, a.causal, a.flops, o.repeats);
      p.attention.push_back(a);
    }
  });

  p.collective_algo_note = d.collective_algo_note();
  if (p.device.count >= 2) {
    const std::vector<double> coll_sizes = doubling(kCollectiveMinBytes, o.collective_max_bytes);
    for (std::int64_t g = 2; g <= p.device.count; ++g) {
      say(o, fmt::format("NCCL collectives over {} GPUs", g));
      for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"}) {
        optional(op, [&] {
          hardware::CollectiveSeries s;
          s.op = op;
          s.gpus = g;
          for (double b : coll_sizes) {
            // As nccl-tests: whole 4-byte elements per rank, the size rounded down to a multiple of them.
            const std::int64_t bytes = static_cast<std::int64_t>(b) / (4 * g) * (4 * g);
            const CollectiveTiming ct = d.collective(op, g, bytes, o.repeats);
            s.points.push_back({static_cast<double>(bytes), ct.time_s, ct.algo});
          }
          p.collectives.push_back(std::move(s));
        });
      }
    }
  }
  // Compute beside communication: a large BF16 GEMM (about a millisecond on current GPUs) alone and
  // beside all-reduces over every local GPU of kOverlapAllReduceBytes (a data-parallel bucket's
  // size, milliseconds over NVLink), so the all-reduces outlast each timed GEMM.
  if (p.device.count >= 2) {
    say(o, fmt::format("a GEMM beside all-reduces over {} GPUs", p.device.count));
    optional("overlap", [&] {
      hardware::OverlapMeasurement m;
      m.m = m.n = m.k = kOverlapGemmDim;
      m.gpus = p.device.count;
      const std::int64_t bytes = kOverlapAllReduceBytes / (4 * m.gpus) * (4 * m.gpus);
      m.all_reduce_bytes = static_cast<double>(bytes);
      m.gemm_alone_s = d.gemm_s(m.m, m.n, m.k, Dtype::bf16, o.repeats);
      m.gemm_beside_s = d.gemm_beside_all_reduce_s(m.m, m.n, m.k, m.gpus, bytes, o.repeats);
      p.overlap = m;
    });
  }
  if (!skipped.empty()) p.settings["skipped"] = skipped;
  fit_profile(p);
  return p;
}

}  // namespace trainsim::calibrate
