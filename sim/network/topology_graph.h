#pragma once
// The cluster as a graph (Boost.Graph): GPUs, one NVSwitch domain per node, NICs, leaf, spine and
// (multi-pod) core switches, joined by directed links with a capacity each. Routes between GPUs
// are shortest paths; where several next hops are equally short (the spines of a pod, the cores),
// one is picked by a hash of the endpoints: deterministic ECMP, so two flows can collide on a spine
// link exactly as they would on a real fabric.
//
// Capacities are achieved (NCCL-level) rates, so that an idle path runs at the bandwidth the
// analytical model uses: GPU<->NVSwitch the larger of `nvlink.p2p` and `nvlink.busbw` (the flow
// model caps collective flows at the ring rate), NIC<->leaf `nic.busbw`, GPU<->NIC twice
// that (PCIe is not the bottleneck), leaf->spine the leaf's downlink capacity / oversubscription
// split over the spines, spine->core likewise with the pod oversubscription.

#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "network/cluster.h"

namespace trainsim::network {

enum class LinkTier : std::uint8_t { nvlink, pcie, nic, leaf_spine, spine_core };
std::string_view to_string(LinkTier tier);
inline constexpr int kLinkTiers = 5;

class TopologyGraph {
 public:
  using LinkId = std::uint32_t;

  // The first `gpus` GPUs of the cluster, on ceil(gpus / gpus_per_node) nodes (a partly filled last
  // node cannot receive across nodes on a rail whose GPU is missing).
  TopologyGraph(const ClusterSpec& cluster, std::int64_t gpus);
  ~TopologyGraph();
  TopologyGraph(const TopologyGraph&) = delete;
  TopologyGraph& operator=(const TopologyGraph&) = delete;

  // Appends the links from GPU `src` to GPU `dst` to `out` (none when src == dst). Inside a node:
  // GPU -> NVSwitch -> GPU. Across nodes, on the source GPU's rail r (GPU i uses NIC i mod nics):
  // GPU -> NIC r -> leaf -> ... -> leaf -> NIC r of the destination node -> its GPU r, then over
  // NVLink to the destination if that is another GPU (traffic stays on its rail, as with NCCL's PXN).
  void route(std::uint32_t src, std::uint32_t dst, std::vector<LinkId>& out) const;

  std::size_t link_count() const { return capacity_.size(); }
  std::span<const double> capacities() const { return capacity_; }
  LinkTier tier(LinkId link) const { return tier_[link]; }
  std::int64_t gpus() const { return gpus_; }
  std::int64_t switches() const;

 private:
  struct Impl;
  Impl* impl_;
  std::int64_t gpus_;
  std::vector<double> capacity_;
  std::vector<LinkTier> tier_;
};

}  // namespace trainsim::network
