#pragma once
// Simulated time: an integer count of picoseconds, so event order and results are exact and
// identical on every machine. int64 picoseconds reach 106 days, far beyond any training step.

#include <cmath>
#include <compare>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace trainsim::engine {

class Time {
 public:
  constexpr Time() = default;
  static constexpr Time from_ps(std::int64_t ps) { return Time(ps); }
  // Rounds to the nearest picosecond; negative or NaN durations are clamped to zero. Durations past
  // the range (about 106 days) throw std::range_error.
  static Time from_seconds(double s) {
    if (!(s > 0)) return Time(0);
    if (!(s < kMaxSeconds))
      throw std::range_error("a simulated duration of " + std::to_string(s) +
                             " s exceeds the simulator's range of about 106 days");
    return Time(static_cast<std::int64_t>(std::llround(s * 1e12)));
  }
  static constexpr double kMaxSeconds = 9.2e6;  // INT64_MAX ps is 9.22e6 s
  static constexpr Time max() { return Time(INT64_MAX); }

  constexpr std::int64_t ps() const { return ps_; }
  constexpr double seconds() const { return static_cast<double>(ps_) * 1e-12; }

  constexpr Time operator+(Time o) const { return Time(ps_ + o.ps_); }
  constexpr Time operator-(Time o) const { return Time(ps_ - o.ps_); }
  constexpr Time& operator+=(Time o) {
    ps_ += o.ps_;
    return *this;
  }
  constexpr auto operator<=>(const Time&) const = default;

 private:
  constexpr explicit Time(std::int64_t ps) : ps_(ps) {}
  std::int64_t ps_ = 0;
};

}  // namespace trainsim::engine
