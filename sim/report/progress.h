#pragma once
// A one-line progress bar with an ETA on stderr for long commands (scale, validate, big runs). It
// draws only on a terminal; in CI logs and pipes it stays silent, so outputs stay clean. Debian 12
// packages no maintained C++ progress-bar library (no libindicators-dev), hence this small one.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "parallel/step_runner.h"

namespace trainsim::report {

// "1:05" for 65 s, "1:01:05" past an hour; "?" before any progress.
std::string format_eta(double elapsed_s, double fraction);
// The bar line without the carriage return: "label [#####     ]  50%  3/6  ETA 0:30  note".
std::string progress_line(std::string_view label, std::uint64_t done, std::uint64_t total, double elapsed_s,
                          std::string_view note, int width = 24);

bool stderr_is_terminal();

class ProgressBar {
 public:
  // Draws on `out` when `enabled` (by default: stderr, when it is a terminal).
  ProgressBar(std::string label, std::uint64_t total, bool enabled = stderr_is_terminal(), std::FILE* out = stderr);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Redraws at most ten times a second, and always at the end.
  void set(std::uint64_t done, std::string_view note = {});
  // Clears the line.
  void finish();
  void set_total(std::uint64_t total) { total_ = total; }
  bool enabled() const { return enabled_; }

 private:
  std::string label_;
  std::uint64_t total_;
  bool enabled_;
  std::FILE* out_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

// Counts tasks of a simulated step as they end and shows them on a ProgressBar.
class ProgressObserver : public parallel::StepObserver {
 public:
  explicit ProgressObserver(std::string label, bool enabled = stderr_is_terminal())
      : bar_(std::move(label), 0, enabled) {}
  void on_plan(const parallel::StepPlan& plan) override;
  void on_task(std::uint32_t rank, const engine::Program& program, const engine::Task& task, engine::Time start,
               engine::Time end) override;
  void finish() { bar_.finish(); }
  bool enabled() const { return bar_.enabled(); }

 private:
  ProgressBar bar_;
  std::uint64_t total_ = 0, done_ = 0;
};

}  // namespace trainsim::report
