#pragma once
// The discrete-event kernel: a clock and a queue of callbacks ordered by (time, sequence number).
// Equal times run in the order they were scheduled, so a run is deterministic. The kernel knows
// nothing of GPUs or transformers; models schedule callbacks on it.

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "engine/callback.h"
#include "engine/time.h"

namespace trainsim::engine {

class Simulation {
 public:
  Time now() const { return now_; }
  // Schedules `cb` at absolute time `at` (not before now()).
  void at(Time at, Callback cb);
  // Throws std::range_error when now + delay is past the range of Time.
  void after(Time delay, Callback cb) {
    if (delay > Time::max() - now_)
      throw std::range_error("the simulated step runs past the simulator's range of about 106 days");
    at(now_ + delay, std::move(cb));
  }
  // Runs events until the queue is empty. Returns the number of events run.
  std::uint64_t run();
  std::size_t pending() const { return heap_.size(); }

 private:
  // A 4-ary min-heap (shallower than binary, children share a cache line) of small trivially-copyable keys; callbacks
  // stay put in a slab and are moved once in and once out, so reordering the heap never touches them.
  struct Key {
    Time time;
    std::uint64_t seq;
    std::uint32_t slot;
  };
  static bool later(const Key& a, const Key& b) { return a.time != b.time ? a.time > b.time : a.seq > b.seq; }
  void sift_up(std::size_t i);
  void sift_down(std::size_t i);
  static constexpr std::size_t kArity = 4;

  Time now_;
  std::uint64_t next_seq_ = 0;
  std::vector<Key> heap_;
  std::vector<Callback> slots_;
  std::vector<std::uint32_t> free_slots_;
};

}  // namespace trainsim::engine
