#pragma once
// The discrete-event kernel: a clock and a queue of callbacks ordered by (time, sequence number).
// Equal times run in the order they were scheduled, so a run is deterministic. The kernel knows
// nothing of GPUs or transformers; models schedule callbacks on it.

#include <cstdint>
#include <vector>

#include "engine/callback.h"
#include "engine/time.h"

namespace trainsim::engine {

class Simulation {
 public:
  Time now() const { return now_; }
  // Schedules `cb` at absolute time `at` (not before now()).
  void at(Time at, Callback cb);
  void after(Time delay, Callback cb) { at(now_ + delay, std::move(cb)); }
  // Runs events until the queue is empty. Returns the number of events run.
  std::uint64_t run();
  std::size_t pending() const { return heap_.size(); }

 private:
  struct Event {
    Time time;
    std::uint64_t seq;
    Callback cb;
  };
  static bool later(const Event& a, const Event& b) {
    return a.time != b.time ? a.time > b.time : a.seq > b.seq;
  }
  void sift_up(std::size_t i);
  void sift_down(std::size_t i);

  Time now_;
  std::uint64_t next_seq_ = 0;
  std::vector<Event> heap_;
};

}  // namespace trainsim::engine
