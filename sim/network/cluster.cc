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

hardware::GpuSpec parse_gpu(const util::JsonNode& node) {
  const std::string id = node.as_string();
  if (const hardware::GpuSpec* gpu = hardware::find_gpu(id)) return *gpu;
  std::string known;
  for (const hardware::GpuSpec& g : hardware::gpu_catalog()) {
    if (!known.empty()) known += ", ";
    known += g.id;
  }
  node.fail(fmt::format("unknown GPU \"{}\" (known: {})", id, known));
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
                       "host_memory_GB", "fabric", "sources"});
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
