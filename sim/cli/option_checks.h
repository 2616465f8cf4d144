#pragma once
// Checks on numeric command-line options whose failures read as one plain sentence. CLI11's own
// (CLI::PositiveNumber, CLI::NonNegativeNumber) print the whole range of a double ("Value 0 not in
// range 0.000000 to 1797...") and let "-1" through into an unsigned option as a huge number.

#include <cmath>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>

namespace trainsim::cli {

namespace detail {

// The option's value as a finite number, or nothing when it is not one (to the last character).
inline bool parse_number(const std::string& value, double& out) {
  if (value.empty()) return false;
  char* end = nullptr;
  out = std::strtod(value.c_str(), &end);
  return end == value.c_str() + value.size() && std::isfinite(out);
}

}  // namespace detail

// > 0 (a count, a size, a scale).
inline const CLI::Validator kPositive(
    [](std::string& value) -> std::string {
      double x = 0;
      if (!detail::parse_number(value, x) || x <= 0) return "\"" + value + "\" is not a positive number";
      return {};
    },
    "POSITIVE");

// >= 0 (0 usually meaning "all" or "off").
inline const CLI::Validator kNonNegative(
    [](std::string& value) -> std::string {
      double x = 0;
      if (!detail::parse_number(value, x) || x < 0) return "\"" + value + "\" is not a number of 0 or more";
      return {};
    },
    "NONNEGATIVE");

// One line for every command-line error (CLI11's default adds a second, "Run with --help ...").
inline std::string one_line_failure(const CLI::App*, const CLI::Error& e) {
  return std::string(e.what()) + " (see --help)\n";
}

}  // namespace trainsim::cli
