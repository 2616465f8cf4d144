// End-to-end: `trainsim run --trace/--report`, `scale` and `compare` as a user and a CI job run
// them. Bad input: one line on stderr naming the option or file, exit code 2.

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "run_binary.h"

using namespace test_binary;

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

TEST_CASE("scale keeping the global batch: DP grows with the GPUs, micro-batches per pipeline shrink") {
  // GPT-3 175B with tp 8 · pp 16: dp = GPUs / 128; 1536 sequences of micro-batch 1 give 1536 / dp
  // micro-batches per pipeline. Output files go into --report; no progress bar off a terminal.
  const fs::path dir = temp_dir() / "scale-report";
  Result r =
      run(fmt::format("scale configs/gpt3-175b-a100-1024.json --gpus 256,512,1024 --json --report '{}'", dir.string()));
  REQUIRE(r.code == 0);
  CHECK(r.err.empty());
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["scale"]["keep"] == "global-batch");
  REQUIRE(j["runs"].size() == 3);
  for (const auto& run : j["runs"]) {
    const auto gpus = run["scenario"]["gpus"].get<std::int64_t>();
    CHECK(run["scenario"]["dp"].get<std::int64_t>() == gpus / 128);
    CHECK(run["scenario"]["micro_batches"].get<std::int64_t>() == 1536 / (gpus / 128));
    CHECK(run["scenario"]["global_batch"] == 1536);
    // Efficiency: tokens/s/GPU relative to the 256-GPU run.
    CHECK(run["scaling_efficiency"].get<double>() ==
          Approx(run["tokens_per_s_per_gpu"].get<double>() / j["runs"][0]["tokens_per_s_per_gpu"].get<double>()));
  }
  CHECK(j["runs"][0]["scaling_efficiency"] == 1.0);
  CHECK(nlohmann::json::parse(slurp(dir / "results.json")) == j);
  const std::string md = slurp(dir / "summary.md");
  CHECK(md.find("| 256 | 2 | 1536 | 768 |") != std::string::npos);
  CHECK(md.find("| 1024 | 8 | 1536 | 192 |") != std::string::npos);
  CHECK(slurp(dir / "index.html").find("<svg") != std::string::npos);
}

TEST_CASE("scale keeping the batch per GPU: the global batch grows with the GPUs; --nodes counts nodes") {
  // llama3.1-8b on dgx-h200 (8 GPUs per node): 512 sequences on 64 GPUs -> 1024 on 128.
  Result r = run("scale configs/llama3.1-8b-h200-64.json --nodes 8,16 --keep per-gpu-batch --markdown");
  REQUIRE(r.code == 0);
  CHECK(r.out.find("| 64 | 32 | 512 | 8 |") != std::string::npos);
  CHECK(r.out.find("| 128 | 64 | 1024 | 8 |") != std::string::npos);
  Result again = run("scale configs/llama3.1-8b-h200-64.json --nodes 8,16 --keep per-gpu-batch --markdown");
  CHECK(again.out == r.out);
}

TEST_CASE("training.train_tokens: run and scale say how many steps, days and GPU-hours the budget takes") {
  // llama3.1-8b on 64 H200: 512 sequences of 8,192 tokens per step, 4,194,304 tokens. 10^12 tokens
  // take ceil(10^12 / 4,194,304) = 238,419 whole steps.
  auto j = nlohmann::json::parse(slurp(fs::path(TRAINSIM_SOURCE_DIR) / "configs" / "llama3.1-8b-h200-64.json"));
  j["training"]["train_tokens"] = 1e12;
  const fs::path file = write("train-tokens.json", j.dump());
  Result r = run(fmt::format("run '{}' --json", file.string()));
  REQUIRE(r.code == 0);
  const auto out = nlohmann::json::parse(r.out);
  const double step = out["step_time_s"].get<double>();
  CHECK(out["scenario"]["train_tokens"] == 1e12);
  CHECK(out["time_to_train"]["steps"] == 238419);
  CHECK(out["time_to_train"]["days"].get<double>() == Approx(238419 * step / 86400));
  CHECK(out["time_to_train"]["gpu_hours"].get<double>() == Approx(238419 * step * 64 / 3600));
  Result text = run(fmt::format("run '{}'", file.string()));
  CHECK(text.out.find(fmt::format("to train      1T tokens: 238,419 steps · {:.1f} days", 238419 * step / 86400)) !=
        std::string::npos);
  // A study at two sizes adds the days and GPU-hours of each.
  Result study = run(fmt::format("scale '{}' --gpus 64,128", file.string()));
  REQUIRE(study.code == 0);
  CHECK(study.out.find("days    GPU-hours") != std::string::npos);
  CHECK(study.out.find("days and GPU-hours to train 1T tokens") != std::string::npos);
  // Not a positive number, or past 10^18: one line naming the key, exit 2.
  for (const nlohmann::json& bad :
       {nlohmann::json(0), nlohmann::json(-5), nlohmann::json("15T"), nlohmann::json(1e19)}) {
    j["training"]["train_tokens"] = bad;
    Result e = run(fmt::format("run '{}'", write("train-tokens-bad.json", j.dump()).string()));
    CHECK(e.code == 2);
    CHECK(lines(e.err) == 1);
    CHECK(e.err.find(": training.train_tokens: ") != std::string::npos);
  }
}

TEST_CASE("training.optimizer: the summary, --json and the HTML report name the optimizer's states and offload") {
  // Qwen3 30B on 16 H100 with bf16 moments and half of each rank's Adam step on the CPU.
  auto j = nlohmann::json::parse(slurp(fs::path(TRAINSIM_SOURCE_DIR) / "configs" / "qwen3-30b-a3b-h100-16.json"));
  j["training"]["optimizer"] = {{"use_precision_aware_optimizer", true},
                                {"exp_avg_dtype", "bf16"},
                                {"exp_avg_sq_dtype", "bf16"},
                                {"optimizer_cpu_offload", true},
                                {"optimizer_offload_fraction", 0.5}};
  const fs::path file = write("optimizer.json", j.dump());
  Result text = run(fmt::format("run '{}'", file.string()));
  REQUIRE(text.code == 0);
  CHECK(text.out.find("optimizer     precision-aware Adam: master weights fp32 (16-bit remainders) · moments bf16 "
                      "and bf16 · CPU offload of 50%\n") != std::string::npos);
  CHECK(text.out.find("offload       the Adam step of 50% of the parameters to host memory at 56 GB/s") !=
        std::string::npos);
  Result js = run(fmt::format("run '{}' --json", file.string()));
  REQUIRE(js.code == 0);
  const auto out = nlohmann::json::parse(js.out);
  CHECK(out["scenario"]["optimizer"]["exp_avg_dtype"] == "bf16");
  CHECK(out["scenario"]["optimizer"]["optimizer_offload_fraction"] == 0.5);
  CHECK(out["memory"]["host_offload_gib"].get<double>() > 0);
  CHECK(out["time_breakdown_s"].contains("offload_exposed"));
  const fs::path dir = temp_dir() / "optimizer-report";
  REQUIRE(run(fmt::format("run '{}' --report '{}'", file.string(), dir.string())).code == 0);
  CHECK(slurp(dir / "index.html").find("<th>optimizer</th><td>precision-aware Adam") != std::string::npos);
}

TEST_CASE("scale: an impossible size or rule is one line naming it, exit 2") {
  Result r = run("scale configs/gpt3-175b-a100-1024.json --gpus 128,192");
  CHECK(r.code == 2);
  CHECK(r.out.empty());
  CHECK(r.err ==
        "configs/gpt3-175b-a100-1024.json: gpus: at 192 GPUs (--gpus): 192 is not a multiple of tp*pp*cp = 8*16*1 = "
        "128\n");
  r = run("scale configs/gpt3-175b-a100-1024.json --gpus 1024,512");
  CHECK(r.code == 2);
  CHECK(r.err == "--gpus: sizes must increase: 512 after 1024\n");
  r = run("scale configs/gpt3-175b-a100-1024.json --gpus 1024 --keep tokens");
  CHECK(r.code == 2);
  CHECK(r.err == "--keep: unknown rule \"tokens\" (expected global-batch or per-gpu-batch)\n");
}

TEST_CASE("compare exits 0 when predictions hold or improve, 1 when one got worse beyond the bound, 2 on bad input") {
  Result base = run("run configs/llama3.1-8b-h200-64.json --json");
  REQUIRE(base.code == 0);
  const auto j = nlohmann::json::parse(base.out);
  const fs::path a = write("base.json", base.out);
  auto scaled = [&](const std::string& name, double step_factor) {
    auto k = j;
    k["step_time_s"] = j["step_time_s"].get<double>() * step_factor;
    for (const char* key : {"tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu"})
      k[key] = j[key].get<double>() / step_factor;
    return write(name, k.dump());
  };
  Result same = run(fmt::format("compare '{}' '{}' --max-slowdown 5%", a.string(), a.string()));
  CHECK(same.code == 0);
  CHECK(same.out.find("ok: no prediction got worse by more than 5.0%") != std::string::npos);
  CHECK(run(fmt::format("compare '{}' '{}'", a.string(), scaled("faster.json", 0.8).string())).code == 0);
  CHECK(
      run(fmt::format("compare '{}' '{}' --max-slowdown 5%", a.string(), scaled("slower4.json", 1.04).string())).code ==
      0);
  Result worse =
      run(fmt::format("compare '{}' '{}' --max-slowdown 5%", a.string(), scaled("slower6.json", 1.06).string()));
  CHECK(worse.code == 1);
  CHECK(worse.out.find("REGRESSION: 5 predictions got worse by more than 5.0%") != std::string::npos);
  // The same 6% passes a 10% bound.
  CHECK(run(fmt::format("compare '{}' '{}' --max-slowdown 0.1", a.string(),
                        fs::path(temp_dir() / "slower6.json").string()))
            .code == 0);
  Result bad = run(fmt::format("compare '{}' '{}'", a.string(), write("bad.json", "{\"x\": 1}").string()));
  CHECK(bad.code == 2);
  CHECK(lines(bad.err) == 1);
  CHECK(bad.err.find("bad.json: not a result of") != std::string::npos);
  CHECK(run(fmt::format("compare '{}' '{}' --max-slowdown 5", a.string(), a.string())).code == 2);
  CHECK(run(fmt::format("compare '{}' missing.json", a.string())).code == 2);
}

TEST_CASE("the new commands and options are in --help") {
  Result run_help = run("run --help");
  for (const char* opt : {"--trace", "--trace-ranks", "--report"}) CHECK(run_help.out.find(opt) != std::string::npos);
  Result scale_help = run("scale --help");
  CHECK(scale_help.code == 0);
  for (const char* opt : {"--gpus", "--nodes", "--keep", "--report", "--markdown", "--json"})
    CHECK(scale_help.out.find(opt) != std::string::npos);
  Result compare_help = run("compare --help");
  CHECK(compare_help.code == 0);
  CHECK(compare_help.out.find("--max-slowdown") != std::string::npos);
}

// --price: the run page's summary gains a cost row, the scaling study's table a column, each the
// figure the text summary prints (cli_test.cc checks those against the formula).
TEST_CASE("report pages with --price: the run's cost row, the scaling study's cost column") {
  const fs::path dir = temp_dir() / "priced";
  Result r = run(fmt::format("run configs/llama3.1-8b-h200-64.json --price 2 --report '{}'", (dir / "run").string()));
  REQUIRE(r.code == 0);
  Result text = run("run configs/llama3.1-8b-h200-64.json --price 2");
  const std::size_t at = text.out.find("cost          ");
  REQUIRE(at != std::string::npos);
  const std::string line = text.out.substr(at + 14, text.out.find('\n', at) - at - 14);
  CHECK(slurp(dir / "run" / "index.html").find("<tr><th>cost</th><td>" + line + "</td></tr>") != std::string::npos);
  Result s = run(fmt::format("scale configs/llama3.1-8b-h200-64.json --gpus 32,64 --price 2 --report '{}'",
                             (dir / "scale").string()));
  REQUIRE(s.code == 0);
  const std::string page = slurp(dir / "scale" / "index.html");
  CHECK(page.find("<th>$ per million tokens</th>") != std::string::npos);
  CHECK(std::count(page.begin(), page.end(), '$') >= 3);  // the header and both sizes' cells
  CHECK(slurp(dir / "scale" / "summary.md").find("| $ per million tokens |") != std::string::npos);
}

TEST_CASE("run --report writes index.html; a directory that cannot be made is a one-line error, exit 2") {
  const fs::path dir = temp_dir() / "run-report" / "nested";
  Result r = run(fmt::format("run configs/llama3.1-8b-h200-64.json --report '{}'", dir.string()));
  CHECK(r.code == 0);
  CHECK(r.err.empty());
  CHECK(slurp(dir / "index.html").rfind("<!DOCTYPE html>", 0) == 0);
  const fs::path file = write("a-file", "x");
  r = run(fmt::format("run configs/llama3.1-8b-h200-64.json --report '{}'", (file / "sub").string()));
  CHECK(r.code == 2);
  CHECK(r.out.empty());
  CHECK(r.err == fmt::format("--report: cannot create directory {}\n", (file / "sub").string()));
}

TEST_CASE("run --ops lists each part's ops after the summary, and as the key ops with --json") {
  Result text = run("run configs/llama3.1-8b-h200-64.json --ops");
  REQUIRE(text.code == 0);
  const auto at = text.out.find("\nops ");
  REQUIRE(at != std::string::npos);
  CHECK(text.out.find("fits ") < at);
  CHECK(text.out.find("  layer · 32 layers · backward\n") != std::string::npos);
  CHECK(text.out.find("    fc1_gate_up_wgrad ") != std::string::npos);

  Result json = run("run configs/llama3.1-8b-h200-64.json --ops --json");
  REQUIRE(json.code == 0);
  const auto j = nlohmann::json::parse(json.out);
  REQUIRE(j.at("ops").is_array());
  CHECK(j.at("ops").size() == 6);
  // Without --ops neither output has them.
  CHECK(run("run configs/llama3.1-8b-h200-64.json").out.find("\nops ") == std::string::npos);
  CHECK(!nlohmann::json::parse(run("run configs/llama3.1-8b-h200-64.json --json").out).contains("ops"));
}
