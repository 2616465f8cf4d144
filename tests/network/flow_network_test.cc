// The flow-level network: agrees with the analytical model on an idle network, and slows down
// exactly where links are shared.

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/simulation.h"
#include "network/analytical_network.h"
#include "network/flow_network.h"
#include "network/topology_graph.h"
#include "util/json_node.h"

using namespace trainsim;
using namespace trainsim::network;

namespace {

ClusterSpec topology(const std::string& name) {
  std::ifstream in(std::string(TRAINSIM_SOURCE_DIR) + "/topologies/" + name + ".json");
  const auto doc = nlohmann::json::parse(in);
  return parse_cluster(util::JsonNode(doc, name + ".json"));
}

// Runs one request on an idle flow network; returns its duration.
double flow_time(FlowNetwork& net, const engine::CommRequest& req) {
  engine::Simulation sim;
  double end = -1;
  net.start(req, sim, [&sim, &end] { end = sim.now().seconds(); });
  sim.run();
  return end;
}

engine::CommRequest collective(CollectiveOp op, std::int64_t bytes, const std::vector<std::uint32_t>& ranks) {
  engine::CommRequest r;
  r.kind = engine::CommRequest::Kind::collective;
  r.op = static_cast<std::uint16_t>(op);
  r.bytes = bytes;
  r.ranks = ranks;
  return r;
}

}  // namespace

TEST_CASE("idle network: flow and analytical agree within 5% for every collective and size") {
  for (const char* name : {"dgx-h100", "dgx-a100"}) {
    const ClusterSpec c = topology(name);
    for (std::int64_t gpus : {8, 16, 64}) {
      std::vector<std::uint32_t> ranks(static_cast<std::size_t>(gpus));
      std::iota(ranks.begin(), ranks.end(), 0u);
      AnalyticalNetwork ana(c);
      FlowNetwork flow(c, gpus);
      for (CollectiveOp op : {CollectiveOp::all_reduce, CollectiveOp::all_gather, CollectiveOp::reduce_scatter,
                              CollectiveOp::all_to_all}) {
        for (std::int64_t bytes : {std::int64_t{1} << 20, std::int64_t{1} << 26, std::int64_t{1} << 32}) {
          INFO(name << " " << gpus << " GPUs " << to_string(op) << " " << bytes << " B");
          const double a = ana.collective_time_s(op, bytes, ranks);
          CHECK(flow_time(flow, collective(op, bytes, ranks)) == Approx(a).epsilon(0.05));
        }
      }
      engine::CommRequest p2p;
      p2p.kind = engine::CommRequest::Kind::p2p;
      p2p.bytes = std::int64_t{1} << 28;
      p2p.src = 0;
      p2p.dst = static_cast<std::uint32_t>(gpus - 1);
      CHECK(flow_time(flow, p2p) == Approx(ana.p2p_time_s(0, p2p.dst, p2p.bytes)).epsilon(0.05));
    }
  }
}

TEST_CASE("contention: two jobs' all-reduces on a 1:4 oversubscribed spine take what the bottleneck predicts") {
  // 4 groups of 2 nodes (one leaf group per 2 nodes), rail-optimized. Job A all-reduces over nodes
  // 0 and 2, job B over nodes 1 and 3: every ring crosses leaf -> spine -> leaf. Full bisection:
  // each leaf's uplink carries 2 nodes' worth of NIC bandwidth, both jobs run at NIC speed. At 1:4,
  // a leaf's uplink is 2·47/4 GB/s per rail, shared by the two jobs' rings that leave that leaf:
  // each gets (2·47/4)/2 = 11.75 GB/s per rail instead of 47: 4x slower in the bandwidth term.
  ClusterSpec c = topology("dgx-h100");
  c.fabric.nodes_per_leaf = 2;
  c.fabric.spines = 1;
  const std::int64_t bytes = std::int64_t{1} << 32;
  std::vector<std::uint32_t> a, b;
  for (std::uint32_t g = 0; g < 8; ++g) {
    a.push_back(0 * 8 + g);
    b.push_back(1 * 8 + g);
  }
  for (std::uint32_t g = 0; g < 8; ++g) {
    a.push_back(2 * 8 + g);
    b.push_back(3 * 8 + g);
  }
  auto both = [&](double oversub) {
    c.fabric.oversubscription = oversub;
    FlowNetwork net(c, 32);
    engine::Simulation sim;
    double end_a = 0, end_b = 0;
    net.start(collective(CollectiveOp::all_reduce, bytes, a), sim, [&] { end_a = sim.now().seconds(); });
    net.start(collective(CollectiveOp::all_reduce, bytes, b), sim, [&] { end_b = sim.now().seconds(); });
    sim.run();
    CHECK(end_a == Approx(end_b));
    return end_a;
  };
  const double full = both(1.0);
  const double over = both(4.0);
  AnalyticalNetwork ana(c);
  CHECK(full == Approx(ana.collective_time_s(CollectiveOp::all_reduce, bytes, a)).epsilon(0.05));
  // Bandwidth term: 2(n-1)/n·S over 8 rails; full: min(370, 8·47) per GPU; 1:4 shared by 2 jobs:
  // 8 · 11.75 = 94 GB/s.
  const double factor = 2.0 * 15 / 16 * static_cast<double>(bytes);
  const double lat = full - factor / 370e9;
  CHECK(over - lat == Approx(factor / (8 * 11.75e9)).epsilon(0.05));
  CHECK(over > 3.5 * full);
}

TEST_CASE("ECMP is deterministic and spreads flows over the spines") {
  ClusterSpec c = topology("dgx-h100");
  c.fabric.nodes_per_leaf = 1;
  c.fabric.spines = 4;
  TopologyGraph g(c, 64);
  std::vector<TopologyGraph::LinkId> p1, p2;
  g.route(0, 8 * 5, p1);
  g.route(0, 8 * 5, p2);
  CHECK(p1 == p2);
  CHECK(p1.size() == 6);  // GPU-NIC, NIC-leaf, leaf-spine, spine-leaf, leaf-NIC, NIC-GPU
  std::vector<int> used(g.link_count(), 0);
  for (std::uint32_t dst = 1; dst < 8; ++dst) {
    std::vector<TopologyGraph::LinkId> p;
    g.route(0, dst * 8, p);
    ++used[p[2]];
  }
  int distinct = 0;
  for (int u : used) distinct += u > 0 ? 1 : 0;
  CHECK(distinct > 1);  // 7 destinations hash onto more than one of the 4 spines
}

TEST_CASE("multi-pod Clos: traffic between pods crosses the core tier, 1:7 slower than inside a pod") {
  // topologies/dgx-h100-pods-1to7.json: 384-node pods, full bisection inside, 1:7 above. Small
  // pods here (2 leaves of 1 node each, 1 spine) keep the graph small; the rule is the same.
  nlohmann::json doc;
  {
    std::ifstream in(std::string(TRAINSIM_SOURCE_DIR) + "/topologies/dgx-h100-pods-1to7.json");
    doc = nlohmann::json::parse(in);
  }
  ClusterSpec c = parse_cluster(util::JsonNode(doc, "dgx-h100-pods-1to7.json"));
  CHECK(c.fabric.pod_nodes == 384);
  CHECK(c.fabric.pod_oversubscription == 7);
  c.fabric.nodes_per_leaf = 1;
  c.fabric.spines = 1;
  c.fabric.pod_nodes = 2;
  TopologyGraph g(c, 32);  // 4 nodes: pods {0, 1} and {2, 3}
  std::vector<TopologyGraph::LinkId> in_pod, across;
  g.route(0, 8, in_pod);
  g.route(0, 16, across);
  auto tiers = [&](const std::vector<TopologyGraph::LinkId>& p, LinkTier t) {
    int n = 0;
    for (auto l : p) n += g.tier(l) == t ? 1 : 0;
    return n;
  };
  CHECK(tiers(in_pod, LinkTier::spine_core) == 0);
  CHECK(tiers(across, LinkTier::spine_core) == 2);
  // All 8 GPUs of node 0 send 1 GiB to their peers on another node at once (one flow per rail).
  // Inside the pod each flow has its NIC: 47 GB/s. Across pods the 8 flows share the spine's core
  // uplink: its downlink (2 leaves x 8 rails x 47 GB/s) / 7 = 107.4 GB/s, 13.4 GB/s each.
  auto eight = [&](std::uint32_t to_node) {
    FlowNetwork net(c, 32);
    engine::Simulation sim;
    double end = 0;
    for (std::uint32_t g8 = 0; g8 < 8; ++g8) {
      engine::CommRequest r;
      r.kind = engine::CommRequest::Kind::p2p;
      r.bytes = std::int64_t{1} << 30;
      r.src = g8;
      r.dst = to_node * 8 + g8;
      net.start(r, sim, [&sim, &end] { end = std::max(end, sim.now().seconds()); });
    }
    sim.run();
    return end;
  };
  const double gib = static_cast<double>(std::int64_t{1} << 30);
  CHECK(eight(1) == Approx(14e-6 + gib / 47e9).epsilon(1e-6));
  CHECK(eight(2) == Approx(14e-6 + gib / (2 * 8 * 47e9 / 7 / 8)).epsilon(1e-6));
}

TEST_CASE("tree all-reduce as NCCL's double binary tree: idle time as analytical, two at once share the links") {
  // Forced tree (NCCL_ALGO=Tree) across 2-8 nodes of 8 H100. Per channel (one per rail, 8) two
  // mirrored binary trees over the nodes, each carrying half the data up and down: 16 flows. Alone on
  // the fabric the tree takes the analytical model's time (its flows say which links it loads);
  // two identical trees at once share every link, so their bandwidth term doubles.
  const ClusterSpec c = topology("dgx-h100");
  AlgorithmChoice forced{};
  forced[static_cast<std::size_t>(CollectiveOp::all_reduce)] = Algorithm::tree;
  for (std::int64_t nodes : {2, 3, 5, 8}) {
    const std::int64_t gpus = 8 * nodes;
    std::vector<std::uint32_t> ranks(static_cast<std::size_t>(gpus));
    std::iota(ranks.begin(), ranks.end(), 0u);
    AnalyticalNetwork ana(c, forced);
    for (std::int64_t bytes : {std::int64_t{1} << 20, std::int64_t{1} << 30}) {
      INFO(nodes << " nodes, " << bytes << " B");
      FlowNetwork flow(c, gpus, forced);
      const auto timed = ana.chosen(CollectiveOp::all_reduce, bytes, ranks);
      REQUIRE(timed.algo == Algorithm::tree);
      CHECK(flow_time(flow, collective(CollectiveOp::all_reduce, bytes, ranks)) == Approx(timed.time_s).epsilon(0.01));
      CHECK(flow.flows_started() == 16);
      engine::Simulation sim;
      double end = 0;
      const auto req = collective(CollectiveOp::all_reduce, bytes, ranks);
      for (int k = 0; k < 2; ++k) flow.start(req, sim, [&] { end = std::max(end, sim.now().seconds()); });
      sim.run();
      CHECK(end == Approx(timed.latency_s + 2 * (timed.time_s - timed.latency_s)).epsilon(0.01));
    }
  }
}

TEST_CASE("flows that end at one instant are removed together: one solve per instant, not per flow") {
  // An all-to-all over 2 nodes of 8 H100: 16 x 15 pairs of S / 16, as 16 x 2 flows (per source, one
  // per destination node: FlowSolver counts), all started together. By symmetry the flows inside a
  // node all end at one instant and those across nodes at a later one, so the rates are solved 3
  // times (the start and the two instants), where one solve per ended flow would be 1 + 32. Two
  // all-to-alls at once share every link: twice the bandwidth term.
  const ClusterSpec c = topology("dgx-h100");
  std::vector<std::uint32_t> ranks(16);
  std::iota(ranks.begin(), ranks.end(), 0u);
  const std::int64_t bytes = std::int64_t{1} << 30;
  const auto req = collective(CollectiveOp::all_to_all, bytes, ranks);
  FlowNetwork one(c, 16);
  const double alone = flow_time(one, req);
  CHECK(one.flows_started() == 32);
  CHECK(one.solves() == 3);
  CHECK(alone == Approx(AnalyticalNetwork(c).collective_time_s(CollectiveOp::all_to_all, bytes, ranks)).epsilon(0.05));
  FlowNetwork two(c, 16);
  engine::Simulation sim;
  double end = 0;
  for (int k = 0; k < 2; ++k) two.start(req, sim, [&] { end = std::max(end, sim.now().seconds()); });
  const std::uint64_t events = sim.run();
  CHECK(two.solves() == 4);  // each start solves; then the two instants
  // Events: the first's 32 ends (made stale when the second's start halves their rates), the 64
  // ends rescheduled then, one solve per instant (2) and each transfer's completion (2). No flow
  // whose rate did not change is rescheduled (the 16 cross-node flows when the others end).
  CHECK(events == 32 + 64 + 2 + 2);
  const double latency = AnalyticalNetwork(c).chosen(CollectiveOp::all_to_all, bytes, ranks).latency_s;
  CHECK(end - latency == Approx(2 * (alone - latency)).epsilon(1e-9));
}

TEST_CASE("an all-to-all's flows per destination node end when its pairs, each a flow of its own, would") {
  // The reference: every ordered pair a flow of S / n over its route and its source's NCCL link,
  // max-min fair, re-solved each time flows end, on 3 nodes of 8 H100 (a 1:2 oversubscribed spine,
  // 2 nodes per leaf: pairs between leaves share the uplinks). The grouped flows take the same time.
  ClusterSpec c = topology("dgx-h100");
  c.fabric.nodes_per_leaf = 2;
  c.fabric.oversubscription = 2.0;
  const std::int64_t gpus = 24;
  std::vector<std::uint32_t> ranks(static_cast<std::size_t>(gpus));
  std::iota(ranks.begin(), ranks.end(), 0u);
  const std::int64_t bytes = std::int64_t{3} << 28;
  TopologyGraph graph(c, gpus);
  std::vector<double> caps(graph.capacities().begin(), graph.capacities().end());
  caps.insert(caps.end(), static_cast<std::size_t>(gpus), c.nvlink.busbw_Bps);
  FlowSolver pairs(caps);
  std::vector<FlowSolver::FlowId> ids;
  std::vector<double> left;
  std::vector<FlowSolver::LinkId> path;
  for (std::uint32_t i : ranks)
    for (std::uint32_t j : ranks) {
      if (i == j) continue;
      path.clear();
      graph.route(i, j, path);
      path.push_back(static_cast<FlowSolver::LinkId>(graph.link_count() + i));
      ids.push_back(pairs.add(path));
      left.push_back(static_cast<double>(bytes) / static_cast<double>(gpus));
    }
  double t = 0;
  std::size_t open = ids.size();
  while (open > 0) {
    pairs.solve();
    double step = std::numeric_limits<double>::infinity();
    for (std::size_t k = 0; k < ids.size(); ++k)
      if (pairs.active(ids[k])) step = std::min(step, left[k] / pairs.rate(ids[k]));
    t += step;
    for (std::size_t k = 0; k < ids.size(); ++k) {
      if (!pairs.active(ids[k])) continue;
      left[k] -= pairs.rate(ids[k]) * step;
      if (left[k] <= 1e-9 * static_cast<double>(bytes)) {
        pairs.remove(ids[k]);
        --open;
      }
    }
  }
  FlowNetwork net(c, gpus);
  const auto req = collective(CollectiveOp::all_to_all, bytes, ranks);
  const double latency = AnalyticalNetwork(c).chosen(CollectiveOp::all_to_all, bytes, ranks).latency_s;
  CHECK(flow_time(net, req) - latency == Approx(t).epsilon(1e-9));
  CHECK(net.flows_started() == 24 * 3);
}
