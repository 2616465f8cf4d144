// The HTML reports in a real browser: headless Chromium (Debian's chromium package, installed by
// tools/setup) opens each page offline, logs no console message, and renders non-empty SVG plots;
// a screenshot is saved next to the page. Without chromium this test reports itself skipped (exit
// code 77, ctest's SKIP_RETURN_CODE) and checks nothing.

#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <regex>
#include <sstream>

#include "run_binary.h"

using namespace test_binary;

namespace {

// The chromium binary: $TRAINSIM_CHROMIUM, else chromium or chromium-browser on PATH.
std::string find_chromium() {
  if (const char* env = std::getenv("TRAINSIM_CHROMIUM"); env != nullptr && *env != '\0') return env;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':'))
    for (const char* name : {"chromium", "chromium-browser"})
      if (fs::exists(fs::path(dir) / name)) return (fs::path(dir) / name).string();
  return {};
}

const std::string& chromium() {
  static const std::string c = find_chromium();
  return c;
}

std::string browser_flags() {
  return "--headless --no-sandbox --disable-gpu --no-first-run --disable-extensions --enable-logging=stderr --v=0";
}

// Console messages Chromium logged while showing the page (any level: the reports run no script,
// so anything there is a fault, such as a resource that failed to load or a parse error).
std::vector<std::string> console_messages(const std::string& log) {
  std::vector<std::string> out;
  std::stringstream in(log);
  std::string line;
  while (std::getline(in, line))
    if (line.find(":CONSOLE") != std::string::npos) out.push_back(line);
  return out;
}

struct Shown {
  std::vector<std::string> console;
  std::string dom;
  fs::path screenshot;
};

Shown show(const fs::path& page, const fs::path& screenshot, int width, int height) {
  Shown s;
  Result shot = run_shell(fmt::format("'{}' {} --window-size={},{} --screenshot='{}' 'file://{}'", chromium(),
                                      browser_flags(), width, height, screenshot.string(), page.string()));
  INFO(shot.err);
  REQUIRE(shot.code == 0);
  s.console = console_messages(shot.err);
  Result dom = run_shell(fmt::format("'{}' {} --dump-dom 'file://{}'", chromium(), browser_flags(), page.string()));
  REQUIRE(dom.code == 0);
  s.dom = dom.out;
  for (const auto& m : console_messages(dom.err)) s.console.push_back(m);
  s.screenshot = screenshot;
  return s;
}

// Every <svg> element of the rendered DOM, with its content.
std::vector<std::string> svgs(const std::string& dom) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while ((at = dom.find("<svg", at)) != std::string::npos) {
    const std::size_t end = dom.find("</svg>", at);
    if (end == std::string::npos) break;
    out.push_back(dom.substr(at, end - at));
    at = end;
  }
  return out;
}

int shapes(const std::string& svg) {
  static const std::regex shape("<(rect|polygon|polyline|circle|line|path)\\b");
  return static_cast<int>(std::distance(std::sregex_iterator(svg.begin(), svg.end(), shape), std::sregex_iterator()));
}

bool is_png(const fs::path& p) {
  const std::string head = slurp(p).substr(0, 8);
  return fs::exists(p) && fs::file_size(p) > 1000 && head == "\x89PNG\r\n\x1a\n";
}

// Nothing the page would fetch: no script, no external URL, no web font, no CSS import.
void check_offline(const std::string& html) {
  CHECK(html.find("<script") == std::string::npos);
  CHECK(html.find("@import") == std::string::npos);
  CHECK(html.find("@font-face") == std::string::npos);
  CHECK(html.find("url(") == std::string::npos);
  CHECK(html.find("src=") == std::string::npos);
  CHECK(html.find("href=") == std::string::npos);
}

}  // namespace

TEST_CASE("the console check sees what a faulty page logs") {
  // A page with a script error and a console.error call: both must be reported, or the checks
  // below could never fail.
  const fs::path page = write("faulty.html",
                              "<!DOCTYPE html><html><body><script>console.error('boom'); missing_function();</script>"
                              "</body></html>");
  const Shown s = show(page, temp_dir() / "faulty.png", 400, 300);
  CHECK(s.console.size() == 2 * 2);  // two messages, logged by each of the two loads (screenshot, DOM dump)
}

TEST_CASE("the run report of GPT-3 175B on 1024 GPUs renders offline with its plots and no console message") {
  const fs::path dir = temp_dir() / "run-report";
  Result r = run(fmt::format("run configs/gpt3-175b-a100-1024.json --report '{}'", dir.string()));
  REQUIRE(r.code == 0);
  const fs::path page = dir / "index.html";
  check_offline(slurp(page));
  const Shown s = show(page, dir / "report.png", 1100, 2400);
  INFO("console: " << (s.console.empty() ? "" : s.console.front()));
  CHECK(s.console.empty());
  // Step breakdown, three pipeline charts and the memory timeline, each with shapes drawn.
  const auto plots = svgs(s.dom);
  CHECK(plots.size() == 5);
  for (const auto& svg : plots) CHECK(shapes(svg) >= 5);
  CHECK(s.dom.find("Memory of rank 0") != std::string::npos);
  CHECK(is_png(s.screenshot));
}

TEST_CASE("the scaling report renders offline: six plots with a line each, no console message") {
  const fs::path dir = temp_dir() / "scale-report";
  Result r = run(fmt::format("scale configs/gpt3-175b-a100-1024.json --gpus 256,512,1024 --report '{}'", dir.string()));
  REQUIRE(r.code == 0);
  const fs::path page = dir / "index.html";
  check_offline(slurp(page));
  const Shown s = show(page, dir / "report.png", 1100, 1300);
  INFO("console: " << (s.console.empty() ? "" : s.console.front()));
  CHECK(s.console.empty());
  // Throughput, tokens/s/GPU, MFU, scaling efficiency, bubble and communication, memory peak.
  const auto plots = svgs(s.dom);
  CHECK(plots.size() == 6);
  for (const auto& svg : plots) {
    CHECK(svg.find("<polyline") != std::string::npos);
    CHECK(shapes(svg) >= 3 + 5);  // a line and three points, axes and grid lines
  }
  CHECK(is_png(s.screenshot));
}

int main(int argc, char* argv[]) {
  if (chromium().empty()) {
    std::printf("SKIPPED: chromium not found on PATH (tools/setup installs it; or set TRAINSIM_CHROMIUM)\n");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
