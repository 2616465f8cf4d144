// The program executor: in-order streams with cross-stream dependencies, collectives that start
// only when every member arrives, eager point-to-point messages, memory and time accounting, and a
// clear error instead of a hang when ranks cannot finish.

#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "engine/executor.h"

using namespace trainsim::engine;

namespace {

// Every collective takes `collective_ps`, every message `p2p_ps`.
class FixedComm final : public CommModel {
 public:
  std::int64_t collective_ps = 5;
  std::int64_t p2p_ps = 4;
  std::vector<std::int64_t> starts;
  void start(const CommRequest& req, Simulation& sim, Callback done) override {
    starts.push_back(sim.now().ps());
    sim.after(Time::from_ps(req.kind == CommRequest::Kind::collective ? collective_ps : p2p_ps), std::move(done));
  }
};

constexpr std::uint8_t kCompute = 0, kComm = 1, kSend = 2, kRecv = 3;

Task compute(Program& p, std::int64_t ps, const char* name = "op") {
  Task t;
  t.stream = kCompute;
  t.duration = Time::from_ps(ps);
  t.label = p.label(name);
  return t;
}

Task collective(Program& p, const char* name = "all_reduce") {
  Task t;
  t.stream = kComm;
  t.kind = TaskKind::collective;
  t.slot = 0;
  t.op = 1;
  t.bytes = 100;
  t.label = p.label(name);
  return t;
}

// Buckets: 0 idle, 1 compute busy, 2 only communication busy.
Executor::BucketMap buckets() {
  Executor::BucketMap m{};
  for (std::size_t mask = 0; mask < m.size(); ++mask) m[mask] = mask == 0 ? 0 : (mask & 1u) ? 1 : 2;
  return m;
}

// One rank whose group slot 0 is a data-parallel group of itself alone.
struct OneRank {
  std::vector<Binding> bindings = std::vector<Binding>(1);
  GroupTable groups;
  OneRank() {
    std::vector<std::uint32_t> members{0};
    bindings[0].group[0] = groups.add(members, groups.kind_id("dp"));
  }
};

}  // namespace

TEST_CASE("tasks on one stream run back to back") {
  std::vector<Program> programs(1);
  programs[0].add(compute(programs[0], 10));
  programs[0].add(compute(programs[0], 20));
  std::vector<Binding> bindings(1);
  GroupTable groups;
  Simulation sim;
  FixedComm comm;
  Executor ex(sim, comm, programs, bindings, groups, buckets());
  CHECK(ex.run() == Time::from_ps(30));
  CHECK(ex.stats(0).bucket_time[1] == Time::from_ps(30));
}

TEST_CASE("a task waits for its cross-stream dependency, and a collective for every member") {
  // Rank 0 computes 10 ps, rank 1 computes 30 ps; each then all-reduces (5 ps) after its compute.
  // The collective starts at 30 when the slower rank arrives, so both finish at 35 and rank 0
  // idles from 10 to 30.
  std::vector<Program> programs(2);
  for (int r = 0; r < 2; ++r) {
    Program& p = programs[static_cast<std::size_t>(r)];
    Dep c = p.add(compute(p, r == 0 ? 10 : 30));
    p.add(collective(p), {c});
  }
  std::vector<Binding> bindings(2);
  GroupTable groups;
  std::vector<std::uint32_t> members{0, 1};
  const auto g = groups.add(members, groups.kind_id("dp"));
  for (std::uint32_t r = 0; r < 2; ++r) {
    bindings[r].program = r;
    bindings[r].group[0] = g;
  }
  Simulation sim;
  FixedComm comm;
  Executor ex(sim, comm, programs, bindings, groups, buckets());
  CHECK(ex.run() == Time::from_ps(35));
  CHECK(comm.starts == std::vector<std::int64_t>{30});
  CHECK(ex.stats(0).bucket_time[0] == Time::from_ps(20));  // waiting for rank 1
  CHECK(ex.stats(0).bucket_time[2] == Time::from_ps(5));   // exposed communication
  CHECK(ex.stats(1).bucket_time[1] == Time::from_ps(30));
}

TEST_CASE("a task may wait for more tasks than a dependency count holds: each stream's latest is kept") {
  // 70,000 collectives of 5 ps each on the comm stream (each after nothing: they run back to back,
  // done at 350,000 ps) and a compute task that waits for all of them: more than the 16-bit count a
  // task stores, which is fine because a stream finishes in order (found by tools/fuzz-scenarios: a
  // step with 8192 micro-batches under zero 2 waits for one gradient reduce-scatter of each). Its
  // dependencies keep one per stream, the latest, so it starts at 350,000 and ends 10 ps later.
  constexpr std::uint32_t kMany = 70000;
  std::vector<Program> programs(1);
  Program& p = programs[0];
  std::vector<Dep> deps;
  for (std::uint32_t i = 0; i < kMany; ++i) deps.push_back(p.add(collective(p)));
  std::reverse(deps.begin(), deps.end());  // the latest need not come last
  Dep c = p.add(compute(p, 10), deps);
  CHECK(p.deps(p.task(c)).size() == 1);
  CHECK(p.deps(p.task(c))[0].position == kMany - 1);
  OneRank one;
  Simulation sim;
  FixedComm comm;
  Executor ex(sim, comm, programs, one.bindings, one.groups, buckets());
  CHECK(ex.run() == Time::from_ps(5 * kMany + 10));
}

TEST_CASE("communication overlapped with compute is not exposed") {
  // Compute A (10) then B (10); the collective depends only on A, so it runs during B.
  std::vector<Program> programs(1);
  Program& p = programs[0];
  Dep a = p.add(compute(p, 10));
  p.add(compute(p, 10));
  p.add(collective(p), {a});
  OneRank one;
  Simulation sim;
  FixedComm comm;
  Executor ex(sim, comm, programs, one.bindings, one.groups, buckets());
  CHECK(ex.run() == Time::from_ps(20));
  CHECK(ex.stats(0).bucket_time[1] == Time::from_ps(20));
  CHECK(ex.stats(0).bucket_time[2] == Time::from_ps(0));
  CHECK(ex.stats(0).stream_busy[kComm] == Time::from_ps(5));
}

TEST_CASE("overlapped communication slows the compute it overlaps by the slowdown fraction") {
  // Compute A (10 ps) then B (100 ps); a collective of 20 ps after A runs from 10 to 30, beside B.
  // With a slowdown of 0.2, B progresses at 0.8 while the collective runs: 20 ps of wall time do 16
  // ps of B's work, and the other 84 ps run at full speed from 30, so B ends at 114, not 110.
  auto build = [](std::vector<Program>& programs) {
    Program& p = programs[0];
    Dep a = p.add(compute(p, 10));
    p.add(compute(p, 100));
    p.add(collective(p), {a});
  };
  OneRank one;
  for (const double fraction : {0.0, 0.2}) {
    std::vector<Program> programs(1);
    build(programs);
    Simulation sim;
    FixedComm comm;
    comm.collective_ps = 20;
    Executor ex(sim, comm, programs, one.bindings, one.groups, buckets());
    ex.set_compute_slowdown({fraction, 1u << kCompute, 1u << kComm});
    CHECK(ex.run() == Time::from_ps(fraction == 0 ? 110 : 114));
    CHECK(ex.stats(0).stream_busy[kCompute] == Time::from_ps(fraction == 0 ? 110 : 114));
  }
  // Communication that does not overlap compute (exposed) slows nothing: A, then the collective
  // alone, then B after it.
  std::vector<Program> programs(1);
  Program& p = programs[0];
  Dep a = p.add(compute(p, 10));
  Dep c = p.add(collective(p), {a});
  p.add(compute(p, 100), {c});
  Simulation sim;
  FixedComm comm;
  comm.collective_ps = 20;
  Executor ex(sim, comm, programs, one.bindings, one.groups, buckets());
  ex.set_compute_slowdown({0.5, 1u << kCompute, 1u << kComm});
  CHECK(ex.run() == Time::from_ps(130));
}

TEST_CASE("a message sent after compute releases the receiver's recv when it lands") {
  // Rank 0: compute 10, send (4). Rank 1: recv, then compute 5 -> finishes at 10 + 4 + 5 = 19.
  std::vector<Program> programs(2);
  {
    Program& p = programs[0];
    Dep c = p.add(compute(p, 10));
    Task s;
    s.stream = kSend;
    s.kind = TaskKind::send;
    s.slot = 1;
    s.bytes = 64;
    s.label = p.label("send");
    p.add(s, {c});
  }
  {
    Program& p = programs[1];
    Task r;
    r.stream = kRecv;
    r.kind = TaskKind::recv;
    r.slot = 0;
    r.label = p.label("recv");
    Dep got = p.add(r);
    p.add(compute(p, 5), {got});
  }
  std::vector<Binding> bindings(2);
  bindings[0].program = 0;
  bindings[0].peer[1] = 1;
  bindings[1].program = 1;
  bindings[1].peer[0] = 0;
  GroupTable groups;
  Simulation sim;
  FixedComm comm;
  Executor ex(sim, comm, programs, bindings, groups, buckets());
  CHECK(ex.run() == Time::from_ps(19));
  CHECK(ex.stats(1).bucket_time[0] == Time::from_ps(14));
}

TEST_CASE("memory is allocated at task start and freed at task end; the peak is read off the timeline") {
  // Forward A allocates 100 (kept), forward B allocates 50 (kept); backward B frees 50, backward A
  // frees 100. Static weights 1000 from time zero. Peak 1150 at t=10 when B starts.
  std::vector<Program> programs(1);
  Program& p = programs[0];
  p.initial_mem_bytes[0] = 1000;
  Task fa = compute(p, 10, "fwd_a");
  fa.mem_alloc_bytes = 100;
  fa.mem_category = 1;
  Task fb = compute(p, 10, "fwd_b");
  fb.mem_alloc_bytes = 50;
  fb.mem_category = 1;
  Task bb = compute(p, 10, "bwd_b");
  bb.mem_free_bytes = 50;
  bb.mem_category = 1;
  Task ba = compute(p, 10, "bwd_a");
  ba.mem_free_bytes = 100;
  ba.mem_category = 1;
  for (const Task& t : {fa, fb, bb, ba}) p.add(t);
  std::vector<Binding> bindings(1);
  GroupTable groups;
  Simulation sim;
  FixedComm comm;
  Executor ex(sim, comm, programs, bindings, groups, buckets());
  ex.run();
  const RankStats& s = ex.stats(0);
  CHECK(s.peak_bytes == 1150);
  CHECK(s.peak_time == Time::from_ps(10));
  CHECK(s.peak_breakdown_bytes[0] == 1000);
  CHECK(s.peak_breakdown_bytes[1] == 150);
  CHECK(s.mem_bytes[1] == 0);
}

TEST_CASE("a collective that one member never posts stops the run with the ranks and the op named") {
  std::vector<Program> programs(2);
  {
    Program& p = programs[0];
    Dep c = p.add(compute(p, 10));
    p.add(collective(p, "grad_all_reduce"), {c});
  }
  {
    Program& p = programs[1];
    p.add(compute(p, 10));
  }
  std::vector<Binding> bindings(2);
  GroupTable groups;
  std::vector<std::uint32_t> members{0, 1};
  const auto g = groups.add(members, groups.kind_id("dp"));
  bindings[0].group[0] = g;
  bindings[1].program = 1;
  bindings[1].group[0] = g;
  Simulation sim;
  FixedComm comm;
  Executor ex(sim, comm, programs, bindings, groups, buckets());
  REQUIRE_THROWS_WITH(ex.run(), Catch::Contains("deadlock") && Catch::Contains("ranks 0 wait in 'grad_all_reduce'") &&
                                    Catch::Contains("group dp#0") && Catch::Contains("ranks 1 never post"));
}

TEST_CASE("a recv whose message never comes is reported, not waited on forever") {
  std::vector<Program> programs(1);
  Program& p = programs[0];
  Task r;
  r.stream = kRecv;
  r.kind = TaskKind::recv;
  r.label = p.label("recv_forward");
  p.add(r);
  std::vector<Binding> bindings(1);
  bindings[0].peer[0] = 7;
  GroupTable groups;
  Simulation sim;
  FixedComm comm;
  Executor ex(sim, comm, programs, bindings, groups, buckets());
  REQUIRE_THROWS_WITH(ex.run(), Catch::Contains("rank 0 waits in 'recv_forward' for a message from rank 7"));
}

TEST_CASE("the same programs give the same timeline every time") {
  auto once = [] {
    std::vector<Program> programs(4);
    GroupTable groups;
    std::vector<std::uint32_t> members{0, 1, 2, 3};
    const auto g = groups.add(members, groups.kind_id("tp"));
    std::vector<Binding> bindings(4);
    for (std::uint32_t r = 0; r < 4; ++r) {
      Program& p = programs[r];
      for (int i = 0; i < 20; ++i) {
        Dep c = p.add(compute(p, 3 + (r * 7 + static_cast<unsigned>(i)) % 5));
        p.add(collective(p), {c});
      }
      bindings[r].program = r;
      bindings[r].group[0] = g;
    }
    Simulation sim;
    FixedComm comm;
    Executor ex(sim, comm, programs, bindings, groups, buckets());
    ex.run();
    return comm.starts;
  };
  CHECK(once() == once());
}
