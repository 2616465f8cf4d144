#!/usr/bin/env bash
# tools/gen-validation: every record in validation/records is exactly what the generator writes from
# the reference file and validation/sources/ (torchtitan.json, megatron-deepspeed.json, mcore-moe.json, nemo-perf.json, dgxc.json, mbridge-verify.json; no record edited by hand, the output deterministic), and a row of a covered source that the
# conversions do not know (here an MPT row on a GPU without a topology) becomes a skipped record
# that `trainsim validate` lists with the reason. Skipped (77) where ../shared/reference is absent.
# Usage: gen_validation_test.sh SOURCE_DIR TRAINSIM_BINARY
set -euo pipefail
src=$1
trainsim=$2
ref="$src/../shared/reference/published-runs.json"
[ -f "$ref" ] || { echo "no $ref: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

python3 "$src/tools/gen-validation" --reference "$ref" --out "$tmp/records" >/dev/null 2>"$tmp/gen.err" ||
  fail "generator: $(cat "$tmp/gen.err")"
# Every committed record is reproduced byte for byte (a reference file with more rows may add records).
for f in "$src"/validation/records/*.json; do
  g="$tmp/records/$(basename "$f")"
  [ -f "$g" ] || fail "$(basename "$f") is not written by the generator"
  cmp -s "$f" "$g" || fail "$(basename "$f") differs from the generator's output: $(diff "$f" "$g" | head -10)"
done

python3 - "$ref" "$tmp/fake.json" <<'PY'
import json, sys
row = next(r for r in json.load(open(sys.argv[1])) if r["id"].startswith("mpt_"))
row["id"] = "mpt_test_unknown_gpu"
row["cluster"]["gpu"] = "L40S 48GB"
json.dump([row], open(sys.argv[2], "w"))
PY
echo '{"pages": {}, "runs": []}' >"$tmp/no-torchtitan.json"
python3 "$src/tools/gen-validation" --reference "$tmp/fake.json" --torchtitan "$tmp/no-torchtitan.json" \
  --megatron-deepspeed "$tmp/no-torchtitan.json" --mcore-moe "$tmp/no-torchtitan.json" --nemo-perf "$tmp/no-torchtitan.json" --dgxc "$tmp/no-torchtitan.json" --mbridge-verify "$tmp/no-torchtitan.json" \
  --out "$tmp/fake" >/dev/null 2>"$tmp/fake.err" ||
  fail "generator on an unknown GPU: $(cat "$tmp/fake.err")"
grep -q "not converted: mpt_test_unknown_gpu: no topology for GPU 'L40S 48GB'" "$tmp/fake.err" || fail "no warning: $(cat "$tmp/fake.err")"
TRAINSIM_DATA_DIR="$src" "$trainsim" validate "$tmp/fake" >"$tmp/validate.txt" || fail "trainsim validate failed"
grep -q "skipped: the generator cannot convert this row: no topology for GPU 'L40S 48GB'" "$tmp/validate.txt" ||
  fail "not listed as skipped: $(cat "$tmp/validate.txt")"
grep -q "1 records: 0 run, 1 skipped" "$tmp/validate.txt" || fail "summary: $(cat "$tmp/validate.txt")"
echo ok
