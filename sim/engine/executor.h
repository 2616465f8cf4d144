#pragma once
// Runs every rank's Program on a Simulation. Each rank has in-order streams; a task starts when it
// is at the head of its stream and its cross-stream dependencies have completed. A collective
// starts when every member of its group has reached it; a send delivers a message that the peer's
// matching recv consumes. Time is accounted per rank by which streams are busy (a caller-supplied
// map from busy-stream mask to bucket), and memory per rank by category, so peaks and exposed
// communication are read off the simulated timeline.
//
// If ranks cannot finish (a collective some members never post, a recv nobody sends), run() throws
// RunError naming the ranks and the operations they wait in.

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/comm_model.h"
#include "engine/program.h"
#include "engine/simulation.h"

namespace trainsim::engine {

class RunError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Optional hook for traces: called when a task ends, with its start and end time.
class Observer {
 public:
  virtual ~Observer() = default;
  virtual void on_task(std::uint32_t rank, const Program& program, const Task& task, Time start, Time end) = 0;
};

struct RankStats {
  Time finish;                                              // when its last task ended
  std::array<Time, kMaxBuckets> bucket_time{};              // time per accounting bucket up to the global end
  std::array<Time, kMaxStreams> stream_busy{};              // time each stream was running a task
  std::array<std::int64_t, kMaxMemCategories> mem_bytes{};  // at the end of the run
  std::int64_t peak_bytes = 0;
  Time peak_time;
  std::array<std::int64_t, kMaxMemCategories> peak_breakdown_bytes{};
};

// Overlapped communication slowing compute (DESIGN.md, "Overlap"): while any stream of `slowing`
// runs a task on a rank (NCCL kernels holding SMs and memory bandwidth), the compute tasks of the
// rank's `slowed` streams progress at 1 - fraction of their speed; the rest of the time at full
// speed. fraction 0 (the default) leaves every task its own duration.
struct ComputeSlowdown {
  double fraction = 0;
  StreamMask slowed = 0;
  StreamMask slowing = 0;
};

class Executor {
 public:
  using BucketMap = std::array<std::uint8_t, 1u << kMaxStreams>;

  Executor(Simulation& sim, CommModel& comm, const std::vector<Program>& programs, const std::vector<Binding>& bindings,
           const GroupTable& groups, BucketMap buckets);

  void set_observer(Observer* observer) { observer_ = observer; }
  // Before run(): fraction in [0, 1).
  void set_compute_slowdown(const ComputeSlowdown& slowdown);
  // Runs all ranks to completion. Returns the time the last rank finished.
  Time run();
  const RankStats& stats(std::uint32_t rank) const { return stats_[rank]; }
  std::size_t rank_count() const { return bindings_.size(); }
  std::uint64_t events() const { return events_; }

 private:
  struct RankState {
    std::array<std::uint32_t, kMaxStreams> next{};  // head position == tasks completed
    std::array<Time, kMaxStreams> started{};
    std::array<std::uint32_t, kMaxSlots> delivered{};
    std::array<std::uint32_t, kMaxSlots> consumed{};
    StreamMask occupied = 0;  // head task has been started (running, or waiting in a collective)
    StreamMask pending = 0;   // streams with tasks left
    StreamMask busy = 0;      // head task is running
    Time last_change;
    std::int64_t mem_total = 0;
    // Compute slowdown: each slowed stream's running task, its work left (picoseconds at full
    // speed) as of `progress_at`, and the generation of its scheduled end (a stale end is ignored).
    std::array<std::int64_t, kMaxStreams> work_left{};
    std::array<Time, kMaxStreams> progress_at{};
    std::array<std::uint32_t, kMaxStreams> generation{};
  };
  struct GroupState {
    std::uint32_t arrived = 0;
    std::uint8_t stream = 0;
    std::uint16_t op = 0;
    std::int64_t bytes = 0;
    std::uint32_t first_rank = kNone;
    bool in_flight = false;
  };

  const Program& program_of(std::uint32_t rank) const { return programs_[bindings_[rank].program]; }
  std::uint32_t cluster_rank(std::uint32_t rank) const {
    return bindings_[rank].cluster_rank == kNone ? rank : bindings_[rank].cluster_rank;
  }
  void pump(std::uint32_t rank);
  bool try_start(std::uint32_t rank, int stream);
  void set_busy(std::uint32_t rank, StreamMask busy);
  bool slowed_now(std::uint32_t rank) const;
  void schedule_compute_end(std::uint32_t rank, int stream);
  void rescale_compute(std::uint32_t rank, bool was_slowed);
  void begin(std::uint32_t rank, int stream, const Task& task);
  void finish(std::uint32_t rank, int stream, bool then_pump = true);
  void arrive(std::uint32_t rank, int stream, const Task& task);
  void finish_collective(std::uint32_t group);
  void deliver(std::uint32_t from, std::uint8_t slot, std::uint32_t to);
  void change_mem(std::uint32_t rank, std::uint8_t category, std::int64_t delta);
  [[noreturn]] void report_deadlock() const;

  Simulation& sim_;
  CommModel& comm_;
  const std::vector<Program>& programs_;
  const std::vector<Binding>& bindings_;
  const GroupTable& groups_;
  BucketMap buckets_;
  Observer* observer_ = nullptr;
  ComputeSlowdown slowdown_;
  std::vector<RankState> ranks_;
  std::vector<RankStats> stats_;
  std::vector<GroupState> group_state_;
  std::uint64_t events_ = 0;
};

}  // namespace trainsim::engine
