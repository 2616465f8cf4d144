// The analytical network with a calibrated profile: collectives inside one NVLink domain take the
// measured times; groups across nodes and collectives the profile lacks keep the topology's model.

#include <catch2/catch.hpp>

#include <memory>
#include <numeric>
#include <vector>

#include "config/scenario.h"
#include "hardware/profile.h"
#include "network/analytical_network.h"

using namespace trainsim;

namespace {

// all_reduce over 8 GPUs measured at 1 MB in 100 us and 4 MB in 400 us.
std::shared_ptr<const hardware::GpuProfile> profile() {
  auto p = std::make_shared<hardware::GpuProfile>();
  p->file = "p.json";
  hardware::CollectiveSeries s;
  s.op = "all_reduce";
  s.gpus = 8;
  s.points = {{1e6, 100e-6, "unknown"}, {4e6, 400e-6, "unknown"}};
  s.fit = {1e10, 0, 0};
  p->collectives.push_back(s);
  return p;
}

std::vector<std::uint32_t> ranks(std::uint32_t n) {
  std::vector<std::uint32_t> r(n);
  std::iota(r.begin(), r.end(), 0u);
  return r;
}

}  // namespace

TEST_CASE("a profile times the collectives it measured inside one node", "[profile][network]") {
  // 2 MB is halfway between 1 and 4 MB in log bytes: sqrt(100 us * 400 us) = 200 us, whatever the
  // topology's NVLink figures say.
  network::ClusterSpec plain = config::load_cluster("dgx-h200", TRAINSIM_SOURCE_DIR, "test");
  network::ClusterSpec calibrated = plain;
  calibrated.gpu.profile = profile();
  const network::AnalyticalNetwork a(plain), b(calibrated);
  const auto eight = ranks(8), sixteen = ranks(16), four = ranks(4);
  CHECK(b.collective_time_s(network::CollectiveOp::all_reduce, 2'000'000, eight) == Approx(200e-6));
  CHECK(a.collective_time_s(network::CollectiveOp::all_reduce, 2'000'000, eight) != Approx(200e-6));
  // Not measured: 4 GPUs, all-gather, two nodes.
  CHECK(b.collective_time_s(network::CollectiveOp::all_reduce, 2'000'000, four) ==
        a.collective_time_s(network::CollectiveOp::all_reduce, 2'000'000, four));
  CHECK(b.collective_time_s(network::CollectiveOp::all_gather, 2'000'000, eight) ==
        a.collective_time_s(network::CollectiveOp::all_gather, 2'000'000, eight));
  CHECK(b.collective_time_s(network::CollectiveOp::all_reduce, 2'000'000, sixteen) ==
        a.collective_time_s(network::CollectiveOp::all_reduce, 2'000'000, sixteen));
}
