#pragma once
// Runs the real trainsim binary from the source tree, as a user would, capturing stdout and stderr
// (the CLI, calibrate and report tests).

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>

namespace test_binary {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string out, err;
};

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline fs::path temp_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / fmt::format("trainsim-test-{}", ::getpid());
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

inline Result run_shell(const std::string& command) {
  const fs::path out = temp_dir() / "stdout.txt", err = temp_dir() / "stderr.txt";
  const std::string cmd =
      fmt::format("cd '{}' && {} >'{}' 2>'{}'", TRAINSIM_SOURCE_DIR, command, out.string(), err.string());
  const int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

inline Result run(const std::string& args) {
  return run_shell(fmt::format("'{}' {}", TRAINSIM_BINARY, args));
}

inline fs::path write(const std::string& name, const std::string& text) {
  fs::path p = temp_dir() / name;
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

}  // namespace test_binary
