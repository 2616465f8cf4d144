#!/usr/bin/env python3
"""Times real single-GPU training steps of small Llama-style models in PyTorch, for trainsim to
predict (training.framework "pytorch-eager", sim/workload/eager_ops.h models these exact kernels).

Usage (on a machine with a CUDA GPU and PyTorch >= 2.3; standard library + torch only):
    python3 tools/device/torch_steps.py --out OUT.json [--quick] [--configs NAME,...] [--compile]
                                        [--sdpa flash|cudnn|efficient] [--warmup N] [--steps N]
                                        [--budget-s S]
    python3 tools/device/torch_steps.py --list          # the configurations
    python3 tools/device/torch_steps.py --dry-run --out /tmp/x.json   # CPU, tiny sizes, a smoke test
    python3 tools/device/torch_steps.py --count-ops   # ATen ops of one block's forward and backward

What runs (and what trainsim models):
  * The model: token embedding (untied), L decoder blocks, final RMSNorm, LM head; every block
    x -> x + o(sdpa(rope(q), rope(k), v)), then h -> h + down(silu(gate) * up) on RMSNorm'ed inputs,
    with a fused QKV and a fused gate/up projection (torch.nn.functional.linear, no biases).
    RMSNorm is x * rsqrt(mean(x^2) + eps) * w and RoPE t * cos + cat(-t2, t1) * sin, written as
    plain tensor expressions: in eager mode every element-wise operation is its own kernel.
  * Attention: torch.nn.functional.scaled_dot_product_attention(is_causal=True) with one SDPA backend
    forced (default: FLASH_ATTENTION, PyTorch's FlashAttention-2 kernels); the output records it.
  * Precision: pure bf16. Parameters, gradients and both AdamW moments are bf16 (torch.optim.AdamW
    keeps its states in the parameter dtype); the loss is cross-entropy over fp32 logits.
  * Optimizer: torch.optim.AdamW(fused=True); gradients persist between steps
    (zero_grad(set_to_none=False)), so each backward adds into them.
  * Data: random token ids generated on the GPU (nothing is read or downloaded).
  * Mode: eager by default (element-wise ops unfused); --compile wraps the model in torch.compile
    (element-wise ops fused by Inductor; trainsim does not model that mode yet).

Measured per configuration, after --warmup steps: --steps steps, each between two
torch.cuda.synchronize() calls, timed on the host clock (time.perf_counter, what a step costs the
training loop) and with CUDA events; the median host time is `step_time_s`. Memory:
torch.cuda.reset_peak_memory_stats() before the timed steps, torch.cuda.max_memory_allocated()
after them (`peak_memory_bytes`); torch.cuda.memory_allocated() at a step boundary is
`static_memory_bytes` (parameters, gradients, optimizer states, the batch, cuBLAS workspaces).

Also measured once (`host_overhead`): the CPU cost of one eager kernel launch, forward (a chain of
small bf16 multiplies recorded by autograd) and backward (that chain's backward), each the median
of 5 runs of 2000 ops; trainsim takes them as training.host_forward_us / host_backward_us.
"""

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time

# Llama-style shapes with Llama 2's 32000-token vocabulary: multi-head attention (kv_heads = heads),
# and Llama 3.2 1B's grouped-query shape (32 query heads of 64 over 8 KV heads, SDPA's enable_gqa).
MODELS = {
    "llama-125m": {"layers": 12, "hidden": 768, "heads": 12, "kv_heads": 12, "ffn_hidden": 2048, "vocab": 32000},
    "llama-350m": {"layers": 24, "hidden": 1024, "heads": 16, "kv_heads": 16, "ffn_hidden": 2816, "vocab": 32000},
    "llama-1b": {"layers": 16, "hidden": 2048, "heads": 16, "kv_heads": 16, "ffn_hidden": 5632, "vocab": 32000},
    "llama-3b": {"layers": 26, "hidden": 3072, "heads": 24, "kv_heads": 24, "ffn_hidden": 8192, "vocab": 32000},
    "llama-1b-gqa": {"layers": 16, "hidden": 2048, "heads": 32, "kv_heads": 8, "ffn_hidden": 8192, "vocab": 32000},
    # --dry-run only.
    "tiny": {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4, "ffn_hidden": 176, "vocab": 512},
    "tiny-gqa": {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn_hidden": 176, "vocab": 512},
}

# (model, seq_len, micro_batch): 8k-16k tokens a step, sequences 1k to 8k. trainsim predicts
# 0.05-0.4 s a step and at most 55 GiB for these on an H200.
CONFIGS = [
    ("llama-125m", 1024, 16),
    ("llama-125m", 4096, 4),
    ("llama-350m", 2048, 8),
    ("llama-350m", 8192, 2),
    ("llama-1b", 2048, 4),
    ("llama-1b", 8192, 1),
    ("llama-3b", 1024, 8),
    ("llama-3b", 4096, 2),
    ("llama-1b-gqa", 4096, 2),
]
QUICK = [("llama-125m", 1024, 16), ("llama-1b", 2048, 4)]
DRY = [("tiny", 64, 2), ("tiny", 128, 1), ("tiny-gqa", 64, 2)]

EPS = 1e-5
ROPE_THETA = 10000.0
SEED = 1234


def config_name(model, seq, mbs):
    return f"{model}_s{seq}_b{mbs}"


def all_configs():
    return {config_name(*c): c for c in CONFIGS + DRY}


def head_dim(dims):
    return dims["hidden"] // dims["heads"]


def param_count(dims):
    """Parameters of the model below: embedding and LM head (untied), final norm, per layer QKV,
    output, gate/up, down and two norms."""
    h, f, v = dims["hidden"], dims["ffn_hidden"], dims["vocab"]
    q = dims["heads"] * head_dim(dims)
    kv = dims["kv_heads"] * head_dim(dims)
    layer = h * (q + 2 * kv) + q * h + 3 * h * f + 2 * h
    return 2 * v * h + h + dims["layers"] * layer


def build_model(torch, dims, seq, device, dtype, attention=None):
    """The model; `attention(q, k, v)` replaces SDPA (--count-ops only)."""
    nn = torch.nn
    F = torch.nn.functional
    h, n, nkv, f, v = dims["hidden"], dims["heads"], dims["kv_heads"], dims["ffn_hidden"], dims["vocab"]
    hd = head_dim(dims)
    q_width, kv_width = n * hd, nkv * hd
    gqa = nkv != n
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if attention is not None:
        def sdpa(q, k, val, is_causal, enable_gqa=False):
            return attention(q, k, val)
    elif sdpa is None:  # torch < 2.0 (Debian's python3-torch): a reference attention, dry runs only
        def sdpa(q, k, val, is_causal, enable_gqa=False):
            if enable_gqa:
                k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
                val = val.repeat_interleave(q.shape[1] // val.shape[1], dim=1)
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
            mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).triu(1)
            return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ val

    def rmsnorm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w

    def rope(t, cos, sin):
        half = t.shape[-1] // 2
        rot = torch.cat((-t[..., half:], t[..., :half]), dim=-1)
        return t * cos + rot * sin

    def weight(*shape):
        return nn.Parameter(torch.randn(*shape, device=device, dtype=dtype) * 0.02)

    def ones(size):
        return nn.Parameter(torch.ones(size, device=device, dtype=dtype))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            # Registration order = the optimizer's order (sim/workload/eager_ops.cc eager_param_sizes).
            self.wqkv = weight(q_width + 2 * kv_width, h)
            self.wo = weight(h, q_width)
            self.w_gate_up = weight(2 * f, h)
            self.w_down = weight(h, f)
            self.norm1 = ones(h)
            self.norm2 = ones(h)

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            q, k, val = F.linear(rmsnorm(x, self.norm1), self.wqkv).split([q_width, kv_width, kv_width], dim=-1)
            q = rope(q.view(b, s, n, hd), cos, sin).transpose(1, 2)
            k = rope(k.view(b, s, nkv, hd), cos, sin).transpose(1, 2)
            val = val.view(b, s, nkv, hd).transpose(1, 2)
            if gqa:
                a = sdpa(q, k, val, is_causal=True, enable_gqa=True)
            else:
                a = sdpa(q, k, val, is_causal=True)
            x = x + F.linear(a.transpose(1, 2).reshape(b, s, q_width), self.wo)
            gate, up = F.linear(rmsnorm(x, self.norm2), self.w_gate_up).chunk(2, dim=-1)
            return x + F.linear(F.silu(gate) * up, self.w_down)

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = weight(v, h)
            self.norm = ones(h)
            self.lm_head = weight(v, h)
            self.layers = nn.ModuleList(Block() for _ in range(dims["layers"]))
            inv = 1.0 / (ROPE_THETA ** (torch.arange(0, hd, 2, device=device, dtype=torch.float32) / hd))
            freqs = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
            angles = torch.cat((freqs, freqs), dim=-1)[:, None, :]  # [s, 1, hd], broadcast over heads
            self.register_buffer("cos", angles.cos().to(dtype), persistent=False)
            self.register_buffer("sin", angles.sin().to(dtype), persistent=False)

        def forward(self, idx, targets):
            x = F.embedding(idx, self.embed)
            for layer in self.layers:
                x = layer(x, self.cos, self.sin)
            # One expression, so the bf16 logits are freed as soon as their fp32 copy exists.
            return F.cross_entropy(F.linear(rmsnorm(x, self.norm), self.lm_head).float().view(-1, v), targets.view(-1))

    return Llama()


def sdpa_context(torch, backend):
    """A context forcing one SDPA backend, or None where this torch has no such API (dry runs)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return None
    kinds = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
             "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    return sdpa_kernel([kinds[backend]])


def host_overhead(torch, device, sync, ops=2000, runs=5):
    """CPU microseconds per eager kernel: forward ops recorded by autograd, and backward nodes."""
    x = torch.randn(16, 64, device=device, dtype=torch.bfloat16, requires_grad=True)
    w = torch.full((16, 64), 1.0, device=device, dtype=torch.bfloat16)  # no grad: one kernel per node
    fwd, bwd = [], []
    for _ in range(runs + 1):  # the first run warms up
        sync()
        t0 = time.perf_counter()
        y = x
        for _ in range(ops):
            y = y * w
        sync()
        t1 = time.perf_counter()
        s = y.sum()
        sync()
        t2 = time.perf_counter()
        s.backward()
        sync()
        t3 = time.perf_counter()
        x.grad = None
        fwd.append((t1 - t0) / ops * 1e6)
        bwd.append((t3 - t2) / ops * 1e6)
    return {"forward_us": statistics.median(fwd[1:]), "backward_us": statistics.median(bwd[1:]), "ops": ops,
            "runs": runs, "forward_samples_us": fwd[1:], "backward_samples_us": bwd[1:]}


# Tensor operations that launch no kernel (views, metadata), left out of --count-ops.
NO_KERNEL = {"view", "_unsafe_view", "transpose", "t", "split", "split_with_sizes", "chunk", "slice", "expand",
             "detach", "alias", "as_strided", "unsqueeze", "squeeze", "reshape", "_reshape_alias", "select", "narrow",
             "permute", "unbind", "empty", "empty_like", "empty_strided", "is_same_size", "lift_fresh"}


def count_ops(torch):
    """ATen operations one decoder block dispatches in eager mode (views left out), forward and
    backward, with attention replaced by an opaque op; on the CPU, tiny sizes. sim/workload/eager_ops.cc
    models one kernel per operation (slice_backward: two, zeros and copy)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Opaque(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            return torch.empty_like(q)

        @staticmethod
        def backward(ctx, g):
            return torch.empty_like(g), torch.empty_like(g), torch.empty_like(g)

    class Log(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.__name__.split(".")[0]
            if name not in NO_KERNEL:
                self.ops[name] = self.ops.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    dims = dict(MODELS["tiny"], layers=1)
    model = build_model(torch, dims, 32, torch.device("cpu"), torch.bfloat16, attention=Opaque.apply)
    block = model.layers[0]
    x = torch.randn(2, 32, dims["hidden"], dtype=torch.bfloat16, requires_grad=True)
    for p in block.parameters():
        p.grad = torch.zeros_like(p)  # persistent gradients, as zero_grad(set_to_none=False) leaves them
    with Log() as fwd:
        y = block(x, model.cos, model.sin)
    g = torch.randn_like(y)
    with Log() as bwd:
        y.backward(g)
    return {"torch": torch.__version__, "forward": dict(sorted(fwd.ops.items())),
            "backward": dict(sorted(bwd.ops.items()))}


def run_config(torch, name, model_name, seq, mbs, args, device, on_gpu, sync):
    dims = MODELS[model_name]
    dtype = torch.bfloat16
    result = {"name": name, "model": dict(name=model_name, head_dim=head_dim(dims), **dims), "seq_len": seq,
              "micro_batch": mbs, "tokens": seq * mbs, "params": param_count(dims)}
    torch.manual_seed(SEED)
    model = build_model(torch, dims, seq, device, dtype)
    assert sum(p.numel() for p in model.parameters()) == result["params"]
    if args.compile:
        model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True) if on_gpu else torch.optim.AdamW(
        model.parameters(), lr=1e-4, foreach=False)
    gen = torch.Generator(device=device)
    gen.manual_seed(SEED)
    idx = torch.randint(0, dims["vocab"], (mbs, seq), device=device, generator=gen)
    targets = torch.randint(0, dims["vocab"], (mbs, seq), device=device, generator=gen)

    def step():
        opt.zero_grad(set_to_none=False)
        loss = model(idx, targets)
        loss.backward()
        opt.step()
        return loss

    ctx = sdpa_context(torch, args.sdpa) if on_gpu else None
    if ctx is not None:
        ctx.__enter__()
    try:
        # The attention output's layout decides whether transpose + reshape copies it (the model
        # assumes it does not: FlashAttention writes [b, s, heads, hd]).
        if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
            with torch.no_grad():
                probe = torch.randn(1, 8, 2, head_dim(dims), device=device, dtype=dtype).transpose(1, 2)
                probe_out = torch.nn.functional.scaled_dot_product_attention(probe, probe, probe, is_causal=True)
                result["attention_output_contiguous_after_transpose"] = probe_out.transpose(1, 2).is_contiguous()
        losses = []
        for _ in range(args.warmup):
            losses.append(step())
        sync()
        if on_gpu:
            torch.cuda.reset_peak_memory_stats()
            result["static_memory_bytes"] = torch.cuda.memory_allocated()
        host, events = [], []
        for _ in range(args.steps):
            if on_gpu:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            sync()
            t0 = time.perf_counter()
            if on_gpu:
                start.record()
            losses.append(step())
            if on_gpu:
                end.record()
            sync()
            host.append(time.perf_counter() - t0)
            if on_gpu:
                events.append(start.elapsed_time(end) / 1e3)
        if on_gpu:
            result["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
            result["reserved_memory_bytes"] = torch.cuda.max_memory_reserved()
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)
    loss_values = [float(l) for l in losses]
    if not all(math.isfinite(l) for l in loss_values):
        raise RuntimeError(f"non-finite loss: {loss_values}")
    result["step_time_s"] = statistics.median(host)
    result["step_time_samples_s"] = host
    if events:
        result["cuda_event_time_s"] = statistics.median(events)
        result["cuda_event_samples_s"] = events
    result["tokens_per_s"] = seq * mbs / result["step_time_s"]
    result["loss_first_last"] = [loss_values[0], loss_values[-1]]
    del model, opt, losses, idx, targets
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="where to write the JSON result")
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(config_name(*c) for c in QUICK)}")
    ap.add_argument("--configs", help="comma-separated configuration names (see --list)")
    ap.add_argument("--list", action="store_true", help="print the configurations and exit")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (fuses element-wise ops)")
    ap.add_argument("--sdpa", default="flash", choices=["flash", "cudnn", "efficient"],
                    help="the SDPA backend to force (default flash: FlashAttention-2)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per configuration (default 3)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per configuration (default 10)")
    ap.add_argument("--budget-s", type=float, default=240.0,
                    help="start no new configuration after this many seconds (default 240)")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny model, 1 warm-up and 2 timed steps")
    ap.add_argument("--count-ops", action="store_true",
                    help="print the ATen operations one block dispatches (forward, backward) as JSON and exit")
    args = ap.parse_args()
    if args.count_ops:
        import torch
        print(json.dumps(count_ops(torch), indent=1))
        return 0
    known = all_configs()
    if args.list:
        for name, (m, s, b) in known.items():
            print(f"{name}: {m} ({param_count(MODELS[m]) / 1e6:.0f}M parameters), seq_len {s}, micro_batch {b}")
        return 0
    if not args.out:
        ap.error("--out is required")
    if args.warmup < 1 or args.steps < 1:
        ap.error("--warmup and --steps must be at least 1 (the first step allocates gradients and AdamW states)")
    if args.configs:
        unknown = [c for c in args.configs.split(",") if c not in known]
        if unknown:
            ap.error(f"unknown configuration(s) {', '.join(unknown)}; known: {', '.join(known)}")
        chosen = [known[c] for c in args.configs.split(",")]
    elif args.dry_run:
        chosen = DRY
    else:
        chosen = QUICK if args.quick else CONFIGS
    if args.dry_run:
        args.warmup, args.steps = 1, 2

    import torch  # imported late: --list and argument errors work without it

    on_gpu = not args.dry_run
    if on_gpu and not torch.cuda.is_available():
        print("torch_steps.py: no CUDA device is available (use --dry-run for a CPU smoke test)", file=sys.stderr)
        return 2
    device = torch.device("cuda" if on_gpu else "cpu")
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    started = time.perf_counter()
    out = {
        "tool": "tools/device/torch_steps.py",
        "format": 1,
        "date": datetime.date.today().isoformat(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if on_gpu else None,
        "device": torch.cuda.get_device_name(0) if on_gpu else "cpu (dry run)",
        "capability": list(torch.cuda.get_device_capability(0)) if on_gpu else None,
        "mode": "compile" if args.compile else "eager",
        "elementwise_fused": bool(args.compile),
        "sdpa_backend": args.sdpa if on_gpu else "default (dry run)",
        "precision": "pure bf16: bf16 parameters, gradients and AdamW moments (torch.optim.AdamW keeps its states "
                     "in the parameter dtype); cross-entropy over fp32 logits",
        "optimizer": "torch.optim.AdamW(lr=1e-4, fused=True); zero_grad(set_to_none=False)",
        "timing": f"{args.warmup} warm-up steps, then the median of {args.steps} steps, each between two "
                  "torch.cuda.synchronize() calls on the host clock (CUDA-event times beside)",
        "memory": "torch.cuda.reset_peak_memory_stats() after warm-up, torch.cuda.max_memory_allocated() after the "
                  "timed steps; static = torch.cuda.memory_allocated() at a step boundary",
        "warmup_steps": args.warmup,
        "timed_steps": args.steps,
        "dry_run": bool(args.dry_run),
    }
    print(f"torch {torch.__version__} on {out['device']}, {out['mode']}, sdpa {out['sdpa_backend']}", file=sys.stderr)
    out["host_overhead"] = host_overhead(torch, device, sync, ops=200 if args.dry_run else 2000)
    print(f"host overhead per kernel: forward {out['host_overhead']['forward_us']:.2f} us, backward "
          f"{out['host_overhead']['backward_us']:.2f} us", file=sys.stderr)
    out["configs"] = []

    def write():  # after every configuration, so that a run stopped by a timeout keeps what it measured
        out["wall_s"] = time.perf_counter() - started
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out + ".tmp", "w") as fh:
            json.dump(out, fh, indent=2)
            fh.write("\n")
        os.replace(args.out + ".tmp", args.out)

    write()
    for model_name, seq, mbs in chosen:
        name = config_name(model_name, seq, mbs)
        if time.perf_counter() - started > args.budget_s:
            out["configs"].append({"name": name, "error": f"not run: the {args.budget_s:.0f} s budget was spent"})
            write()
            continue
        t0 = time.perf_counter()
        try:
            r = run_config(torch, name, model_name, seq, mbs, args, device, on_gpu, sync)
            mem = f", peak {r['peak_memory_bytes'] / 2**30:.2f} GiB" if "peak_memory_bytes" in r else ""
            print(f"{name}: {r['step_time_s'] * 1e3:.1f} ms{mem} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
        except Exception as e:  # one failing configuration must not lose the others
            r = {"name": name, "error": f"{type(e).__name__}: {e}"}
            print(f"{name}: FAILED {r['error']}", file=sys.stderr)
        out["configs"].append(r)
        write()
        if on_gpu:
            torch.cuda.empty_cache()
    write()
    failed = [c["name"] for c in out["configs"] if "error" in c]
    print(f"wrote {args.out} ({out['wall_s']:.0f} s); failed: {', '.join(failed) or 'none'}", file=sys.stderr)
    # The file is written either way; an error status only when nothing was measured.
    return 1 if len(failed) == len(out["configs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
