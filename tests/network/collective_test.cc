#include <catch2/catch.hpp>

#include "network/collective.h"

using trainsim::network::busbw_factor;
using trainsim::network::collective_from_string;
using trainsim::network::CollectiveOp;
using trainsim::network::to_string;

TEST_CASE("collective names round-trip and unknown names are rejected", "[network]") {
  // Every op has one snake_case name, the one scenario and trace files use.
  for (CollectiveOp op : {CollectiveOp::all_reduce, CollectiveOp::all_gather, CollectiveOp::reduce_scatter,
                          CollectiveOp::all_to_all, CollectiveOp::broadcast}) {
    REQUIRE(collective_from_string(to_string(op)) == op);
  }
  CHECK(to_string(CollectiveOp::all_reduce) == "all_reduce");
  CHECK(to_string(CollectiveOp::reduce_scatter) == "reduce_scatter");
  CHECK_FALSE(collective_from_string("allreduce").has_value());
  CHECK_FALSE(collective_from_string("").has_value());
}

TEST_CASE("bus-bandwidth factors are those of nccl-tests", "[network]") {
  // nccl-tests: busbw = algbw * 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and
  // all-to-all, 1 for broadcast (ecosystem.md §3.3).
  CHECK(busbw_factor(CollectiveOp::all_reduce, 8) == Approx(1.75));
  CHECK(busbw_factor(CollectiveOp::all_reduce, 2) == Approx(1.0));
  CHECK(busbw_factor(CollectiveOp::all_gather, 8) == Approx(0.875));
  CHECK(busbw_factor(CollectiveOp::reduce_scatter, 4) == Approx(0.75));
  CHECK(busbw_factor(CollectiveOp::all_to_all, 16) == Approx(15.0 / 16.0));
  CHECK(busbw_factor(CollectiveOp::broadcast, 8) == Approx(1.0));
  CHECK(busbw_factor(CollectiveOp::all_reduce, 1) == Approx(0.0));
}
