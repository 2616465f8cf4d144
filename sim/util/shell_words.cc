#include "util/shell_words.h"

#include <cctype>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "util/error.h"

namespace trainsim::util {

namespace {

bool name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_';
}
bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
}

// The length of "NAME=" when `w` opens with an assignment, else 0.
std::size_t assignment_prefix(std::string_view w) {
  if (w.empty() || !name_start(w[0])) return 0;
  std::size_t i = 1;
  while (i < w.size() && name_char(w[i])) ++i;
  return i < w.size() && w[i] == '=' ? i + 1 : 0;
}

// A variable's words, each with the line it was written on.
struct Value {
  std::vector<std::string> words;
  std::vector<int> lines;
};
using Vars = std::map<std::string, Value, std::less<>>;

// bash's integer arithmetic, the part launch scripts use: + - * / % and parentheses over integers
// and variables ($NAME, ${NAME} or NAME). nullopt when a variable is unset or not an integer, or on a
// division by zero or a syntax error.
class Arithmetic {
 public:
  Arithmetic(std::string_view text, const Vars& vars) : s_(text), vars_(vars) {}

  std::optional<std::int64_t> evaluate() {
    auto v = sum();
    skip_space();
    if (!v || i_ != s_.size()) return std::nullopt;
    return v;
  }

 private:
  void skip_space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_])) != 0) ++i_;
  }
  bool eat(char c) {
    skip_space();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  std::optional<std::int64_t> sum() {
    auto v = product();
    while (v) {
      if (eat('+')) {
        auto r = product();
        if (!r) return std::nullopt;
        *v += *r;
      } else if (eat('-')) {
        auto r = product();
        if (!r) return std::nullopt;
        *v -= *r;
      } else {
        break;
      }
    }
    return v;
  }
  std::optional<std::int64_t> product() {
    auto v = factor();
    while (v) {
      skip_space();
      if (i_ >= s_.size()) break;
      const char op = s_[i_];
      if (op != '*' && op != '/' && op != '%') break;
      ++i_;
      auto r = factor();
      if (!r || (op != '*' && *r == 0)) return std::nullopt;
      *v = op == '*' ? *v * *r : op == '/' ? *v / *r : *v % *r;
    }
    return v;
  }
  std::optional<std::int64_t> factor() {
    if (eat('-')) {
      auto v = factor();
      return v ? std::optional<std::int64_t>(-*v) : std::nullopt;
    }
    if (eat('+')) return factor();
    if (eat('(')) {
      auto v = sum();
      return v && eat(')') ? v : std::nullopt;
    }
    skip_space();
    if (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])) != 0) return integer(read_while_digit());
    const bool braced = eat('$') && eat('{');
    skip_space();
    const std::size_t from = i_;
    while (i_ < s_.size() && name_char(s_[i_])) ++i_;
    if (from == i_ || (braced && !eat('}'))) return std::nullopt;
    const auto it = vars_.find(s_.substr(from, i_ - from));
    if (it == vars_.end() || it->second.words.size() != 1) return std::nullopt;
    return integer(it->second.words[0]);
  }
  std::string_view read_while_digit() {
    const std::size_t from = i_;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])) != 0) ++i_;
    return s_.substr(from, i_ - from);
  }
  static std::optional<std::int64_t> integer(std::string_view t) {
    if (t.empty() || t.size() > 18) return std::nullopt;
    std::int64_t v = 0;
    for (char c : t) {
      if (std::isdigit(static_cast<unsigned char>(c)) == 0) return std::nullopt;
      v = v * 10 + (c - '0');
    }
    return v;
  }

  std::string_view s_;
  const Vars& vars_;
  std::size_t i_ = 0;
};

class Splitter {
 public:
  Splitter(std::string_view text, const std::string& source) : s_(text), source_(source) {}

  std::vector<ShellCommand> run() {
    while (i_ < s_.size()) step();
    if (!array_name_.empty()) fail(array_line_, fmt::format("the array {}=( is never closed", array_name_));
    end_command();
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(int line, const std::string& problem) const {
    throw InputError(source_, fmt::format("line {}", line), problem);
  }

  void add_text(std::string_view t, int line = 0) {
    if (!in_word_) word_line_ = line > 0 ? line : line_;
    word_ += t;
    in_word_ = true;
  }
  void end_word() {
    if (!in_word_) return;
    if (skip_word_) {
      skip_word_ = false;
    } else {
      words_.push_back(std::move(word_));
      lines_.push_back(word_line_);
    }
    word_.clear();
    in_word_ = false;
    plain_ = true;
  }
  void end_command() {
    end_word();
    // Leading declaration words, then the assignments: a command of assignments alone sets the
    // script's variables; before a command they are its environment only.
    std::size_t k = 0;
    if (!words_.empty() && (words_[0] == "export" || words_[0] == "declare" || words_[0] == "readonly" ||
                            words_[0] == "local" || words_[0] == "typeset")) {
      k = 1;
      while (k < words_.size() && words_[k].starts_with('-')) ++k;
    }
    std::size_t a = k;
    while (a < words_.size() && assignment_prefix(words_[a]) > 0) ++a;
    if (a == words_.size()) {
      for (std::size_t j = k; j < a; ++j) {
        const std::size_t p = assignment_prefix(words_[j]);
        vars_[words_[j].substr(0, p - 1)] = {{words_[j].substr(p)}, {lines_[j]}};
      }
    } else {
      const auto from = static_cast<std::ptrdiff_t>(a);
      out_.push_back({std::vector<std::string>(words_.begin() + from, words_.end()),
                      std::vector<int>(lines_.begin() + from, lines_.end())});
    }
    words_.clear();
    lines_.clear();
  }

  // A variable's value into the word being built: unquoted, split into words at white space;
  // quoted, as one word ("${A[@]}": one word per element). Unset: its text as written.
  void insert(const Value* value, std::string_view raw, bool quoted, bool every_element) {
    plain_ = false;
    if (value == nullptr) {
      add_text(raw);
      return;
    }
    const auto& words = value->words;
    if (quoted && !every_element) {
      std::string joined;
      for (std::size_t j = 0; j < words.size(); ++j) joined += (j > 0 ? " " : "") + words[j];
      add_text(joined, value->lines.empty() ? 0 : value->lines[0]);
      return;
    }
    bool first = true;
    for (std::size_t j = 0; j < words.size(); ++j) {
      const std::string& element = words[j];
      const int line = value->lines[j];
      if (quoted) {
        if (!first) end_word();
        add_text(element, line);
        first = false;
        continue;
      }
      std::size_t p = 0;
      while (p < element.size()) {
        while (p < element.size() && std::isspace(static_cast<unsigned char>(element[p])) != 0) ++p;
        if (p >= element.size()) break;
        std::size_t q = p;
        while (q < element.size() && std::isspace(static_cast<unsigned char>(element[q])) == 0) ++q;
        if (!first) end_word();
        add_text(std::string_view(element).substr(p, q - p), line);
        first = false;
        p = q;
      }
    }
  }

  const Value* lookup(std::string_view name) const {
    const auto it = vars_.find(name);
    return it == vars_.end() ? nullptr : &it->second;
  }

  // The end of a parenthesised run opened at `open` (s_[open] == '('), or npos.
  std::size_t matching_paren(std::size_t open) const {
    int depth = 0;
    for (std::size_t j = open; j < s_.size(); ++j) {
      if (s_[j] == '(') ++depth;
      if (s_[j] == ')' && --depth == 0) return j;
    }
    return std::string_view::npos;
  }

  void count_lines(std::string_view t) {
    for (char c : t)
      if (c == '\n') ++line_;
  }

  // At a '$'.
  void dollar(bool quoted) {
    const std::size_t at = i_;
    const char next = at + 1 < s_.size() ? s_[at + 1] : '\0';
    if (next == '(') {
      const std::size_t close = matching_paren(at + 1);
      if (close == std::string_view::npos) fail(line_, "a $( is never closed");
      const std::string_view raw = s_.substr(at, close + 1 - at);
      i_ = close + 1;
      count_lines(raw);
      // $((expr)): integer arithmetic; $(command): kept as written.
      if (raw.starts_with("$((") && raw.ends_with("))")) {
        if (auto v = Arithmetic(raw.substr(3, raw.size() - 5), vars_).evaluate()) {
          plain_ = false;
          add_text(std::to_string(*v));
          return;
        }
      }
      insert(nullptr, raw, quoted, false);
      return;
    }
    if (next == '{') {
      const std::size_t close = s_.find('}', at);
      if (close == std::string_view::npos) fail(line_, "a ${ is never closed");
      const std::string_view raw = s_.substr(at, close + 1 - at);
      const std::string_view body = raw.substr(2, raw.size() - 3);
      i_ = close + 1;
      std::size_t n = 0;
      while (n < body.size() && name_char(body[n])) ++n;
      const std::string_view name = body.substr(0, n);
      const std::string_view rest = body.substr(n);
      const auto* value = lookup(name);
      if (rest.empty()) return insert(value, raw, quoted, false);
      if (rest == "[@]" || rest == "[*]") return insert(value, raw, quoted, rest == "[@]");
      if (rest.starts_with(":-") || rest.starts_with("-")) {
        const bool set = value != nullptr && (rest[0] == '-' || !(value->words.size() == 1 && value->words[0].empty()));
        if (set) return insert(value, raw, quoted, false);
        std::string_view fallback = rest.substr(rest[0] == ':' ? 2 : 1);
        if (fallback.starts_with('$')) {
          const std::string_view inner = fallback.substr(1);
          if (const auto* v = lookup(inner)) return insert(v, raw, quoted, false);
          return insert(nullptr, raw, quoted, false);
        }
        const Value literal{{std::string(fallback)}, {line_}};
        return insert(&literal, raw, quoted, false);
      }
      return insert(nullptr, raw, quoted, false);
    }
    if (name_start(next)) {
      std::size_t e = at + 1;
      while (e < s_.size() && name_char(s_[e])) ++e;
      const std::string_view raw = s_.substr(at, e - at);
      i_ = e;
      return insert(lookup(raw.substr(1)), raw, quoted, false);
    }
    // $1, $@, $# ... and a lone '$': kept as written.
    const std::size_t len =
        next != '\0' && std::string_view("0123456789@*#?$!-").find(next) != std::string_view::npos ? 2 : 1;
    plain_ = len == 1 && plain_;
    add_text(s_.substr(at, len));
    i_ = at + len;
  }

  void single_quoted() {
    const std::size_t close = s_.find('\'', i_ + 1);
    if (close == std::string_view::npos) fail(line_, "a ' quote is never closed");
    const std::string_view body = s_.substr(i_ + 1, close - i_ - 1);
    plain_ = false;
    add_text(body);
    count_lines(body);
    i_ = close + 1;
  }

  void double_quoted() {
    const int opened = line_;
    plain_ = false;
    add_text("");
    ++i_;
    while (true) {
      if (i_ >= s_.size()) fail(opened, "a \" quote is never closed");
      const char c = s_[i_];
      if (c == '"') {
        ++i_;
        return;
      }
      if (c == '\\' && i_ + 1 < s_.size()) {
        const char e = s_[i_ + 1];
        if (e == '\n') {
          ++line_;
        } else if (e == '"' || e == '\\' || e == '$' || e == '`') {
          add_text(std::string_view(&s_[i_ + 1], 1));
        } else {
          add_text(s_.substr(i_, 2));
        }
        i_ += 2;
        continue;
      }
      if (c == '$') {
        dollar(true);
        continue;
      }
      if (c == '\n') ++line_;
      add_text(std::string_view(&s_[i_], 1));
      ++i_;
    }
  }

  // At '>' or '<': drops the redirection and its target (a file, or &N).
  void redirection() {
    if (in_word_ && plain_ && !word_.empty() && word_.find_first_not_of("0123456789") == std::string::npos) {
      word_.clear();
      in_word_ = false;
    } else {
      end_word();
    }
    while (i_ < s_.size() && (s_[i_] == '>' || s_[i_] == '<')) ++i_;
    if (i_ < s_.size() && s_[i_] == '&') {
      ++i_;
      while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) != 0 || s_[i_] == '-')) ++i_;
      return;
    }
    skip_word_ = true;
  }

  void step() {
    const char c = s_[i_];
    const bool in_array = !array_name_.empty();
    switch (c) {
      case '\n':
        ++line_;
        ++i_;
        in_array ? end_word() : end_command();
        return;
      case ' ':
      case '\t':
      case '\r':
        end_word();
        ++i_;
        return;
      case '#':
        if (in_word_) break;
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
        return;
      case '\\':
        if (i_ + 1 < s_.size() && s_[i_ + 1] == '\n') {
          ++line_;
        } else if (i_ + 1 < s_.size()) {
          plain_ = false;
          add_text(s_.substr(i_ + 1, 1));
        }
        i_ += 2;
        return;
      case '\'':
        single_quoted();
        return;
      case '"':
        double_quoted();
        return;
      case '$':
        dollar(false);
        return;
      case ';':
      case '&':
      case '|':
        while (i_ < s_.size() && (s_[i_] == ';' || s_[i_] == '&' || s_[i_] == '|')) ++i_;
        in_array ? end_word() : end_command();
        return;
      case '(':
        ++i_;
        if (!in_array && in_word_ && plain_ && assignment_prefix(word_) == word_.size()) {
          array_name_ = word_.substr(0, word_.size() - 1);
          array_line_ = line_;
          word_.clear();
          in_word_ = false;
          saved_words_ = std::move(words_);
          saved_lines_ = std::move(lines_);
          words_.clear();
          lines_.clear();
        } else {
          end_word();
        }
        return;
      case ')':
        ++i_;
        end_word();
        if (in_array) {
          vars_[array_name_] = {std::move(words_), std::move(lines_)};
          words_ = std::move(saved_words_);
          lines_ = std::move(saved_lines_);
          saved_words_.clear();
          saved_lines_.clear();
          array_name_.clear();
        }
        return;
      case '>':
      case '<':
        redirection();
        return;
      default:
        break;
    }
    add_text(s_.substr(i_, 1));
    ++i_;
  }

  std::string_view s_;
  const std::string& source_;
  std::size_t i_ = 0;
  int line_ = 1;
  Vars vars_;
  std::vector<ShellCommand> out_;
  std::vector<std::string> words_;
  std::vector<int> lines_;
  std::string word_;
  int word_line_ = 1;
  bool in_word_ = false;
  bool plain_ = true;  // the word so far has no quotes, escapes or expansions
  bool skip_word_ = false;
  std::string array_name_;  // the array NAME=( being read
  int array_line_ = 0;
  std::vector<std::string> saved_words_;
  std::vector<int> saved_lines_;
};

}  // namespace

std::vector<ShellCommand> split_shell_commands(std::string_view text, const std::string& source) {
  return Splitter(text, source).run();
}

}  // namespace trainsim::util
