// Max-min fair sharing, tested like physics: conservation (no link over capacity), symmetry (equal
// flows get equal shares), and the bottleneck rule (a flow limited elsewhere leaves its unused share).

#include <catch2/catch.hpp>

#include <array>
#include <vector>

#include "network/flow_solver.h"

using trainsim::network::FlowSolver;
using Link = FlowSolver::LinkId;

TEST_CASE("two flows on one link get half each; alone, a flow gets the whole link") {
  FlowSolver s({100e9});
  const std::array<Link, 1> path{0};
  const auto a = s.add(path);
  s.solve();
  CHECK(s.rate(a) == Approx(100e9));
  const auto b = s.add(path);
  const auto& changed = s.solve();
  CHECK(changed.size() == 2);  // a slowed down: both re-solved
  CHECK(s.rate(a) == Approx(50e9));
  CHECK(s.rate(b) == Approx(50e9));
  s.remove(a);
  s.solve();
  CHECK(s.rate(b) == Approx(100e9));  // the survivor takes the freed share
}

TEST_CASE("a flow limited elsewhere leaves its unused share to the others (the header's example)") {
  // A = 100, B = 30. Flow 1 on A; flows 2, 3 on A and B. B limits 2 and 3 to 15 each; flow 1 gets
  // the remaining 70 of A, not a third of it.
  FlowSolver s({100e9, 30e9});
  const std::array<Link, 1> a_only{0};
  const std::array<Link, 2> a_and_b{0, 1};
  const auto f1 = s.add(a_only);
  const auto f2 = s.add(a_and_b);
  const auto f3 = s.add(a_and_b);
  s.solve();
  CHECK(s.rate(f2) == Approx(15e9));
  CHECK(s.rate(f3) == Approx(15e9));
  CHECK(s.rate(f1) == Approx(70e9));
  CHECK(s.load(0) == Approx(100e9));  // A full
  CHECK(s.load(1) == Approx(30e9));   // B full
}

TEST_CASE("a flow's own cap works like a private bottleneck") {
  FlowSolver s({100e9});
  const std::array<Link, 1> path{0};
  const auto slow = s.add(path, 20e9);
  const auto fast = s.add(path);
  s.solve();
  CHECK(s.rate(slow) == Approx(20e9));
  CHECK(s.rate(fast) == Approx(80e9));
}

TEST_CASE("only the touched component is re-solved; others keep their rates") {
  FlowSolver s({10e9, 10e9});
  const std::array<Link, 1> l0{0}, l1{1};
  const auto x = s.add(l0);
  const auto y = s.add(l1);
  s.solve();
  const auto z = s.add(l1);
  const auto& changed = s.solve();
  CHECK(changed == std::vector<FlowSolver::FlowId>{y, z});  // x's link untouched
  CHECK(s.rate(x) == Approx(10e9));
  CHECK(s.rate(y) == Approx(5e9));
}

TEST_CASE("max-min on a parking lot: no link over capacity, every flow bottlenecked somewhere") {
  // Three links in a row (10, 20, 30 GB/s); a long flow crosses all, one short flow per link.
  // Link 0 splits 5 / 5; the long flow is then fixed at 5, so link 1's short flow gets 15 and link
  // 2's 25.
  FlowSolver s({10e9, 20e9, 30e9});
  const std::array<Link, 3> all{0, 1, 2};
  const std::array<Link, 1> l0{0}, l1{1}, l2{2};
  const auto lng = s.add(all);
  const auto s0 = s.add(l0), s1 = s.add(l1), s2 = s.add(l2);
  s.solve();
  CHECK(s.rate(lng) == Approx(5e9));
  CHECK(s.rate(s0) == Approx(5e9));
  CHECK(s.rate(s1) == Approx(15e9));
  CHECK(s.rate(s2) == Approx(25e9));
  for (Link l = 0; l < 3; ++l) CHECK(s.load(l) <= s.capacity(l) * (1 + 1e-12));
}

TEST_CASE("a flow listed twice on a link carries twice its rate there (a ring whose hops share it)") {
  // Link 0 = 90 GB/s. A ring flow crossing it twice and a plain flow: three shares of 30; the ring
  // moves at 30 and loads the link with 60, the plain flow gets 30. Alone the ring gets 45.
  FlowSolver s({90e9, 1000e9});
  const std::array<Link, 3> ring{0, 1, 0};
  const std::array<Link, 1> plain{0};
  const auto r = s.add(ring);
  s.solve();
  CHECK(s.rate(r) == Approx(45e9));
  const auto p = s.add(plain);
  s.solve();
  CHECK(s.rate(r) == Approx(30e9));
  CHECK(s.rate(p) == Approx(30e9));
  CHECK(s.load(0) == Approx(90e9));  // conservation with the multiplicity
  s.remove(r);
  s.solve();
  CHECK(s.rate(p) == Approx(90e9));
  CHECK(s.flows_on(0).size() == 1);
}

TEST_CASE("a flow with a count stands for that many flows of one rate on each link") {
  // Link 0 = 120 GB/s shared by a flow counted 3 times and a plain flow: four shares of 30. The
  // counted flow loads link 0 with 3 x 30 = 90 and link 1, where it is counted once, with 30.
  FlowSolver s({120e9, 1000e9, 20e9});
  const std::array<Link, 2> grouped{0, 1};
  const std::array<std::uint32_t, 2> three{3, 1};
  const std::array<Link, 1> plain{0};
  const auto g = s.add(grouped, three);
  const auto p = s.add(plain);
  s.solve();
  CHECK(s.rate(g) == Approx(30e9));
  CHECK(s.rate(p) == Approx(30e9));
  CHECK(s.load(0) == Approx(120e9));
  CHECK(s.load(1) == Approx(30e9));
  // Three equal flows over link 0 (each also over link 1) get what the counted flow's entries get.
  FlowSolver t({120e9, 1000e9, 20e9});
  const std::array<Link, 2> single{0, 1};
  for (int k = 0; k < 3; ++k) t.add(single);
  const auto q = t.add(plain);
  t.solve();
  CHECK(t.rate(q) == Approx(s.rate(p)));
  CHECK(t.load(0) == Approx(s.load(0)));
  // A count on the narrow link 2 (20 GB/s): it carries 2 x the rate, so the flow gets 10 and leaves
  // 110 of link 0 to the plain flow.
  FlowSolver u({120e9, 1000e9, 20e9});
  const std::array<Link, 2> narrow{0, 2};
  const std::array<std::uint32_t, 2> twice{1, 2};
  const auto n = u.add(narrow, twice);
  const auto m = u.add(plain);
  u.solve();
  CHECK(u.rate(n) == Approx(10e9));
  CHECK(u.rate(m) == Approx(110e9));
  CHECK(u.load(2) == Approx(20e9));
  u.remove(n);
  u.solve();
  CHECK(u.rate(m) == Approx(120e9));
  CHECK(u.load(2) == 0);
}
