#pragma once
// The contention-aware network (`"network": "flow"`): every message becomes flows over the
// topology graph's links, and concurrent flows share each link max-min fairly (FlowSolver). A
// collective is decomposed the way NCCL moves its bytes:
//   * ring all-reduce / all-gather / reduce-scatter / broadcast: each rank sends busbw-factor x S
//     to its ring successor; across nodes the ring runs as min(ranks per node, NICs) channels, each
//     leaving a node through a different GPU and its rail NIC (so a node's NICs share the load);
//   * NVLS all-reduce inside a node: the ring's flows carrying factor x S x (ring / NVLS bus
//     bandwidth), so an idle node runs at the measured NVLS rate;
//   * all-to-all: one flow per ordered pair of S / n;
//   * point to point: one flow.
// Each GPU's collective flows together cross a virtual link of `nvlink.busbw` (what NCCL's kernels on
// one GPU can move, protocol overhead included), besides the physical links; point-to-point copies
// are bounded by the physical links alone (`nvlink.p2p` inside a node).
// A transfer ends when its last flow has drained plus the same fixed latency the analytical model
// charges, so on an idle network the two models agree (tests check within 5%).

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/comm_model.h"
#include "network/analytical_network.h"
#include "network/cluster.h"
#include "network/flow_solver.h"
#include "network/topology_graph.h"

namespace trainsim::network {

class FlowNetwork final : public engine::CommModel {
 public:
  FlowNetwork(const ClusterSpec& cluster, std::int64_t gpus, const AlgorithmChoice& algorithms = {});

  void start(const engine::CommRequest& req, engine::Simulation& sim, engine::Callback done) override;

  // What each link carried: bytes, and time with at least one flow on it.
  struct LinkStats {
    double bytes = 0;
    double busy_s = 0;
  };
  const TopologyGraph& graph() const { return graph_; }
  // Per link, up to the last flow's end (call after the simulation ran).
  std::vector<LinkStats> link_stats() const;
  std::uint64_t flows_started() const { return flows_started_; }

 private:
  struct Flow {
    std::uint32_t transfer = 0;
    double remaining = 0;  // bytes
    double rate = 0;       // bytes/s in effect since `since`
    double since = 0;
    std::uint64_t version = 0;
    std::vector<FlowSolver::LinkId> path;
  };
  struct Transfer {
    std::uint32_t open_flows = 0;
    double latency_s = 0;
    engine::Callback done;
  };
  void add_flow(std::uint32_t transfer, std::uint32_t src, std::uint32_t dst, double bytes, bool collective);
  static std::vector<double> capacities(const TopologyGraph& graph, const ClusterSpec& cluster);
  void launch(std::uint32_t transfer, engine::Simulation& sim);
  void reschedule(engine::Simulation& sim);
  void finish_flow(FlowSolver::FlowId id, std::uint64_t version, engine::Simulation& sim);
  void link_busy_change(FlowSolver::LinkId link, int delta, double now);

  ClusterSpec cluster_;
  AnalyticalNetwork analytical_;
  TopologyGraph graph_;
  FlowSolver solver_;
  std::vector<Flow> flows_;  // by solver flow id
  std::vector<Transfer> transfers_;
  std::vector<std::uint32_t> free_transfers_;
  std::vector<FlowSolver::LinkId> path_;
  std::vector<std::uint32_t> pending_;  // flows of the transfer being built
  std::vector<double> link_bytes_, link_busy_s_, link_busy_since_;
  std::vector<std::uint32_t> link_flows_;
  std::uint64_t flows_started_ = 0;
};

}  // namespace trainsim::network
