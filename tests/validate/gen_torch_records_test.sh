#!/usr/bin/env bash
# tools/gen-torch-records end to end: the synthetic device output in tests/validate/data becomes
# step and memory records (a failed configuration a skipped record) that `trainsim validate` runs;
# bad input exits 2 with one line naming the file and the JSON path; synthetic data is never
# written into validation/.
# Usage: gen_torch_records_test.sh SOURCE_DIR TRAINSIM_BINARY
set -euo pipefail
src=$1
trainsim=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gen="$src/tools/gen-torch-records"
data="$src/tests/validate/data/torch_steps_synthetic.json"
fail() { echo "FAIL: $*" >&2; exit 1; }

python3 "$gen" "$data" --out "$tmp/records" --no-gpu-profile 2>"$tmp/gen.err" || fail "generator: $(cat "$tmp/gen.err")"
n=$(ls "$tmp/records" | wc -l)
[ "$n" -eq 5 ] || fail "expected 5 records, got $n: $(ls "$tmp/records")"
[ -f "$tmp/records/torch-h200_llama-125m_s1024_b4_step.json" ] || fail "step record missing"
[ -f "$tmp/records/torch-h200_llama-125m_s1024_b4_memory.json" ] || fail "memory record missing"

# Every record loads and runs: 2 step and 2 memory comparisons, 1 skipped.
TRAINSIM_DATA_DIR="$src" "$trainsim" validate "$tmp/records" --json >"$tmp/validate.json" || fail "trainsim validate failed"
python3 - "$tmp/validate.json" <<'PY' || fail "validate output"
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
assert s["records"] == 5 and s["skipped"] == 1, s
q = s["quantities"]
assert q["step_time_s"]["covered"] == 2 and q["memory_gib"]["covered"] == 2, q
PY

# The same input gives byte-identical records.
python3 "$gen" "$data" --out "$tmp/again" --no-gpu-profile 2>/dev/null
diff -r "$tmp/records" "$tmp/again" >/dev/null || fail "output is not deterministic"

# Bad input: exit 2, one line naming the file and the JSON path.
python3 - "$data" "$tmp/bad.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
del d["configs"][0]["step_time_s"]
json.dump(d, open(sys.argv[2], "w"))
PY
set +e
python3 "$gen" "$tmp/bad.json" --out "$tmp/bad" 2>"$tmp/bad.err"
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "bad input: exit $rc, expected 2"
[ "$(wc -l <"$tmp/bad.err")" -eq 1 ] || fail "bad input: expected one line, got: $(cat "$tmp/bad.err")"
grep -q "bad.json: configs\[0\].step_time_s: missing" "$tmp/bad.err" || fail "bad input message: $(cat "$tmp/bad.err")"

# Synthetic data never lands in validation/.
set +e
python3 "$gen" "$data" --out "$src/validation/torch/synthetic-test" 2>"$tmp/syn.err"
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "synthetic input into validation/: exit $rc, expected 2"
[ ! -e "$src/validation/torch/synthetic-test" ] || fail "synthetic records were written into validation/"
echo "gen-torch-records: ok"
