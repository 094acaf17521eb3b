#!/usr/bin/env python3
"""The table of tests/gpu/run.sh, from the logs it left in WORK (standard library only).

    python3 tests/gpu/report.py WORK KERNELS_DEVICE RUN_DEVICE

WORK holds: kernels.log and kernels.rc (test_kernels on KERNELS_DEVICE against the cpu
backend), tiny-cpu.log and tiny-dev.log (ftc run of tiny.ft, 20 steps, on the cpu backend
and RUN_DEVICE), and for each workload W listed in workloads: W.plan/ (the plan,
memory.json, report.txt), W.ran (the plan directory the run used, when not W.plan: a
dry run's stand-in), W-ftc.log (ftc run on RUN_DEVICE) and W-torch.json (torch_step.py's
line). Exit status 1 when a check fails:
a kernel outside its tolerance, tiny's losses apart by more than 1%, or a measured device
footprint off the plan's by more than 2% (and 64 MiB). Speed and size against PyTorch
are the goal, reported, not checked.
"""
import json
import os
import re
import sys

UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def size(text):
    m = re.fullmatch(r"([0-9.]+) (B|KiB|MiB|GiB|TiB)", text.strip())
    return int(float(m.group(1)) * UNITS[m.group(2)]) if m else None


def gib(n):
    return "-" if n is None else f"{n / 2**30:.2f} GiB"


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def losses(log):
    return [float(m.group(1)) for m in re.finditer(r"^step \d+/\d+  loss ([0-9.naif-]+)", log or "", re.M)]


def ftc_run(log):
    """What ftc run printed: the memory line (cuda only) and the steady step."""
    r = {}
    m = re.search(r"^memory: planned (.+?) \(arena (.+?) \+ reserve (.+?)\); (.+?) shows (.+?) in use of (?:its )?(.+?) \(",
                  log or "", re.M)
    if m:
        r.update(planned=size(m.group(1)), arena=size(m.group(2)), reserve=size(m.group(3)),
                 gpu=m.group(4), in_use=size(m.group(5)), total=size(m.group(6)))
    m = re.search(r"^steady: ([0-9.]+)s per step after the first, ([0-9]+) tok/s", log or "", re.M)
    if m:
        r.update(step_s=float(m.group(1)), tokens_per_s=float(m.group(2)))
    return r


def estimate(plan_dir):
    """memory.json's estimate: peak FLOP/s, model FLOPs and seconds of one step."""
    try:
        with open(f"{plan_dir}/memory.json") as f:
            return json.load(f).get("estimate", {})
    except (OSError, ValueError):
        return {}


def mfu(est, seconds):
    peak = est.get("peak_flops_per_s", 0)
    return est.get("model_flops", 0) / seconds / peak if peak and seconds > 0 else 0.0


def profile(text):
    """ftc run --profile's table: the measured and estimated totals, and rows of (calls a step,
    ms a step, us a call, estimated us a call, measured over estimated, what)."""
    if not text:
        return None
    m = re.search(r"^# the device's work: ([0-9.]+) ms a step measured, ([0-9.]+) ms estimated", text, re.M)
    rows = [(float(r[0]), float(r[1]), float(r[2]), float(r[3]), float(r[4]), r[5]) for r in
            re.findall(r"^ *([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+)  (.+)$", text, re.M)]
    return {"measured_ms": float(m.group(1)), "estimated_ms": float(m.group(2)), "rows": rows} if m else None


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: report.py WORK KERNELS_DEVICE RUN_DEVICE")
    work, kdevice, device = sys.argv[1:4]
    rows, failed = [], 0
    profiles, attention = {}, {}

    def row(check, value, reference, verdict):
        nonlocal failed
        failed += verdict == "FAIL"
        rows.append((check, value, reference, verdict))

    # Kernels: test_kernels' own table, worst error per op against its tolerance.
    klog, krc = read(f"{work}/kernels.log"), (read(f"{work}/kernels.rc") or "1").strip()
    ops = re.findall(r"^  (\w+)\s+(\d+)\s+(\d+)\s+([0-9.e+-]+)\s+(bitwise|2\^-6|2\^-7|1e-5)\s", klog or "", re.M)
    worst = max(ops, key=lambda o: float(o[3]), default=None)
    row(f"kernels on {kdevice} vs cpu backend: {len(ops)} ops, "
        f"{sum(int(o[1]) for o in ops)} outputs",
        f"worst {float(worst[3]):.3g} ({worst[0]})" if worst else "-",
        "each op within its tolerance",
        "ok" if krc == "0" and ops else "n/a (no NVRTC)" if krc == "77" else "FAIL")

    # tiny.ft, 20 steps, the device against the cpu backend.
    a, b = losses(read(f"{work}/tiny-cpu.log")), losses(read(f"{work}/tiny-dev.log"))
    if len(a) == 20 and len(a) == len(b):
        rel = max(abs(x - y) / max(abs(x), 1e-9) for x, y in zip(a, b))
        row(f"tiny.ft 20 steps, {device} vs cpu losses", f"max rel diff {rel:.2e}",
            f"loss {a[0]:.4f} -> {a[-1]:.4f}", "ok" if rel < 0.01 else "FAIL")
    else:
        row(f"tiny.ft 20 steps, {device} vs cpu losses", f"{len(b)} vs {len(a)} steps", "20", "FAIL")

    # tiny.ft with the updates inside backward against after it: the same weights, bitwise.
    s, e = losses(read(f"{work}/tiny-step.log")), losses(read(f"{work}/tiny-backward.log"))
    same = None
    try:
        same = open(f"{work}/tiny-step/model.safetensors", "rb").read() == \
            open(f"{work}/tiny-backward/model.safetensors", "rb").read()
    except OSError:
        pass
    row(f"tiny.ft 4 steps on {device}, updates inside backward vs after",
        f"{len(e)} steps, weights {'bitwise equal' if same else 'differ' if same is False else 'missing'}",
        "bitwise equal", "ok" if same and len(s) == 4 and s == e else "FAIL")

    for w in (read(f"{work}/workloads") or "").split():
        plan = read(f"{work}/{w}.plan/plan")
        if plan is None:
            row(f"{w}: plan for the h200 preset", "ftc compile failed", "-", "FAIL")
            continue
        head = dict(re.findall(r"^(reserve|micro_batch|accum) (\d+)$", plan, re.M))
        arena = re.search(r"^arena device (\d+)", plan, re.M)
        planned = int(arena.group(1)) + int(head.get("reserve", 0)) if arena else None
        choice = re.search(r"^plan: (.*)$", read(f"{work}/{w}.plan/report.txt") or "", re.M)
        est = estimate(f"{work}/{w}.plan")
        row(f"{w}: plan for the h200 preset", choice.group(1) if choice else "-",
            f"{gib(planned)} planned; estimated {est.get('step_us', 0) * 1e-6:.3f} s/step, "
            f"MFU {mfu(est, est.get('step_us', 0) * 1e-6) * 100:.1f}%", "ok")
        # The run: the plan itself on a GPU; in a dry run tiny.ft of the same kind.
        ran = (read(f"{work}/{w}.ran") or f"{work}/{w}.plan").strip()
        stand_in = ran != f"{work}/{w}.plan"
        label = f"{w}{' (tiny.ft stand-in)' if stand_in else ''}"
        r = ftc_run(read(f"{work}/{w}-ftc.log"))
        if "in_use" in r:
            off = r["in_use"] - r["planned"]
            ok = abs(off) <= max(0.02 * r["planned"], 64 * 2**20)
            row(f"{label}: device memory, measured vs planned", gib(r["in_use"]),
                f"{gib(r['planned'])} ({off / r['planned'] * 100:+.1f}%)", "ok" if ok else "FAIL")
        else:
            row(f"{label}: device memory, measured vs planned", "-", "-",
                "FAIL" if device == "cuda" else "n/a")
        if "step_s" in r:
            rest = estimate(ran)
            row(f"{label}: ftc step, tokens/s, MFU", f"{r['step_s']:.3f} s, {r['tokens_per_s']:.0f} tok/s, "
                f"MFU {mfu(rest, r['step_s']) * 100:.1f}%", f"estimated {rest.get('step_us', 0) * 1e-6:.3f} s",
                "ok")
        else:
            row(f"{label}: ftc step", "no steady step", "-", "FAIL")
        # The same plan issued launch by launch (--no-graphs), where it ran (a GPU: the run
        # above launched each phase as a CUDA graph)
        e = ftc_run(read(f"{work}/{w}-eager.log"))
        if "step_s" in e and "step_s" in r:
            row(f"{label}: step with CUDA graphs vs launch by launch", f"{r['step_s']:.3f} s",
                f"{e['step_s']:.3f} s ({e['step_s'] / r['step_s']:.2f}x graphs')", "ok")
        prof = profile(read(f"{work}/{w}-profile.txt"))
        if prof:
            row(f"{label}: device work a step, measured vs estimated", f"{prof['measured_ms']:.1f} ms",
                f"{prof['estimated_ms']:.1f} ms ({prof['measured_ms'] / max(prof['estimated_ms'], 1e-9):.2f}x)",
                "ok")
            profiles[label] = prof
        else:
            row(f"{label}: ftc run --profile", "no profile", "-", "FAIL")
        if w == "qwen2-7b-lora" and prof:
            attention[stand_in] = prof
        t = {}
        try:
            with open(f"{work}/{w}-torch.json") as f:
                t = json.loads(f.read().strip().splitlines()[-1])
        except (OSError, ValueError, IndexError):
            pass
        if "step_s" in t and "step_s" in r and not stand_in:
            faster = r["step_s"] < t["step_s"]
            row(f"{w}: step time, ftc vs transformers", f"{r['step_s']:.3f} s",
                f"{t['step_s']:.3f} s ({t['step_s'] / r['step_s']:.2f}x ftc's)",
                "goal met" if faster else "goal missed")
            if "in_use" in r:
                smaller = r["in_use"] < t["process_in_use"]
                row(f"{w}: device memory, ftc vs transformers", gib(r["in_use"]),
                    f"{gib(t['process_in_use'])} in use (max_memory_reserved {gib(t['max_reserved'])})",
                    "goal met" if smaller else "goal missed")
        elif t.get("dry_run"):
            lora = t.get("lora")
            row(f"{w}: transformers (dry run)", "would run",
                f"{t['micro']} x {t['accum']} x seq {t['seq']}, checkpointing "
                f"{'on' if t['checkpointing'] else 'off'}{', LoRA r %d' % lora['r'] if lora else ''}", "n/a")
        else:
            row(f"{w}: transformers", "no result", "-", "FAIL")

    # ftc's attention kernels (the qwen2-7b-lora run's profile) against torch's flash SDPA at
    # the same shapes: forward and backward, a layer's call each.
    s = {}
    try:
        with open(f"{work}/sdpa.json") as f:
            s = json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        pass
    p = attention.get(False) or attention.get(True)
    if p and "fwd_ms" in s and False in attention:
        for kind, name, ref in (("forward", "attention k", s["fwd_ms"]), ("backward", "attention_bwd k", s["bwd_ms"])):
            us = [r[2] for r in p["rows"] if r[5].startswith(name)]
            if us:
                row(f"attention {kind} at Qwen2-7B's shapes, ftc vs torch SDPA", f"{us[0] / 1e3:.3f} ms",
                    f"{ref:.3f} ms ({ref / (us[0] / 1e3):.2f}x ftc's)",
                    "goal met" if us[0] / 1e3 < ref else "goal missed")
    elif s.get("dry_run"):
        row("attention at Qwen2-7B's shapes, ftc vs torch SDPA (dry run)", "would time",
            f"B {s['shape']['B']}, S {s['shape']['S']}, {s['shape']['H']}/{s['shape']['HKV']} heads, "
            f"D {s['shape']['D']}, causal", "n/a")
    else:
        row("attention at Qwen2-7B's shapes, ftc vs torch SDPA", "no result", "-", "FAIL")

    wc = [max(len(r[i]) for r in rows) for i in range(3)]
    head = ("check", "ftc", "reference", "result")
    wc = [max(w, len(h)) for w, h in zip(wc, head)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, wc + [6])) + " |")
    print("|" + "|".join("-" * (w + 2) for w in wc + [6]) + "|")
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, wc + [6])) + " |")
    # Where each run's device time went: its ten largest kernels and GEMM shapes.
    for label, prof in profiles.items():
        print(f"\n{label}: the device's work a step, the largest first (ftc run --profile)")
        print(f"  {'ms/step':>9} {'us/call':>10} {'est us':>10} {'meas/est':>8}  what")
        for calls, ms, us, est, ratio, what in prof["rows"][:10]:
            print(f"  {ms:9.3f} {us:10.2f} {est:10.2f} {ratio:8.2f}  {what}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
