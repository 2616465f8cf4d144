#include "network/analytical_network.h"

#include <algorithm>

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

double AnalyticalNetwork::collective_time_s(CollectiveOp op, std::int64_t bytes, std::int64_t n,
                                            const Placement& p) const {
  TRAINSIM_ASSERT(bytes >= 0);
  if (n <= 1 || bytes == 0) return 0.0;
  const std::int64_t steps = ring_steps(op, n);
  const std::int64_t inter_steps = p.nodes > 1 ? inter_node_steps(op, p.nodes) : 0;
  const bool has_nvlink_phase = p.nodes == 1 || p.min_ranks_per_node > 1;

  double latency_s = cluster_.collective_base_latency_s +
                     static_cast<double>(steps - inter_steps) * cluster_.nvlink.latency_s +
                     static_cast<double>(inter_steps) * cluster_.nic.latency_s;
  if (has_nvlink_phase) latency_s += cluster_.nvlink.ramp_latency_s;

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
  return latency_s + size * busbw_factor(op, n) / busbw_Bps;
}

double AnalyticalNetwork::p2p_time_s(std::uint32_t src, std::uint32_t dst, std::int64_t bytes) const {
  TRAINSIM_ASSERT(bytes >= 0);
  if (src == dst) return 0.0;
  const double size = static_cast<double>(bytes);
  if (cluster_.node_of(src) == cluster_.node_of(dst)) return cluster_.nvlink.latency_s + size / cluster_.nvlink.p2p_Bps;
  return cluster_.nic.latency_s + size / cluster_.nic.busbw_Bps;
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
    t = collective_time_s(static_cast<CollectiveOp>(req.op), req.bytes, static_cast<std::int64_t>(req.ranks.size()), p);
  }
  sim.after(engine::Time::from_seconds(t), std::move(done));
}

}  // namespace trainsim::network
