#include "engine/simulation.h"

#include <utility>

#include "util/error.h"

namespace trainsim::engine {

void Simulation::at(Time at, Callback cb) {
  TRAINSIM_ASSERT(at >= now_);
  heap_.push_back(Event{at, next_seq_++, std::move(cb)});
  sift_up(heap_.size() - 1);
}

void Simulation::sift_up(std::size_t i) {
  Event e = std::move(heap_[i]);
  while (i > 0) {
    std::size_t parent = (i - 1) / 2;
    if (!later(heap_[parent], e)) break;
    heap_[i] = std::move(heap_[parent]);
    i = parent;
  }
  heap_[i] = std::move(e);
}

void Simulation::sift_down(std::size_t i) {
  const std::size_t n = heap_.size();
  Event e = std::move(heap_[i]);
  for (;;) {
    std::size_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && later(heap_[child], heap_[child + 1])) ++child;
    if (!later(e, heap_[child])) break;
    heap_[i] = std::move(heap_[child]);
    i = child;
  }
  heap_[i] = std::move(e);
}

std::uint64_t Simulation::run() {
  std::uint64_t count = 0;
  while (!heap_.empty()) {
    Event top = std::move(heap_.front());
    if (heap_.size() > 1) {
      heap_.front() = std::move(heap_.back());
      heap_.pop_back();
      sift_down(0);
    } else {
      heap_.pop_back();
    }
    now_ = top.time;
    top.cb();
    ++count;
  }
  return count;
}

}  // namespace trainsim::engine
