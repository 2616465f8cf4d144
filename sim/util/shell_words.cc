#include "util/shell_words.h"

#include <algorithm>
#include <array>
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

// The length of "NAME=" or "NAME+=" when `w` opens with an assignment, else 0.
std::size_t assignment_prefix(std::string_view w) {
  if (w.empty() || !name_start(w[0])) return 0;
  std::size_t i = 1;
  while (i < w.size() && name_char(w[i])) ++i;
  if (i < w.size() && w[i] == '=') return i + 1;
  return i + 1 < w.size() && w[i] == '+' && w[i + 1] == '=' ? i + 2 : 0;
}

// The variable an assignment of prefix length `p` sets, and whether it appends (+=).
std::string assigned_name(std::string_view w, std::size_t p) {
  return std::string(w.substr(0, w[p - 2] == '+' ? p - 2 : p - 1));
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
    const std::string_view name = s_.substr(from, i_ - from);
    if (name.empty() || (braced && !eat('}'))) return std::nullopt;
    const auto it = vars_.find(name);
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

  // A variable set before the script runs (line 0: not written in the script).
  void set(const std::string& name, const std::string& value) { vars_[name] = {{value}, {0}}; }

  std::vector<ShellCommand> run(std::vector<std::string>* notes, std::map<std::string, std::string>* files) {
    while (i_ < s_.size()) step();
    if (!array_name_.empty()) fail(array_line_, fmt::format("the array {}=( is never closed", array_name_));
    if (!heredocs_.empty()) read_heredocs();
    end_command();
    if (notes != nullptr) *notes = std::move(notes_);
    if (files != nullptr) *files = std::move(files_);
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
      if (capture_target_) redirect_to_ = word_;
      capture_target_ = false;
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
    control();
    write_file();
    if (words_.empty() || !active() || words_[0] == "echo" || words_[0] == "printf") {
      words_.clear();
      lines_.clear();
      return;
    }
    if (words_[0] == "eval") return evaluate();
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
        const std::string name = assigned_name(words_[j], p);
        Value& v = vars_[name];
        if (words_[j][p - 2] == '+' && v.words.size() == 1) {
          v.words[0] += words_[j].substr(p);  // NAME+=text appends to a string
        } else {
          v = {{words_[j].substr(p)}, {lines_[j]}};
        }
      }
    } else {
      const auto from = static_cast<std::ptrdiff_t>(a);
      out_.push_back({std::vector<std::string>(words_.begin() + from, words_.end()),
                      std::vector<int>(lines_.begin() + from, lines_.end())});
    }
    words_.clear();
    lines_.clear();
  }

  // An open `if` or `case` block: whether the block is read at all, whether its current branch is,
  // whether some branch was taken, and whether a condition could not be decided (then every branch
  // is read in order, as before control flow was understood, and a note says so).
  struct Branch {
    bool parent_active = true;
    bool active = true;
    bool taken = false;
    bool unknown = false;
    bool is_case = false;
    std::string subject;
  };

  bool active() const { return branches_.empty() || branches_.back().active; }
  // Inside `case ... in`, before the current clause's ')' (its patterns are being read).
  bool in_case_pattern() const {
    return !branches_.empty() && branches_.back().is_case &&
           std::find(words_.begin(), words_.end(), ")") == words_.end();
  }

  static bool unexpanded(const std::string& w) {
    return w.find('$') != std::string::npos || w.find('`') != std::string::npos;
  }

  // bash's glob match of `text` against `pattern` (* and ?; no brackets), in linear passes: on a
  // mismatch the last * takes one more character.
  static bool glob(std::string_view text, std::string_view pattern) {
    std::size_t t = 0, p = 0, star = std::string_view::npos, resume = 0;
    while (t < text.size()) {
      if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
        ++t;
        ++p;
      } else if (p < pattern.size() && pattern[p] == '*') {
        star = p++;
        resume = t;
      } else if (star != std::string_view::npos) {
        p = star + 1;
        t = ++resume;
      } else {
        return false;
      }
    }
    while (p < pattern.size() && pattern[p] == '*') ++p;
    return p == pattern.size();
  }

  // The value of a test command ([ ... ], [[ ... ]], test ..., true, false); nullopt when it
  // cannot be told (an operand the script does not set, a file test, another command).
  static std::optional<bool> condition(std::vector<std::string> w) {
    bool negate = false;
    if (!w.empty() && w[0] == "!") {
      negate = true;
      w.erase(w.begin());
    }
    if (w.size() == 1 && (w[0] == "true" || w[0] == "false")) return (w[0] == "true") != negate;
    if (w.empty()) return std::nullopt;
    if (w[0] == "[" && w.back() == "]") {
      w = std::vector<std::string>(w.begin() + 1, w.end() - 1);
    } else if (w[0] == "[[" && w.back() == "]]") {
      w = std::vector<std::string>(w.begin() + 1, w.end() - 1);
    } else if (w[0] == "test") {
      w.erase(w.begin());
    } else {
      return std::nullopt;
    }
    if (!w.empty() && w[0] == "!") {
      negate = !negate;
      w.erase(w.begin());
    }
    for (const auto& x : w)
      if (unexpanded(x)) return std::nullopt;
    std::optional<bool> r;
    if (w.size() == 1) r = !w[0].empty();
    if (w.size() == 2 && w[0] == "-z") r = w[1].empty();
    if (w.size() == 2 && w[0] == "-n") r = !w[1].empty();
    if (w.size() == 3) {
      const std::string& op = w[1];
      if (op == "=" || op == "==") r = glob(w[0], w[2]);
      if (op == "!=") r = !glob(w[0], w[2]);
      static constexpr std::array<std::string_view, 6> kNumeric{"-eq", "-ne", "-gt", "-ge", "-lt", "-le"};
      if (std::find(kNumeric.begin(), kNumeric.end(), op) != kNumeric.end()) {
        const auto a = Arithmetic(w[0], {}).evaluate();
        const auto b = Arithmetic(w[2], {}).evaluate();
        if (!a || !b) return std::nullopt;
        r = op == "-eq"   ? *a == *b
            : op == "-ne" ? *a != *b
            : op == "-gt" ? *a > *b
            : op == "-ge" ? *a >= *b
            : op == "-lt" ? *a < *b
                          : *a <= *b;
      }
    }
    if (!r) return std::nullopt;
    return *r != negate;
  }

  void undecided(int line, const std::string& what) {
    notes_.push_back(
        fmt::format("line {}: cannot tell whether {} holds (a variable the script does not set, or "
                    "not a plain test): every branch is read in order, the last setting wins",
                    line, what));
  }

  static std::string joined(const std::vector<std::string>& w, std::size_t from) {
    std::string out;
    for (std::size_t i = from; i < w.size(); ++i) {
      if (i > from) out += ' ';
      out += w[i];
    }
    return out;
  }

  // Consumes the control-flow words that open the current command (if, elif, else, fi, then, do,
  // done, case, esac, a case clause's patterns, loop heads), leaving the command after them.
  void control() {
    while (!words_.empty()) {
      const std::string w = words_[0];
      const int line = lines_[0];
      auto drop = [this](std::size_t n) {
        words_.erase(words_.begin(), words_.begin() + static_cast<std::ptrdiff_t>(n));
        lines_.erase(lines_.begin(), lines_.begin() + static_cast<std::ptrdiff_t>(n));
      };
      if (w == "if" || w == "elif") {
        const std::vector<std::string> test(words_.begin() + 1, words_.end());
        if (w == "if") branches_.push_back({active(), false, false, false, false, {}});
        if (branches_.empty()) return drop(words_.size());
        Branch& b = branches_.back();
        const auto r = condition(test);
        if (!r && !b.taken && !b.unknown && b.parent_active) undecided(line, fmt::format("`{}`", joined(words_, 1)));
        b.unknown = b.unknown || !r;
        b.active = b.parent_active && (b.unknown || (!b.taken && *r));
        b.taken = b.taken || (r && *r);
        return drop(words_.size());
      }
      if (w == "else") {
        if (!branches_.empty()) {
          Branch& b = branches_.back();
          b.active = b.parent_active && (b.unknown || !b.taken);
        }
        drop(1);
        continue;
      }
      if (w == "fi" || w == "esac") {
        if (!branches_.empty()) branches_.pop_back();
        drop(1);
        continue;
      }
      if (w == "then" || w == "do" || w == "done" || w == "{" || w == "}") {
        drop(1);
        continue;
      }
      if (w == "for" || w == "while" || w == "until" || w == "select") return drop(words_.size());
      if (w == "case" && words_.size() >= 3 && words_[2] == "in") {
        branches_.push_back({active(), false, false, false, true, words_[1]});
        return drop(words_.size());
      }
      // A clause of the innermost case: its patterns, then ')'.
      const auto close = std::find(words_.begin(), words_.end(), ")");
      if (!branches_.empty() && branches_.back().is_case && close != words_.end()) {
        Branch& b = branches_.back();
        bool match = false;
        for (auto it = words_.begin(); it != close; ++it)
          if (*it != "|" && *it != "(") match = match || glob(b.subject, *it);
        if (unexpanded(b.subject) && !b.unknown && b.parent_active)
          undecided(line, fmt::format("the case of `{}`", b.subject));
        b.unknown = b.unknown || unexpanded(b.subject);
        b.active = b.parent_active && (b.unknown || (!b.taken && match));
        b.taken = b.taken || match;
        drop(static_cast<std::size_t>(close - words_.begin()) + 1);
        continue;
      }
      return;
    }
  }

  // `eval WORDS`: the words joined by spaces are read again as script text, with the script's
  // variables, as one more piece of the script at this line (its pipes and quotes now count).
  void evaluate() {
    std::string text;
    for (std::size_t i = 1; i < words_.size(); ++i) {
      if (i > 1) text += ' ';
      text += words_[i];
    }
    const int line = lines_.empty() ? line_ : lines_[0];
    words_.clear();
    lines_.clear();
    if (++eval_depth_ > 8) fail(line, "eval nested more than 8 deep");
    Splitter inner(text, source_);
    inner.vars_ = vars_;
    inner.line_ = line;
    inner.eval_depth_ = eval_depth_;
    std::vector<std::string> notes;
    std::map<std::string, std::string> files;
    auto commands = inner.run(&notes, &files);
    for (auto& [path, written] : files) files_[path] = std::move(written);
    for (auto& c : commands) {
      std::fill(c.lines.begin(), c.lines.end(), line);
      out_.push_back(std::move(c));
    }
    for (auto& n : notes) notes_.push_back(std::move(n));
    vars_ = std::move(inner.vars_);
    --eval_depth_;
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
        // A quoted default: its quotes go, as bash removes them.
        if (fallback.size() >= 2 && (fallback.front() == '"' || fallback.front() == '\'') &&
            fallback.back() == fallback.front())
          fallback = fallback.substr(1, fallback.size() - 2);
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
    const std::size_t op = i_;
    while (i_ < s_.size() && (s_[i_] == '>' || s_[i_] == '<')) ++i_;
    const std::string_view ops = s_.substr(op, i_ - op);
    if (ops == "<<") return heredoc();
    if (i_ < s_.size() && s_[i_] == '&') {
      ++i_;
      while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) != 0 || s_[i_] == '-')) ++i_;
      return;
    }
    if (ops == ">" || ops == ">>") {
      capture_target_ = true;
      redirect_append_ = ops == ">>";
    }
    skip_word_ = true;
  }

  // After `<<` or `<<-`: the here-document's delimiter word. A quoted delimiter ('EOT', "EOT", \EOT)
  // keeps the body as written; otherwise its $variables and $((arithmetic)) expand. The body
  // itself is read at the end of the line (read_heredocs).
  void heredoc() {
    Heredoc h;
    if (i_ < s_.size() && s_[i_] == '-') {
      h.strip_tabs = true;
      ++i_;
    }
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t')) ++i_;
    while (i_ < s_.size() && std::string_view(" \t\n;&|<>()").find(s_[i_]) == std::string_view::npos) {
      const char c = s_[i_++];
      if (c == '\'' || c == '"' || c == '\\') {
        h.expand = false;
        continue;
      }
      h.delimiter += c;
    }
    if (h.delimiter.empty()) fail(line_, "a here-document (<<) without its delimiter word");
    heredocs_.push_back(std::move(h));
  }

  // At the start of the line after a command with here-documents: their bodies, each up to its
  // delimiter's line (or the end of the script, as bash accepts with a warning).
  void read_heredocs() {
    for (const Heredoc& h : heredocs_) {
      std::string body;
      while (i_ < s_.size()) {
        std::size_t eol = s_.find('\n', i_);
        if (eol == std::string_view::npos) eol = s_.size();
        std::string_view text = s_.substr(i_, eol - i_);
        i_ = std::min(eol + 1, s_.size());
        ++line_;
        if (h.strip_tabs)
          while (text.starts_with('\t')) text.remove_prefix(1);
        if (text == h.delimiter) break;
        body += text;
        body += '\n';
      }
      heredoc_body_ += h.expand ? expanded(body) : body;
    }
    heredocs_.clear();
    has_heredoc_ = true;
  }

  // `text` with its $variables, ${...} and $((...)) expanded as a here-document expands them
  // (backslash escapes only \$, \`, \\ and a line continuation; command substitutions kept).
  std::string expanded(const std::string& text) {
    const std::string_view saved_s = s_;
    const std::size_t saved_i = i_;
    const int saved_line = line_;
    std::string saved_word = std::move(word_);
    const bool saved_in_word = in_word_, saved_plain = plain_;
    const int saved_word_line = word_line_;
    s_ = text;
    i_ = 0;
    word_.clear();
    in_word_ = false;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '\\' && i_ + 1 < s_.size() && std::string_view("$`\\\n").find(s_[i_ + 1]) != std::string_view::npos) {
        if (s_[i_ + 1] != '\n') add_text(s_.substr(i_ + 1, 1));
        i_ += 2;
      } else if (c == '$') {
        dollar(true);
      } else {
        add_text(s_.substr(i_, 1));
        ++i_;
      }
    }
    std::string out = std::move(word_);
    s_ = saved_s;
    i_ = saved_i;
    line_ = saved_line;
    word_ = std::move(saved_word);
    in_word_ = saved_in_word;
    plain_ = saved_plain;
    word_line_ = saved_word_line;
    return out;
  }

  // A here-document that `cat > FILE` or `tee [-a] FILE` writes: the file's text, for a reader that
  // later finds FILE named in a command (a DeepSpeed configuration the launch script writes).
  void write_file() {
    if (has_heredoc_ && active() && !words_.empty()) {
      std::string target = redirect_to_;
      bool append = redirect_append_;
      if (words_[0] == "tee") {
        for (std::size_t k = 1; k < words_.size(); ++k) {
          if (words_[k] == "-a" || words_[k] == "--append") {
            append = true;
          } else if (!words_[k].starts_with('-')) {
            target = words_[k];
            break;
          }
        }
      }
      if ((words_[0] == "cat" || words_[0] == "tee") && !target.empty())
        files_[target] = append ? files_[target] + heredoc_body_ : heredoc_body_;
    }
    has_heredoc_ = false;
    heredoc_body_.clear();
    redirect_to_.clear();
    redirect_append_ = false;
  }

  void step() {
    const char c = s_[i_];
    const bool in_array = !array_name_.empty();
    switch (c) {
      case '\n':
        ++line_;
        ++i_;
        if (!heredocs_.empty()) read_heredocs();
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
        if (c == '|' && !in_array && in_case_pattern() && (i_ + 1 >= s_.size() || s_[i_ + 1] != '|')) {
          end_word();
          words_.push_back("|");
          lines_.push_back(line_);
          ++i_;
          return;
        }
        while (i_ < s_.size() && (s_[i_] == ';' || s_[i_] == '&' || s_[i_] == '|')) ++i_;
        in_array ? end_word() : end_command();
        return;
      case '(':
        ++i_;
        if (!in_array && in_word_ && plain_ && assignment_prefix(word_) == word_.size()) {
          array_append_ = word_[word_.size() - 2] == '+';
          array_name_ = assigned_name(word_, word_.size());
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
        if (!in_array && in_case_pattern()) {
          words_.push_back(")");
          lines_.push_back(line_);
        }
        if (in_array && active()) {
          Value& v = vars_[array_name_];
          if (!array_append_) v = {};
          v.words.insert(v.words.end(), words_.begin(), words_.end());
          v.lines.insert(v.lines.end(), lines_.begin(), lines_.end());
        }
        if (in_array) {
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
  std::vector<Branch> branches_;  // the open if / case blocks, innermost last
  int eval_depth_ = 0;
  std::vector<std::string> notes_;
  std::string array_name_;     // the array NAME=( being read
  bool array_append_ = false;  // NAME+=( appends
  int array_line_ = 0;
  std::vector<std::string> saved_words_;
  std::vector<int> saved_lines_;
  struct Heredoc {
    std::string delimiter;
    bool strip_tabs = false;
    bool expand = true;
  };
  std::vector<Heredoc> heredocs_;  // the here-documents of the line being read, bodies still to come
  std::string heredoc_body_;       // the current command's here-document text
  bool has_heredoc_ = false;
  bool capture_target_ = false;  // the next word is a `>` or `>>` target
  std::string redirect_to_;      // the current command's output file
  bool redirect_append_ = false;
  std::map<std::string, std::string> files_;
};

}  // namespace

std::vector<ShellCommand> split_shell_commands(std::string_view text, const std::string& source,
                                               std::vector<std::string>* notes,
                                               const std::map<std::string, std::string>& environment,
                                               std::map<std::string, std::string>* files) {
  Splitter splitter(text, source);
  for (const auto& [name, value] : environment) splitter.set(name, value);
  return splitter.run(notes, files);
}

}  // namespace trainsim::util
