#!/usr/bin/env python3
"""The planner's recompute against the exact optimum, memory as the liveness peak.

    python3 tests/bench/remat_milp.py [FTC] [MODEL.ft] [--layers N] [--budgets K]

Checkmate's problem on ftc's own order: the instructions of the plan that keeps every
tensor (micro-batch 1, nothing offloaded, no fusion, so that each op is one instruction)
fix the order of forward and backward; a plan chooses which tensors made in a block wait
for backward (k_t) and which forward instructions of a block run again in backward, and
where (y_n,s: instruction n re-run just before backward instruction s). The memory is the
liveness peak over every instruction of the step: the bytes of every buffer live there as
the plan lists them, a kept tensor from its making to its last backward reader, a re-run
copy from its slot to its last reader (a backward instruction, or a re-run instruction
after it); the cost is the re-run instructions' time as ftc's cost model puts it in the plan
(`us=`), and their FLOPs. Constraints: a tensor backward reads is kept or its producer runs
again before its first reader; a re-run instruction's block-made inputs are kept or were
themselves re-run no later.

Each plan ftc compile chooses under a sweep of budgets (the planner free, between the
plans that recompute every block fully and that keep everything) is put in the model as
it is (its kept tensors; its re-run instructions where ftc puts them, at their first
reader), its peak found; the MILP (scipy's milp, HiGHS) then finds the least recompute
at no more than that peak. Printed per plan: its choice, its peak (in the model and as
its own arena says), its recompute and the optimum's in time and FLOPs, and its whole
step against the step with the optimum's recompute instead. Needs scipy (the benchmark
only; ftc does not).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import lil_matrix

ap = argparse.ArgumentParser(description="the planner's recompute against the liveness-peak MILP")
ap.add_argument("ftc", nargs="?", default="build/ftc")
ap.add_argument("model", nargs="?", default="models/tiny.ft")
ap.add_argument("--layers", type=int, default=0, help="a copy of the model with this many blocks")
ap.add_argument("--budgets", type=int, default=11, help="budgets in the sweep, evenly from full recompute's to keep's")
ap.add_argument("--masks", action="store_true", help="also print each plan's and its optimum's kept tensors, block by block")
ARGS = ap.parse_args()
FTC, MODEL, LAYERS = ARGS.ftc, ARGS.model, ARGS.layers


def compile_plan(src, out, *flags):
    r = subprocess.run([FTC, "compile", src, "--micro-batch", "1", "--offload", "none", "--no-fusion",
                        "-o", out, *flags], capture_output=True, text=True)
    return out if r.returncode == 0 else None, r.stdout + r.stderr


class Plan:
    """A plan's buffers (name, bytes, first and last instruction, view and reuse roots) and
    instructions (op, inputs, outputs, time, FLOPs, layer, phase)."""

    def __init__(self, path):
        self.buf, self.ins, self.phase_at = {}, [], {}
        phase = None
        for line in open(os.path.join(path, "plan")):
            f = line.split()
            if not f:
                continue
            if f[0] == "buffer" and len(f) > 11:
                attrs = dict(a.split("=", 1) for a in f[12:] if "=" in a)
                self.buf[int(f[1])] = {"name": f[2], "cat": f[3], "bytes": int(f[6]), "first": int(f[9]),
                                       "last": int(f[10]), "view": int(attrs.get("view", -1)),
                                       "reuse": int(attrs.get("reuse", -1)),
                                       "layer": int(attrs.get("layer", -1)), "kind": attrs.get("kind")}
            elif f[0] == "phase":
                phase = f[1]
                self.phase_at.setdefault(phase, len(self.ins))
            elif f[0].isdigit() and phase is not None:
                kv = dict(a.split("=", 1) for a in f[2:] if "=" in a)
                ids = lambda s: [int(x) for x in s.split(",") if x] if s else []
                self.ins.append({"op": f[1], "out": ids(kv.get("out")), "in": ids(kv.get("in")),
                                 "us": float(kv.get("us", 0)), "flops": float(kv.get("flops", 0)),
                                 "layer": int(kv.get("layer", -1)), "phase": phase})
            elif f[0] == "arena" and f[1] == "device":
                self.arena = int(f[2])
            elif f[0] == "estimate":
                self.step_us = float(re.search(r"step_us=([0-9.]+)", line).group(1))
            elif f[0] == "accum":
                self.accum = int(f[1])
        self.by_name = {b["name"]: i for i, b in self.buf.items()}

    def peak(self):
        """The liveness peak: the most bytes live at one instruction, every buffer over
        [first, last], one that reuses another's storage from the instruction after its first."""
        live = np.zeros(len(self.ins) + 1)
        for b in self.buf.values():
            if b["view"] < 0:
                live[b["first"] + (1 if b["reuse"] >= 0 else 0):b["last"] + 1] += b["bytes"]
        return int(live.max())

    def root(self, b):
        while b >= 0 and self.buf[b]["view"] >= 0:
            b = self.buf[b]["view"]
        return b


class Model:
    """The keep-everything plan's order and buffers, and the choices a plan makes in it."""

    def __init__(self, keep):
        self.p = p = keep
        fb, ob = p.phase_at["backward"], p.phase_at.get("optimizer", len(p.ins))
        self.fb, self.ob, self.n = fb, ob, len(p.ins)
        # Forward instructions of the blocks that make something (views aside): re-runnable.
        self.node_of = {}   # root buffer -> forward instruction making it
        self.nodes = []
        for i, x in enumerate(p.ins[:fb]):
            if x["layer"] < 0 or x["op"] == "view":
                continue
            self.nodes.append(i)
            for o in x["out"]:
                self.node_of[p.root(o)] = i
        readers = {}   # root -> instructions reading it
        for i, x in enumerate(p.ins):
            for b in x["in"]:
                if b >= 0:
                    readers.setdefault(p.root(b), []).append(i)
        # Candidates: values a block instruction makes that no other block's (or the head's)
        # forward reads: the block's outputs are always kept.
        self.cand = {}
        for t, i in self.node_of.items():
            L = p.ins[i]["layer"]
            fwd = [r for r in readers.get(t, []) if r < fb]
            if any(p.ins[r]["layer"] != L for r in fwd):
                continue
            bwd = sorted(r for r in readers.get(t, []) if fb <= r < ob)
            self.cand[t] = {"node": i, "f1": max(fwd) if fwd else i, "bwd": bwd,
                            "bytes": p.buf[t]["bytes"]}
        # Consumers among the re-runnable instructions, and the slots each may take: the
        # backward instructions reading one of its outputs, or where a consumer may run.
        self.inputs = {i: sorted({p.root(b) for b in p.ins[i]["in"] if b >= 0 and p.root(b) in self.cand})
                       for i in self.nodes}
        self.consumers = {t: [i for i in self.nodes if t in self.inputs[i]] for t in self.cand}
        self.slots = {}
        for i in reversed(self.nodes):
            s = set()
            for t in self.outs(i):
                s |= set(self.cand[t]["bwd"])
                for c in self.consumers[t]:
                    s |= set(self.slots.get(c, ()))
            self.slots[i] = sorted(s)
        self.nodes = [i for i in self.nodes if self.slots[i]]
        # What every plan has live: the buffers that are not candidates (by the keep plan),
        # and each candidate over its forward life.
        self.const = np.zeros(self.n)
        for bid, b in p.buf.items():
            if b["view"] >= 0 or p.root(bid) in self.cand:
                continue
            lo = b["first"] + (1 if b["reuse"] >= 0 else 0)
            self.const[lo:b["last"] + 1] += b["bytes"]
        for t, c in self.cand.items():
            b = p.buf[t]
            lo = b["first"] + (1 if b["reuse"] >= 0 else 0)
            self.const[lo:c["f1"] + 1] += c["bytes"]

    def outs(self, i):
        return [t for t in (self.p.root(o) for o in self.p.ins[i]["out"]) if t in self.cand]

    def solve(self, fixed=None, peak=None):
        """fixed = (kept, rerun) puts a plan in: its peak. Else the least recompute time at
        no more than `peak`. Returns (peak, us, flops, kept, rerun) or None."""
        p, fb, ob = self.p, self.fb, self.ob
        need = [t for t in self.cand if self.cand[t]["bwd"]]
        var = {}
        def new(key):
            var[key] = len(var)
            return var[key]
        for t in need:
            new(("k", t))
        for i in self.nodes:
            for s in self.slots[i]:
                new(("y", i, s))
        # a re-run copy's life, where it may outlive what the slot sums say: l[t, tau]
        lifetimes = {}
        for t, c in self.cand.items():
            i = c["node"]
            if i not in self.slots:
                continue
            lo = self.slots[i][0] if self.slots[i] else ob
            hi = max([lo] + c["bwd"][-1:] + [self.slots[k][-1] for k in self.consumers[t] if self.slots.get(k)])
            for tau in range(lo, hi + 1):
                lifetimes[(t, tau)] = new(("l", t, tau))
        P = new(("P",))
        nv = len(var)
        rows, lo_b, hi_b = [], [], []
        def row(coef, a, b):
            rows.append(coef), lo_b.append(a), hi_b.append(b)
        y = lambda i, pred: [(var[("y", i, s)], 1) for s in self.slots.get(i, []) if pred(s)]
        for i in self.nodes:   # at most once
            row(y(i, lambda s: True), -np.inf, 1)
        for t in need:         # kept, or re-run no later than its first reader
            c = self.cand[t]
            row([(var[("k", t)], 1)] + y(c["node"], lambda s: s <= c["bwd"][0]), 1, np.inf)
        for i in self.nodes:   # a re-run's inputs: kept, or re-run no later
            for u in self.inputs[i]:
                j = self.cand[u]["node"]
                ku = [(var[("k", u)], 1)] if ("k", u) in var else []
                for s in self.slots[i]:
                    row([(var[("y", i, s)], -1)] + ku + y(j, lambda r: r <= s), 0, np.inf)
        for (t, tau), li in lifetimes.items():   # the copy's life
            c = self.cand[t]
            kt = [(var[("k", t)], -1)] if ("k", t) in var else []
            made = y(c["node"], lambda s: s <= tau)
            if c["bwd"] and tau <= c["bwd"][-1]:
                row([(li, 1)] + [(v, -1) for v, _ in made] + [(v, 1) for v, _ in kt], 0, np.inf)
            for k in self.consumers[t]:
                later = [(var[("y", k, s)], -1) for s in self.slots.get(k, []) if s >= tau]
                if later:
                    row([(li, 1)] + [(v, -1) for v, _ in made] + later + [(v, 1) for v, _ in kt], -1, np.inf)
        # memory at every instruction: const + kept + copies <= P
        kept_at = {}
        for t in need:
            c = self.cand[t]
            for tau in range(c["f1"] + 1, c["bwd"][-1] + 1):
                kept_at.setdefault(tau, []).append((var[("k", t)], c["bytes"]))
        copies_at = {}
        for (t, tau), li in lifetimes.items():
            copies_at.setdefault(tau, []).append((li, self.cand[t]["bytes"]))
        for tau in range(self.n):
            coef = kept_at.get(tau, []) + copies_at.get(tau, []) + [(P, -1)]
            row(coef, -np.inf, -self.const[tau])
        cost = np.zeros(nv)
        us = {i: p.ins[i]["us"] for i in self.nodes}
        for i in self.nodes:
            for s in self.slots[i]:
                cost[var[("y", i, s)]] = us[i]
        lb, ub = np.zeros(nv), np.ones(nv)
        ub[P] = np.inf
        integ = np.zeros(nv)
        for key, v in var.items():
            if key[0] in ("k", "y"):
                integ[v] = 1
        if fixed is not None:
            kept, rerun = fixed
            for t in need:
                lb[var[("k", t)]] = ub[var[("k", t)]] = 1 if t in kept else 0
            for i in self.nodes:
                if i not in rerun:
                    for s in self.slots[i]:
                        ub[var[("y", i, s)]] = 0
                else:   # at its first demand, as ftc places it: fix z_i = 1, the slot free
                    row(y(i, lambda s: True), 1, 1)
            c = np.zeros(nv)
            c[P] = 1.0
            c += cost * 1e-6   # (the latest slots among equal peaks)
        else:
            ub[P] = peak
            c = cost.copy()
            c[P] = 1e-9
        A = lil_matrix((len(rows), nv))
        for r, coef in enumerate(rows):
            for v, a in coef:
                A[r, v] += a
        res = milp(c, constraints=LinearConstraint(A.tocsr(), lo_b, hi_b), integrality=integ,
                   bounds=Bounds(lb, ub), options={"time_limit": 120})
        if res.x is None:
            return None
        x = res.x
        kept = {t for t in need if x[var[("k", t)]] > 0.5}
        rerun = {i for i in self.nodes if any(x[var[("y", i, s)]] > 0.5 for s in self.slots[i])}
        return (x[P], sum(us[i] for i in rerun), sum(p.ins[i]["flops"] for i in rerun), kept, rerun,
                res.status == 0)

    def masks(self, kept):
        """The kept tensors block by block, by their names less the block's prefix."""
        by = {}
        for t in sorted(kept, key=lambda t: self.cand[t]["node"]):
            name = self.p.buf[t]["name"]
            by.setdefault(self.p.ins[self.cand[t]["node"]]["layer"], []).append(name.split(".", 1)[-1])
        return "; ".join(f"{l}: {' '.join(v)}" for l, v in sorted(by.items()))

    def choice_of(self, plan):
        """The kept tensors and re-run instructions of a compiled plan, by their names."""
        kept, rerun = set(), set()
        fwd_end = plan.phase_at["backward"]
        for t in self.cand:
            name = self.p.buf[t]["name"]
            b = plan.by_name.get(name)
            if b is not None and self.cand[t]["bwd"] and plan.buf[b]["last"] >= fwd_end:
                kept.add(t)
            if name + ".re" in plan.by_name:
                rerun.add(self.cand[t]["node"])
        return kept, rerun & set(self.nodes)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        src = MODEL
        if LAYERS:
            text = re.sub(r"(?m)^(\s*layers\s*=\s*)\d+", lambda m: m.group(1) + str(LAYERS), open(MODEL).read())
            src = os.path.join(tmp, f"{os.path.basename(MODEL)[:-3]}-{LAYERS}.ft")
            open(src, "w").write(text)
        pk, log = compile_plan(src, os.path.join(tmp, "keep.plan"), "--remat", "keep")
        pf, _ = compile_plan(src, os.path.join(tmp, "full.plan"), "--remat", "full")
        if not pk or not pf:
            sys.exit("ftc compile failed: " + log)
        keep, full = Plan(pk), Plan(pf)
        m = Model(keep)
        blocks = len({keep.ins[i]["layer"] for i in m.nodes})
        print(f"{MODEL}{f' with {LAYERS} blocks' if LAYERS else ''}: {blocks} blocks, {len(m.cand)} tensors a plan may keep or recompute, "
              f"{len(m.nodes)} instructions it may re-run; keep-everything peak {keep.arena} B, "
              f"full recompute {full.arena} B")
        reserve = int(re.search(r"^reserve (\d+)", open(os.path.join(pk, "plan")).read(), re.M).group(1))
        rows, seen = [], set()
        n = max(ARGS.budgets, 2)
        for step in range(n):
            budget = reserve + full.arena + (keep.arena - full.arena) * step // (n - 1)
            p, _ = compile_plan(src, os.path.join(tmp, f"b{step}.plan"), "--budget", f"{budget}")
            if not p:
                continue
            choice = re.search(r"recompute (.*?), offload", open(os.path.join(p, "report.txt")).read())
            plan = Plan(p)
            kept, rerun = m.choice_of(plan)
            key = (frozenset(kept), frozenset(rerun))
            if key in seen:
                continue
            seen.add(key)
            rows.append((budget, choice.group(1) if choice else "?", plan, kept, rerun))
        print(f"{'budget (B)':>10}  {'ftc chose':<46} {'model peak':>10} {'own peak':>9} {'recompute us':>12} "
              f"{'optimum us':>10} {'time':>5} {'FLOPs':>5} {'step':>6}")
        worst_t = worst_s = 1.0
        for budget, name, plan, kept, rerun in rows:
            ev = m.solve(fixed=(kept, rerun))
            if ev is None:
                print(f"{budget:>10}  {name:<46} (not a plan of the model)")
                continue
            peak, us, fl = ev[0], ev[1], ev[2]
            opt = m.solve(peak=peak + 0.5)
            if opt is None:
                print(f"{budget:>10}  {name:<46} {peak:>9.0f} no optimum found")
                continue
            ou, of = opt[1], opt[2]
            rt = us / ou if ou > 0 else (1.0 if us == 0 else float("inf"))
            rf = fl / of if of > 0 else (1.0 if fl == 0 else float("inf"))
            step_opt = plan.step_us - plan.accum * (us - ou)
            rs = plan.step_us / step_opt
            worst_t, worst_s = max(worst_t, rt), max(worst_s, rs)
            print(f"{budget:>10}  {name:<46} {peak:>10.0f} {plan.peak():>9} {us:>12.2f} {ou:>10.2f} "
                  f"{rt:>5.3f}x {rf:>4.2f}x {rs:>5.3f}x{'' if opt[5] else ' (bracket)'}")
            if ARGS.masks:
                print(f"{'':>12}ftc keeps: {m.masks(kept)}\n{'':>12}optimum:   {m.masks(opt[3])}")
        print(f"ftc's plans: recompute at most {worst_t:.3f}x the optimum's at their peak, "
              f"the whole step at most {worst_s:.3f}x")


if __name__ == "__main__":
    main()
