// The Chrome trace of a simulated step: its structure (what chrome://tracing and Perfetto need),
// its flows (one per pipeline message between written ranks) and its memory counters (which must
// reproduce the engine's measured peak), on small layouts whose counts follow from the schedule.

#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <sstream>
#include <string>

#include "config/scenario.h"
#include "parallel/step_runner.h"
#include "report/chrome_trace.h"
#include "report/timeline.h"
#include "util/error.h"

using namespace trainsim;

namespace {

config::Scenario scenario(const nlohmann::json& j) {
  return config::parse_scenario(util::JsonNode(j, "test.json"), TRAINSIM_SOURCE_DIR);
}

// 8 GPUs as tp 2 · pp 2 · dp 2; 4 sequences of micro-batch 1 = 2 micro-batches per pipeline.
nlohmann::json small(std::int64_t gbs = 4) {
  return {{"model",
           {{"name", "tiny<gpt>"},
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
          {"training", {{"micro_batch", 1}, {"global_batch", gbs}, {"seq_len", 1024}}}};
}

struct Traced {
  parallel::StepResult result;
  std::string text;
  nlohmann::json json;
};

Traced trace(const config::Scenario& sc, const std::vector<std::uint32_t>& ranks, bool all_ranks = false) {
  report::TimelineRecorder rec(sc, ranks, {});
  parallel::BuildOptions opt;
  opt.all_ranks = all_ranks;
  Traced t;
  t.result = parallel::simulate_step(sc, opt, &rec);
  const report::Timeline tl = rec.take();
  std::ostringstream out;
  report::write_chrome_trace(out, sc, t.result, tl, ranks);
  t.text = out.str();
  t.json = nlohmann::json::parse(t.text);
  return t;
}

double num(const nlohmann::json& v) {
  return v.get<double>();
}

}  // namespace

TEST_CASE("rank selection: stages is tp = cp = dp = 0 of each stage; lists and ranges; bad ones name the option") {
  // tp 2 · cp 1 · dp 2 · pp 2: stage s starts at rank s · tp · cp · dp = 4s.
  auto sc = scenario(small());
  CHECK(report::parse_rank_selection("stages", sc) == std::vector<std::uint32_t>{0, 4});
  CHECK(report::parse_rank_selection("5,0-2,1", sc) == std::vector<std::uint32_t>{0, 1, 2, 5});
  CHECK(report::parse_rank_selection("all", sc).size() == 8);
  auto error = [&](const std::string& spec) {
    try {
      report::parse_rank_selection(spec, sc);
    } catch (const util::InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error("8") == "--trace-ranks: rank 8 is out of range (the scenario has 8 GPUs)");
  CHECK(error("3-1").find("--trace-ranks: range 3-1 is empty") == 0);
  CHECK(error("1,x").find("--trace-ranks: \"x\" is not a rank") == 0);
  CHECK(error("1,").find("--trace-ranks: \"\" is not a rank") == 0);
}

TEST_CASE("trace structure: complete events have ts/dur/pid/tid, names resolve, flows pair up stage to stage") {
  auto sc = scenario(small());
  const std::vector<std::uint32_t> ranks = {0, 1, 2, 3, 4, 5, 6, 7};
  const Traced t = trace(sc, ranks);
  const auto& events = t.json.at("traceEvents");
  std::set<std::int64_t> processes;
  std::set<std::pair<std::int64_t, std::int64_t>> threads;
  for (const auto& e : events) {
    if (e.at("ph") != "M") continue;
    if (e.at("name") == "process_name") processes.insert(e.at("pid").get<std::int64_t>());
    if (e.at("name") == "thread_name")
      threads.insert({e.at("pid").get<std::int64_t>(), e.at("tid").get<std::int64_t>()});
  }
  CHECK(processes == std::set<std::int64_t>(ranks.begin(), ranks.end()));

  std::map<std::int64_t, int> per_rank;
  std::map<std::uint64_t, nlohmann::json> starts, finishes;
  for (const auto& e : events) {
    const std::string ph = e.at("ph");
    if (ph == "X") {
      for (const char* k : {"ts", "dur", "pid", "tid", "name"}) REQUIRE(e.contains(k));
      CHECK(num(e["dur"]) >= 0);
      CHECK(num(e["ts"]) + num(e["dur"]) <= t.result.step_time_s * 1e6 + 1e-3);
      CHECK(threads.count({e["pid"].get<std::int64_t>(), e["tid"].get<std::int64_t>()}) == 1);
      ++per_rank[e["pid"].get<std::int64_t>()];
    } else if (ph == "s") {
      CHECK(starts.emplace(e.at("id").get<std::uint64_t>(), e).second);
    } else if (ph == "f") {
      CHECK(finishes.emplace(e.at("id").get<std::uint64_t>(), e).second);
    } else if (ph == "C") {
      CHECK(processes.count(e.at("pid").get<std::int64_t>()) == 1);
    }
  }
  // Every rank of a stage runs its stage's program: the same number of tasks.
  CHECK(per_rank.size() == 8);
  CHECK(per_rank[0] == per_rank[1]);
  CHECK(per_rank[0] == per_rank[3]);
  CHECK(per_rank[4] == per_rank[7]);
  // Each pipeline (4 of them: tp 2 x dp 2) carries 2 activations forward and 2 gradients back.
  CHECK(starts.size() == 4 * (2 + 2));
  REQUIRE(finishes.size() == starts.size());
  for (const auto& [id, s] : starts) {
    REQUIRE(finishes.count(id) == 1);
    const auto& f = finishes[id];
    CHECK(f["cat"] == s["cat"]);
    CHECK(f["name"] == s["name"]);
    CHECK(num(f["ts"]) >= num(s["ts"]));
    // The peer is the same rank of the other stage: 4 ranks apart.
    CHECK(std::abs(f["pid"].get<std::int64_t>() - s["pid"].get<std::int64_t>()) == 4);
  }
  // Byte-identical when written again.
  CHECK(trace(sc, ranks).text == t.text);
}

TEST_CASE("trace args: compute carries FLOPs, collectives bytes and group, sends bytes and peer") {
  auto sc = scenario(small());
  const Traced t = trace(sc, {0, 4});
  int compute_with_flops = 0, tp = 0, dp = 0, sends = 0;
  for (const auto& e : t.json.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    const auto& a = e.value("args", nlohmann::json::object());
    if (e["tid"] == 0 && a.contains("flops")) compute_with_flops += num(a["flops"]) > 0;
    if (a.value("group", "") == "tp") {
      ++tp;
      CHECK(a["ranks"] == 2);
      CHECK(a["bytes"].get<std::int64_t>() > 0);
    }
    if (a.value("group", "") == "dp") {
      ++dp;
      CHECK(a["ranks"] == 2);
    }
    if (e.value("cat", "") == "send") {
      ++sends;
      CHECK(a["peer"].get<std::int64_t>() == 4 - e["pid"].get<std::int64_t>());
    }
  }
  CHECK(compute_with_flops > 0);
  CHECK(tp > 0);
  CHECK(dp == 2);     // one gradient reduction per rank, ranks 0 and 4
  CHECK(sends == 4);  // rank 0: 2 activations; rank 4: 2 gradients
}

TEST_CASE("a rank that is not simulated is written from its representative, with the same times as a full run") {
  // Rank 3 (tp 1, dp 1, stage 0) runs rank 0's program at rank 0's times; --all-ranks simulates it.
  auto sc = scenario(small());
  const Traced sym = trace(sc, {3});
  const Traced all = trace(sc, {3}, /*all_ranks=*/true);
  auto spans = [](const nlohmann::json& j) {
    std::vector<std::string> out;
    for (const auto& e : j.at("traceEvents"))
      if (e.at("ph") == "X") out.push_back(e.dump());
    return out;
  };
  CHECK(spans(sym.json) == spans(all.json));
  CHECK(!spans(sym.json).empty());
}

TEST_CASE("memory counters start at the static memory, return to it, and reach the engine's peak") {
  auto sc = scenario(small(8));
  const Traced t = trace(sc, {0});
  std::map<std::string, double> now;
  double peak = 0;
  std::map<std::string, double> first;
  for (const auto& e : t.json.at("traceEvents")) {
    if (e.at("ph") != "C") continue;
    const std::string name = e["name"];
    if (!first.count(name)) first[name] = num(e["args"]["GiB"]);
    now[name] = num(e["args"]["GiB"]);
    double total = 0;
    for (const auto& [k, v] : now) total += v;
    peak = std::max(peak, total);
  }
  CHECK(first.count("weights GiB") == 1);
  CHECK(now["activations GiB"] == Approx(0).margin(1e-4));  // every activation freed by the backward
  CHECK(now["weights GiB"] == first["weights GiB"]);
  const double engine_peak = static_cast<double>(t.result.memory[0].peak_bytes) / (1024.0 * 1024 * 1024);
  CHECK(peak == Approx(engine_peak).margin(4e-4));  // counters are rounded to 0.0001 GiB
}

TEST_CASE("a scenario file name that is not UTF-8 still gives valid JSON, the bad byte replaced") {
  auto sc = scenario(small());
  sc.file = "runs/caf\xe9.json";  // Latin-1 é
  const Traced t = trace(sc, {0});
  CHECK(t.json["otherData"]["scenario"] == "runs/caf\xef\xbf\xbd.json");  // U+FFFD
}
