#pragma once
// The contention-aware network (`"network": "flow"`): every message becomes flows over the
// topology graph's links, and concurrent flows share each link max-min fairly (FlowSolver). A
// collective is decomposed the way NCCL moves its bytes:
//   * ring all-reduce / all-gather / reduce-scatter / broadcast: each rank sends busbw-factor x S
//     to its ring successor; across nodes the ring runs as min(ranks per node, NICs) channels, each
//     leaving a node through a different GPU and its rail NIC (so a node's NICs share the load).
//     A pipelined ring moves at its slowest hop, so each ring (each channel) is ONE flow whose path
//     is all its hops' links: every hop carries the flow's bytes at the flow's rate, and a link two
//     hops share is listed twice (it carries twice the rate);
//   * the algorithm and protocol the analytical model picks (NVLS, LL, LL128): the ring's flows
//     carrying factor x S x (ring / chosen bus bandwidth), with the chosen one's fixed latency, so
//     an idle network runs at the chosen rate;
//   * tree all-reduce across nodes: NCCL's double binary tree (a chain inside each node, two mirrored
//     binary trees over the nodes, each carrying half the data up and back down), one flow per tree
//     and channel over all its edges; its bytes are set so that alone on the fabric it takes the
//     analytical model's time, and under load it slows where its edges are shared;
//   * all-to-all: a pair flow of S / n per ordered pair; the pairs from one GPU to one node move as
//     one flow of one rate (FlowSolver's counts: it loads each link with its pairs on it), which is
//     what they would do on their own where their shared links, not their last hops, are the
//     bottleneck (by symmetry, an all-to-all alone); n x nodes flows instead of n x (n - 1);
//   * point to point: one flow.
// Each GPU's collective flows together cross a virtual link of `nvlink.busbw` (what NCCL's kernels on
// one GPU can move, protocol overhead included), besides the physical links; point-to-point copies
// are bounded by the physical links alone (`nvlink.p2p` inside a node).
// A transfer ends when its last flow has drained plus the same fixed latency the analytical model
// charges, so on an idle network the two models agree (tests check within 5%).

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
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

  // Symmetric runs, where one simulated rank stands for a class of identical ranks: `image(r, k)`
  // is cluster rank r's k-th image (k < count; image 0 is r itself). Every message then moves for
  // each distinct image of its ranks too, so the links carry the whole cluster's traffic, and it
  // completes when the last image's flows drain (the slowest replica sets the pace, as it would
  // through the next collective).
  using ImageFn = std::function<std::uint32_t(std::uint32_t rank, std::uint32_t image)>;
  void set_images(std::uint32_t count, ImageFn image);

  // What each link carried: bytes, and time with at least one flow on it.
  struct LinkStats {
    double bytes = 0;
    double busy_s = 0;
  };
  const TopologyGraph& graph() const { return graph_; }
  // Per link, up to the last flow's end (call after the simulation ran).
  std::vector<LinkStats> link_stats() const;
  std::uint64_t flows_started() const { return flows_started_; }
  // Times the rates were solved again (a flow set started, or flows ended at one instant).
  std::uint64_t solves() const { return solves_; }

 private:
  struct Flow {
    std::uint32_t transfer = 0;
    double remaining = 0;  // bytes
    double rate = 0;       // bytes/s in effect since `since`
    double since = 0;
    std::uint64_t version = 0;
  };
  struct Transfer {
    std::uint32_t open_flows = 0;
    double latency_s = 0;
    engine::Callback done;
  };
  void add_flow(std::uint32_t transfer, std::uint32_t src, std::uint32_t dst, double bytes, bool collective);
  // A collective's flows: flow i crosses links[ends[i-1], ends[i]) and carries weight[i] x the unit
  // (S / n-sized pairs for all-to-all: unit S; ring channels: unit the per-rank bytes).
  struct FlowSet {
    std::vector<std::uint32_t> ranks;  // the group it was built for
    std::vector<FlowSolver::LinkId> links;
    std::vector<std::uint32_t> counts;  // per entry of links: the flows it stands for there
    std::vector<std::uint32_t> ends;
    std::vector<double> weight;
    double idle_s_per_unit = 0;  // trees: the time one unit takes alone on the fabric
  };
  // Appends the flows of one ring (or tree) collective, or all-to-all, over `ranks`, in group order.
  void build_collective(CollectiveOp op, std::span<const std::uint32_t> ranks, FlowSet& out, bool tree);
  // NCCL's double binary tree across nodes (chains inside them), per channel; node_start: where
  // each node's run of ranks begins, plus the end.
  void build_tree(std::span<const std::uint32_t> ranks, const std::vector<std::int64_t>& node_start, FlowSet& out);
  // Seconds per unit of the set's first `flows` flows alone on an idle fabric (the slowest flow).
  double idle_seconds_per_unit(const FlowSet& set, std::size_t flows) const;
  // Appends the route src -> dst (and, for a collective, src's virtual NCCL link) to path_, each
  // link with a count of 1 in path_count_.
  void append_hop(std::uint32_t src, std::uint32_t dst, bool collective);
  // Empties path_ and path_count_ (kept the same length: a count per link).
  void clear_path() {
    path_.clear();
    path_count_.clear();
  }
  // One flow of `bytes` over path_ with path_count_ (both then cleared); nothing when path_ is empty.
  void add_path_flow(std::uint32_t transfer, double bytes);
  // An all-to-all's flows over `ranks`: per source, one flow per destination node.
  void build_all_to_all(std::span<const std::uint32_t> ranks, FlowSet& out);
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
  std::vector<std::uint32_t> path_count_;
  std::vector<std::uint32_t> pending_;  // flows of the transfer being built
  std::vector<double> link_bytes_, link_busy_s_, link_busy_since_;
  std::vector<std::uint32_t> link_flows_;
  std::uint64_t flows_started_ = 0;
  std::uint64_t solves_ = 0;
  bool solve_pending_ = false;  // a re-solve is queued at the current time (finish_flow)
  // Routes by (src, dst): offset and length in route_links_ (routing is deterministic).
  std::unordered_map<std::uint64_t, std::pair<std::uint32_t, std::uint32_t>> routes_;
  std::vector<FlowSolver::LinkId> route_links_;
  std::uint32_t image_count_ = 1;
  ImageFn image_;
  // The distinct images of a group (key: group id | 1 << 63) or of a p2p pair (key: src << 32 | dst),
  // concatenated; computed once per key.
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> images_;
  std::unordered_map<std::uint64_t, FlowSet> flow_sets_;  // by group id << 2 | ring 0, all-to-all 1, tree 2
  const std::vector<std::uint32_t>& images_of(std::uint64_t key, std::span<const std::uint32_t> ranks, bool dedupe);
  std::vector<std::uint32_t> covered_;  // per cluster rank: the lookup that last took it
  std::uint32_t stamp_ = 0;
};

}  // namespace trainsim::network
