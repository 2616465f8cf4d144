#include "engine/simulation.h"

#include <algorithm>
#include <utility>

#include "util/error.h"

namespace trainsim::engine {

void Simulation::at(Time at, Callback cb) {
  TRAINSIM_ASSERT(at >= now_);
  std::uint32_t slot;
  if (free_slots_.empty()) {
    slot = static_cast<std::uint32_t>(slots_.size());
    slots_.push_back(std::move(cb));
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
    slots_[slot] = std::move(cb);
  }
  heap_.push_back(Key{at, next_seq_++, slot});
  sift_up(heap_.size() - 1);
}

void Simulation::sift_up(std::size_t i) {
  const Key e = heap_[i];
  while (i > 0) {
    std::size_t parent = (i - 1) / kArity;
    if (!later(heap_[parent], e)) break;
    heap_[i] = heap_[parent];
    i = parent;
  }
  heap_[i] = e;
}

void Simulation::sift_down(std::size_t i) {
  const std::size_t n = heap_.size();
  const Key e = heap_[i];
  for (;;) {
    const std::size_t first = kArity * i + 1;
    if (first >= n) break;
    std::size_t best = first;
    const std::size_t last = std::min(first + kArity, n);
    for (std::size_t c = first + 1; c < last; ++c)
      if (later(heap_[best], heap_[c])) best = c;
    if (!later(e, heap_[best])) break;
    heap_[i] = heap_[best];
    i = best;
  }
  heap_[i] = e;
}

std::uint64_t Simulation::run() {
  std::uint64_t count = 0;
  while (!heap_.empty()) {
    const Key top = heap_.front();
    heap_.front() = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) sift_down(0);
    now_ = top.time;
    Callback cb = std::move(slots_[top.slot]);
    free_slots_.push_back(top.slot);
    cb();
    ++count;
  }
  return count;
}

}  // namespace trainsim::engine
