#include "network/analytical_network.h"

#include <algorithm>
#include <cmath>

#include "engine/simulation.h"
#include "util/error.h"

namespace trainsim::network {

namespace {

// Ring steps NCCL's cost model charges (src/graph/tuning.cc, ecosystem.md §3.2): nsteps = 2(n-1)
// for all-reduce, n-1 for all-gather / reduce-scatter, n otherwise; of those, 2(nodes-1) (all-reduce)
// or nodes-1 (others) cross the network.
std::int64_t ring_steps(CollectiveOp op, std::int64_t n) {
  switch (op) {
    case CollectiveOp::all_reduce:
      return 2 * (n - 1);
    case CollectiveOp::all_gather:
    case CollectiveOp::reduce_scatter:
      return n - 1;
    case CollectiveOp::all_to_all:
    case CollectiveOp::broadcast:
      return n;
  }
  TRAINSIM_ASSERT(false && "unknown CollectiveOp");
  return 0;
}

// NCCL 2.30.7 src/graph/tuning.cc (ecosystem.md §3.2): Tree/Simple base latency, NVLink and NET hop
// latencies; tree all-reduce bus bandwidth = min(0.92 · ring busBw, per-channel caps).
constexpr double kTreeBaseLatency_s = 8.4e-6;
constexpr double kTreeNvlinkHop_s = 4.0e-6;
constexpr double kTreeNetHop_s = 14e-6;

std::int64_t inter_node_steps(CollectiveOp op, std::int64_t nodes) {
  return op == CollectiveOp::all_reduce ? 2 * (nodes - 1) : nodes - 1;
}

}  // namespace

AnalyticalNetwork::Placement AnalyticalNetwork::place(std::span<const std::uint32_t> ranks) const {
  // Ranks of a group are few and listed in increasing order, so counting runs of equal nodes works.
  Placement p;
  std::int64_t run = 0, node = -1;
  auto close_run = [&p, &run] {
    if (run > 0) p.min_ranks_per_node = p.nodes == 1 ? run : std::min(p.min_ranks_per_node, run);
  };
  for (std::uint32_t r : ranks) {
    const std::int64_t n = cluster_.node_of(r);
    TRAINSIM_ASSERT(n >= node);
    if (n != node) {
      close_run();
      ++p.nodes;
      node = n;
      run = 0;
    }
    ++run;
  }
  close_run();
  return p;
}

double AnalyticalNetwork::collective_time_s(CollectiveOp op, std::int64_t bytes,
                                            std::span<const std::uint32_t> ranks) const {
  return collective_time_s(op, bytes, static_cast<std::int64_t>(ranks.size()), place(ranks));
}

double AnalyticalNetwork::collective_latency_s(CollectiveOp op, std::int64_t n, const Placement& p) const {
  const std::int64_t steps = ring_steps(op, n);
  const std::int64_t inter_steps = p.nodes > 1 ? inter_node_steps(op, p.nodes) : 0;
  const bool has_nvlink_phase = p.nodes == 1 || p.min_ranks_per_node > 1;
  double latency_s = cluster_.collective_base_latency_s +
                     static_cast<double>(steps - inter_steps) * cluster_.nvlink.latency_s +
                     static_cast<double>(inter_steps) * cluster_.nic.latency_s;
  if (has_nvlink_phase) latency_s += cluster_.nvlink.ramp_latency_s;
  return latency_s;
}

double AnalyticalNetwork::p2p_latency_s(std::uint32_t src, std::uint32_t dst) const {
  return cluster_.node_of(src) == cluster_.node_of(dst) ? cluster_.nvlink.latency_s : cluster_.nic.latency_s;
}

double AnalyticalNetwork::collective_time_s(CollectiveOp op, std::int64_t bytes, std::int64_t n,
                                            const Placement& p) const {
  TRAINSIM_ASSERT(bytes >= 0);
  if (n <= 1 || bytes == 0) return 0.0;
  const double latency_s = collective_latency_s(op, n, p);

  const double size = static_cast<double>(bytes);
  if (p.nodes == 1) {
    // One NVLink domain: a ring (or NVLS for all-reduce where NCCL uses it) at the measured busbw.
    const double busbw_Bps =
        op == CollectiveOp::all_reduce ? cluster_.nvlink.allreduce_busbw_Bps : cluster_.nvlink.busbw_Bps;
    return latency_s + size * busbw_factor(op, n) / busbw_Bps;
  }

  if (op == CollectiveOp::all_to_all) {
    // Every rank sends (n - ppn)/n of its buffer over the network and (ppn - 1)/n over NVLink.
    // All-to-all cannot aggregate several NICs per GPU (sjeaugey, nccl-tests#267): each rank has at
    // most its own NIC.
    const double ppn = static_cast<double>(p.min_ranks_per_node);
    const double nics_per_gpu =
        std::min(1.0, static_cast<double>(cluster_.nic.per_node) / static_cast<double>(cluster_.gpus_per_node));
    const double inter_s =
        size * (static_cast<double>(n) - ppn) / static_cast<double>(n) / (cluster_.nic.busbw_Bps * nics_per_gpu);
    const double intra_s = size * (ppn - 1.0) / static_cast<double>(n) / cluster_.nvlink.busbw_Bps;
    return latency_s + std::max(inter_s, intra_s);
  }

  // Hierarchical ring across nodes: each node's share of the ring runs over as many NICs as the group
  // has ranks there (at most the node's NICs), and never faster than the NVLink ring inside it.
  const double nics = static_cast<double>(std::min(p.min_ranks_per_node, cluster_.nic.per_node));
  const double busbw_Bps = std::min(cluster_.nvlink.busbw_Bps, nics * cluster_.nic.busbw_Bps);
  const double ring_s = latency_s + size * busbw_factor(op, n) / busbw_Bps;
  if (op != CollectiveOp::all_reduce) return ring_s;
  // NCCL picks the cheaper of ring and tree for a multi-node all-reduce (tree: fewer latency steps,
  // 0.92 of the ring's bandwidth), so small all-reduces across many nodes run on the tree.
  return std::min(ring_s, tree_time_s(bytes, n, p, busbw_Bps));
}

double AnalyticalNetwork::tree_time_s(std::int64_t bytes, std::int64_t n, const Placement& p, double ring_Bps) const {
  const double ramp = p.nodes == 1 || p.min_ranks_per_node > 1 ? cluster_.nvlink.ramp_latency_s : 0.0;
  const double ppn = static_cast<double>(n / p.nodes);
  const double lat = kTreeBaseLatency_s +
                     2.0 * ((ppn - 1.0) * kTreeNvlinkHop_s + std::log2(static_cast<double>(p.nodes)) * kTreeNetHop_s) +
                     ramp;
  return lat +
         static_cast<double>(bytes) * busbw_factor(CollectiveOp::all_reduce, n) / (kTreeBandwidthRatio * ring_Bps);
}

std::optional<AnalyticalNetwork::Timed> AnalyticalNetwork::collective(CollectiveOp op, std::int64_t bytes,
                                                                      std::span<const std::uint32_t> ranks,
                                                                      Algorithm algo) const {
  const Placement p = place(ranks);
  const auto n = static_cast<std::int64_t>(ranks.size());
  const bool one_node = p.nodes == 1;
  const bool nvls_here =
      cluster_.nvlink.nvls && one_node && op != CollectiveOp::all_to_all && op != CollectiveOp::broadcast;
  const double size = static_cast<double>(bytes);
  // Ring bandwidth: NVLink ring inside a node (the all-reduce figure when it is a ring's), NICs of
  // the least populated node across nodes, as in collective_time_s.
  const double nics = static_cast<double>(std::min(p.min_ranks_per_node, cluster_.nic.per_node));
  const double ring_intra_Bps = op == CollectiveOp::all_reduce && !cluster_.nvlink.nvls
                                    ? cluster_.nvlink.allreduce_busbw_Bps
                                    : cluster_.nvlink.busbw_Bps;
  const double ring_Bps =
      one_node ? ring_intra_Bps : std::min(cluster_.nvlink.busbw_Bps, nics * cluster_.nic.busbw_Bps);
  if (algo == Algorithm::automatic) {
    // The simulation's choice: NVLS where the measured all-reduce figure is NVLS's; across nodes the
    // cheaper of ring and tree for all-reduce (collective_time_s takes the minimum); rings otherwise.
    Algorithm used = nvls_here && op == CollectiveOp::all_reduce ? Algorithm::nvls : Algorithm::ring;
    const double t = collective_time_s(op, bytes, n, p);
    const double ring_s = collective_latency_s(op, n, p) + size * busbw_factor(op, n) / ring_Bps;
    if (op == CollectiveOp::all_reduce && !one_node && t < ring_s) used = Algorithm::tree;
    return Timed{t, used};
  }
  switch (algo) {
    case Algorithm::ring: {
      if (op == CollectiveOp::all_to_all || op == CollectiveOp::broadcast) return std::nullopt;
      return Timed{collective_latency_s(op, n, p) + size * busbw_factor(op, n) / ring_Bps, Algorithm::ring};
    }
    case Algorithm::tree: {
      // NCCL's tree all-reduce (tuning.cc): a chain inside each node, double binary trees across
      // nodes; latency baseLat + 2((ppn - 1) intra hop + log2(nodes) NET hop), Simple protocol
      // (8.4, 4.0 and 14 us); bus bandwidth 0.92 of the ring's.
      if (op != CollectiveOp::all_reduce) return std::nullopt;
      return Timed{tree_time_s(bytes, n, p, ring_Bps), Algorithm::tree};
    }
    case Algorithm::nvls: {
      // NVLink SHARP: the switches reduce and multicast. All-reduce at the measured NVLS figure;
      // all-gather / reduce-scatter at the ring figure measured for them on the same systems. The
      // fixed time is the fitted one of the measured (NVLS) all-reduce curve.
      if (!nvls_here) return std::nullopt;
      const double bw =
          op == CollectiveOp::all_reduce ? cluster_.nvlink.allreduce_busbw_Bps : cluster_.nvlink.busbw_Bps;
      return Timed{collective_latency_s(op, n, p) + size * busbw_factor(op, n) / bw, Algorithm::nvls};
    }
    case Algorithm::automatic:
      break;
  }
  return std::nullopt;
}

double AnalyticalNetwork::p2p_time_s(std::uint32_t src, std::uint32_t dst, std::int64_t bytes) const {
  TRAINSIM_ASSERT(bytes >= 0);
  if (src == dst) return 0.0;
  const double size = static_cast<double>(bytes);
  if (cluster_.node_of(src) == cluster_.node_of(dst)) return cluster_.nvlink.latency_s + size / cluster_.nvlink.p2p_Bps;
  return cluster_.nic.latency_s + size / cluster_.nic.busbw_Bps;
}

AnalyticalNetwork::Timed AnalyticalNetwork::chosen(CollectiveOp op, std::int64_t bytes,
                                                   std::span<const std::uint32_t> ranks) const {
  const Algorithm forced = algorithms_[static_cast<std::size_t>(op)];
  if (forced != Algorithm::automatic)
    if (auto t = collective(op, bytes, ranks, forced)) return *t;
  return *collective(op, bytes, ranks, Algorithm::automatic);
}

void AnalyticalNetwork::start(const engine::CommRequest& req, engine::Simulation& sim, engine::Callback done) {
  double t = 0.0;
  if (req.kind == engine::CommRequest::Kind::p2p) {
    t = p2p_time_s(req.src, req.dst, req.bytes);
  } else {
    TRAINSIM_ASSERT(req.op <= static_cast<std::uint16_t>(CollectiveOp::broadcast));
    if (req.group >= placements_.size()) placements_.resize(req.group + 1);
    Placement& p = placements_[req.group];
    if (p.nodes == 0) p = place(req.ranks);
    const auto op = static_cast<CollectiveOp>(req.op);
    if (algorithms_[static_cast<std::size_t>(op)] != Algorithm::automatic && req.bytes > 0 && req.ranks.size() > 1)
      t = chosen(op, req.bytes, req.ranks).time_s;
    else
      t = collective_time_s(op, req.bytes, static_cast<std::int64_t>(req.ranks.size()), p);
  }
  sim.after(engine::Time::from_seconds(t), std::move(done));
}

}  // namespace trainsim::network
