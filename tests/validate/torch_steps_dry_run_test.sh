#!/usr/bin/env bash
# tools/device/torch_steps.py without a GPU: --list and argument errors need no torch; where a
# python3 with torch exists, --dry-run builds the model, trains three tiny configurations on the CPU (one with grouped-query attention)
# and writes the JSON gen-torch-records reads (which refuses it: a dry run measures no GPU), and
# --count-ops shows that one block dispatches exactly the kernels trainsim's eager op list holds.
# Exit 77 (skipped) when no python3 here has torch.
# Usage: torch_steps_dry_run_test.sh SOURCE_DIR
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
script="$src/tools/device/torch_steps.py"
fail() { echo "FAIL: $*" >&2; exit 1; }

# Read the whole listing first: `grep -q` closing the pipe early would break python's stdout.
listing=$(python3 "$script" --list) || fail "--list exited non-zero"
grep -q "llama-1b_s2048_b4: llama-1b (953M parameters)" <<<"$listing" || fail "--list"
set +e
python3 "$script" --configs nope --out "$tmp/x.json" 2>"$tmp/err"
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "unknown configuration(s) nope" "$tmp/err" || fail "unknown configuration: exit $rc"

py=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null && "$candidate" -c "import torch" 2>/dev/null; then py=$candidate; break; fi
done
if [ -z "$py" ]; then
  echo "no python3 with torch here: dry run skipped"
  exit 77
fi
"$py" "$script" --dry-run --out "$tmp/dry.json" 2>"$tmp/dry.err" || fail "dry run: $(cat "$tmp/dry.err")"
"$py" - "$tmp/dry.json" <<'PY' || fail "dry-run output"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["tool"] == "tools/device/torch_steps.py" and d["format"] == 1 and d["dry_run"] is True, d
assert d["host_overhead"]["forward_us"] > 0 and d["host_overhead"]["backward_us"] > 0
assert [c["name"] for c in d["configs"]] == ["tiny_s64_b2", "tiny_s128_b1", "tiny-gqa_s64_b2"], d["configs"]
# QKV width q + 2kv: 64 + 2*64 for tiny, 64 + 2*32 for tiny-gqa (2 KV heads of 16).
params = {"tiny": 2 * 512 * 64 + 64 + 2 * (64 * 192 + 64 * 64 + 3 * 64 * 176 + 2 * 64),
          "tiny-gqa": 2 * 512 * 64 + 64 + 2 * (64 * 128 + 64 * 64 + 3 * 64 * 176 + 2 * 64)}
for c in d["configs"]:
    assert "error" not in c, c
    assert c["step_time_s"] > 0 and len(c["step_time_samples_s"]) == 2
    assert c["params"] == params[c["model"]["name"]], c["params"]
PY
# The kernels one block dispatches, attention left out, are those sim/workload/eager_ops.cc lists
# (forward 30 = 31 - attention; backward 63 ATen ops = 70 kernels - 3 of attention - 4, as each of
# the 4 slice_backward calls is one ATen op but two kernels, zeros and copy).
"$py" "$script" --count-ops >"$tmp/ops.json" 2>"$tmp/ops.err" || fail "--count-ops: $(cat "$tmp/ops.err")"
"$py" - "$tmp/ops.json" <<'PY' || fail "--count-ops: the block does not dispatch the modelled kernels"
import json, sys
d = json.load(open(sys.argv[1]))
forward = {"add": 6, "cat": 2, "mean": 2, "mm": 4, "mul": 9, "neg": 2, "pow": 2, "rsqrt": 2, "silu": 1}
backward = {"add": 8, "add_": 6, "cat": 2, "div": 2, "mm": 8, "mul": 22, "neg": 2, "pow": 4, "silu_backward": 1,
            "slice_backward": 4, "sum": 4}
assert d["forward"] == forward, f"forward {d['forward']}"
assert d["backward"] == backward, f"backward {d['backward']}"
PY
set +e
python3 "$src/tools/gen-torch-records" "$tmp/dry.json" --out "$tmp/records" 2>"$tmp/gen.err"
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "dry_run: a --dry-run (CPU) output has no GPU measurements" "$tmp/gen.err" ||
  fail "gen-torch-records on a dry run: exit $rc: $(cat "$tmp/gen.err")"
echo "torch_steps.py dry run: ok ($py)"
