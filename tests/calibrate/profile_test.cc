// Calibrated profiles as the models read them: the JSON round-trips, lookups interpolate in log
// space between measured points and warn far outside them, scenarios and topologies that name a
// profile change predictions, and a malformed profile is an InputError naming its file and path.

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "calibrate/calibration.h"
#include "calibrate/fake_device.h"
#include "config/scenario.h"
#include "hardware/compute_model.h"
#include "hardware/gpu.h"
#include "hardware/profile.h"
#include "parallel/step_runner.h"
#include "util/error.h"

using namespace trainsim;
using Catch::Matchers::Contains;
using hardware::GpuProfile;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / fmt::format("trainsim-profile-test-{}", ::getpid());
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

GpuProfile fake_profile(calibrate::FakeParams params = {}) {
  calibrate::Options o;
  o.gemm_points = 8;  // 128 ... 16384
  o.memory_max_bytes = std::int64_t{1} << 26;
  o.host_copy_max_bytes = std::int64_t{1} << 22;
  o.collective_max_bytes = std::int64_t{1} << 30;
  o.attention_max_seq = 1024;
  calibrate::FakeDevice dev(params);
  return calibrate::run_calibration(dev, o, "2026-01-01T00:00:00Z");
}

std::string write(const std::string& name, const nlohmann::json& doc) {
  const fs::path p = temp_dir() / name;
  std::ofstream(p) << doc.dump(2);
  return p.string();
}

// Equal up to rounding: profile files hold GB/s and microseconds, the structs bytes/s and seconds.
void check_close(const nlohmann::json& a, const nlohmann::json& b, const std::string& path = "") {
  INFO(path);
  REQUIRE(a.type() == b.type());
  if (a.is_object()) {
    REQUIRE(a.size() == b.size());
    for (auto it = a.begin(); it != a.end(); ++it) {
      REQUIRE(b.contains(it.key()));
      check_close(it.value(), b.at(it.key()), path + "." + it.key());
    }
  } else if (a.is_array()) {
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) check_close(a[i], b[i], fmt::format("{}[{}]", path, i));
  } else if (a.is_number_float()) {
    CHECK(a.get<double>() == Approx(b.get<double>()).epsilon(1e-12));
  } else {
    CHECK(a == b);
  }
}

// A 2 x 1 x 1 grid: m = 1024 and 4096 at n = k = 1024, timed so that they run at 400 and 600
// TFLOP/s; x0 = 100 for below-grid extrapolation.
GpuProfile two_point_profile() {
  GpuProfile p;
  p.file = "two.json";
  p.device.name = "test";
  p.device.count = 1;
  hardware::GemmTable t;
  t.m = {1024, 4096};
  t.n = {1024};
  t.k = {1024};
  const double f0 = 2.0 * 1024 * 1024 * 1024, f1 = 2.0 * 4096 * 1024 * 1024;
  t.time_s = {f0 / 400e12, f1 / 600e12};
  t.fit = {600e12, 100, 0, 0};
  p.gemm_bf16 = t;
  p.hbm_Bps = 4e12;
  p.launch_s = 2e-6;
  hardware::CollectiveSeries s;
  s.op = "all_reduce";
  s.gpus = 8;
  s.points = {{1e6, 100e-6, "unknown"}, {4e6, 400e-6, "unknown"}};
  s.fit = {1e10, 0, 0};
  p.collectives.push_back(s);
  return p;
}

workload::Op gemm_op(std::int64_t m, std::int64_t n, std::int64_t k) {
  workload::Op op;
  op.kind = workload::OpKind::gemm;
  op.gemm = {m, n, k, 1};
  op.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  op.bytes = 2.0 * static_cast<double>(m * k + k * n + m * n);
  return op;
}

}  // namespace

TEST_CASE("a profile survives writing and reading back", "[profile]") {
  const GpuProfile p = fake_profile();
  const nlohmann::json doc = hardware::profile_to_json(p);
  const GpuProfile back = hardware::parse_profile(util::JsonNode(doc, "p.json"));
  check_close(doc, hardware::profile_to_json(back));
  CHECK(back.file == "p.json");
  CHECK(back.collectives.size() == p.collectives.size());
  CHECK(back.gemm_bf16->time_s == p.gemm_bf16->time_s);
  CHECK(back.device.name == "Fake H200");
  CHECK(back.date == "2026-01-01T00:00:00Z");
}

TEST_CASE("GEMM throughput is interpolated in log space between grid points", "[profile]") {
  // m = 2048 sits halfway between 1024 and 4096 in log m, so it runs at (400 + 600) / 2 = 500
  // TFLOP/s: 2 * 2048 * 1024 * 1024 / 500e12 = 8.589934592 us, with no launch added (the measured
  // back-to-back time holds it) and HBM time 2 * (2*1024*1024 + 2048*1024) B / 4 TB/s = 2.1 us below it.
  GpuProfile p = two_point_profile();
  CHECK(*p.gemm_flops_per_s(2048, 1024, 1024, false) == Approx(500e12));
  hardware::GpuSpec gpu = *hardware::find_gpu("h200-sxm");
  gpu.profile = std::make_shared<const GpuProfile>(p);
  const hardware::ComputeModel cm(gpu);
  CHECK(cm.time_s(gemm_op(2048, 1024, 1024)) == Approx(8.589934592e-6));
  CHECK(cm.gemm_efficiency({2048, 1024, 1024, 1}) == Approx(500e12 / gpu.bf16_flops));
  // Memory-bound ops: bytes at the measured 4 TB/s plus the measured 2 us launch.
  workload::Op mem;
  mem.kind = workload::OpKind::memory;
  mem.bytes = 4e9;
  CHECK(cm.time_s(mem) == Approx(1e-3 + 2e-6));
  CHECK(p.warnings->list().empty());
}

TEST_CASE("lookups far outside the measurements extrapolate and warn once", "[profile]") {
  GpuProfile p = two_point_profile();
  SECTION("above the grid: clamped at the largest m") {
    CHECK(*p.gemm_flops_per_s(16384, 1024, 1024, false) == Approx(600e12));
    CHECK(*p.gemm_flops_per_s(16384, 1024, 1024, false) == Approx(600e12));
    REQUIRE(p.warnings->list().size() == 1);
    CHECK_THAT(p.warnings->list()[0],
               Contains("two.json: gemm.bf16.m:") && Contains("far above the measured 1024-4096"));
  }
  SECTION("below the grid: scaled by g(x) / g(x_min), g(x) = x / (x + 100)") {
    const double expected = 400e12 * (256.0 / 356.0) / (1024.0 / 1124.0);
    CHECK(*p.gemm_flops_per_s(256, 1024, 1024, false) == Approx(expected));
    CHECK(p.warnings->list().size() == 1);
  }
  SECTION("just outside (within a factor 2) does not warn") {
    CHECK(*p.gemm_flops_per_s(8192, 1024, 1024, false) == Approx(600e12));
    CHECK(p.warnings->list().empty());
  }
  SECTION("no FP8 table: the datasheet model, with a warning") {
    CHECK_FALSE(p.gemm_flops_per_s(1024, 1024, 1024, true));
    CHECK_THAT(p.warnings->list().at(0), Contains("gemm.fp8: not measured"));
  }
}

TEST_CASE("collective times are interpolated in log-log between measured sizes", "[profile]") {
  // 1 MB in 100 us and 4 MB in 400 us: 2 MB is halfway in log bytes, so its time is the geometric
  // mean sqrt(100 * 400) = 200 us; below 1 MB, 100 us; at 8 MB, 400 us * 2 (bandwidth-bound).
  const GpuProfile p = two_point_profile();
  CHECK(*p.collective_time_s("all_reduce", 8, 2e6) == Approx(200e-6));
  CHECK(*p.collective_time_s("all_reduce", 8, 1e3) == Approx(100e-6));
  CHECK(*p.collective_time_s("all_reduce", 8, 8e6) == Approx(800e-6));
  CHECK(p.warnings->list().empty());
  CHECK(*p.collective_time_s("all_reduce", 8, 64e6) == Approx(6400e-6));
  CHECK(p.warnings->list().size() == 1);
  CHECK_FALSE(p.collective_time_s("all_gather", 8, 1e6));
}

namespace {

nlohmann::json scenario(const std::string& profile) {
  nlohmann::json s = nlohmann::json::parse(R"({
    "model": "llama3.1-8b", "cluster": "dgx-h200", "gpus": 8,
    "parallel": {"tp": 8},
    "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 4096}})");
  if (!profile.empty()) s["gpu_profile"] = profile;
  return s;
}

}  // namespace

TEST_CASE("a scenario naming a profile changes the prediction", "[profile][config]") {
  // The fake GPU runs GEMMs at 300 TFLOP/s at most, well under the H200 catalog's 0.66 x 989: the
  // step must take longer with the profile than without it.
  calibrate::FakeParams slow;
  slow.bf16_flops_per_s = 300e12;
  const std::string prof = write("slow.json", hardware::profile_to_json(fake_profile(slow)));
  const auto base = config::parse_scenario(util::JsonNode(scenario(""), "s.json"), TRAINSIM_SOURCE_DIR);
  const auto with = config::parse_scenario(util::JsonNode(scenario(prof), "s.json"), TRAINSIM_SOURCE_DIR);
  REQUIRE(with.cluster.gpu.profile);
  CHECK(with.cluster.gpu.profile->file == prof);
  const double t0 = parallel::simulate_step(base).step_time_s;
  const double t1 = parallel::simulate_step(with).step_time_s;
  CHECK(t1 > 1.3 * t0);
  // The fake device calls itself "Fake H200" and matches no catalog id: no mismatch warning.
  CHECK(with.warnings.empty());
}

TEST_CASE("a profile's overlap slowdown slows the compute that communication overlaps", "[profile][config]") {
  // Llama 3.1 8B on 16 H200 (dp 2, tp 8) with the distributed optimizer and overlapped gradient
  // reduction: the reduce-scatters run beside the backward. With the profile's 20% slowdown the step
  // takes longer than with 0% (the same profile otherwise), and the symmetric run still equals the
  // full one.
  nlohmann::json s = scenario("");
  s["gpus"] = 16;
  s["training"]["global_batch"] = 16;
  s["parallel"] = {{"tp", 8}, {"zero", 1}, {"overlap_grad_reduce", true}, {"overlap_param_gather", true}};
  auto step = [&](double fraction, bool all_ranks) {
    calibrate::FakeParams params;
    params.overlap_slowdown = fraction;
    const std::string prof =
        write(fmt::format("overlap-{}.json", fraction), hardware::profile_to_json(fake_profile(params)));
    nlohmann::json d = s;
    d["gpu_profile"] = prof;
    const auto sc = config::parse_scenario(util::JsonNode(d, "s.json"), TRAINSIM_SOURCE_DIR);
    REQUIRE(sc.cluster.gpu.profile->overlap);
    parallel::BuildOptions b;
    b.all_ranks = all_ranks;
    return parallel::simulate_step(sc, b);
  };
  const auto none = step(0.0, false);
  const auto slowed = step(0.2, false);
  CHECK(slowed.step_time_s > none.step_time_s);
  // Compute stretches by at most 1 / 0.8 where all of it overlaps communication; only overlapped
  // compute does (the exact arithmetic: tests/engine/executor_test.cc).
  CHECK(slowed.step_time_s <= none.step_time_s + 0.25 * none.ranks[0].compute_s);
  CHECK(step(0.2, true).step_time_s == slowed.step_time_s);
}

TEST_CASE("a topology names a profile with gpu_profile", "[profile][config]") {
  const std::string prof = write("topo-profile.json", hardware::profile_to_json(fake_profile()));
  nlohmann::json s = scenario("");
  nlohmann::json topo =
      nlohmann::json::parse(std::ifstream(fs::path(TRAINSIM_SOURCE_DIR) / "topologies" / "dgx-h200.json"));
  topo["gpu_profile"] = prof;
  s["cluster"] = topo;
  const auto sc = config::parse_scenario(util::JsonNode(s, "s.json"), TRAINSIM_SOURCE_DIR);
  REQUIRE(sc.cluster.gpu.profile);
  CHECK(sc.cluster.gpu.profile->device.count == 8);
  CHECK(sc.cluster.name == "dgx-h200");
}

TEST_CASE("a profile measured on another GPU is a scenario warning", "[profile][config]") {
  GpuProfile p = fake_profile();
  p.device.gpu = "a100-sxm-80gb";
  const std::string prof = write("a100.json", hardware::profile_to_json(p));
  const auto sc = config::parse_scenario(util::JsonNode(scenario(prof), "s.json"), TRAINSIM_SOURCE_DIR);
  REQUIRE(sc.warnings.size() == 1);
  CHECK_THAT(sc.warnings[0], Contains("s.json: gpu_profile:") && Contains("the cluster has h200-sxm"));
}

TEST_CASE("malformed profiles are InputErrors naming the profile file and JSON path", "[profile][config]") {
  const nlohmann::json good = hardware::profile_to_json(fake_profile());
  auto error_for = [](const nlohmann::json& doc) -> util::InputError {
    const std::string file = write("bad-profile.json", doc);
    try {
      (void)config::parse_scenario(util::JsonNode(scenario(file), "s.json"), TRAINSIM_SOURCE_DIR);
    } catch (const util::InputError& e) {
      CHECK(e.file() == file);
      return e;
    }
    FAIL("no error");
    return util::InputError("", "", "");
  };
  SECTION("a grid with the wrong number of times") {
    nlohmann::json doc = good;
    doc["gemm"]["bf16"]["time_s"].erase(0);
    const auto e = error_for(doc);
    CHECK(e.path() == "gemm.bf16.time_s");
    CHECK_THAT(e.problem(), Contains("has 511 values for a 8 x 8 x 8 grid (512 expected)"));
  }
  SECTION("an unknown key") {
    nlohmann::json doc = good;
    doc["memory"]["hbm_GBs"] = 1;
    CHECK(error_for(doc).path() == "memory.hbm_GBs");
  }
  SECTION("sizes out of order") {
    nlohmann::json doc = good;
    doc["memory"]["kernels"]["copy"]["bytes"][1] = 1;
    const auto e = error_for(doc);
    CHECK(e.path() == "memory.kernels.copy.bytes[1]");
  }
  SECTION("a negative time") {
    nlohmann::json doc = good;
    doc["collectives"]["series"][0]["points"][2]["time_s"] = -1;
    CHECK(error_for(doc).path() == "collectives.series[0].points[2].time_s");
  }
  SECTION("not a profile") {
    nlohmann::json doc = good;
    doc["format"] = "something-else";
    CHECK(error_for(doc).path() == "format");
  }
  SECTION("an overlap measurement over one GPU, or whose stated slowdown disagrees with its times") {
    nlohmann::json doc = good;
    REQUIRE(doc.contains("overlap"));  // the fake device has 8 GPUs
    doc["overlap"]["gpus"] = 1;
    CHECK(error_for(doc).path() == "overlap.gpus");
    doc = good;
    doc["overlap"]["compute_slowdown"] = 0.5;  // the fake device's times say 0.1
    const auto e = error_for(doc);
    CHECK(e.path() == "overlap.compute_slowdown");
    CHECK_THAT(e.problem(), Contains("disagrees with 1 - gemm_alone_s / gemm_beside_s = 0.100000"));
    doc = good;
    doc["overlap"]["gemm"] = {8192, 8192};
    CHECK(error_for(doc).path() == "overlap.gemm");
  }
}

TEST_CASE("a gpu_profile that names no file is an error on the scenario", "[profile][config]") {
  try {
    (void)config::parse_scenario(util::JsonNode(scenario("no-such-profile"), "s.json"), TRAINSIM_SOURCE_DIR);
    FAIL("no error");
  } catch (const util::InputError& e) {
    CHECK(e.file() == "s.json");
    CHECK(e.path() == "gpu_profile");
    CHECK_THAT(e.problem(), Contains("is neither a profile in"));
  }
}
