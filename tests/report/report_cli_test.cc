// End-to-end: `trainsim run --trace/--report`, `scale` and `compare` as a user and a CI job run
// them. Bad input: one line on stderr naming the option or file, exit code 2.

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "run_binary.h"

using namespace report_test;

namespace {

int lines(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

}  // namespace

TEST_CASE("the trace of GPT-3 175B on 1024 GPUs, one rank per stage by default, stays under 50 MB") {
  // 16 pipeline stages -> 16 processes; a file that chrome://tracing and Perfetto open.
  const fs::path trace = temp_dir() / "gpt3-1024.trace.json";
  Result r = run(fmt::format("run configs/gpt3-175b-a100-1024.json --trace '{}'", trace.string()));
  REQUIRE(r.code == 0);
  const auto size = fs::file_size(trace);
  CHECK(size < 50'000'000u);
  const auto j = nlohmann::json::parse(slurp(trace));
  std::set<std::int64_t> pids;
  for (const auto& e : j.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "process_name") pids.insert(e.at("pid").get<std::int64_t>());
  // Stage s starts at rank s * tp * cp * dp = 64 s.
  std::set<std::int64_t> expected;
  for (int s = 0; s < 16; ++s) expected.insert(64 * s);
  CHECK(pids == expected);
}

TEST_CASE("run --trace: bad rank selections and unwritable files are one-line errors, exit 2") {
  Result r = run("run configs/llama3.1-8b-h200-64.json --trace out.json --trace-ranks 64");
  CHECK(r.code == 2);
  CHECK(r.err == "--trace-ranks: rank 64 is out of range (the scenario has 64 GPUs)\n");
  r = run("run configs/llama3.1-8b-h200-64.json --trace /nonexistent-dir/out.json");
  CHECK(r.code == 2);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("--trace: cannot write /nonexistent-dir/out.json") == 0);
}
