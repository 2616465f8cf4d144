#pragma once
// The one error type for bad input: it names the file, the JSON path and the problem, so main can
// print a single line (`scenario.json: parallel.tp: 3 does not divide heads (64)`) and exit 2.

#include <stdexcept>
#include <string>

namespace trainsim::util {

class InputError : public std::runtime_error {
 public:
  InputError(std::string file, std::string path, std::string problem);

  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  const std::string& problem() const { return problem_; }

 private:
  std::string file_;
  std::string path_;
  std::string problem_;
};

// An invariant of the program broke: a bug in trainsim, never the user's input.
#define TRAINSIM_ASSERT(cond)                                              \
  do {                                                                     \
    if (!(cond)) ::trainsim::util::assert_fail(#cond, __FILE__, __LINE__); \
  } while (false)

[[noreturn]] void assert_fail(const char* expr, const char* file, int line);

}  // namespace trainsim::util
