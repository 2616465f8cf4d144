#include "network/analytical_network.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "engine/simulation.h"
#include "hardware/profile.h"
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

// NCCL 2.30.7 src/graph/tuning.cc cost model (ecosystem.md §3.2), indexed by Protocol {LL, LL128,
// Simple}: base latency and per-hop latencies (NVLink, NET) of ring and tree. The Simple ring's
// figures come from the topology (its keys hold these same values); the rest are NCCL's constants.
constexpr std::array<double, 3> kRingBase_s = {6.6e-6, 14.0e-6, 8.4e-6};
constexpr std::array<double, 3> kRingNvlinkHop_s = {0.6e-6, 1.9e-6, 3.4e-6};
constexpr std::array<double, 3> kRingNetHop_s = {2.7e-6, 4.0e-6, 14e-6};
constexpr std::array<double, 3> kTreeBase_s = {6.8e-6, 14.0e-6, 8.4e-6};
constexpr std::array<double, 3> kTreeNvlinkHop_s = {0.6e-6, 1.25e-6, 4.0e-6};
constexpr std::array<double, 3> kTreeNetHop_s = {5.0e-6, 8.5e-6, 14e-6};
// tuning.cc bandwidth refinements: ring LL128 busBw = 0.92 busBw; ring LL = min(llMaxBw, 0.5
// busBw); tree Simple 0.92 busBw; tree LL = min(busBw / 3.8, llMaxBw); tree LL128 busBw * 7/9
// (one node) or 120/128 (several). Per-channel caps need NCCL's channel count, which the topology
// does not give; they are left out.
constexpr double kLl128Ratio = 0.92;
constexpr double kLlRatio = 0.5;
constexpr double kTreeRatio = 0.92;
constexpr double kTreeLlDivisor = 3.8;
constexpr double kTreeLl128OneNode = 7.0 / 9.0;
constexpr double kTreeLl128Nodes = 120.0 / 128.0;
constexpr std::array<Protocol, 3> kProtocols = {Protocol::ll, Protocol::ll128, Protocol::simple};

std::size_t index(Protocol proto) {
  return static_cast<std::size_t>(proto);
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
  const auto n = static_cast<std::int64_t>(ranks.size());
  if (n <= 1 || bytes <= 0) return 0.0;
  return best(op, bytes, n, place(ranks), Algorithm::automatic)->time_s;
}

double AnalyticalNetwork::ring_latency_s(CollectiveOp op, std::int64_t n, const Placement& p, Protocol proto) const {
  const std::int64_t steps = ring_steps(op, n);
  const std::int64_t inter_steps = p.nodes > 1 ? inter_node_steps(op, p.nodes) : 0;
  const bool simple = proto == Protocol::simple;
  const double base = simple ? cluster_.collective_base_latency_s : kRingBase_s[index(proto)];
  const double nvlink_hop = simple ? cluster_.nvlink.latency_s : kRingNvlinkHop_s[index(proto)];
  const double net_hop = simple ? cluster_.nic.latency_s : kRingNetHop_s[index(proto)];
  const bool has_nvlink_phase = p.nodes == 1 || p.min_ranks_per_node > 1;
  double latency_s =
      base + static_cast<double>(steps - inter_steps) * nvlink_hop + static_cast<double>(inter_steps) * net_hop;
  // The fitted pipeline fill belongs to Simple's large chunks (it was fitted where Simple runs).
  if (simple && has_nvlink_phase) latency_s += cluster_.nvlink.ramp_latency_s;
  return latency_s;
}

double AnalyticalNetwork::tree_latency_s(std::int64_t n, const Placement& p, Protocol proto) const {
  // tuning.cc: lat = baseLat + 2((ppn - 1) intra hop + log2(nodes) NET hop): a chain inside each
  // node, double binary trees across nodes.
  const double ppn = static_cast<double>(n / p.nodes);
  const bool has_nvlink_phase = p.nodes == 1 || p.min_ranks_per_node > 1;
  double latency_s =
      kTreeBase_s[index(proto)] + 2.0 * ((ppn - 1.0) * kTreeNvlinkHop_s[index(proto)] +
                                         std::log2(static_cast<double>(p.nodes)) * kTreeNetHop_s[index(proto)]);
  if (proto == Protocol::simple && has_nvlink_phase) latency_s += cluster_.nvlink.ramp_latency_s;
  return latency_s;
}

double AnalyticalNetwork::p2p_latency_s(std::uint32_t src, std::uint32_t dst) const {
  return cluster_.node_of(src) == cluster_.node_of(dst) ? cluster_.nvlink.latency_s : cluster_.nic.latency_s;
}

double AnalyticalNetwork::ring_busbw_Bps(CollectiveOp op, const Placement& p) const {
  if (p.nodes == 1) {
    // Without NVLS the all-reduce figure is the ring's own.
    return op == CollectiveOp::all_reduce && !cluster_.nvlink.nvls ? cluster_.nvlink.allreduce_busbw_Bps
                                                                   : cluster_.nvlink.busbw_Bps;
  }
  // Hierarchical ring across nodes: each node's share of the ring runs over as many NICs as the group
  // has ranks there (at most the node's NICs), and never faster than the NVLink ring inside it.
  const double nics = static_cast<double>(std::min(p.min_ranks_per_node, cluster_.nic.per_node));
  return std::min(cluster_.nvlink.busbw_Bps, nics * cluster_.nic.busbw_Bps);
}

// tuning.cc llMaxBws (GB/s) by GPU generation, for 1 node / 2 nodes / more (ecosystem.md §3.2).
// Several nodes take the Volta column's entries on Intel hosts and the Ampere column's on AMD ones:
// DGX A100 has AMD EPYC CPUs, DGX H100/H200/B200 Intel Xeon; GB200's and GB300's Grace is treated like AMD
// ("AMD/mixed"), a [D] reading of the rule.
double AnalyticalNetwork::ll_max_busbw_Bps(std::int64_t nodes) const {
  struct Caps {
    double one, two, more;
  };
  const hardware::GpuSpec& gpu = cluster_.gpu;
  const bool intel_host = gpu.arch != hardware::Arch::ampere && !gpu.grace_host;
  const Caps multi = intel_host ? Caps{0, 39.0, 20.4} : Caps{0, 22.5, 19.0};
  const double one = gpu.arch == hardware::Arch::ampere ? 87.7 : gpu.arch == hardware::Arch::hopper ? 141.0 : 282.0;
  const double gbps = nodes == 1 ? one : nodes == 2 ? multi.two : multi.more;
  return gbps * 1e9;
}

std::optional<AnalyticalNetwork::Timed> AnalyticalNetwork::candidate(CollectiveOp op, double size, std::int64_t n,
                                                                     const Placement& p, Algorithm algo,
                                                                     Protocol proto) const {
  const bool one_node = p.nodes == 1;
  const double ring_Bps = ring_busbw_Bps(op, p);
  if (proto == Protocol::ll128 && !cluster_.nvlink.ll128) return std::nullopt;
  double latency_s = 0, busbw_Bps = 0;
  switch (algo) {
    case Algorithm::ring:
      if (op == CollectiveOp::all_to_all || op == CollectiveOp::broadcast) return std::nullopt;
      latency_s = ring_latency_s(op, n, p, proto);
      busbw_Bps = proto == Protocol::simple  ? ring_Bps
                  : proto == Protocol::ll128 ? kLl128Ratio * ring_Bps
                                             : std::min(ll_max_busbw_Bps(p.nodes), kLlRatio * ring_Bps);
      break;
    case Algorithm::tree:
      if (op != CollectiveOp::all_reduce) return std::nullopt;
      latency_s = tree_latency_s(n, p, proto);
      busbw_Bps = proto == Protocol::simple  ? kTreeRatio * ring_Bps
                  : proto == Protocol::ll128 ? (one_node ? kTreeLl128OneNode : kTreeLl128Nodes) * ring_Bps
                                             : std::min(ll_max_busbw_Bps(p.nodes), ring_Bps / kTreeLlDivisor);
      break;
    case Algorithm::nvls:
      // NVLink SHARP: the switches reduce and multicast; Simple protocol only (ecosystem.md §3.1).
      // All-reduce at the measured NVLS figure; all-gather / reduce-scatter at the ring figure
      // measured for them on the same systems. The fixed time is the fitted one of the measured
      // (NVLS) all-reduce curve.
      if (!cluster_.nvlink.nvls || !one_node || proto != Protocol::simple) return std::nullopt;
      if (op == CollectiveOp::all_to_all || op == CollectiveOp::broadcast) return std::nullopt;
      latency_s = ring_latency_s(op, n, p, proto);
      busbw_Bps = op == CollectiveOp::all_reduce ? cluster_.nvlink.allreduce_busbw_Bps : cluster_.nvlink.busbw_Bps;
      break;
    case Algorithm::automatic:
      TRAINSIM_ASSERT(false && "candidate() takes a concrete algorithm");
      return std::nullopt;
  }
  return Timed{latency_s + size * busbw_factor(op, n) / busbw_Bps, algo, proto, latency_s, busbw_Bps};
}

std::optional<AnalyticalNetwork::Timed> AnalyticalNetwork::best(CollectiveOp op, std::int64_t bytes, std::int64_t n,
                                                                const Placement& p, Algorithm algo) const {
  const double size = static_cast<double>(bytes);
  // A calibrated GPU profile times what it measured inside one NVLink domain (hardware/profile.h);
  // `auto` then stands for whatever NCCL chose there.
  if (const auto& prof = cluster_.gpu.profile; prof && algo == Algorithm::automatic && p.nodes == 1)
    if (auto t = prof->collective_time_s(to_string(op), n, size)) {
      const auto* fit = prof->find_collective(to_string(op), n);
      return Timed{*t, Algorithm::automatic, Protocol::simple, fit->fit.latency_s, fit->fit.Bps};
    }
  if (algo == Algorithm::automatic) {
    // Collectives NCCL runs outside the ring/tree/NVLS choice, Simple protocol.
    if (op == CollectiveOp::all_to_all || op == CollectiveOp::broadcast) {
      const double latency_s = ring_latency_s(op, n, p, Protocol::simple);
      if (p.nodes == 1 || op == CollectiveOp::broadcast) {
        const double bw = ring_busbw_Bps(op, p);
        return Timed{latency_s + size * busbw_factor(op, n) / bw, Algorithm::ring, Protocol::simple, latency_s, bw};
      }
      // Every rank sends (n - ppn)/n of its buffer over the network and (ppn - 1)/n over NVLink.
      // All-to-all cannot aggregate several NICs per GPU (sjeaugey, nccl-tests#267): each rank has
      // at most its own NIC.
      const double ppn = static_cast<double>(p.min_ranks_per_node);
      const double nics_per_gpu =
          std::min(1.0, static_cast<double>(cluster_.nic.per_node) / static_cast<double>(cluster_.gpus_per_node));
      const double inter_s =
          size * (static_cast<double>(n) - ppn) / static_cast<double>(n) / (cluster_.nic.busbw_Bps * nics_per_gpu);
      const double intra_s = size * (ppn - 1.0) / static_cast<double>(n) / cluster_.nvlink.busbw_Bps;
      const double move_s = std::max(inter_s, intra_s);
      const double bw = move_s > 0 ? size * busbw_factor(op, n) / move_s : cluster_.nic.busbw_Bps;
      return Timed{latency_s + move_s, Algorithm::ring, Protocol::simple, latency_s, bw};
    }
    // NCCL's choice: the cheapest algorithm and protocol by its cost model. Tree runs across nodes
    // (inside one it is a chain NCCL does not pick on NVSwitch systems); NVLS inside a node.
    std::optional<Timed> out;
    for (Algorithm a : {Algorithm::nvls, Algorithm::ring, Algorithm::tree}) {
      if (a == Algorithm::tree && (op != CollectiveOp::all_reduce || p.nodes == 1)) continue;
      if (a == Algorithm::nvls && op != CollectiveOp::all_reduce) continue;
      for (Protocol proto : kProtocols)
        if (auto t = candidate(op, size, n, p, a, proto); t && (!out || t->time_s < out->time_s)) out = t;
    }
    return out;
  }
  std::optional<Timed> out;
  for (Protocol proto : kProtocols)
    if (auto t = candidate(op, size, n, p, algo, proto); t && (!out || t->time_s < out->time_s)) out = t;
  return out;
}

std::optional<AnalyticalNetwork::Timed> AnalyticalNetwork::collective(CollectiveOp op, std::int64_t bytes,
                                                                      std::span<const std::uint32_t> ranks,
                                                                      Algorithm algo) const {
  const auto n = static_cast<std::int64_t>(ranks.size());
  TRAINSIM_ASSERT(bytes >= 0);
  if (n <= 1) return Timed{};
  return best(op, bytes, n, place(ranks), algo);
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
    const auto n = static_cast<std::int64_t>(req.ranks.size());
    if (n > 1 && req.bytes > 0) {
      const Algorithm forced = algorithms_[static_cast<std::size_t>(op)];
      std::optional<Timed> timed;
      if (forced != Algorithm::automatic) timed = best(op, req.bytes, n, p, forced);
      if (!timed) timed = best(op, req.bytes, n, p, Algorithm::automatic);
      t = timed->time_s;
    }
  }
  sim.after(engine::Time::from_seconds(t), std::move(done));
}

}  // namespace trainsim::network
