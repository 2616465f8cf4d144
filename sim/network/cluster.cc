#include "network/cluster.h"

#include <fmt/format.h>

#include "util/error.h"

namespace trainsim::network {

namespace {
constexpr double kBytesPerGB = 1e9;  // GB/s in topology files are decimal, as nccl-tests prints them
constexpr double kSecondsPerUs = 1e-6;

double gbps(const util::JsonNode& node, std::string_view key) {
  return node.at(key).as_positive_number() * kBytesPerGB;
}
double micros(const util::JsonNode& node, std::string_view key) {
  return node.at(key).as_nonnegative_number() * kSecondsPerUs;
}

hardware::GpuSpec catalog_gpu(const util::JsonNode& node) {
  const std::string id = node.as_string();
  if (const hardware::GpuSpec* gpu = hardware::find_gpu(id)) return *gpu;
  std::string known;
  for (const hardware::GpuSpec& g : hardware::gpu_catalog()) {
    if (!known.empty()) known += ", ";
    known += g.id;
  }
  node.fail(fmt::format("unknown GPU \"{}\" (known: {})", id, known));
}

// A GPU derived from a catalog one (`{"base": "h100-sxm", "bf16_tflops": 148, ...}`): the datasheet
// figures it names replace the base's; everything the compute model measured or fitted on the base
// (GEMM, attention and HBM efficiencies as fractions of the peaks, launch cost, architecture) carries
// over, as it does for a part that runs the base's kernels on a different budget of SMs, clocks or HBM.
hardware::GpuSpec derived_gpu(const util::JsonNode& node) {
  node.reject_unknown({"base", "id", "name", "bf16_tflops", "fp8_tflops", "fp4_tflops", "hbm_GB", "hbm_TBps", "host"});
  const util::JsonNode base = node.at("base");
  if (!base.is_string()) base.fail("expected a GPU id of the catalog");
  hardware::GpuSpec g = catalog_gpu(base);
  const std::string base_id = g.id;
  g.id = "custom-" + base_id;
  g.name = g.name + " (custom)";
  if (auto v = node.find("id")) {
    g.id = v->as_string();
    if (g.id.empty()) v->fail("expected a non-empty id");
  }
  if (auto v = node.find("name")) {
    g.name = v->as_string();
    if (g.name.empty()) v->fail("expected a non-empty name");
  }
  constexpr double kTera = 1e12;
  if (auto v = node.find("bf16_tflops")) g.bf16_flops = v->as_positive_number() * kTera;
  // FP8 and FP4 can be taken away (0) but not added: their efficiencies come from the base.
  const auto low_precision = [&](std::string_view key, double& flops, const char* what) {
    auto v = node.find(key);
    if (!v) return;
    const double tflops = v->as_nonnegative_number();
    if (tflops > 0 && flops <= 0)
      v->fail(fmt::format("{} has no {} tensor cores to derive them from (0 is allowed: none)", base_id, what));
    flops = tflops * kTera;
  };
  low_precision("fp8_tflops", g.fp8_flops, "FP8");
  low_precision("fp4_tflops", g.fp4_flops, "FP4");
  if (auto v = node.find("hbm_GB")) g.hbm_bytes = hardware::usable_hbm_bytes(v->as_positive_number());
  if (auto v = node.find("hbm_TBps")) g.hbm_Bps = v->as_positive_number() * kTera;
  if (auto v = node.find("host")) {
    const std::string host = v->as_string();
    if (host != "x86" && host != "grace")
      v->fail(fmt::format("unknown value \"{}\" (expected one of: x86, grace)", host));
    g.grace_host = host == "grace";
  }
  return g;
}

hardware::GpuSpec parse_gpu(const util::JsonNode& node) {
  if (node.is_object()) return derived_gpu(node);
  if (!node.is_string()) node.fail("expected a GPU id of the catalog or an object deriving one");
  return catalog_gpu(node);
}

void check_sources(const util::JsonNode& node) {
  node.expect_object();
  for (auto it = node.json().begin(); it != node.json().end(); ++it) {
    util::JsonNode entry(it.value(), node.file(), util::join_path(node.path(), it.key()));
    (void)entry.as_string();
  }
}
}  // namespace

ClusterSpec parse_cluster(const util::JsonNode& node) {
  node.reject_unknown({"name", "gpu", "gpus_per_node", "nvlink", "nic", "collective_base_latency_us", "host_link_GBps",
                       "host_memory_GB", "host_memory_GBps", "fabric", "sources"});
  ClusterSpec c;
  c.name = node.at("name").as_string();
  c.gpu = parse_gpu(node.at("gpu"));
  c.gpus_per_node = node.at("gpus_per_node").as_positive_int();

  const util::JsonNode nvlink = node.at("nvlink");
  nvlink.reject_unknown(
      {"allreduce_busbw_GBps", "busbw_GBps", "p2p_GBps", "latency_us", "ramp_latency_us", "nvls", "ll128"});
  if (nvlink.has("nvls")) c.nvlink.nvls = nvlink.at("nvls").as_bool();
  if (nvlink.has("ll128")) c.nvlink.ll128 = nvlink.at("ll128").as_bool();
  c.nvlink.allreduce_busbw_Bps = gbps(nvlink, "allreduce_busbw_GBps");
  c.nvlink.busbw_Bps = gbps(nvlink, "busbw_GBps");
  c.nvlink.p2p_Bps = gbps(nvlink, "p2p_GBps");
  c.nvlink.latency_s = micros(nvlink, "latency_us");
  if (nvlink.has("ramp_latency_us")) c.nvlink.ramp_latency_s = micros(nvlink, "ramp_latency_us");

  const util::JsonNode nic = node.at("nic");
  nic.reject_unknown({"per_node", "busbw_GBps", "latency_us"});
  c.nic.per_node = nic.at("per_node").as_positive_int();
  c.nic.busbw_Bps = gbps(nic, "busbw_GBps");
  c.nic.latency_s = micros(nic, "latency_us");

  c.collective_base_latency_s = micros(node, "collective_base_latency_us");
  if (node.has("host_link_GBps")) c.host_link_Bps = gbps(node, "host_link_GBps");
  if (node.has("host_memory_GBps")) c.host_memory_Bps = gbps(node, "host_memory_GBps");
  if (auto v = node.find("host_memory_GB"))
    c.host_memory_per_gpu_bytes = v->as_positive_number() * 1e9 / static_cast<double>(c.gpus_per_node);
  if (auto fabric = node.find("fabric")) {
    fabric->reject_unknown(
        {"kind", "nodes_per_leaf", "spines", "oversubscription", "pod_nodes", "pod_oversubscription"});
    auto& f = c.fabric;
    if (auto v = fabric->find("kind")) {
      const std::string kind = v->as_string();
      if (kind == "rail_optimized")
        f.kind = ClusterSpec::Fabric::Kind::rail_optimized;
      else if (kind == "fat_tree")
        f.kind = ClusterSpec::Fabric::Kind::fat_tree;
      else
        v->fail(fmt::format("unknown value \"{}\" (expected one of: rail_optimized, fat_tree)", kind));
    }
    if (auto v = fabric->find("nodes_per_leaf")) f.nodes_per_leaf = v->as_positive_int();
    if (auto v = fabric->find("spines")) f.spines = v->as_positive_int();
    if (auto v = fabric->find("oversubscription")) f.oversubscription = v->as_positive_number();
    if (auto v = fabric->find("pod_nodes")) f.pod_nodes = v->as_nonnegative_int();
    if (auto v = fabric->find("pod_oversubscription")) f.pod_oversubscription = v->as_positive_number();
    if (f.oversubscription < 1) fabric->at("oversubscription").fail("must be >= 1 (downlink / uplink capacity)");
    if (f.pod_oversubscription < 1)
      fabric->at("pod_oversubscription").fail("must be >= 1 (downlink / uplink capacity)");
    if (f.pod_nodes > 0 && f.pod_nodes % f.nodes_per_leaf != 0)
      fabric->at("pod_nodes").fail(fmt::format("must be a multiple of nodes_per_leaf ({})", f.nodes_per_leaf));
  }
  if (auto sources = node.find("sources")) check_sources(*sources);
  return c;
}

}  // namespace trainsim::network
