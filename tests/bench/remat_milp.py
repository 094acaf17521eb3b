#!/usr/bin/env python3
"""The planner's recompute against the exact optimum over per-tensor choices.

    python3 tests/bench/remat_milp.py [FTC] [MODEL.ft]

On a small graph (tiny.ft: 2 blocks, micro-batch 1, nothing offloaded, no elementwise
fusion, so that the graph ftc's remat pass sees is the one solved), every plan is put in
one model: per block, which of its tensors backward finds kept (k_t) and which forward
nodes run again in backward (z_n);

    activation bytes  M = sum of the kept tensors' bytes (what lives from forward into
                          backward: the peak at the start of backward, before any recompute)
    recompute         C = sum of the re-run nodes' times, each the larger of its FLOPs at
                          250 TFLOP/s and its bytes at 1.2 TB/s, plus 4 us a launch (the
                          proxy ftc's remat pass orders its choices by)

A tensor backward reads is kept or its producer re-runs; a re-run node's inputs made in
the block are kept or re-run too; the blocks' outputs are always kept (every ftc policy
keeps them), so they are left out of M. An exact MILP (scipy's milp, HiGHS) finds the
least C at M no more than each plan's, and the least M at C no more than each plan's.
The plans: ftc's per-block policies (uniform and mixed, as its planner chooses among them)
evaluated in the model, and the plans ftc compile chooses at a sweep of budgets (they may
keep tensor by tensor). Prints, per plan, C and M, the optimum's C at that M, and the ratio.
Needs scipy (the benchmark only; ftc does not).
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

FTC = sys.argv[1] if len(sys.argv) > 1 else "build/ftc"
MODEL = sys.argv[2] if len(sys.argv) > 2 else "models/tiny.ft"
COSTLY = {"linear", "matmul", "attention", "embed"}   # what selective keeps (remat.c's costly)


def compile_plan(tmp, name, *flags):
    out = os.path.join(tmp, name)
    r = subprocess.run([FTC, "compile", MODEL, "--micro-batch", "1", "--offload", "none", "--no-fusion",
                        "-o", out, *flags], capture_output=True, text=True)
    return out if r.returncode == 0 else None, r.stdout + r.stderr


class Graph:
    def __init__(self, path):
        d = json.load(open(path))
        self.t = d["tensors"]
        self.n = d["nodes"]
        self.base = {x["id"]: (x["view_of"] if x["view_of"] >= 0 else x["id"]) for x in self.t}
        fwd = [n for n in self.n if n["phase"] == "forward"]
        bwd = [n for n in self.n if n["phase"] != "forward"]
        readers = {}
        for n in fwd:
            for i in n["inputs"]:
                if i >= 0:
                    readers.setdefault(self.base[i], set()).add(n["layer"])
        self.prod = {}
        for n in fwd:
            for o in n["outputs"]:
                self.prod[o] = n
        # Candidates: values made in a block, not views, not the block's outputs.
        self.cand = {}
        for x in self.t:
            p = self.prod.get(x["id"])
            if p is None or p["layer"] < 0 or x["view_of"] >= 0 or x["category"] == "weights":
                continue
            out = any(l != p["layer"] for l in readers.get(x["id"], ()))
            if not out:
                self.cand[x["id"]] = p["layer"]
        self.needed = set()
        for n in bwd:
            for i in n["inputs"]:
                if i >= 0 and self.base[i] in self.cand:
                    self.needed.add(self.base[i])
        self.block_nodes = [n for n in fwd if n["layer"] >= 0]
        self.by_name = {x["name"]: x["id"] for x in self.t}

    def evaluate(self, kept):
        """C and M of a plan keeping `kept` (candidate ids): re-runs what backward needs."""
        rerun, stack = set(), [t for t in self.needed if t not in kept]
        while stack:
            t = stack.pop()
            p = self.prod[t]
            if p["id"] in rerun:
                continue
            rerun.add(p["id"])
            for i in p["inputs"]:
                u = self.base.get(i, -1) if i >= 0 else -1
                if u in self.cand and u not in kept:
                    stack.append(u)
        return self.cost_mem(kept, rerun)

    def node_us(self, n):
        moved = n["out_bytes"] + sum(self.t[i]["bytes"] for i in n["inputs"] if i >= 0)
        return 4 + 1e6 * max(n["flops"] / 250e12, moved / 1.2e12)

    def cost_mem(self, kept, rerun):
        nodes = {n["id"]: n for n in self.block_nodes}
        c = sum(self.node_us(nodes[i]) for i in rerun)
        m = sum(self.t[k]["bytes"] for k in kept)
        return c, m

    def policy(self, layer_policies):
        """The kept set of per-block policies (keep, selective, full) as remat.c decides."""
        kept = set()
        for t, layer in self.cand.items():
            p = layer_policies[layer]
            if p == "keep" or (p == "selective" and self.prod[t]["op"] in COSTLY):
                kept.add(t)
        return kept

    def solve(self, m_max=None, c_max=None):
        """min C s.t. M <= m_max, or min M s.t. C <= c_max; (C, M) of the optimum or None."""
        cand = sorted(self.cand)
        nodes = [n for n in self.block_nodes if any(o in self.cand for o in n["outputs"])]
        nk, nz = len(cand), len(nodes)
        ki = {t: j for j, t in enumerate(cand)}
        zi = {n["id"]: nk + j for j, n in enumerate(nodes)}
        nv = nk + nz
        rows, lo, hi = [], [], []
        def row(coef, a, b):
            r = np.zeros(nv)
            for i, v in coef:
                r[i] += v
            rows.append(r), lo.append(a), hi.append(b)
        for t in self.needed:   # kept or its producer re-run
            row([(ki[t], 1), (zi[self.prod[t]["id"]], 1)], 1, np.inf)
        for n in nodes:         # a re-run node's inputs made in the block: kept or re-run
            for i in n["inputs"]:
                u = self.base.get(i, -1) if i >= 0 else -1
                if u in self.cand:
                    row([(zi[n["id"]], -1), (ki[u], 1), (zi[self.prod[u]["id"]], 1)], 0, np.inf)
        mem = [(ki[t], self.t[t]["bytes"]) for t in cand]
        cost = [(zi[n["id"]], self.node_us(n)) for n in nodes]
        c = np.zeros(nv)
        if m_max is not None:
            row(mem, -np.inf, m_max)
            for i, v in cost:
                c[i] += v
            for i, v in mem:   # among equal costs, the least memory
                c[i] += v * 1e-9
        else:
            row(cost, -np.inf, c_max)
            for i, v in mem:
                c[i] += v
        res = milp(c, constraints=LinearConstraint(np.array(rows), lo, hi), integrality=np.ones(nv),
                   bounds=Bounds(np.zeros(nv), np.ones(nv)))
        if res.x is None:
            return None
        x = res.x
        kept = {t for t in cand if x[ki[t]] > 0.5}
        rerun = {n["id"] for n in nodes if x[zi[n["id"]]] > 0.5}
        return self.cost_mem(kept, rerun)

    def plan_choice(self, plan_dir):
        """The kept set of a compiled plan: candidates saved for backward (its activations)."""
        kept = set()
        for line in open(os.path.join(plan_dir, "plan")):
            f = line.split()
            if f and f[0] == "buffer" and f[3] == "activations" and f[2] in self.by_name:
                t = self.by_name[f[2]]
                if t in self.cand:
                    kept.add(t)
        return kept


def main():
    with tempfile.TemporaryDirectory() as tmp:
        plan, log = compile_plan(tmp, "keep.plan", "--remat", "keep",
                                 "--emit-graph", os.path.join(tmp, "g.json"))
        if not plan:
            sys.exit("ftc compile failed: " + log)
        g = Graph(os.path.join(tmp, "g.json"))
        layers = sorted({n["layer"] for n in g.block_nodes})
        total = sum(g.node_us(n) for n in g.n)
        print(f"{MODEL}: {len(layers)} blocks, {len(g.cand)} tensors a plan may keep or recompute, "
              f"a step of {total:.0f} us by the same proxy")
        rows = []
        L = len(layers)
        named = {"keep": ["keep"] * L, "selective": ["selective"] * L, "full": ["full"] * L}
        for a, b in (("keep", "selective"), ("selective", "full"), ("keep", "full")):
            for k in range(1, L):
                named[f"{a} x{k} + {b} x{L - k}"] = [a] * k + [b] * (L - k)
        for name, pol in named.items():
            c, m = g.evaluate(g.policy(dict(zip(layers, pol))))
            rows.append((name, c, m))
        # What ftc chooses under a sweep of budgets (between the full-recompute and the
        # keep-everything plans' device bytes): its plans' kept sets in the same model.
        seen = set()

        def device_bytes(plan_dir):
            for line in open(os.path.join(plan_dir, "plan")):
                if line.startswith("arena device"):
                    return int(line.split()[2])
            return 0
        pk, _ = compile_plan(tmp, "k.plan", "--remat", "keep")
        pf, _ = compile_plan(tmp, "f.plan", "--remat", "full")
        hi_b, lo_b = device_bytes(pk), device_bytes(pf)
        reserve = 512 << 20
        for step in range(9):
            budget = reserve + lo_b + (hi_b - lo_b) * step // 8
            p, _ = compile_plan(tmp, "b.plan", "--budget", f"{budget // 1024}K")
            if not p:
                continue
            choice = re.search(r"^plan: micro-batch 1, recompute (.*), offload", open(os.path.join(p, "report.txt")).read(), re.M)
            kept = frozenset(g.plan_choice(p))
            if kept in seen:
                continue
            seen.add(kept)
            c, m = g.evaluate(set(kept))
            rows.append((f"ftc at {budget / 2**20:.1f} MiB: " + (choice.group(1) if choice else "?"), c, m))
        print(f"{'plan':<58} {'recompute':>10} {'act. bytes':>11} {'optimum':>10} {'ratio':>6} "
              f"{'opt. bytes at its C':>19}")
        worst = 1.0
        for name, c, m in rows:
            opt = g.solve(m_max=m)
            opt_c = opt[0] if opt else float("nan")
            at_c = g.solve(c_max=c)
            ratio = c / opt_c if opt_c > 0 else (1.0 if c == 0 else float("inf"))
            if name.startswith("ftc"):
                worst = max(worst, ratio)
            saving = f"{at_c[1]:>10} ({100 * (1 - at_c[1] / m):4.1f}% less)" if at_c and m else ""
            print(f"{name:<58} {c:>7.1f} us {m:>11} {opt_c:>7.1f} us {ratio:>5.2f}x {saving:>19}")
        print(f"ftc's chosen plans: at most {worst:.2f}x the optimum's recompute at their activation bytes")


if __name__ == "__main__":
    main()
