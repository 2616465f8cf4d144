// The event kernel: events run in (time, insertion) order, the clock follows them, and callbacks
// are stored inline.

#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "engine/simulation.h"

using trainsim::engine::Simulation;
using trainsim::engine::Time;

TEST_CASE("events run in time order, and equal times in the order they were scheduled") {
  Simulation sim;
  std::vector<std::string> order;
  sim.at(Time::from_ps(5), [&order] { order.push_back("a@5"); });
  sim.at(Time::from_ps(3), [&order] { order.push_back("b@3"); });
  sim.at(Time::from_ps(5), [&order] { order.push_back("c@5"); });
  sim.at(Time::from_ps(0), [&order] { order.push_back("d@0"); });
  CHECK(sim.run() == 4);
  CHECK(order == std::vector<std::string>{"d@0", "b@3", "a@5", "c@5"});
  CHECK(sim.now() == Time::from_ps(5));
}

TEST_CASE("a callback may schedule more events, relative to the current time") {
  Simulation sim;
  std::vector<std::int64_t> times;
  sim.at(Time::from_ps(10), [&] {
    times.push_back(sim.now().ps());
    sim.after(Time::from_ps(7), [&] { times.push_back(sim.now().ps()); });
    sim.after(Time::from_ps(0), [&] { times.push_back(sim.now().ps()); });
  });
  sim.run();
  CHECK(times == std::vector<std::int64_t>{10, 10, 17});
}

TEST_CASE("many interleaved events come out sorted and stable (heap order is total)") {
  Simulation sim;
  std::vector<std::pair<std::int64_t, int>> seen;
  // Times cycle through 0..9; the insertion index breaks ties, so the output is fully determined.
  for (int i = 0; i < 1000; ++i) {
    const std::int64_t t = (i * 7) % 10;
    sim.at(Time::from_ps(t), [&seen, t, i] { seen.emplace_back(t, i); });
  }
  sim.run();
  REQUIRE(seen.size() == 1000);
  for (std::size_t k = 1; k < seen.size(); ++k) CHECK(seen[k - 1] < seen[k]);
}

TEST_CASE("time converts from seconds to picoseconds by rounding") {
  CHECK(Time::from_seconds(1.5e-6).ps() == 1'500'000);
  CHECK(Time::from_seconds(32.0).seconds() == Approx(32.0));
  CHECK(Time::from_seconds(-1.0).ps() == 0);
  // Past int64 picoseconds (about 106 days): an error, not a wrapped negative time.
  CHECK_THROWS_AS(Time::from_seconds(1e7), std::range_error);
  CHECK(Time::from_seconds(9e6).seconds() == Approx(9e6));
  Simulation sim;
  sim.after(Time::from_seconds(9e6), [] {});
  sim.run();
  CHECK_THROWS_AS(sim.after(Time::from_seconds(9e6), [] {}), std::range_error);
}
