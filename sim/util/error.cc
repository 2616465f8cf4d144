#include "util/error.h"

#include <cstdio>
#include <cstdlib>

namespace trainsim::util {

namespace {
std::string compose(const std::string& file, const std::string& path, const std::string& problem) {
  std::string out = file.empty() ? std::string("<input>") : file;
  out += ": ";
  if (!path.empty()) {
    out += path;
    out += ": ";
  }
  out += problem;
  return out;
}
}  // namespace

InputError::InputError(std::string file, std::string path, std::string problem)
    : std::runtime_error(compose(file, path, problem)),
      file_(std::move(file)),
      path_(std::move(path)),
      problem_(std::move(problem)) {
}

void assert_fail(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "trainsim: internal error: assertion '%s' failed at %s:%d\n", expr, file, line);
  std::abort();
}

}  // namespace trainsim::util
