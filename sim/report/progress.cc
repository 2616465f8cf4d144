#include "report/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace trainsim::report {

std::string format_eta(double elapsed_s, double fraction) {
  if (!(fraction > 0) || !(elapsed_s >= 0)) return "?";
  const double remaining = elapsed_s * (1 - std::min(fraction, 1.0)) / fraction;
  const auto s = static_cast<std::int64_t>(std::llround(remaining));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

std::string progress_line(std::string_view label, std::uint64_t done, std::uint64_t total, double elapsed_s,
                          std::string_view note, int width) {
  const double f = total == 0 ? 0.0 : std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
  const auto filled = static_cast<int>(f * width);
  std::string line = fmt::format(
      "{} [{}{}] {:3.0f}%  {}/{}  ETA {}", label, std::string(static_cast<std::size_t>(filled), '#'),
      std::string(static_cast<std::size_t>(width - filled), ' '), 100 * f, done, total, format_eta(elapsed_s, f));
  if (!note.empty()) fmt::format_to(std::back_inserter(line), "  {}", note);
  return line;
}

bool stderr_is_terminal() {
  return ::isatty(STDERR_FILENO) == 1;
}

ProgressBar::ProgressBar(std::string label, std::uint64_t total, bool enabled, std::FILE* out)
    : label_(std::move(label)), total_(total), enabled_(enabled), out_(out), start_(std::chrono::steady_clock::now()) {
}

ProgressBar::~ProgressBar() {
  finish();
}

void ProgressBar::set(std::uint64_t done, std::string_view note) {
  if (!enabled_) return;
  if (total_ == 0) total_ = done;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && done < total_ && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  drawn_ = true;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  fmt::print(out_, "\r\033[K{}", progress_line(label_, done, total_, elapsed, note));
  std::fflush(out_);
}

void ProgressBar::finish() {
  if (!drawn_) return;
  fmt::print(out_, "\r\033[K");
  std::fflush(out_);
  drawn_ = false;
}

void ProgressObserver::on_plan(const parallel::StepPlan& plan) {
  for (const auto& b : plan.bindings) total_ += plan.programs[b.program].task_count();
  bar_.set_total(total_);
}

void ProgressObserver::on_task(std::uint32_t, const engine::Program&, const engine::Task&, engine::Time, engine::Time) {
  if ((++done_ & 4095u) == 0 || done_ == total_) bar_.set(done_);
}

}  // namespace trainsim::report
