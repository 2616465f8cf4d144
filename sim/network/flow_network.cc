#include "network/flow_network.h"

#include <algorithm>

#include "engine/simulation.h"
#include "util/error.h"

namespace trainsim::network {

FlowNetwork::FlowNetwork(const ClusterSpec& cluster, std::int64_t gpus, const AlgorithmChoice& algorithms)
    : cluster_(cluster),
      analytical_(cluster, algorithms),
      graph_(cluster, gpus),
      solver_(capacities(graph_, cluster)),
      link_bytes_(solver_.link_count(), 0),
      link_busy_s_(solver_.link_count(), 0),
      link_busy_since_(solver_.link_count(), 0),
      link_flows_(solver_.link_count(), 0) {
}

// The graph's links, then one virtual link per GPU for its NCCL collective throughput.
std::vector<double> FlowNetwork::capacities(const TopologyGraph& graph, const ClusterSpec& cluster) {
  std::vector<double> caps(graph.capacities().begin(), graph.capacities().end());
  caps.insert(caps.end(), static_cast<std::size_t>(graph.gpus()), cluster.nvlink.busbw_Bps);
  return caps;
}

void FlowNetwork::link_busy_change(FlowSolver::LinkId link, int delta, double now) {
  if (delta > 0 && link_flows_[link]++ == 0) link_busy_since_[link] = now;
  if (delta < 0 && --link_flows_[link] == 0) link_busy_s_[link] += now - link_busy_since_[link];
}

void FlowNetwork::set_images(std::uint32_t count, ImageFn image) {
  TRAINSIM_ASSERT(count >= 1);
  image_count_ = count;
  image_ = std::move(image);
  covered_.assign(static_cast<std::size_t>(graph_.gpus()), 0);
}

const std::vector<std::uint32_t>& FlowNetwork::images_of(std::uint64_t key, std::span<const std::uint32_t> ranks,
                                                         bool dedupe) {
  auto [it, fresh] = images_.try_emplace(key);
  if (!fresh) return it->second;
  std::vector<std::uint32_t>& out = it->second;
  ++stamp_;
  std::vector<std::uint32_t> mapped(ranks.size());
  for (std::uint32_t k = 0; k < image_count_; ++k) {
    for (std::size_t i = 0; i < ranks.size(); ++i) mapped[i] = k == 0 ? ranks[i] : image_(ranks[i], k);
    // A group can map onto itself (a TP group under a TP shift): keep distinct images only.
    if (dedupe && covered_[mapped.front()] == stamp_) continue;
    for (std::uint32_t r : mapped) covered_[r] = stamp_;
    out.insert(out.end(), mapped.begin(), mapped.end());
  }
  return out;
}

void FlowNetwork::append_hop(std::uint32_t src, std::uint32_t dst, bool collective) {
  if (src == dst) return;
  const std::uint64_t key = (static_cast<std::uint64_t>(src) << 32) | dst;
  auto [it, fresh] = routes_.try_emplace(key);
  if (fresh) {
    const auto offset = static_cast<std::uint32_t>(route_links_.size());
    graph_.route(src, dst, route_links_);
    it->second = {offset, static_cast<std::uint32_t>(route_links_.size()) - offset};
  }
  path_.insert(path_.end(), route_links_.begin() + it->second.first,
               route_links_.begin() + it->second.first + it->second.second);
  if (collective) path_.push_back(static_cast<FlowSolver::LinkId>(graph_.link_count() + src));
  path_count_.resize(path_.size(), 1);
}

void FlowNetwork::add_path_flow(std::uint32_t transfer, double bytes) {
  if (path_.empty() || bytes <= 0) {
    clear_path();
    return;
  }
  const FlowSolver::FlowId id = solver_.add(path_, path_count_);
  if (id >= flows_.size()) flows_.resize(id + 1);
  Flow& f = flows_[id];
  f.transfer = transfer;
  f.remaining = bytes;
  f.rate = 0;
  f.since = 0;
  ++f.version;
  for (std::size_t i = 0; i < path_.size(); ++i) link_bytes_[path_[i]] += bytes * path_count_[i];
  clear_path();
  ++transfers_[transfer].open_flows;
  pending_.push_back(id);
  ++flows_started_;
}

void FlowNetwork::add_flow(std::uint32_t transfer, std::uint32_t src, std::uint32_t dst, double bytes,
                           bool collective) {
  clear_path();
  append_hop(src, dst, collective);
  add_path_flow(transfer, bytes);
}

namespace {

// The parent of node i (i > 0) in a balanced in-order binary tree over nodes 0..n-1 whose root is 0:
// a node's level is its lowest set bit; it hangs under the node one level up (that bit moved up),
// or under the bit-cleared node when that one is beyond n.
std::int64_t tree_parent(std::int64_t i, std::int64_t n) {
  const std::int64_t bit = i & -i;
  const std::int64_t up = (i ^ bit) | (bit << 1);
  return up < n ? up : i ^ bit;
}

}  // namespace

void FlowNetwork::build_tree(std::span<const std::uint32_t> ranks, const std::vector<std::int64_t>& node_start,
                             FlowSet& out) {
  // NCCL's tree all-reduce: a chain through each node's ranks, and across nodes two binary trees,
  // the second the mirror of the first (a node inner in one is mostly a leaf in the other), each
  // reducing half the data up to its root and broadcasting it back down. Pipelined, each tree (per
  // channel) moves at its slowest edge: one flow over every edge in both directions.
  const auto runs = static_cast<std::int64_t>(node_start.size()) - 1;
  auto r = [&](std::int64_t i) { return ranks[static_cast<std::size_t>(i)]; };
  std::int64_t min_ppn = static_cast<std::int64_t>(ranks.size());
  for (std::int64_t k = 0; k < runs; ++k)
    min_ppn = std::min(min_ppn, node_start[static_cast<std::size_t>(k + 1)] - node_start[static_cast<std::size_t>(k)]);
  const std::int64_t channels = std::max<std::int64_t>(1, std::min(min_ppn, cluster_.nic.per_node));
  for (std::int64_t c = 0; c < channels; ++c) {
    // Channel c's endpoint in each node is its c-th rank (that GPU's rail NIC); the chain walks the
    // node's ranks from there.
    auto endpoint = [&](std::int64_t node) {
      const std::int64_t begin = node_start[static_cast<std::size_t>(node)];
      const std::int64_t ppn = node_start[static_cast<std::size_t>(node + 1)] - begin;
      return r(begin + c % ppn);
    };
    for (int tree = 0; tree < 2; ++tree) {
      clear_path();
      for (std::int64_t k = 0; k < runs; ++k) {
        const std::int64_t begin = node_start[static_cast<std::size_t>(k)];
        const std::int64_t ppn = node_start[static_cast<std::size_t>(k + 1)] - begin;
        for (std::int64_t j = 0; j + 1 < ppn; ++j) {
          const std::uint32_t a = r(begin + (c + j) % ppn), b = r(begin + (c + j + 1) % ppn);
          append_hop(b, a, true);  // reduce towards the endpoint
          append_hop(a, b, true);  // broadcast back
        }
      }
      for (std::int64_t i = 1; i < runs; ++i) {
        const std::int64_t child = tree == 0 ? i : runs - 1 - i;
        const std::int64_t parent = tree == 0 ? tree_parent(i, runs) : runs - 1 - tree_parent(i, runs);
        append_hop(endpoint(child), endpoint(parent), true);
        append_hop(endpoint(parent), endpoint(child), true);
      }
      if (path_.empty()) continue;
      out.links.insert(out.links.end(), path_.begin(), path_.end());
      out.counts.insert(out.counts.end(), path_count_.begin(), path_count_.end());
      out.ends.push_back(static_cast<std::uint32_t>(out.links.size()));
      out.weight.push_back(0.5 / static_cast<double>(channels));
      clear_path();
    }
  }
}

double FlowNetwork::idle_seconds_per_unit(const FlowSet& set, std::size_t flows) const {
  // The flows alone on the fabric: each at its max-min rate; the slowest sets the time.
  std::vector<double> caps(solver_.link_count());
  for (std::size_t l = 0; l < caps.size(); ++l) caps[l] = solver_.capacity(static_cast<FlowSolver::LinkId>(l));
  FlowSolver idle(std::move(caps));
  std::vector<FlowSolver::FlowId> ids;
  std::uint32_t begin = 0;
  for (std::size_t i = 0; i < flows; ++i) {
    ids.push_back(idle.add(std::span(set.links).subspan(begin, set.ends[i] - begin),
                           std::span(set.counts).subspan(begin, set.ends[i] - begin)));
    begin = set.ends[i];
  }
  idle.solve();
  double worst = 0;
  for (std::size_t i = 0; i < flows; ++i) worst = std::max(worst, set.weight[i] / idle.rate(ids[i]));
  return worst;
}

void FlowNetwork::build_all_to_all(std::span<const std::uint32_t> ranks, FlowSet& out) {
  // Every ordered pair moves S / n. The pairs from one source to the ranks of one node share the
  // source's links and, across nodes, the route to that node's rail GPU; they are one flow whose
  // count on each link is the number of its pairs crossing it (nodes in order of first appearance).
  const auto n = ranks.size();
  std::vector<std::int64_t> nodes;                     // the destination nodes of the current source
  std::vector<std::vector<FlowSolver::LinkId>> links;  // per destination node: its distinct links
  std::vector<std::vector<std::uint32_t>> counts;      // and their counts
  for (std::size_t i = 0; i < n; ++i) {
    nodes.clear();
    for (std::size_t j = 0; j < n; ++j) {
      if (ranks[j] == ranks[i]) continue;
      const std::int64_t node = cluster_.node_of(ranks[j]);
      const auto at = static_cast<std::size_t>(std::find(nodes.begin(), nodes.end(), node) - nodes.begin());
      if (at == nodes.size()) {
        nodes.push_back(node);
        if (links.size() < nodes.size()) {
          links.resize(nodes.size());
          counts.resize(nodes.size());
        }
        links[at].clear();
        counts[at].clear();
      }
      clear_path();
      append_hop(ranks[i], ranks[j], true);
      for (FlowSolver::LinkId l : path_) {
        const auto k = static_cast<std::size_t>(std::find(links[at].begin(), links[at].end(), l) - links[at].begin());
        if (k == links[at].size()) {
          links[at].push_back(l);
          counts[at].push_back(1);
        } else {
          ++counts[at][k];
        }
      }
    }
    for (std::size_t k = 0; k < nodes.size(); ++k) {
      out.links.insert(out.links.end(), links[k].begin(), links[k].end());
      out.counts.insert(out.counts.end(), counts[k].begin(), counts[k].end());
      out.ends.push_back(static_cast<std::uint32_t>(out.links.size()));
      out.weight.push_back(1.0 / static_cast<double>(n));
    }
  }
  clear_path();
}

void FlowNetwork::build_collective(CollectiveOp op, std::span<const std::uint32_t> ranks, FlowSet& out, bool tree) {
  const auto n = static_cast<std::int64_t>(ranks.size());
  auto r = [&](std::int64_t i) { return ranks[static_cast<std::size_t>(i)]; };
  auto close_flow = [&](double weight) {
    if (path_.empty()) return;
    out.links.insert(out.links.end(), path_.begin(), path_.end());
    out.counts.insert(out.counts.end(), path_count_.begin(), path_count_.end());
    out.ends.push_back(static_cast<std::uint32_t>(out.links.size()));
    out.weight.push_back(weight);
    clear_path();
  };
  clear_path();
  if (op == CollectiveOp::all_to_all) {
    build_all_to_all(ranks, out);
    return;
  }
  // A pipelined ring moves at its slowest hop: each ring (each channel across nodes) is one flow over
  // all its hops' links, every hop carrying the per-rank bytes.
  // Runs of the group's ranks per node, in group order.
  std::vector<std::int64_t> node_start;
  for (std::int64_t i = 0; i < n; ++i)
    if (i == 0 || cluster_.node_of(r(i)) != cluster_.node_of(r(i - 1))) node_start.push_back(i);
  const auto runs = static_cast<std::int64_t>(node_start.size());
  if (runs == 1 && !tree) {
    for (std::int64_t i = 0; i < n; ++i) append_hop(r(i), r((i + 1) % n), true);
    close_flow(1.0);
    return;
  }
  node_start.push_back(n);
  if (tree) {
    build_tree(ranks, node_start, out);
    return;
  }
  std::int64_t min_ppn = n;
  for (std::int64_t k = 0; k < runs; ++k)
    min_ppn = std::min(min_ppn, node_start[static_cast<std::size_t>(k + 1)] - node_start[static_cast<std::size_t>(k)]);
  const std::int64_t channels = std::max<std::int64_t>(1, std::min(min_ppn, cluster_.nic.per_node));
  for (std::int64_t c = 0; c < channels; ++c) {
    // Channel c enters each node at its c-th rank, walks the node's ranks and leaves from the one
    // before the entry, through that GPU's rail NIC, to the next node's entry.
    for (std::int64_t k = 0; k < runs; ++k) {
      const std::int64_t begin = node_start[static_cast<std::size_t>(k)];
      const std::int64_t ppn = node_start[static_cast<std::size_t>(k + 1)] - begin;
      for (std::int64_t j = 0; j + 1 < ppn; ++j)
        append_hop(r(begin + (c + j) % ppn), r(begin + (c + j + 1) % ppn), true);
      const std::int64_t exit = begin + (c + ppn - 1) % ppn;
      const std::int64_t nb = node_start[static_cast<std::size_t>((k + 1) % runs)];
      const std::int64_t nppn = node_start[static_cast<std::size_t>((k + 1) % runs + 1)] - nb;
      append_hop(r(exit), r(nb + c % nppn), true);
    }
    close_flow(1.0 / static_cast<double>(channels));
  }
}

void FlowNetwork::start(const engine::CommRequest& req, engine::Simulation& sim, engine::Callback done) {
  std::uint32_t t;
  if (!free_transfers_.empty()) {
    t = free_transfers_.back();
    free_transfers_.pop_back();
  } else {
    t = static_cast<std::uint32_t>(transfers_.size());
    transfers_.emplace_back();
  }
  transfers_[t].open_flows = 0;
  transfers_[t].done = std::move(done);
  pending_.clear();
  const double size = static_cast<double>(req.bytes);

  if (req.kind == engine::CommRequest::Kind::p2p) {
    transfers_[t].latency_s = analytical_.p2p_latency_s(req.src, req.dst);
    if (image_count_ == 1) {
      add_flow(t, req.src, req.dst, size, false);
    } else {
      const std::uint32_t pair[2] = {req.src, req.dst};
      const auto& images = images_of((static_cast<std::uint64_t>(req.src) << 32) | req.dst, pair, false);
      for (std::size_t i = 0; i < images.size(); i += 2) add_flow(t, images[i], images[i + 1], size, false);
    }
  } else {
    const auto op = static_cast<CollectiveOp>(req.op);
    const std::span<const std::uint32_t> ranks = req.ranks;
    const auto n = static_cast<std::int64_t>(ranks.size());
    transfers_[t].latency_s = 0.0;
    if (n > 1 && req.bytes > 0) {
      // The algorithm and protocol the analytical model picks: its fixed time, and its bus bandwidth
      // relative to the plain ring the flows run (the flows carry that many more bytes).
      const auto timed = analytical_.chosen(op, req.bytes, ranks);
      transfers_[t].latency_s = timed.latency_s;
      const double flow_ring_Bps = analytical_.ring_busbw_Bps(CollectiveOp::all_gather, analytical_.place(ranks));
      const double per_rank = size * busbw_factor(op, n) * flow_ring_Bps / timed.busbw_Bps;
      // The group's flows (and its images'), built once per group and kind of collective.
      const bool a2a = op == CollectiveOp::all_to_all;
      const bool tree = timed.algo == Algorithm::tree;
      const std::uint64_t kind = a2a ? 1u : tree ? 2u : 0u;
      auto [it, fresh] = flow_sets_.try_emplace((static_cast<std::uint64_t>(req.group) << 2) | kind);
      FlowSet& set = it->second;
      if (!fresh && !std::equal(ranks.begin(), ranks.end(), set.ranks.begin(), set.ranks.end())) {
        set = FlowSet{};  // the same group id over other ranks (callers outside a step plan)
        images_.erase(req.group | (std::uint64_t{1} << 63));
        fresh = true;
      }
      if (fresh) {
        set.ranks.assign(ranks.begin(), ranks.end());
        build_collective(op, ranks, set, tree);
        // A tree's idle speed is the analytical model's (NCCL's cost model with its measured
        // bandwidths); its flows only say which links it loads, and how much each.
        if (tree) set.idle_s_per_unit = idle_seconds_per_unit(set, set.ends.size());
        if (image_count_ > 1) {
          const auto& images = images_of(req.group | (std::uint64_t{1} << 63), ranks, true);
          for (std::size_t i = ranks.size(); i < images.size(); i += ranks.size())
            build_collective(op, std::span(images).subspan(i, ranks.size()), set, tree);
        }
      }
      const double unit = a2a ? size : tree ? (timed.time_s - timed.latency_s) / set.idle_s_per_unit : per_rank;
      std::uint32_t begin = 0;
      for (std::size_t i = 0; i < set.ends.size(); ++i) {
        path_.assign(set.links.begin() + begin, set.links.begin() + set.ends[i]);
        path_count_.assign(set.counts.begin() + begin, set.counts.begin() + set.ends[i]);
        add_path_flow(t, set.weight[i] * unit);
        begin = set.ends[i];
      }
    }
  }
  launch(t, sim);
}

void FlowNetwork::launch(std::uint32_t t, engine::Simulation& sim) {
  if (transfers_[t].open_flows == 0) {  // nothing to move: only the fixed time
    engine::Callback done = std::move(transfers_[t].done);
    free_transfers_.push_back(t);
    sim.after(engine::Time::from_seconds(transfers_[t].latency_s), std::move(done));
    return;
  }
  const double now = sim.now().seconds();
  for (std::uint32_t id : pending_) {
    flows_[id].since = now;
    for (FlowSolver::LinkId l : solver_.path(id)) link_busy_change(l, +1, now);
  }
  reschedule(sim);
}

void FlowNetwork::reschedule(engine::Simulation& sim) {
  const double now = sim.now().seconds();
  ++solves_;
  for (FlowSolver::FlowId id : solver_.solve()) {
    if (!solver_.active(id)) continue;
    Flow& f = flows_[id];
    // A flow whose rate did not change keeps the end it was given (most of a component's flows when
    // one of them ends elsewhere): no second event for it in the queue.
    if (solver_.rate(id) == f.rate && f.rate > 0) continue;
    f.remaining = std::max(0.0, f.remaining - f.rate * (now - f.since));
    f.since = now;
    f.rate = solver_.rate(id);
    ++f.version;
    TRAINSIM_ASSERT(f.rate > 0);
    const std::uint64_t version = f.version;
    sim.after(engine::Time::from_seconds(f.remaining / f.rate),
              [this, id, version, &sim] { finish_flow(id, version, sim); });
  }
}

void FlowNetwork::finish_flow(FlowSolver::FlowId id, std::uint64_t version, engine::Simulation& sim) {
  Flow& f = flows_[id];
  if (f.version != version || !solver_.active(id)) return;  // rescheduled since
  const std::uint32_t t = f.transfer;
  for (FlowSolver::LinkId l : solver_.path(id)) link_busy_change(l, -1, sim.now().seconds());
  solver_.remove(id);
  ++f.version;
  // Flows that end at the same instant (an all-to-all's pairs, a symmetric collective's images) are
  // removed together before the rates are solved again: one solve for all, after the others' ends.
  if (!solve_pending_) {
    solve_pending_ = true;
    sim.after(engine::Time{}, [this, &sim] {
      solve_pending_ = false;
      reschedule(sim);
    });
  }
  if (--transfers_[t].open_flows == 0) {
    engine::Callback done = std::move(transfers_[t].done);
    free_transfers_.push_back(t);
    sim.after(engine::Time::from_seconds(transfers_[t].latency_s), std::move(done));
  }
}

std::vector<FlowNetwork::LinkStats> FlowNetwork::link_stats() const {
  std::vector<LinkStats> out(graph_.link_count());  // physical links only
  for (std::size_t l = 0; l < out.size(); ++l) out[l] = {link_bytes_[l], link_busy_s_[l]};
  return out;
}

}  // namespace trainsim::network
