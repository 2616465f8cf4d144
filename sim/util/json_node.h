#pragma once
// A read-only view of one JSON value that knows its file and path, so every accessor can fail with
// an InputError naming both. Parsers walk a document with it and call reject_unknown() on every
// object, so a misspelt key is an error instead of a silent default.

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace trainsim::util {

class JsonNode {
 public:
  JsonNode(const nlohmann::json& value, std::string file, std::string path = {});

  const nlohmann::json& json() const { return *value_; }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }

  // Object access. at() fails with "missing key" when absent; find() returns nullopt.
  JsonNode at(std::string_view key) const;
  std::optional<JsonNode> find(std::string_view key) const;
  bool has(std::string_view key) const;
  void expect_object() const;
  // Fails on the first key not in `allowed` (in document order, so the message is deterministic).
  void reject_unknown(std::initializer_list<std::string_view> allowed) const;

  bool is_string() const { return value_->is_string(); }
  bool is_object() const { return value_->is_object(); }

  std::string as_string() const;
  bool as_bool() const;
  double as_number() const;
  double as_positive_number() const;     // > 0
  double as_nonnegative_number() const;  // >= 0
  std::int64_t as_int() const;
  std::int64_t as_positive_int() const;  // >= 1
  std::int64_t as_nonnegative_int() const;

  [[noreturn]] void fail(const std::string& problem) const;

 private:
  const nlohmann::json* value_;
  std::string file_;
  std::string path_;
};

// Parses a file; a missing file or malformed JSON is an InputError naming the file (and line).
nlohmann::json read_json_file(const std::string& file);
// A whole file's text; a file that cannot be opened is an InputError naming it.
std::string read_text_file(const std::string& file);
// Parses JSON text that `source` names in messages (a file, or a script's here-document); malformed
// JSON is an InputError naming it (and the line).
nlohmann::json parse_json_text(const std::string& text, const std::string& source);

// "parallel" + "tp" -> "parallel.tp"; "" + "model" -> "model".
std::string join_path(std::string_view parent, std::string_view key);

}  // namespace trainsim::util
