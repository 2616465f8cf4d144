// `trainsim collective`'s sweep against published nccl-tests measurements (the targets:
// within 10% at >= 64 MiB) and its algorithm rules.

#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "network/cluster.h"
#include "network/sweep.h"
#include "util/error.h"
#include "util/json_node.h"

using namespace trainsim::network;

namespace {

ClusterSpec topology(const std::string& name) {
  std::ifstream in(std::string(TRAINSIM_SOURCE_DIR) + "/topologies/" + name + ".json");
  const auto doc = nlohmann::json::parse(in);
  return parse_cluster(trainsim::util::JsonNode(doc, name + ".json"));
}

SweepRow at(const std::vector<SweepRow>& rows, std::int64_t bytes) {
  for (const auto& r : rows)
    if (r.bytes == bytes) return r;
  FAIL("no row for " << bytes);
  return {};
}

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

}  // namespace

TEST_CASE("8x H100 all-reduce follows the published DGX H100 sweep within 10% from 64 MiB") {
  // NVIDIA/dgxc-benchmarking nccl/README.md, DGX H100, all_reduce busbw (GB/s), published-runs.md §9c.
  constexpr std::array<std::pair<std::int64_t, double>, 9> kMeasured{{{64 * kMiB, 361.67},
                                                                      {128 * kMiB, 400.53},
                                                                      {256 * kMiB, 422.25},
                                                                      {512 * kMiB, 436.79},
                                                                      {1024 * kMiB, 466.33},
                                                                      {2048 * kMiB, 473.37},
                                                                      {4096 * kMiB, 477.24},
                                                                      {8192 * kMiB, 480.16},
                                                                      {16384 * kMiB, 479.9}}};
  SweepRequest req;
  req.op = "all_reduce";
  const auto rows = collective_sweep(topology("dgx-h100"), 1024, req);
  CHECK(rows.front().bytes == kMiB);
  CHECK(rows.back().bytes == 16384 * kMiB);
  CHECK(rows.size() == 15);
  for (const auto& [bytes, busbw] : kMeasured) {
    INFO(bytes << " bytes");
    CHECK(at(rows, bytes).busbw_GBps == Approx(busbw).epsilon(0.10));
    CHECK(at(rows, bytes).algo == "nvls");
  }
  // nccl-tests' definitions: algbw = S/t, busbw = algbw * 2(n-1)/n.
  const SweepRow& r = rows.back();
  CHECK(r.algbw_GBps == Approx(static_cast<double>(r.bytes) / r.time_s / 1e9));
  CHECK(r.busbw_GBps == Approx(r.algbw_GBps * 2 * 7 / 8));
}

TEST_CASE("protocol choice: 8x H100 all-reduce from 1 MiB follows the DGX H100 sweep, LL then LL128 then NVLS") {
  // Below 64 MiB the size picks NCCL's protocol (tuning.cc, ecosystem.md §3.2): LL (6.6 + 14 x 0.6 =
  // 15 us, busbw min(141, 0.5 x 370) = 141 GB/s) for the smallest, LL128 (14 + 14 x 1.9 = 40.6 us,
  // 0.92 x 370 = 340.4 GB/s) in the middle, NVLS/Simple (its fitted 8.4 + 14 x 3.4 + 15 = 71 us,
  // 480 GB/s) for the largest. NVIDIA/dgxc-benchmarking nccl/README.md, DGX H100 (published-runs.md
  // §9c): 1 MiB 67.04, 2 MiB 86.94, 4 MiB 135.44, 8 MiB 176.77, 16 MiB 237.21, 32 MiB 294.69 GB/s.
  constexpr std::array<std::pair<std::int64_t, double>, 6> kMeasured{{{kMiB, 67.04},
                                                                      {2 * kMiB, 86.94},
                                                                      {4 * kMiB, 135.44},
                                                                      {8 * kMiB, 176.77},
                                                                      {16 * kMiB, 237.21},
                                                                      {32 * kMiB, 294.69}}};
  SweepRequest req;
  req.op = "all_reduce";
  req.max_bytes = 32 * kMiB;
  const auto rows = collective_sweep(topology("dgx-h100"), 1024, req);
  for (const auto& [bytes, busbw] : kMeasured) {
    INFO(bytes << " bytes: " << at(rows, bytes).busbw_GBps << " GB/s, " << at(rows, bytes).algo << "/"
               << at(rows, bytes).proto);
    // 4 MiB sits where LL hands over to LL128 and is 13% low; the rest within 5%.
    CHECK(at(rows, bytes).busbw_GBps == Approx(busbw).epsilon(bytes == 4 * kMiB ? 0.15 : 0.05));
  }
  // 1 MiB on LL by hand: t = 15 us + S / algbw, algbw = 141 GB/s x 8 / 14.
  const double t_ll = 15e-6 + static_cast<double>(kMiB) / (141e9 * 8.0 / 14.0);
  CHECK(at(rows, kMiB).time_s == Approx(t_ll));
  CHECK(at(rows, kMiB).proto == "LL");
  CHECK(at(rows, 8 * kMiB).proto == "LL128");
  CHECK(at(rows, 8 * kMiB).algo == "ring");
  CHECK(at(rows, 32 * kMiB).proto == "Simple");
  CHECK(at(rows, 32 * kMiB).algo == "nvls");
  // A DGX A100 runs LL128 (NCCL's default on NVLink + PXB NICs: topologies/dgx-a100.json): LL at
  // 1 MiB, LL128 from 4 to 128 MiB, Simple above. 16 MiB by hand: t = 14 + 14 x 1.9 = 40.6 us +
  // S / algbw, algbw = 0.92 x 231.6 GB/s x 8 / 14.
  const auto a100 = collective_sweep(topology("dgx-a100"), 1024, req);
  CHECK(at(a100, kMiB).proto == "LL");
  CHECK(at(a100, 4 * kMiB).proto == "LL128");
  CHECK(at(a100, 16 * kMiB).time_s == Approx(40.6e-6 + static_cast<double>(16 * kMiB) / (0.92 * 231.6e9 * 8 / 14)));
  // Azure's A100 sweep (published-runs.md §9c, NCCL_ALGO forced, no LL128 regime): without LL128 the
  // middle sizes fall to Simple, 1 MiB stays on LL (nccl-tests 36.22 GB/s; LL's 51 is the closer,
  // Simple's fitted ramp gives 10).
  ClusterSpec azure = topology("dgx-a100");
  azure.nvlink.ll128 = false;
  const auto no_ll128 = collective_sweep(azure, 1024, req);
  CHECK(at(no_ll128, kMiB).proto == "LL");
  CHECK(at(no_ll128, 8 * kMiB).proto != "LL128");
  CHECK(at(no_ll128, 32 * kMiB).proto == "Simple");
}

TEST_CASE("ring on 8 H100 ~370 GB/s, 8 A100 ~230 GB/s, one NDR NIC ~46-48 GB/s") {
  // ecosystem.md §3.4: H100 NCCL_ALGO=RING ~370 (sjeaugey, nccl-tests#212); A100 ~230
  // (nccl-tests#149); one ConnectX-7 NDR 46-48 (nccl-tests#290, #267).
  SweepRequest req;
  req.op = "all_reduce";
  req.min_bytes = req.max_bytes = 8192 * kMiB;
  req.algo = Algorithm::ring;
  CHECK(collective_sweep(topology("dgx-h100"), 1024, req).front().busbw_GBps == Approx(370).epsilon(0.10));
  req.algo = Algorithm::automatic;
  const auto a100 = collective_sweep(topology("dgx-a100"), 1024, req).front();
  CHECK(a100.busbw_GBps == Approx(230).epsilon(0.10));
  CHECK(a100.algo == "ring");  // no NVLS before Hopper
  // Point to point across two nodes: one NIC.
  req.op = "send_recv";
  req.gpus = 16;
  const auto nic = collective_sweep(topology("dgx-h100"), 1024, req).front();
  CHECK(nic.busbw_GBps > 46 * 0.9);
  CHECK(nic.busbw_GBps < 48 * 1.1);
  CHECK(nic.algo == "p2p");
}

TEST_CASE("algorithms: tree wins small multi-node all-reduces, ring large ones; impossible choices are errors") {
  // NCCL's tree latency grows with log2(nodes), the ring's with the ranks: on 64 H100 (8 nodes) a
  // 1 MiB all-reduce is faster on the tree; at 16 GiB the ring's bandwidth wins (the tree's best
  // protocol there, LL128, moves 120/128 of the ring's bus bandwidth: NCCL tuning.cc).
  SweepRequest req;
  req.op = "all_reduce";
  req.gpus = 64;
  req.min_bytes = req.max_bytes = kMiB;
  const auto h100 = topology("dgx-h100");
  auto time = [&](Algorithm a, std::int64_t bytes) {
    req.algo = a;
    req.min_bytes = req.max_bytes = bytes;
    return collective_sweep(h100, 1024, req).front().time_s;
  };
  CHECK(time(Algorithm::tree, kMiB) < time(Algorithm::ring, kMiB));
  CHECK(time(Algorithm::ring, 16384 * kMiB) < time(Algorithm::tree, 16384 * kMiB));
  CHECK(time(Algorithm::ring, 16384 * kMiB) / time(Algorithm::tree, 16384 * kMiB) ==
        Approx(120.0 / 128.0).epsilon(0.01));
  req.algo = Algorithm::nvls;  // NVLS is single-node
  CHECK_THROWS_AS(collective_sweep(h100, 1024, req), trainsim::util::InputError);
  req.gpus = 8;
  req.op = "all_to_all";
  CHECK_THROWS_AS(collective_sweep(h100, 1024, req), trainsim::util::InputError);
  req.algo = Algorithm::automatic;
  req.op = "broadcast";
  CHECK_THROWS_AS(collective_sweep(h100, 1024, req), trainsim::util::InputError);
  req.op = "all_reduce";
  req.gpus = 1;
  CHECK_THROWS_AS(collective_sweep(h100, 1024, req), trainsim::util::InputError);
}

TEST_CASE("the flow network on an idle fabric gives the analytical sweep for every algorithm (within 5%)") {
  for (Algorithm a : {Algorithm::automatic, Algorithm::ring, Algorithm::tree}) {
    SweepRequest req;
    req.op = "all_reduce";
    req.gpus = 32;
    req.algo = a;
    req.max_bytes = std::int64_t{1} << 30;
    const auto ana = collective_sweep(topology("dgx-h100"), 1024, req);
    req.flow = true;
    const auto flow = collective_sweep(topology("dgx-h100"), 1024, req);
    REQUIRE(flow.size() == ana.size());
    for (std::size_t i = 0; i < flow.size(); ++i) {
      INFO(to_string(a) << " " << flow[i].bytes);
      CHECK(flow[i].time_s == Approx(ana[i].time_s).epsilon(0.05));
      CHECK(flow[i].algo == ana[i].algo);
    }
  }
}
