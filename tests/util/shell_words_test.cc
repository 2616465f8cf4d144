// A launch script read as bash reads it: the words of each command after quoting, comments,
// continuations and the script's own variables, with the line each word was written on.

#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "util/error.h"
#include "util/shell_words.h"

using trainsim::util::InputError;
using trainsim::util::split_shell_commands;
using Words = std::vector<std::string>;

TEST_CASE("quotes, escapes, comments and continuations give bash's words") {
  const auto c = split_shell_commands(
      "python train.py --a 'x y' --b \"p q\" \\\n  --c x\\ y # a comment\n"
      "# a whole-line comment\n"
      "run done; run again && run last\n",
      "s.sh");
  REQUIRE(c.size() == 4);
  CHECK(c[0].words == Words{"python", "train.py", "--a", "x y", "--b", "p q", "--c", "x y"});
  CHECK(c[0].lines == std::vector<int>{1, 1, 1, 1, 1, 1, 2, 2});
  CHECK(c[1].words == Words{"run", "done"});
  CHECK(c[2].words == Words{"run", "again"});
  CHECK(c[3].words == Words{"run", "last"});
}

TEST_CASE("the script's variables expand in order, arrays word by word, unset ones as written") {
  const auto c = split_shell_commands(
      "N=8\n"
      "export NODES=2\n"
      "ARGS=(\n  --x $N   # inline comment\n  --y \"a b\"\n)\n"
      "FLAT=\"--p 1 --q 2\"\n"
      "torchrun ${ARGS[@]} $FLAT \"$FLAT\" ${MISSING:-7} ${N:-9} $UNSET $((N * NODES + 1)) $(hostname)\n",
      "s.sh");
  REQUIRE(c.size() == 1);
  // Unquoted, ${ARGS[@]} splits its elements at white space too ("a b" is two words), as bash does.
  CHECK(c[0].words == Words{"torchrun", "--x", "8", "--y", "a", "b", "--p", "1", "--q", "2", "--p 1 --q 2", "7", "8",
                            "$UNSET", "17", "$(hostname)"});
  // --x was written on line 4 (the array's line), its value 8 comes from line 1.
  CHECK(c[0].lines[1] == 4);
  CHECK(c[0].lines[2] == 1);
  CHECK(c[0].lines[6] == 7);  // --p: FLAT's line
}

TEST_CASE("an assignment before a command is that command's environment, not a script variable") {
  const auto c = split_shell_commands("X=1 run --a $X\n", "s.sh");
  REQUIRE(c.size() == 1);
  CHECK(c[0].words == Words{"run", "--a", "$X"});
}

TEST_CASE("redirections and their targets are dropped") {
  const auto c = split_shell_commands("run --a 1 2>&1 > log.txt | tee out.txt\n", "s.sh");
  REQUIRE(c.size() == 2);
  CHECK(c[0].words == Words{"run", "--a", "1"});
  CHECK(c[1].words == Words{"tee", "out.txt"});
}

TEST_CASE("an unterminated quote or array names the line it opens on") {
  try {
    split_shell_commands("a\nb \"never closed\nc\n", "s.sh");
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) == "s.sh: line 2: a \" quote is never closed");
  }
  CHECK_THROWS_AS(split_shell_commands("A=(\n--x 1\n", "s.sh"), InputError);
  CHECK_THROWS_AS(split_shell_commands("x 'open", "s.sh"), InputError);
}

TEST_CASE("if and case choose the branches that run; an undecidable test reads them all, with a note") {
  std::vector<std::string> notes;
  const auto c = split_shell_commands(
      "SCALE=800M\nNODES=2\n"
      "case \"$SCALE\" in\n  8B|8b) L=56 ;;\n  800M) L=48 ;;\n  *) L=1 ;;\nesac\n"
      "if [ \"$NODES\" -gt 1 ]; then D=multi; elif [ -z \"$NODES\" ]; then D=none; else D=single; fi\n"
      "if [[ $SCALE == *M ]]; then\n  A=(--small)\nelse\n  A=(--big)\nfi\n"
      "if [ -f /etc/x ]; then W=1; else W=2; fi\n"
      "echo \"--not-a-flag\"\n"
      "run --layers $L --mode $D ${A[@]} --w $W\n",
      "s.sh", &notes);
  REQUIRE(c.size() == 1);
  CHECK(c[0].words == Words{"run", "--layers", "48", "--mode", "multi", "--small", "--w", "2"});
  REQUIRE(notes.size() == 1);  // the file test: both branches read, the last (W=2) wins
  CHECK(notes[0].find("line 14: cannot tell whether `[ -f /etc/x ]` holds") == 0);
}

TEST_CASE("+= appends to arrays and strings; a quoted default loses its quotes; ${X} works in arithmetic") {
  const auto c = split_shell_commands(
      "A=(--a 1)\nA+=( \"--b 2\" )\nS=x\nS+=y\nN=${UNSET:-\"3\"}\nM=$(( ${N} * 2 ))\nrun ${A[@]} $S $N $M\n", "s.sh");
  REQUIRE(c.size() == 1);
  CHECK(c[0].words == Words{"run", "--a", "1", "--b", "2", "xy", "3", "6"});
}

TEST_CASE("eval reads its words again as script text; the environment given beforehand is the script's") {
  const auto c = split_shell_commands("CMD=\"run --tp $TP --x 'a b'\"\nCMD=\"$CMD | tee log\"\neval $CMD\n", "s.sh",
                                      nullptr, {{"TP", "4"}});
  REQUIRE(c.size() == 2);
  CHECK(c[0].words == Words{"run", "--tp", "4", "--x", "a b"});
  CHECK(c[0].lines == std::vector<int>{3, 3, 3, 3, 3});
  CHECK(c[1].words == Words{"tee", "log"});
}

TEST_CASE("here-documents are not commands; what cat or tee writes from one is kept as the file's text") {
  std::vector<std::string> notes;
  std::map<std::string, std::string> files;
  const auto c = split_shell_commands(
      "MBS=2\n"
      "DS=./ds_config_$MBS.json\n"
      "cat <<EOT > $DS\n"
      "{\n"
      "  \"train_micro_batch_size_per_gpu\": $MBS,\n"
      "  \"gas\": $((MBS * 4)), \"cost\": \\$5\n"
      "}\n"
      "EOT\n"
      "cat > raw.txt <<'EOF'\n"
      "$MBS --not-a-flag\n"
      "EOF\n"
      "tee -a raw.txt <<-END >/dev/null\n"
      "\t\tmore $MBS\n"
      "\tEND\n"
      "python pretrain_gpt.py --deepspeed_config $DS --micro-batch-size $MBS\n",
      "s.sh", &notes, {}, &files);
  // Three cat/tee commands and the launch: the bodies (with their --not-a-flag) are text, not words.
  REQUIRE(c.size() == 4);
  CHECK(c[3].words ==
        Words{"python", "pretrain_gpt.py", "--deepspeed_config", "./ds_config_2.json", "--micro-batch-size", "2"});
  CHECK(c[3].lines == std::vector<int>{15, 15, 15, 2, 15, 1});  // a variable's words: the line that set it
  REQUIRE(files.size() == 2);
  // Unquoted delimiter: $MBS and $((...)) expand, \$ stays a dollar sign.
  CHECK(files.at("./ds_config_2.json") ==
        "{\n  \"train_micro_batch_size_per_gpu\": 2,\n  \"gas\": 8, \"cost\": $5\n}\n");
  // Quoted delimiter: as written; <<- strips the leading tabs; tee -a appends.
  CHECK(files.at("raw.txt") == "$MBS --not-a-flag\nmore 2\n");
  CHECK(notes.empty());
}
