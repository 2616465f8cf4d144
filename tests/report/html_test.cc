// The HTML report and its SVG pieces: text from inputs is escaped, axes get round ticks, the page
// is byte-identical run to run and holds every chart. (Rendering is checked in browser_test.cc.)

#include <catch2/catch.hpp>

#include <string>

#include "config/scenario.h"
#include "parallel/step_builder.h"
#include "parallel/step_runner.h"
#include "report/html.h"
#include "report/svg.h"
#include "report/timeline.h"
#include "util/error.h"

using namespace trainsim;

namespace {

config::Scenario scenario(const std::string& name, bool flow = false) {
  const nlohmann::json j = {{"model",
                             {{"name", name},
                              {"layers", 4},
                              {"hidden", 1024},
                              {"heads", 16},
                              {"kv_heads", 16},
                              {"ffn_hidden", 4096},
                              {"vocab", 1024},
                              {"mlp", "gelu"}}},
                            {"cluster", "dgx-h100"},
                            {"gpus", 8},
                            {"parallel", {{"tp", 2}, {"pp", 2}}},
                            {"training", {{"micro_batch", 1}, {"global_batch", 8}, {"seq_len", 1024}}}};
  nlohmann::json k = j;
  if (flow) k["network"] = "flow";
  return config::parse_scenario(util::JsonNode(k, "a&b.json"), TRAINSIM_SOURCE_DIR);
}

struct Page {
  parallel::StepResult result;
  report::Timeline timeline;
  std::string html;
};

Page page(const config::Scenario& sc) {
  const auto want = report::report_ranks(sc);
  report::TimelineRecorder rec(sc, want.spans, want.mem);
  Page p;
  p.result = parallel::simulate_step(sc, {}, &rec);
  p.timeline = rec.take();
  p.html = report::run_report_html(sc, p.result, p.timeline);
  return p;
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("html_escape escapes the five HTML metacharacters and nothing else") {
  CHECK(report::html_escape("a<b>&\"c'd é") == "a&lt;b&gt;&amp;&quot;c&#39;d é");
}

TEST_CASE("axis ticks are round numbers that cover the range") {
  CHECK(report::ticks(0, 78.2) == std::vector<double>{0, 20, 40, 60, 80});
  const auto unit = report::ticks(0, 1);
  REQUIRE(unit.size() == 6);
  for (std::size_t i = 0; i < unit.size(); ++i) CHECK(unit[i] == Approx(0.2 * static_cast<double>(i)));
  CHECK(report::tick_label(0.5) == "0.5");
  CHECK(report::tick_label(12000) == "12,000");
  CHECK(report::tick_label(64) == "64");
}

TEST_CASE("the run report escapes names from the input and holds every chart, byte-identical twice") {
  const auto sc = scenario("tiny<script>alert(1)</script>");
  const Page a = page(sc);
  CHECK(a.html.find("<script") == std::string::npos);
  CHECK(a.html.find("tiny&lt;script&gt;alert(1)&lt;/script&gt;") != std::string::npos);
  CHECK(a.html.find("a&amp;b.json") != std::string::npos);
  // Step breakdown, three pipeline charts, memory; no flow network, so no link chart.
  CHECK(count(a.html, "<svg ") == 5);
  CHECK(count(a.html, "</svg>") == 5);
  CHECK(a.html.find("nan") == std::string::npos);
  CHECK(a.html.find("inf\"") == std::string::npos);
  CHECK(page(sc).html == a.html);
}

TEST_CASE("the zoomed pipeline window ends with stage 0's first backward, inside the step") {
  // 1F1B with pp 2 and 4 micro-batches: stage 0 runs F F B F B F B B; its first backward run ends
  // before the step does and after both stages' first forward.
  const auto sc = scenario("tiny");
  const Page p = page(sc);
  const auto* s0 = p.timeline.find(0);
  REQUIRE(s0 != nullptr);
  const auto step_ps = static_cast<std::int64_t>(p.result.step_time_s * 1e12);
  const std::int64_t trip = report::first_round_trip_ps(p.timeline, *s0, step_ps);
  CHECK(trip > 0);
  CHECK(trip < step_ps / 2);
  // The second forward of stage 0 starts before the window ends; a backward ends exactly at it.
  bool backward_ends_there = false;
  for (const auto& s : s0->spans)
    if (s.end_ps == trip && p.timeline.names[s.name].rfind("backward", 0) == 0) backward_ends_there = true;
  CHECK(backward_ends_there);
}

TEST_CASE("with the flow network the report adds the link-tier utilisation chart") {
  const Page p = page(scenario("tiny", /*flow=*/true));
  REQUIRE(p.result.network.has_value());
  CHECK(count(p.html, "<svg ") == 6);
  CHECK(p.html.find("Link utilisation per tier") != std::string::npos);
  // One bar label per tier that has links, e.g. "nvlink".
  for (const auto& t : p.result.network->tiers) CHECK(p.html.find(">" + t.name + "</text>") != std::string::npos);
}

TEST_CASE("the steady-state window holds exactly one forward and one backward of stage 0") {
  // 1F1B, pp 2, 4 micro-batches: between the ends of stage 0's 2nd and 3rd forward sends it runs
  // one backward and one forward (the sends block compute), and every micro-batch costs the same.
  const auto sc = scenario("tiny");
  const Page p = page(sc);
  const auto* s0 = p.timeline.find(0);
  REQUIRE(s0 != nullptr);
  const auto [from, to] = report::steady_period_ps(p.timeline, *s0);
  REQUIRE(to > from);
  double in_window = 0, passes = 0;
  for (const auto& s : s0->spans) {
    if (s.stream != parallel::kCompute) continue;
    const std::string& name = p.timeline.names[s.name];
    const bool pass = name.rfind("forward", 0) == 0 || name.rfind("backward", 0) == 0;
    if (pass) passes += static_cast<double>(s.end_ps - s.start_ps);
    if (s.start_ps >= from && s.end_ps <= to) in_window += static_cast<double>(s.end_ps - s.start_ps);
  }
  const double m = static_cast<double>(sc.training.num_micro_batches);
  REQUIRE(m == 4);
  CHECK(in_window == Approx(passes / m).epsilon(1e-6));
}
