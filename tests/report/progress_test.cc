// The progress bar: its ETA is elapsed · (1 - f) / f, it draws only when enabled (a terminal), and
// it clears its line when done so the command's output stays clean.

#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "report/progress.h"

using namespace trainsim;

namespace {

std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  for (int c = std::fgetc(f); c != EOF; c = std::fgetc(f)) out += static_cast<char>(c);
  return out;
}

}  // namespace

TEST_CASE("ETA: 10 s for the first quarter leaves 30 s; two hours for half leaves two hours") {
  CHECK(report::format_eta(10, 0.25) == "0:30");
  CHECK(report::format_eta(7200, 0.5) == "2:00:00");
  CHECK(report::format_eta(5, 0) == "?");
  CHECK(report::format_eta(5, 1) == "0:00");
}

TEST_CASE("the bar line shows the share done, the count, the ETA and a note") {
  CHECK(report::progress_line("scaling", 3, 6, 10, "512 GPUs", 10) ==
        "scaling [#####     ]  50%  3/6  ETA 0:10  512 GPUs");
  CHECK(report::progress_line("x", 0, 4, 0, "", 4) == "x [    ]   0%  0/4  ETA ?");
}

TEST_CASE("a disabled bar writes nothing; an enabled one draws and then clears its line") {
  std::FILE* off = std::tmpfile();
  {
    report::ProgressBar bar("x", 2, false, off);
    bar.set(1);
    bar.set(2);
  }
  CHECK(contents(off).empty());
  std::fclose(off);

  std::FILE* on = std::tmpfile();
  {
    report::ProgressBar bar("x", 2, true, on);
    bar.set(2, "done");
  }
  const std::string s = contents(on);
  CHECK(s.find("x [########################] 100%  2/2") != std::string::npos);
  CHECK(s.substr(s.size() - 4) == "\r\033[K");  // cleared at the end
  std::fclose(on);
}
