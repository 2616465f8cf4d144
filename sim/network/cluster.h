#pragma once
// A cluster as the analytical network sees it: identical nodes of `gpus_per_node` GPUs joined by
// NVLink/NVSwitch, each node with NICs into a non-blocking fabric. A topology file
// (topologies/*.json) describes one node and its fabric; the scenario's GPU count sets the size.

#include <cstdint>
#include <string>

#include "hardware/gpu.h"
#include "util/json_node.h"

namespace trainsim::network {

struct ClusterSpec {
  std::string name;
  hardware::GpuSpec gpu;
  std::int64_t gpus_per_node = 8;  // NVLink domain size (72 for an NVL72 rack)
  struct NvLink {
    double allreduce_busbw_Bps = 0;  // achieved all-reduce bus bandwidth inside a node (NVLS where NCCL uses it)
    bool nvls = false;               // NVLink SHARP in the switches (Hopper and later): allreduce_busbw is NVLS's
    double busbw_Bps = 0;            // achieved ring bus bandwidth (all-gather, reduce-scatter, ring all-reduce)
    double p2p_Bps = 0;              // achieved point-to-point bandwidth between two GPUs
    double latency_s = 0;            // per ring step
    // Extra fixed time per collective with an NVLink phase: NCCL's pipeline fill and channel ramp,
    // which its ideal latency leaves out. Fitted to nccl-tests busbw at 16 MiB-8 GiB
    // (topologies/README.md); 0 gives the pure latency + bandwidth model.
    double ramp_latency_s = 0;
    // NCCL's LL128 protocol runs here (NCCL enables it on NVLink systems); false where the measured
    // collective curve shows no LL128 regime (topologies/README.md).
    bool ll128 = true;
  } nvlink;
  struct Nic {
    std::int64_t per_node = 8;
    double busbw_Bps = 0;  // achieved NCCL bandwidth of one NIC
    double latency_s = 0;  // per inter-node ring step
  } nic;
  double collective_base_latency_s = 0;  // fixed NCCL launch/setup latency per collective
  // Achieved copy bandwidth between one GPU and pinned host memory, per direction, when every GPU
  // of the node copies at once (PCIe or NVLink-C2C); 0: not stated (host offloading is refused).
  double host_link_Bps = 0;
  // The node's CPU memory bandwidth, bytes/s: its DRAM's datasheet peak, all sockets (the CPU's
  // share of the optimizer step with optimizer_cpu_offload is bound by it); 0: not stated.
  double host_memory_Bps = 0;
  // One GPU's share of its node's host (CPU) memory, bytes (the topology's host_memory_GB over its
  // gpus_per_node, fixed when the topology is read); 0: not stated. Activation offloading's pinned
  // buffers of a GPU must fit in it.
  double host_memory_per_gpu_bytes = 0;
  // The fabric between the nodes' NICs (the flow-level network builds its graph from it).
  struct Fabric {
    enum class Kind : std::uint8_t { rail_optimized, fat_tree };
    // rail_optimized: NIC k of every node of a group goes to that group's rail-k leaf (DGX
    // SuperPOD); fat_tree: all NICs of a node go to the group's one leaf.
    Kind kind = Kind::rail_optimized;
    std::int64_t nodes_per_leaf = 32;  // nodes per group (a SuperPOD scalable unit: 32 DGX)
    std::int64_t spines = 8;           // spine switches per pod; ECMP spreads over them
    double oversubscription = 1;       // leaf: downlink / uplink capacity
    std::int64_t pod_nodes = 0;        // nodes per pod; 0: one pod, no core layer
    double pod_oversubscription = 1;   // spine: downlink / uplink-to-core capacity
  } fabric;

  std::int64_t node_of(std::uint32_t rank) const { return static_cast<std::int64_t>(rank) / gpus_per_node; }
};

// Reads a topology object (see topologies/README.md for the keys); unknown keys are errors.
ClusterSpec parse_cluster(const util::JsonNode& node);

}  // namespace trainsim::network
