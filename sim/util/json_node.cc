#include "util/json_node.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "util/error.h"

namespace trainsim::util {

namespace {
const char* type_name(const nlohmann::json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}
}  // namespace

std::string join_path(std::string_view parent, std::string_view key) {
  if (parent.empty()) return std::string(key);
  return fmt::format("{}.{}", parent, key);
}

JsonNode::JsonNode(const nlohmann::json& value, std::string file, std::string path)
    : value_(&value), file_(std::move(file)), path_(std::move(path)) {
}

void JsonNode::fail(const std::string& problem) const {
  throw InputError(file_, path_, problem);
}

void JsonNode::expect_object() const {
  if (!value_->is_object()) fail(fmt::format("expected an object, got {}", type_name(*value_)));
}

bool JsonNode::has(std::string_view key) const {
  return value_->is_object() && value_->contains(key);
}

JsonNode JsonNode::at(std::string_view key) const {
  expect_object();
  auto it = value_->find(key);
  if (it == value_->end()) throw InputError(file_, join_path(path_, key), "missing required key");
  return JsonNode(*it, file_, join_path(path_, key));
}

std::optional<JsonNode> JsonNode::find(std::string_view key) const {
  expect_object();
  auto it = value_->find(key);
  if (it == value_->end()) return std::nullopt;
  return JsonNode(*it, file_, join_path(path_, key));
}

void JsonNode::reject_unknown(std::initializer_list<std::string_view> allowed) const {
  expect_object();
  for (auto it = value_->begin(); it != value_->end(); ++it) {
    bool known = false;
    for (std::string_view a : allowed) known = known || a == it.key();
    if (!known) {
      std::string list;
      for (std::string_view a : allowed) {
        if (!list.empty()) list += ", ";
        list += a;
      }
      throw InputError(file_, join_path(path_, it.key()), fmt::format("unknown key (expected one of: {})", list));
    }
  }
}

std::string JsonNode::as_string() const {
  if (!value_->is_string()) fail(fmt::format("expected a string, got {}", type_name(*value_)));
  return value_->get<std::string>();
}

bool JsonNode::as_bool() const {
  if (!value_->is_boolean()) fail(fmt::format("expected true or false, got {}", type_name(*value_)));
  return value_->get<bool>();
}

double JsonNode::as_number() const {
  if (!value_->is_number()) fail(fmt::format("expected a number, got {}", type_name(*value_)));
  double v = value_->get<double>();
  if (!std::isfinite(v)) fail("expected a finite number");
  return v;
}

double JsonNode::as_positive_number() const {
  double v = as_number();
  if (!(v > 0)) fail(fmt::format("must be positive, got {}", v));
  return v;
}

double JsonNode::as_nonnegative_number() const {
  double v = as_number();
  if (v < 0) fail(fmt::format("must not be negative, got {}", v));
  return v;
}

std::int64_t JsonNode::as_int() const {
  if (value_->is_number_integer()) return value_->get<std::int64_t>();
  if (value_->is_number_float()) {
    double v = value_->get<double>();
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.0e15) return static_cast<std::int64_t>(v);
    fail(fmt::format("expected an integer, got {}", v));
  }
  fail(fmt::format("expected an integer, got {}", type_name(*value_)));
}

std::int64_t JsonNode::as_positive_int() const {
  std::int64_t v = as_int();
  if (v < 1) fail(fmt::format("must be a positive integer, got {}", v));
  return v;
}

std::int64_t JsonNode::as_nonnegative_int() const {
  std::int64_t v = as_int();
  if (v < 0) fail(fmt::format("must not be negative, got {}", v));
  return v;
}

std::string read_text_file(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError(file, "", "cannot open file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

nlohmann::json parse_json_text(const std::string& text, const std::string& source) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();
    auto pos = what.find("parse error");
    throw InputError(source, "", "malformed JSON: " + (pos == std::string::npos ? what : what.substr(pos)));
  }
}

nlohmann::json read_json_file(const std::string& file) {
  return parse_json_text(read_text_file(file), file);
}

}  // namespace trainsim::util
