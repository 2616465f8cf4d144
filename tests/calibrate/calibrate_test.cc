// The calibration on a fake device whose timings come from the model's own formulas with known
// parameters: the fits must recover those parameters, and `trainsim calibrate` must fail cleanly
// where there is no GPU.

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "calibrate/calibration.h"
#include "calibrate/fake_device.h"
#include "calibrate/fit.h"
#include "hardware/profile.h"
#include "run_binary.h"

using namespace trainsim;
using namespace trainsim::calibrate;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

Options small_options() {
  Options o;
  o.gemm_points = 6;  // 128 ... 4096
  o.memory_max_bytes = std::int64_t{1} << 26;
  o.host_copy_max_bytes = std::int64_t{1} << 24;
  o.collective_max_bytes = std::int64_t{1} << 24;
  o.attention_max_seq = 2048;
  return o;
}

constexpr const char* kDate = "2026-01-01T00:00:00Z";

}  // namespace

TEST_CASE("the GEMM fit recovers the ceiling, x0 and fixed time of formula timings", "[calibrate]") {
  // t = 2mnk / (F g(m) g(n) g(k)) + t0 exactly: the fit's residual is zero at the true parameters,
  // so the scan and golden-section refinement must land on them.
  FakeDevice dev;
  const hardware::GpuProfile p = run_calibration(dev, small_options(), kDate);
  REQUIRE(p.gemm_bf16);
  REQUIRE(p.gemm_fp8);
  CHECK(p.gemm_bf16->m.size() == 6);
  CHECK(p.gemm_bf16->time_s.size() == 216);
  CHECK(p.gemm_bf16->fit.max_flops_per_s == Approx(700e12).epsilon(1e-3));
  CHECK(p.gemm_bf16->fit.half_dim == Approx(120).epsilon(1e-3));
  CHECK(p.gemm_bf16->fit.overhead_s == Approx(6e-6).epsilon(1e-3));
  CHECK(p.gemm_bf16->fit.rms_error < 1e-4);
  CHECK(p.gemm_fp8->fit.max_flops_per_s == Approx(1400e12).epsilon(1e-3));
  CHECK(p.gemm_fp8->fit.half_dim == Approx(120).epsilon(1e-3));
}

TEST_CASE("bandwidth fits recover latency and bandwidth; HBM and launch come from them", "[calibrate]") {
  // Memory kernels: t = 3 us + bytes / 4.0 TB/s (copy); host copies: 20 us + bytes / 50 GB/s.
  FakeDevice dev;
  const hardware::GpuProfile p = run_calibration(dev, small_options(), kDate);
  CHECK(p.memory.at("copy").fit.Bps == Approx(4.0e12).epsilon(1e-9));
  CHECK(p.memory.at("copy").fit.latency_s == Approx(3e-6).epsilon(1e-6));
  CHECK(p.memory.at("elementwise").fit.Bps == Approx(4.1e12).epsilon(1e-9));
  CHECK(p.memory.at("reduction").fit.Bps == Approx(3.8e12).epsilon(1e-9));
  CHECK(p.hbm_Bps == Approx(4.0e12).epsilon(1e-9));
  CHECK(p.launch_s == Approx(2.5e-6));
  CHECK(p.host_copies.at("h2d").fit.Bps == Approx(50e9).epsilon(1e-9));
  CHECK(p.host_copies.at("d2h").fit.latency_s == Approx(20e-6).epsilon(1e-6));
  // Memory sizes double from 1 MiB to 64 MiB: 7 points.
  CHECK(p.memory.at("copy").bytes.size() == 7);
}

TEST_CASE("collectives are measured over every GPU count from 2 to all, and their bus bandwidth fitted",
          "[calibrate]") {
  // 8 fake GPUs: 7 GPU counts x 5 ops. t = 20 us + bytes * busbw_factor / 360 GB/s, so the fit of
  // time against bytes * factor returns 360 GB/s and 20 us for each series.
  FakeDevice dev;
  const hardware::GpuProfile p = run_calibration(dev, small_options(), kDate);
  CHECK(p.collectives.size() == 35);
  for (const auto& s : p.collectives) {
    INFO(s.op << " over " << s.gpus);
    CHECK(s.fit.Bps == Approx(360e9).epsilon(1e-6));
    CHECK(s.fit.latency_s == Approx(20e-6).epsilon(1e-4));
    // Sizes are whole 4-byte elements per rank: 1 KiB over 3 GPUs rounds down to 1020 bytes.
    for (const auto& pt : s.points) CHECK(static_cast<std::int64_t>(pt.bytes) % (4 * s.gpus) == 0);
  }
  const hardware::CollectiveSeries* three = p.find_collective("all_gather", 3);
  REQUIRE(three != nullptr);
  CHECK(three->points.front().bytes == 1020);
  CHECK(three->points.front().algo == "ring");
  CHECK(p.collective_algo_note == "fake: always ring");
}

TEST_CASE("one GPU: no collectives are measured", "[calibrate]") {
  FakeParams params;
  params.gpus = 1;
  params.fp8 = false;
  FakeDevice dev(params);
  const hardware::GpuProfile p = run_calibration(dev, small_options(), kDate);
  CHECK(p.collectives.empty());
  CHECK_FALSE(p.gemm_fp8);
  CHECK_FALSE(p.overlap);  // no all-reduce to put beside the GEMM
}

TEST_CASE("a GEMM beside all-reduces over every GPU gives the compute slowdown", "[calibrate]") {
  // The fake device runs a GEMM beside all-reduces at 1 - 0.1 of its speed: t / 0.9.
  FakeDevice dev;
  const hardware::GpuProfile p = run_calibration(dev, small_options(), kDate);
  REQUIRE(p.overlap);
  CHECK(p.overlap->gpus == 8);
  CHECK(p.overlap->m == 8192);
  CHECK(p.overlap->all_reduce_bytes == 268435456.0);  // 256 MiB, whole floats over 8 GPUs
  CHECK(p.overlap->gemm_alone_s == Approx(dev.gemm_formula_s(8192, 8192, 8192, false)));
  CHECK(p.overlap->gemm_beside_s == Approx(p.overlap->gemm_alone_s / 0.9));
  CHECK(p.overlap->fraction() == Approx(0.1));
}

TEST_CASE("a failing optional benchmark is recorded and the rest still runs", "[calibrate]") {
  FakeParams params;
  params.fp8_fails = true;
  FakeDevice dev(params);
  const hardware::GpuProfile p = run_calibration(dev, small_options(), kDate);
  CHECK_FALSE(p.gemm_fp8);
  REQUIRE(p.settings.contains("skipped"));
  CHECK(p.settings["skipped"][0] == "FP8 GEMMs: fake device: no FP8");
  CHECK(p.collectives.size() == 35);
}

TEST_CASE("attention points record executed FLOPs and time", "[calibrate]") {
  // 512, 1024, 2048 tokens; flops = 4 * 32 heads * s^2 * 128.
  FakeDevice dev;
  const hardware::GpuProfile p = run_calibration(dev, small_options(), kDate);
  REQUIRE(p.attention.size() == 3);
  CHECK(p.attention[0].seq == 512);
  CHECK(p.attention[0].flops == Approx(4.0 * 32 * 512.0 * 512.0 * 128));
  CHECK(p.attention[2].time_s == Approx(4.0 * 32 * 2048.0 * 2048.0 * 128 / 400e12 + 2.5e-6));
}

TEST_CASE("device names map to catalog GPUs", "[calibrate]") {
  CHECK(match_gpu("NVIDIA H200", 143e9) == "h200-sxm");
  CHECK(match_gpu("NVIDIA H100 80GB HBM3", 85e9) == "h100-sxm");
  CHECK(match_gpu("NVIDIA A100-SXM4-40GB", 42e9) == "a100-sxm-40gb");
  CHECK(match_gpu("NVIDIA A100-SXM4-80GB", 85e9) == "a100-sxm-80gb");
  CHECK(match_gpu("NVIDIA GB200", 190e9) == "gb200");
  CHECK(match_gpu("NVIDIA GB300", 288e9) == "gb300");
  CHECK(match_gpu("NVIDIA B200", 190e9) == "b200");
  CHECK(match_gpu("NVIDIA B300 SXM6 AC", 288e9) == "b300");
  CHECK(match_gpu("Tesla T4", 16e9).empty());
}

using test_binary::Result;
using test_binary::run;
using test_binary::temp_dir;

TEST_CASE("trainsim calibrate without a usable GPU exits 2 with one line", "[calibrate][cli]") {
  // CI machines and this build machine have no GPU (or a build without CUDA): the command must say
  // so in one line, write nothing, and exit 2 like any other unusable input.
  if (std::getenv("TRAINSIM_TEST_HAS_GPU") != nullptr) return;  // set on a GPU machine
  const fs::path out = temp_dir() / "never.json";
  const Result r = run(fmt::format("calibrate --out '{}'", out.string()));
  INFO("stderr: " << r.err);
  CHECK(r.code == 2);
  CHECK(r.out.empty());
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.rfind("trainsim calibrate: ", 0) == 0);
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("trainsim calibrate --fit refits a profile offline", "[calibrate][cli]") {
  // A fake profile with its fits zeroed: the refit must restore the formula's parameters.
  FakeDevice dev;
  hardware::GpuProfile p = run_calibration(dev, small_options(), kDate);
  p.gemm_bf16->fit = {1e12, 0, 0, 0};
  const fs::path in = temp_dir() / "raw.json", out = temp_dir() / "refit.json";
  std::ofstream(in) << hardware::profile_to_json(p).dump(2);
  const Result r = run(fmt::format("calibrate --fit '{}' --out '{}'", in.string(), out.string()));
  INFO("stderr: " << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("gemm bf16   max 700.0 TFLOP/s"));
  const hardware::GpuProfile back = hardware::load_profile(out.string());
  CHECK(back.gemm_bf16->fit.half_dim == Approx(120).epsilon(1e-3));
}

TEST_CASE("trainsim calibrate rejects bad options with one line", "[calibrate][cli]") {
  const Result r = run(fmt::format("calibrate --grid 1 --out '{}'", (temp_dir() / "x.json").string()));
  CHECK(r.code == 2);
  CHECK(r.err == "--grid: must be 2 to 10 points per GEMM dimension, got 1\n");
  const Result missing = run(fmt::format("calibrate --fit '{}' --out '{}'", (temp_dir() / "nope.json").string(),
                                         (temp_dir() / "x.json").string()));
  CHECK(missing.code == 2);
  CHECK_THAT(missing.err, Contains("nope.json: cannot open file"));
}
