#include "engine/executor.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include <fmt/format.h>

#include "util/error.h"

namespace trainsim::engine {

Executor::Executor(Simulation& sim, CommModel& comm, const std::vector<Program>& programs,
                   const std::vector<Binding>& bindings, const GroupTable& groups, BucketMap buckets)
    : sim_(sim),
      comm_(comm),
      programs_(programs),
      bindings_(bindings),
      groups_(groups),
      buckets_(buckets),
      ranks_(bindings.size()),
      stats_(bindings.size()),
      group_state_(groups.size()) {
  for (auto b : buckets_) TRAINSIM_ASSERT(b < kMaxBuckets);
  for (const Binding& b : bindings_) TRAINSIM_ASSERT(b.program < programs_.size());
}

void Executor::set_compute_slowdown(const ComputeSlowdown& slowdown) {
  TRAINSIM_ASSERT(slowdown.fraction >= 0 && slowdown.fraction < 1);
  slowdown_ = slowdown;
}

bool Executor::slowed_now(std::uint32_t rank) const {
  return slowdown_.fraction > 0 && (ranks_[rank].busy & slowdown_.slowing) != 0;
}

// Schedules the end of the compute task running on `stream` from its work left at the current speed.
void Executor::schedule_compute_end(std::uint32_t rank, int stream) {
  RankState& st = ranks_[rank];
  const auto si = static_cast<std::size_t>(stream);
  const std::int64_t left = st.work_left[si];
  const std::int64_t wall =
      slowed_now(rank) ? static_cast<std::int64_t>(std::ceil(static_cast<double>(left) / (1 - slowdown_.fraction)))
                       : left;
  st.progress_at[si] = sim_.now();
  const std::uint32_t gen = ++st.generation[si];
  sim_.after(Time::from_ps(wall), [this, rank, stream, gen] {
    if (ranks_[rank].generation[static_cast<std::size_t>(stream)] == gen) finish(rank, stream);
  });
}

// The rank's communication started or stopped: each running slowed task's progress so far at the
// old speed, and its end again at the new one.
void Executor::rescale_compute(std::uint32_t rank, bool was_slowed) {
  RankState& st = ranks_[rank];
  const double speed = was_slowed ? 1 - slowdown_.fraction : 1.0;
  for (unsigned m = st.busy & slowdown_.slowed; m != 0; m &= m - 1) {
    const int stream = std::countr_zero(m);
    const auto si = static_cast<std::size_t>(stream);
    const std::int64_t done =
        static_cast<std::int64_t>(std::floor(static_cast<double>((sim_.now() - st.progress_at[si]).ps()) * speed));
    st.work_left[si] = std::max<std::int64_t>(0, st.work_left[si] - done);
    schedule_compute_end(rank, stream);
  }
}

Time Executor::run() {
  const auto n = static_cast<std::uint32_t>(bindings_.size());
  for (std::uint32_t r = 0; r < n; ++r) {
    const Program& p = program_of(r);
    for (int c = 0; c < kMaxMemCategories; ++c)
      change_mem(r, static_cast<std::uint8_t>(c), p.initial_mem_bytes[static_cast<std::size_t>(c)]);
    for (int s = 0; s < kMaxStreams; ++s)
      if (!p.stream(s).empty()) ranks_[r].pending = static_cast<StreamMask>(ranks_[r].pending | (1u << s));
  }
  for (std::uint32_t r = 0; r < n; ++r) pump(r);
  events_ = sim_.run();

  Time end;
  for (std::uint32_t r = 0; r < n; ++r) {
    const Program& p = program_of(r);
    for (int s = 0; s < kMaxStreams; ++s)
      if (ranks_[r].next[static_cast<std::size_t>(s)] < p.stream(s).size()) report_deadlock();
    end = std::max(end, stats_[r].finish);
  }
  // Close every rank's accounting at the global end: a rank that finished early idles until then.
  for (std::uint32_t r = 0; r < n; ++r) {
    RankState& st = ranks_[r];
    stats_[r].bucket_time[buckets_[st.busy]] += end - st.last_change;
    st.last_change = end;
  }
  return end;
}

void Executor::pump(std::uint32_t rank) {
  // Starting a task can complete others at once (a recv whose message is there); loop until quiet.
  // Each pass tries the streams in order, skipping those whose head is started or that have no
  // task left (try_start would refuse them: only a stream's own turn changes either).
  const RankState& st = ranks_[rank];
  bool progress = true;
  while (progress) {
    progress = false;
    for (unsigned m = st.pending & ~st.occupied; m != 0; m &= m - 1)
      progress = try_start(rank, std::countr_zero(m)) || progress;
  }
}

bool Executor::try_start(std::uint32_t rank, int stream) {
  RankState& st = ranks_[rank];
  const auto bit = static_cast<StreamMask>(1u << stream);
  if (st.occupied & bit) return false;
  const Program& p = program_of(rank);
  auto tasks = p.stream(stream);
  const std::uint32_t pos = st.next[static_cast<std::size_t>(stream)];
  if (pos >= tasks.size()) return false;
  const Task& task = tasks[pos];
  for (const Dep& d : p.deps(task))
    if (st.next[d.stream] <= d.position) return false;

  switch (task.kind) {
    case TaskKind::compute:
      begin(rank, stream, task);
      if (task.duration.ps() == 0) {
        finish(rank, stream, /*then_pump=*/false);
        return true;
      }
      if (slowdown_.fraction > 0 && (slowdown_.slowed & (1u << stream)) != 0) {
        ranks_[rank].work_left[static_cast<std::size_t>(stream)] = task.duration.ps();
        schedule_compute_end(rank, stream);
        return false;
      }
      sim_.after(task.duration, [this, rank, stream] { finish(rank, stream); });
      return false;
    case TaskKind::recv: {
      const std::uint8_t slot = task.slot;
      if (st.delivered[slot] <= st.consumed[slot]) return false;  // message not here yet
      ++st.consumed[slot];
      begin(rank, stream, task);
      finish(rank, stream, /*then_pump=*/false);
      return true;
    }
    case TaskKind::send: {
      const std::uint32_t peer = bindings_[rank].peer[task.slot];
      TRAINSIM_ASSERT(peer != kNone);
      begin(rank, stream, task);
      CommRequest req;
      req.kind = CommRequest::Kind::p2p;
      req.bytes = task.bytes;
      req.src = cluster_rank(rank);
      req.dst = cluster_rank(peer);
      const std::uint8_t slot = task.slot;
      comm_.start(req, sim_, [this, rank, stream, peer, slot] {
        finish(rank, stream);
        deliver(rank, slot, peer);
      });
      return false;
    }
    case TaskKind::collective:
      arrive(rank, stream, task);
      return false;
  }
  return false;
}

void Executor::set_busy(std::uint32_t rank, StreamMask busy) {
  RankState& st = ranks_[rank];
  const Time now = sim_.now();
  stats_[rank].bucket_time[buckets_[st.busy]] += now - st.last_change;
  st.last_change = now;
  const bool was_slowed = slowed_now(rank);
  st.busy = busy;
  if (slowdown_.fraction > 0 && was_slowed != slowed_now(rank)) rescale_compute(rank, was_slowed);
}

void Executor::begin(std::uint32_t rank, int stream, const Task& task) {
  RankState& st = ranks_[rank];
  const auto bit = static_cast<StreamMask>(1u << stream);
  st.occupied |= bit;
  st.started[static_cast<std::size_t>(stream)] = sim_.now();
  set_busy(rank, static_cast<StreamMask>(st.busy | bit));
  if (task.mem_alloc_bytes != 0) change_mem(rank, task.mem_category, task.mem_alloc_bytes);
}

void Executor::finish(std::uint32_t rank, int stream, bool then_pump) {
  RankState& st = ranks_[rank];
  const auto bit = static_cast<StreamMask>(1u << stream);
  const Program& p = program_of(rank);
  const auto si = static_cast<std::size_t>(stream);
  const Task& task = p.stream(stream)[st.next[si]];
  if (task.mem_free_bytes != 0) change_mem(rank, task.mem_category, -task.mem_free_bytes);
  const Time start = st.started[si];
  stats_[rank].stream_busy[si] += sim_.now() - start;
  set_busy(rank, static_cast<StreamMask>(st.busy & ~bit));
  st.occupied = static_cast<StreamMask>(st.occupied & ~bit);
  if (++st.next[si] == p.stream(stream).size()) st.pending = static_cast<StreamMask>(st.pending & ~bit);
  stats_[rank].finish = sim_.now();
  if (observer_) observer_->on_task(rank, p, task, start, sim_.now());
  if (then_pump) pump(rank);
}

void Executor::arrive(std::uint32_t rank, int stream, const Task& task) {
  RankState& st = ranks_[rank];
  st.occupied = static_cast<StreamMask>(st.occupied | (1u << stream));
  const std::uint32_t g = bindings_[rank].group[task.slot];
  TRAINSIM_ASSERT(g != kNone);
  GroupState& gs = group_state_[g];
  auto members = groups_.members(g);
  if (gs.in_flight)
    throw RunError(
        fmt::format("rank {} posted '{}' on group {}#{} while the group's previous collective was still running", rank,
                    program_of(rank).label_name(task.label), groups_.kind_name(g), groups_.index_in_kind(g)));
  if (gs.arrived == 0) {
    gs.stream = static_cast<std::uint8_t>(stream);
    gs.op = task.op;
    gs.bytes = task.bytes;
    gs.first_rank = rank;
  } else if (gs.op != task.op || gs.bytes != task.bytes) {
    throw RunError(fmt::format(
        "ranks {} and {} disagree on the collective of group {}#{}: op {} of {} bytes vs op {} of {} bytes",
        gs.first_rank, rank, groups_.kind_name(g), groups_.index_in_kind(g), gs.op, gs.bytes, task.op, task.bytes));
  }
  if (++gs.arrived < members.size()) return;

  gs.in_flight = true;
  for (std::uint32_t m : members) {
    const Task& t = program_of(m).stream(gs.stream)[ranks_[m].next[gs.stream]];
    begin(m, gs.stream, t);
  }
  CommRequest req;
  req.kind = CommRequest::Kind::collective;
  req.op = gs.op;
  req.bytes = gs.bytes;
  req.group = g;
  req.ranks = groups_.placement(g);
  comm_.start(req, sim_, [this, g] { finish_collective(g); });
}

void Executor::finish_collective(std::uint32_t group) {
  GroupState& gs = group_state_[group];
  const int stream = gs.stream;
  gs.arrived = 0;
  gs.in_flight = false;
  for (std::uint32_t m : groups_.members(group)) finish(m, stream);
}

void Executor::deliver(std::uint32_t from, std::uint8_t slot, std::uint32_t to) {
  // Peer slots come in pairs: what a rank sends on slot s arrives on the receiver's slot s ^ 1 (a
  // stage's "next" is its successor's "prev"), so two ranks that are each other's prev and next
  // (a two-stage ring) keep the directions apart.
  const std::uint8_t in = slot ^ 1u;
  if (bindings_[to].peer[in] != from)
    throw RunError(fmt::format("rank {} sent a message on slot {} to rank {}, whose slot {} is not rank {}", from, slot,
                               to, in, from));
  ++ranks_[to].delivered[in];
  pump(to);
}

void Executor::change_mem(std::uint32_t rank, std::uint8_t category, std::int64_t delta) {
  RankStats& s = stats_[rank];
  RankState& st = ranks_[rank];
  s.mem_bytes[category] += delta;
  st.mem_total += delta;
  if (st.mem_total > s.peak_bytes) {
    s.peak_bytes = st.mem_total;
    s.peak_time = sim_.now();
    s.peak_breakdown_bytes = s.mem_bytes;
  }
}

void Executor::report_deadlock() const {
  // Describe the first stuck operation: who waits, in what, and who never posted it.
  const auto n = static_cast<std::uint32_t>(bindings_.size());
  std::vector<std::string> lines;
  std::uint32_t stuck = 0;
  for (std::uint32_t r = 0; r < n; ++r) {
    const Program& p = program_of(r);
    for (int s = 0; s < kMaxStreams; ++s) {
      const std::uint32_t pos = ranks_[r].next[static_cast<std::size_t>(s)];
      if (pos < p.stream(s).size()) {
        ++stuck;
        break;
      }
    }
  }
  for (std::uint32_t r = 0; r < n && lines.empty(); ++r) {
    const Program& p = program_of(r);
    for (int s = 0; s < kMaxStreams && lines.empty(); ++s) {
      const std::uint32_t pos = ranks_[r].next[static_cast<std::size_t>(s)];
      if (pos >= p.stream(s).size()) continue;
      const Task& t = p.stream(s)[pos];
      if (!(ranks_[r].occupied & (1u << s))) {
        if (t.kind == TaskKind::recv) {
          lines.push_back(fmt::format("rank {} waits in '{}' for a message from rank {} that never arrives", r,
                                      p.label_name(t.label), bindings_[r].peer[t.slot]));
        }
        continue;
      }
      if (t.kind != TaskKind::collective) continue;
      const std::uint32_t g = bindings_[r].group[t.slot];
      std::vector<std::uint32_t> waiting, missing;
      for (std::uint32_t m : groups_.members(g)) {
        const auto& ms = ranks_[m];
        const bool arrived = (ms.occupied & (1u << s)) &&
                             ms.next[static_cast<std::size_t>(s)] < program_of(m).stream(s).size() &&
                             program_of(m).stream(s)[ms.next[static_cast<std::size_t>(s)]].kind == TaskKind::collective;
        (arrived ? waiting : missing).push_back(m);
      }
      auto list = [](const std::vector<std::uint32_t>& v) {
        std::string out;
        for (std::size_t i = 0; i < v.size() && i < 16; ++i) {
          if (i) out += ',';
          out += fmt::format("{}", v[i]);
        }
        if (v.size() > 16) out += fmt::format(",... ({} in all)", v.size());
        return out;
      };
      lines.push_back(fmt::format("ranks {} wait in '{}' on group {}#{}, which ranks {} never post", list(waiting),
                                  p.label_name(t.label), groups_.kind_name(g), groups_.index_in_kind(g),
                                  list(missing)));
    }
  }
  if (lines.empty()) lines.emplace_back("no operation can start");
  throw RunError(fmt::format("deadlock at t={:.6f} s with {} of {} ranks unfinished: {}", sim_.now().seconds(), stuck,
                             n, lines.front()));
}

}  // namespace trainsim::engine
