#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "network/analytical_network.h"
#include "network/cluster.h"
#include "util/error.h"

using trainsim::network::AnalyticalNetwork;
using trainsim::network::ClusterSpec;
using trainsim::network::CollectiveOp;
using trainsim::network::parse_cluster;
using trainsim::util::InputError;
using trainsim::util::JsonNode;

namespace {

std::string topology_file(const std::string& name) {
  return (std::filesystem::path(TRAINSIM_SOURCE_DIR) / "topologies" / (name + ".json")).string();
}

ClusterSpec load_topology(const std::string& name) {
  const std::string file = topology_file(name);
  const nlohmann::json doc = trainsim::util::read_json_file(file);
  return parse_cluster(JsonNode(doc, file));
}

// nccl-tests all-reduce busbw the model predicts for 8 GPUs of one node: S * 2(n-1)/n / t.
double model_allreduce_busbw_GBps(const ClusterSpec& c, std::int64_t bytes, std::uint32_t gpus = 8,
                                  std::uint32_t stride = 1) {
  std::vector<std::uint32_t> ranks;
  for (std::uint32_t i = 0; i < gpus; ++i) ranks.push_back(i * stride);
  const double t = AnalyticalNetwork(c).collective_time_s(CollectiveOp::all_reduce, bytes, ranks);
  return static_cast<double>(bytes) * 2.0 * (gpus - 1.0) / gpus / t / 1e9;
}

// published-runs.md §9c: 8-GPU in-place all-reduce busbw (GB/s), 16 MiB .. 8 GiB (powers of two).
struct Curve {
  const char* topology;
  std::vector<double> busbw_GBps;
};
const std::vector<Curve> kMeasured = {
    {"dgx-a100", {109.22, 132.77, 166.63, 174.18, 213.87, 221.58, 228.1, 230.22, 230.48, 231.58}},
    {"dgx-h100", {234.45, 295.53, 361.78, 400.61, 423.38, 438.46, 466.35, 472.36, 475.54, 478.87}},
    {"dgx-h200", {240.41, 300.91, 368.11, 412.45, 432.24, 442.72, 467.58, 472.57, 477.41, 479.98}},
};
constexpr int kFirstLog2Bytes = 24;  // 16 MiB

nlohmann::json toy_topology() {
  return nlohmann::json::parse(R"({
    "name": "toy", "gpu": "h100-sxm", "gpus_per_node": 8,
    "nvlink": {"allreduce_busbw_GBps": 480, "busbw_GBps": 370, "p2p_GBps": 380, "latency_us": 3.4},
    "nic": {"per_node": 8, "busbw_GBps": 47, "latency_us": 14},
    "collective_base_latency_us": 8.4,
    "sources": {"nvlink": "somewhere"}
  })");
}

// What the compute model fitted or measured on a GPU: equal when one GPU runs the other's kernels.
void check_same_kernels(const trainsim::hardware::GpuSpec& a, const trainsim::hardware::GpuSpec& b) {
  CHECK(a.arch == b.arch);
  CHECK(a.gemm_efficiency == b.gemm_efficiency);
  CHECK(a.fp8_gemm_efficiency == b.fp8_gemm_efficiency);
  CHECK(a.attention_efficiency == b.attention_efficiency);
  CHECK(a.hbm_efficiency == b.hbm_efficiency);
  CHECK(a.launch_s == b.launch_s);
}

InputError parse_error(const nlohmann::json& doc) {
  try {
    (void)parse_cluster(JsonNode(doc, "topo.json"));
  } catch (const InputError& e) {
    return e;
  }
  FAIL("parse_cluster accepted a bad topology");
  return InputError("", "", "");
}

}  // namespace

TEST_CASE("every shipped topology parses, with GB/s and microseconds converted to SI", "[network]") {
  for (const char* name : {"dgx-a100", "dgx-a100-40gb", "dgx-h100", "dgx-h200", "dgx-b200", "gb200-nvl72",
                           "gb300-nvl72", "dgx-b300", "hgx-a800", "hgx-h800"}) {
    INFO(name);
    const ClusterSpec c = load_topology(name);
    CHECK(c.name == name);
    CHECK(c.nvlink.allreduce_busbw_Bps >= c.nvlink.busbw_Bps);
    // NVLink outruns a NIC several times over; least on H800, whose 8 links give 164 GB/s against 47.
    CHECK(c.nvlink.busbw_Bps > c.nic.busbw_Bps * 3);
    CHECK(c.nic.per_node == c.gpus_per_node);  // one NIC per GPU on every shipped system
  }
  const ClusterSpec h100 = load_topology("dgx-h100");
  CHECK(h100.gpu.id == "h100-sxm");
  CHECK(h100.gpus_per_node == 8);
  CHECK(h100.nvlink.allreduce_busbw_Bps == Approx(480e9));
  CHECK(h100.nvlink.latency_s == Approx(3.4e-6));
  CHECK(h100.nic.busbw_Bps == Approx(47e9));
  CHECK(h100.nic.latency_s == Approx(14e-6));
  CHECK(h100.collective_base_latency_s == Approx(8.4e-6));
  CHECK(load_topology("dgx-a100").gpu.id == "a100-sxm-80gb");
  CHECK(load_topology("dgx-a100-40gb").gpu.id == "a100-sxm-40gb");
  CHECK(load_topology("gb200-nvl72").gpus_per_node == 72);
  CHECK(load_topology("gb200-nvl72").nic.per_node == 72);
}

TEST_CASE("H800 and A800 are the H100 and A100 chips with 8 NVLinks: same kernels, slower NVLink", "[network]") {
  for (const auto& [variant, original] : {std::pair{"hgx-h800", "dgx-h100"}, std::pair{"hgx-a800", "dgx-a100"}}) {
    INFO(variant);
    const ClusterSpec v = load_topology(variant);
    const ClusterSpec o = load_topology(original);
    CHECK(v.gpu.bf16_flops == o.gpu.bf16_flops);
    CHECK(v.gpu.fp8_flops == o.gpu.fp8_flops);
    CHECK(v.gpu.hbm_bytes == o.gpu.hbm_bytes);
    CHECK(v.gpu.hbm_Bps == o.gpu.hbm_Bps);
    check_same_kernels(v.gpu, o.gpu);
    CHECK(v.gpu.nvlink_Bps == Approx(200e9));  // 8 links x 25 GB/s per direction
    CHECK(v.nvlink.busbw_Bps < o.nvlink.busbw_Bps * 0.75);
  }
  // A 1 GiB all-gather over one node's 8 GPUs runs at the ring busbw: 7/8 of the bytes over 164 GB/s
  // on H800 against 370 on H100, plus the same latency.
  const auto all_gather_s = [](const ClusterSpec& c) {
    return AnalyticalNetwork(c).collective_time_s(CollectiveOp::all_gather, std::int64_t{1} << 30,
                                                  std::vector<std::uint32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  };
  const double bytes = 7.0 / 8.0 * static_cast<double>(std::int64_t{1} << 30);
  CHECK(all_gather_s(load_topology("hgx-h800")) - all_gather_s(load_topology("dgx-h100")) ==
        Approx(bytes / 164e9 - bytes / 370e9).epsilon(0.02));
}

TEST_CASE("a topology's gpu may derive a GPU from a catalog one, replacing its datasheet figures", "[network]") {
  nlohmann::json doc = toy_topology();
  doc["gpu"] = nlohmann::json::parse(R"({"base": "h100-sxm", "id": "h20", "name": "NVIDIA H20 96GB",
      "bf16_tflops": 148, "fp8_tflops": 296, "hbm_GB": 96, "hbm_TBps": 4.0})");
  const ClusterSpec c = parse_cluster(JsonNode(doc, "topo.json"));
  const ClusterSpec h100 = parse_cluster(JsonNode(toy_topology(), "topo.json"));
  CHECK(c.gpu.id == "h20");
  CHECK(c.gpu.name == "NVIDIA H20 96GB");
  CHECK(c.gpu.bf16_flops == Approx(148e12));
  CHECK(c.gpu.fp8_flops == Approx(296e12));
  CHECK(c.gpu.hbm_bytes == Approx(h100.gpu.hbm_bytes * 96.0 / 80.0));  // the catalog's usable share of 96 GiB
  CHECK(c.gpu.hbm_Bps == Approx(4.0e12));
  // What was measured or fitted on the base carries over, as fractions of the new peaks.
  check_same_kernels(c.gpu, h100.gpu);
  CHECK_FALSE(c.gpu.grace_host);

  SECTION("defaults: the base's figures under a custom id and name") {
    doc["gpu"] = {{"base", "b200"}, {"host", "grace"}};
    const ClusterSpec d = parse_cluster(JsonNode(doc, "topo.json"));
    CHECK(d.gpu.id == "custom-b200");
    CHECK(d.gpu.name == "NVIDIA B200 180GB (custom)");
    CHECK(d.gpu.fp4_flops == Approx(9000e12));
    CHECK(d.gpu.grace_host);
  }
  SECTION("FP8 can be taken away, not added to a GPU without it") {
    doc["gpu"] = {{"base", "h100-sxm"}, {"fp8_tflops", 0}};
    CHECK(parse_cluster(JsonNode(doc, "topo.json")).gpu.fp8_flops == 0.0);
    doc["gpu"] = {{"base", "a100-sxm-80gb"}, {"fp8_tflops", 600}};
    const InputError e = parse_error(doc);
    CHECK(e.path() == "gpu.fp8_tflops");
    CHECK(e.problem() == "a100-sxm-80gb has no FP8 tensor cores to derive them from (0 is allowed: none)");
    doc["gpu"] = {{"base", "h100-sxm"}, {"fp4_tflops", 4000}};
    CHECK(parse_error(doc).path() == "gpu.fp4_tflops");
  }
  SECTION("bad input: one line naming the key") {
    doc["gpu"] = {{"bf16_tflops", 100}};
    CHECK(parse_error(doc).path() == "gpu.base");
    doc["gpu"] = {{"base", "x100"}};
    CHECK_THAT(parse_error(doc).problem(), Catch::StartsWith("unknown GPU \"x100\" (known: "));
    doc["gpu"] = {{"base", {{"base", "h100-sxm"}}}};
    CHECK(parse_error(doc).problem() == "expected a GPU id of the catalog");
    doc["gpu"] = {{"base", "h100-sxm"}, {"nvlink_GBps", 200}};
    const InputError unknown = parse_error(doc);
    CHECK(unknown.path() == "gpu.nvlink_GBps");
    CHECK_THAT(unknown.problem(), Catch::StartsWith("unknown key (expected one of: base, id, name,"));
    doc["gpu"] = {{"base", "h100-sxm"}, {"bf16_tflops", 0}};
    CHECK(parse_error(doc).path() == "gpu.bf16_tflops");
    doc["gpu"] = {{"base", "h100-sxm"}, {"hbm_GB", -1}};
    CHECK(parse_error(doc).path() == "gpu.hbm_GB");
    doc["gpu"] = {{"base", "h100-sxm"}, {"host", "arm"}};
    CHECK(parse_error(doc).problem() == "unknown value \"arm\" (expected one of: x86, grace)");
    doc["gpu"] = {{"base", "h100-sxm"}, {"id", ""}};
    CHECK(parse_error(doc).path() == "gpu.id");
    doc["gpu"] = 7;
    CHECK(parse_error(doc).problem() == "expected a GPU id of the catalog or an object deriving one");
  }
}

TEST_CASE("8-GPU all-reduce busbw at >= 1 GiB is within 5% of nccl-tests (A100, H100, H200)", "[network]") {
  // The fit check: at large sizes latency no longer matters and the model must give the measured
  // bus bandwidth (published-runs.md §9c).
  for (const Curve& curve : kMeasured) {
    const ClusterSpec c = load_topology(curve.topology);
    for (int log2_bytes = 30; log2_bytes <= 33; ++log2_bytes) {
      const double measured = curve.busbw_GBps[static_cast<std::size_t>(log2_bytes - kFirstLog2Bytes)];
      const double modeled = model_allreduce_busbw_GBps(c, std::int64_t{1} << log2_bytes);
      INFO(curve.topology << " at 2^" << log2_bytes << " bytes: model " << modeled << ", measured " << measured);
      CHECK(std::fabs(modeled / measured - 1.0) < 0.05);
    }
  }
}

TEST_CASE("8-GPU all-reduce busbw at 16 MiB-512 MiB stays within the residuals in topologies/README.md", "[network]") {
  // Tensor-parallel all-reduces are tens of MB: the fitted ramp keeps the model within 14% there
  // (A100's largest residual, +13.8% at 128 MiB, where the measurement dips); H100/H200 within 6%.
  for (const Curve& curve : kMeasured) {
    ClusterSpec c = load_topology(curve.topology);
    const bool a100 = std::string(curve.topology) == "dgx-a100";
    // Azure measured A100 with NCCL_ALGO forced and no LL128 regime (topologies/dgx-a100.json,
    // nvlink.ll128): compare the protocols that run was left with.
    if (a100) c.nvlink.ll128 = false;
    const double bound = a100 ? 0.14 : 0.06;
    for (int log2_bytes = 24; log2_bytes < 30; ++log2_bytes) {
      const double measured = curve.busbw_GBps[static_cast<std::size_t>(log2_bytes - kFirstLog2Bytes)];
      const double modeled = model_allreduce_busbw_GBps(c, std::int64_t{1} << log2_bytes);
      INFO(curve.topology << " at 2^" << log2_bytes << " bytes: model " << modeled << ", measured " << measured);
      CHECK(std::fabs(modeled / measured - 1.0) < bound);
    }
  }
  // Without the ramp the A100 64 MiB all-reduce would be 25% too fast (NCCL's ideal 56 us latency).
  ClusterSpec no_ramp = load_topology("dgx-a100");
  no_ramp.nvlink.ramp_latency_s = 0;
  CHECK(model_allreduce_busbw_GBps(no_ramp, std::int64_t{1} << 26) > 166.63 * 1.2);
}

TEST_CASE("a DGX A100 all-reduce across nodes runs at 8 HDR NICs, the 192 GB/s NCCL measures", "[network]") {
  // AddyLaddy, NVIDIA/nccl#812: multi-node DGX A100 all-reduce busbw 192 GB/s = 8 x 24 GB/s.
  const ClusterSpec c = load_topology("dgx-a100");
  CHECK(model_allreduce_busbw_GBps(c, std::int64_t{8} << 30, 32) == Approx(192).epsilon(0.02));
}

TEST_CASE("parse_cluster accepts the documented keys and rejects anything else", "[network]") {
  const ClusterSpec c = parse_cluster(JsonNode(toy_topology(), "topo.json"));
  CHECK(c.nvlink.ramp_latency_s == 0.0);  // optional, absent: pure latency + bandwidth

  nlohmann::json doc = toy_topology();
  doc.erase("sources");
  CHECK_NOTHROW(parse_cluster(JsonNode(doc, "topo.json")));

  doc = toy_topology();
  doc["nvlink"]["ramp_latency_us"] = 15;
  CHECK(parse_cluster(JsonNode(doc, "topo.json")).nvlink.ramp_latency_s == Approx(15e-6));

  SECTION("unknown key") {
    doc = toy_topology();
    doc["nic"]["speed"] = 1;
    const InputError e = parse_error(doc);
    CHECK(e.path() == "nic.speed");
    CHECK(e.problem() == "unknown key (expected one of: per_node, busbw_GBps, latency_us)");
  }
  SECTION("fabric: documented keys, defaults, and bad values") {
    doc = toy_topology();
    CHECK(parse_cluster(JsonNode(doc, "topo.json")).fabric.kind == ClusterSpec::Fabric::Kind::rail_optimized);
    doc["fabric"] = {{"kind", "fat_tree"},    {"nodes_per_leaf", 4}, {"spines", 2},
                     {"oversubscription", 4}, {"pod_nodes", 8},      {"pod_oversubscription", 7}};
    const ClusterSpec f = parse_cluster(JsonNode(doc, "topo.json"));
    CHECK(f.fabric.kind == ClusterSpec::Fabric::Kind::fat_tree);
    CHECK(f.fabric.oversubscription == 4);
    CHECK(f.fabric.pod_nodes == 8);
    doc["fabric"] = {{"kind", "torus"}};
    CHECK(parse_error(doc).problem() == "unknown value \"torus\" (expected one of: rail_optimized, fat_tree)");
    doc["fabric"] = {{"oversubscription", 0.5}};
    CHECK(parse_error(doc).path() == "fabric.oversubscription");
    doc["fabric"] = {{"nodes_per_leaf", 32}, {"pod_nodes", 33}};
    CHECK(parse_error(doc).problem() == "must be a multiple of nodes_per_leaf (32)");
    doc["fabric"] = {{"spine", 2}};
    CHECK(parse_error(doc).path() == "fabric.spine");
  }
  SECTION("missing key") {
    doc = toy_topology();
    doc["nvlink"].erase("p2p_GBps");
    const InputError e = parse_error(doc);
    CHECK(e.path() == "nvlink.p2p_GBps");
    CHECK(e.problem() == "missing required key");
  }
  SECTION("unknown GPU lists the catalog") {
    doc = toy_topology();
    doc["gpu"] = "x100";
    const InputError e = parse_error(doc);
    CHECK(e.file() == "topo.json");
    CHECK(e.path() == "gpu");
    CHECK_THAT(e.problem(), Catch::StartsWith("unknown GPU \"x100\" (known: "));
    CHECK_THAT(e.problem(), Catch::Contains("h100-sxm"));
  }
  SECTION("non-positive bandwidth") {
    doc = toy_topology();
    doc["nic"]["busbw_GBps"] = 0;
    CHECK(parse_error(doc).path() == "nic.busbw_GBps");
  }
  SECTION("negative latency") {
    doc = toy_topology();
    doc["collective_base_latency_us"] = -1;
    CHECK(parse_error(doc).path() == "collective_base_latency_us");
  }
  SECTION("wrong type") {
    doc = toy_topology();
    doc["gpus_per_node"] = "8";
    const InputError e = parse_error(doc);
    CHECK(e.path() == "gpus_per_node");
    CHECK(e.problem() == "expected an integer, got a string");
  }
  SECTION("sources must be strings") {
    doc = toy_topology();
    doc["sources"]["nvlink"] = 3;
    CHECK(parse_error(doc).path() == "sources.nvlink");
  }
  SECTION("not an object") {
    const InputError e = parse_error(nlohmann::json::array());
    CHECK(e.problem() == "expected an object, got an array");
  }
}
