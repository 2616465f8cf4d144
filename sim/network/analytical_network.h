#pragma once
// The fast network model: every collective takes latency + S * factor / busbw, NCCL-like. Inside one
// node a ring over NVLink/NVSwitch; across nodes a hierarchical ring whose bottleneck is the NICs
// the group's ranks use (ranks per node x per-NIC bandwidth, capped by NVLink). Point-to-point
// messages take latency + bytes / bandwidth of the path (NVLink or one NIC). Links are not shared:
// concurrent messages do not slow each other (the flow model does that).

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/comm_model.h"
#include "network/cluster.h"
#include "network/collective.h"

namespace trainsim::network {

class AnalyticalNetwork final : public engine::CommModel {
 public:
  explicit AnalyticalNetwork(const ClusterSpec& cluster, const AlgorithmChoice& algorithms = {})
      : cluster_(cluster), algorithms_(algorithms) {}

  void start(const engine::CommRequest& req, engine::Simulation& sim, engine::Callback done) override;

  double collective_time_s(CollectiveOp op, std::int64_t bytes, std::span<const std::uint32_t> ranks) const;

  // One collective with a chosen algorithm (nccl-tests style, `trainsim collective`). `automatic` is
  // the time the simulation uses; ring, tree (all-reduce only) and NVLS (all-reduce, all-gather,
  // reduce-scatter inside one node of a GPU with NVLS) follow NCCL's cost model, each with the
  // cheapest of its protocols (LL, LL128, Simple) at this size. Returns nothing when the algorithm
  // cannot run that collective there.
  struct Timed {
    double time_s = 0;
    Algorithm algo = Algorithm::ring;  // the one that ran (automatic resolved)
    Protocol proto = Protocol::simple;
    double latency_s = 0;  // the fixed part of time_s
    // Bus bandwidth the bytes move at: time = latency + S * busbw_factor / busbw_Bps (all-to-all
    // across nodes: the effective figure of its slower side).
    double busbw_Bps = 0;
  };
  std::optional<Timed> collective(CollectiveOp op, std::int64_t bytes, std::span<const std::uint32_t> ranks,
                                  Algorithm algo) const;
  // The algorithm the simulation runs: the scenario's forced one where it can run, else automatic.
  Timed chosen(CollectiveOp op, std::int64_t bytes, std::span<const std::uint32_t> ranks) const;
  double p2p_time_s(std::uint32_t src, std::uint32_t dst, std::int64_t bytes) const;

  // How a group sits on the cluster: nodes it touches, and ranks on its least populated node
  // (whose NICs bound a hierarchical ring).
  struct Placement {
    std::int64_t nodes = 0;
    std::int64_t min_ranks_per_node = 0;
  };
  Placement place(std::span<const std::uint32_t> ranks) const;
  double p2p_latency_s(std::uint32_t src, std::uint32_t dst) const;
  // Simple-protocol ring bus bandwidth of the group: NVLink inside a node (the all-reduce figure for
  // an all-reduce where the node has no NVLS), the NICs of the least populated node (capped by
  // NVLink) across nodes.
  double ring_busbw_Bps(CollectiveOp op, const Placement& p) const;

 private:
  // The cheapest protocol of `algo` (of every algorithm that can run, for automatic).
  std::optional<Timed> best(CollectiveOp op, std::int64_t bytes, std::int64_t ranks, const Placement& p,
                            Algorithm algo) const;
  // One algorithm with one protocol; nullopt where it cannot run.
  std::optional<Timed> candidate(CollectiveOp op, double bytes, std::int64_t ranks, const Placement& p, Algorithm algo,
                                 Protocol proto) const;
  double ring_latency_s(CollectiveOp op, std::int64_t ranks, const Placement& p, Protocol proto) const;
  double tree_latency_s(std::int64_t ranks, const Placement& p, Protocol proto) const;
  double ll_max_busbw_Bps(std::int64_t nodes) const;

  ClusterSpec cluster_;
  AlgorithmChoice algorithms_{};       // all automatic unless a scenario forces some
  std::vector<Placement> placements_;  // by group id, filled as groups first communicate
};

}  // namespace trainsim::network
