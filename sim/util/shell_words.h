#pragma once
// Splits a launch script, or a pasted command line, into commands and words the way bash would, for
// `trainsim import megatron`: comments, single and double quotes, backslash escapes and line
// continuations; the script's own variables in order (NAME=value, export NAME=value, arrays
// NAME=(a b c)) and their expansions ($NAME, ${NAME}, ${NAME:-default}, ${NAME[@]}, and integer
// arithmetic $((...))); commands end at newlines, ';', '&', '&&', '|' and '||'; redirections
// (> file, 2>&1) are dropped; if/elif/else/fi and case/esac choose the branches that run (below).
// `eval` reads its words again as script text. Nothing else bash does is done (command substitution,
// globbing): a word that needs it keeps its text, and so does a variable neither the script nor the
// caller's environment sets, so a caller that reads such a word can say what it is.

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace trainsim::util {

struct ShellCommand {
  std::vector<std::string> words;
  // The 1-based line each word was written on: a word from a variable, the line that set the
  // variable; 0 for words that come from no file.
  std::vector<int> lines;
};

// The commands that are not only variable assignments, in order, within the branches of `if` /
// `elif` / `else` and `case` that run: a test of the script's own values ([ ], [[ ]], test: = == !=
// with globs, -eq and the other integer comparisons, -z, -n, !) and case patterns (globs, |) are
// decided; a branch whose test cannot be decided is read with every other branch in order, and a
// line in `notes` says so. Loops are read once; echo and printf commands are not commands to read.
// An unterminated quote, ${ or array is an InputError naming `source` and the line it opens on.
// `environment`: variables set before the script runs (NAME -> value), as the shell's environment
// would set them; the process's own environment is never read, so the result depends on the input
// alone. Here-documents (<<EOT, <<-EOT, <<'EOT') are read as bash reads them, not as commands; the
// text that `cat <<EOT > FILE` or `tee FILE <<EOT` writes goes to `files` (FILE as the script names
// it, after expansion -> the text), so a reader can find a configuration the script writes.
std::vector<ShellCommand> split_shell_commands(std::string_view text, const std::string& source,
                                               std::vector<std::string>* notes = nullptr,
                                               const std::map<std::string, std::string>& environment = {},
                                               std::map<std::string, std::string>* files = nullptr);

}  // namespace trainsim::util
