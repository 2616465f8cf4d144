#include <catch2/catch.hpp>

#include <cstdint>
#include <numeric>
#include <vector>

#include "engine/simulation.h"
#include "network/analytical_network.h"

using trainsim::network::AnalyticalNetwork;
using trainsim::network::ClusterSpec;
using trainsim::network::CollectiveOp;

namespace {

// Round numbers so every expectation can be written out by hand.
constexpr double kNvlinkAllReduceBps = 200e9;
constexpr double kNvlinkBusBps = 100e9;
constexpr double kNvlinkP2pBps = 50e9;
constexpr double kNvlinkHopS = 1e-6;
constexpr double kNicBps = 10e9;
constexpr double kNicHopS = 5e-6;
constexpr double kBaseS = 2e-6;

ClusterSpec toy_cluster(std::int64_t nics_per_node = 8, double ramp_s = 0) {
  ClusterSpec c;
  c.name = "toy";
  c.gpus_per_node = 8;
  c.nvlink.allreduce_busbw_Bps = kNvlinkAllReduceBps;
  c.nvlink.busbw_Bps = kNvlinkBusBps;
  c.nvlink.p2p_Bps = kNvlinkP2pBps;
  c.nvlink.latency_s = kNvlinkHopS;
  c.nvlink.ramp_latency_s = ramp_s;
  c.nic.per_node = nics_per_node;
  c.nic.busbw_Bps = kNicBps;
  c.nic.latency_s = kNicHopS;
  c.collective_base_latency_s = kBaseS;
  return c;
}

std::vector<std::uint32_t> iota_ranks(std::uint32_t first, std::uint32_t count, std::uint32_t stride = 1) {
  std::vector<std::uint32_t> r(count);
  for (std::uint32_t i = 0; i < count; ++i) r[i] = first + i * stride;
  return r;
}

constexpr std::int64_t kGiB = std::int64_t{1} << 30;
const double kS = static_cast<double>(kGiB);

}  // namespace

TEST_CASE("a ring all-reduce of S bytes over n GPUs of one node takes 2(n-1)/n * S/B plus latency", "[network]") {
  // One node, 8 ranks: NCCL ring all-reduce, B = the node's all-reduce busbw, 2(n-1) NVLink steps.
  AnalyticalNetwork net(toy_cluster());
  const auto ranks = iota_ranks(0, 8);
  const double latency = kBaseS + 14 * kNvlinkHopS;
  CHECK(net.collective_time_s(CollectiveOp::all_reduce, kGiB, ranks) ==
        Approx(latency + 2.0 * 7.0 / 8.0 * kS / kNvlinkAllReduceBps));
}

TEST_CASE("all-gather and reduce-scatter in a node take (n-1)/n * S/B at the ring busbw", "[network]") {
  // 4 ranks of one node: n-1 = 3 ring steps, ring (not all-reduce) bus bandwidth.
  AnalyticalNetwork net(toy_cluster());
  const auto ranks = iota_ranks(4, 4);
  const double expected = kBaseS + 3 * kNvlinkHopS + 0.75 * kS / kNvlinkBusBps;
  CHECK(net.collective_time_s(CollectiveOp::all_gather, kGiB, ranks) == Approx(expected));
  CHECK(net.collective_time_s(CollectiveOp::reduce_scatter, kGiB, ranks) == Approx(expected));
  // Broadcast: the root's link carries all S bytes; n ring steps.
  CHECK(net.collective_time_s(CollectiveOp::broadcast, kGiB, ranks) ==
        Approx(kBaseS + 4 * kNvlinkHopS + kS / kNvlinkBusBps));
}

TEST_CASE("a group of one rank, or an empty message, costs nothing", "[network]") {
  AnalyticalNetwork net(toy_cluster());
  const std::vector<std::uint32_t> one = {3};
  CHECK(net.collective_time_s(CollectiveOp::all_reduce, kGiB, one) == 0.0);
  CHECK(net.collective_time_s(CollectiveOp::all_reduce, 0, iota_ranks(0, 8)) == 0.0);
  CHECK(net.p2p_time_s(5, 5, kGiB) == 0.0);
}

TEST_CASE("a DP group spanning 8 nodes with one GPU each runs at one NIC's bandwidth", "[network]") {
  // Ranks 0, 8, ..., 56: one per node, so every ring step crosses the network and each node has one
  // rank to feed its NICs: B = 1 x NIC busbw; 2(nodes-1) = 14 network steps.
  AnalyticalNetwork net(toy_cluster());
  const auto ranks = iota_ranks(0, 8, 8);
  const double latency = kBaseS + 14 * kNicHopS;
  CHECK(net.collective_time_s(CollectiveOp::all_reduce, kGiB, ranks) == Approx(latency + 1.75 * kS / kNicBps));
}

TEST_CASE("a hierarchical ring over full nodes is bound by the node's NICs, capped by NVLink", "[network]") {
  // 2 nodes x 8 ranks: B = min(NVLink ring 100, 8 NICs x 10 = 80) GB/s; 30 ring steps, 2 of them
  // on the network.
  AnalyticalNetwork net(toy_cluster());
  const auto ranks = iota_ranks(0, 16);
  const double latency = kBaseS + 28 * kNvlinkHopS + 2 * kNicHopS;
  CHECK(net.collective_time_s(CollectiveOp::all_reduce, kGiB, ranks) ==
        Approx(latency + 2.0 * 15.0 / 16.0 * kS / (8 * kNicBps)));

  // Only 4 NICs per node: the 8 ranks share them, B = 4 x 10 GB/s.
  AnalyticalNetwork four_nics(toy_cluster(4));
  CHECK(four_nics.collective_time_s(CollectiveOp::all_reduce, kGiB, ranks) ==
        Approx(latency + 2.0 * 15.0 / 16.0 * kS / (4 * kNicBps)));

  // Fast NICs (8 x 20 GB/s = 160) cannot beat the NVLink ring (100 GB/s) that feeds them.
  ClusterSpec fast = toy_cluster();
  fast.nic.busbw_Bps = 20e9;
  AnalyticalNetwork fast_net(fast);
  CHECK(fast_net.collective_time_s(CollectiveOp::all_gather, kGiB, ranks) ==
        Approx(kBaseS + 14 * kNvlinkHopS + 1 * kNicHopS + 15.0 / 16.0 * kS / kNvlinkBusBps));
}

TEST_CASE("an all-to-all across nodes cannot aggregate NICs: each rank has its own", "[network]") {
  // 16 ranks on 2 nodes: each rank sends 8/16 of its buffer over its NIC and 7/16 over NVLink.
  AnalyticalNetwork net(toy_cluster());
  const auto ranks = iota_ranks(0, 16);
  const double latency = kBaseS + 15 * kNvlinkHopS + 1 * kNicHopS;
  CHECK(net.collective_time_s(CollectiveOp::all_to_all, kGiB, ranks) == Approx(latency + 0.5 * kS / kNicBps));
}

TEST_CASE("intra-node collectives are faster than the same collective across nodes", "[network]") {
  AnalyticalNetwork net(toy_cluster());
  for (CollectiveOp op : {CollectiveOp::all_reduce, CollectiveOp::all_gather, CollectiveOp::reduce_scatter,
                          CollectiveOp::all_to_all, CollectiveOp::broadcast}) {
    for (std::int64_t bytes : {std::int64_t{1} << 10, std::int64_t{1} << 20, kGiB}) {
      CHECK(net.collective_time_s(op, bytes, iota_ranks(0, 8)) < net.collective_time_s(op, bytes, iota_ranks(0, 8, 8)));
    }
  }
}

TEST_CASE("the size ramp adds a fixed time to collectives with an NVLink phase only", "[network]") {
  // The ramp stands for NCCL's pipeline fill inside a node; a group with one rank per node has no
  // NVLink phase and does not pay it.
  AnalyticalNetwork plain(toy_cluster());
  AnalyticalNetwork ramped(toy_cluster(8, 100e-6));
  const auto node = iota_ranks(0, 8);
  const auto spread = iota_ranks(0, 4, 8);
  CHECK(ramped.collective_time_s(CollectiveOp::all_reduce, kGiB, node) -
            plain.collective_time_s(CollectiveOp::all_reduce, kGiB, node) ==
        Approx(100e-6));
  CHECK(ramped.collective_time_s(CollectiveOp::all_reduce, kGiB, spread) ==
        Approx(plain.collective_time_s(CollectiveOp::all_reduce, kGiB, spread)));
}

TEST_CASE("point-to-point: NVLink inside a node, one NIC between nodes", "[network]") {
  AnalyticalNetwork net(toy_cluster());
  CHECK(net.p2p_time_s(0, 7, kGiB) == Approx(kNvlinkHopS + kS / kNvlinkP2pBps));
  CHECK(net.p2p_time_s(7, 8, kGiB) == Approx(kNicHopS + kS / kNicBps));
  CHECK(net.p2p_time_s(3, 2, 0) == Approx(kNvlinkHopS));
}

TEST_CASE("start() calls back after the modeled duration", "[network]") {
  // The engine sees the same duration the closed form gives, rounded to a picosecond.
  AnalyticalNetwork net(toy_cluster());
  trainsim::engine::Simulation sim;
  const auto ranks = iota_ranks(0, 16);

  trainsim::engine::CommRequest coll;
  coll.kind = trainsim::engine::CommRequest::Kind::collective;
  coll.op = static_cast<std::uint16_t>(CollectiveOp::reduce_scatter);
  coll.bytes = kGiB;
  coll.ranks = ranks;
  trainsim::engine::CommRequest p2p;
  p2p.kind = trainsim::engine::CommRequest::Kind::p2p;
  p2p.bytes = std::int64_t{1} << 20;
  p2p.src = 1;
  p2p.dst = 9;

  trainsim::engine::Time coll_done = trainsim::engine::Time::max();
  trainsim::engine::Time p2p_done = trainsim::engine::Time::max();
  net.start(coll, sim, [&sim, &coll_done] { coll_done = sim.now(); });
  net.start(p2p, sim, [&sim, &p2p_done] { p2p_done = sim.now(); });
  sim.run();
  CHECK(coll_done ==
        trainsim::engine::Time::from_seconds(net.collective_time_s(CollectiveOp::reduce_scatter, kGiB, ranks)));
  CHECK(p2p_done == trainsim::engine::Time::from_seconds(net.p2p_time_s(1, 9, std::int64_t{1} << 20)));
}
