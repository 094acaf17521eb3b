#!/usr/bin/env python3
"""Tokens/s of ftc's cpu backend against a straightforward PyTorch eager training step
of the same model (models/tiny.ft as a transformers Qwen2ForCausalLM), on this machine,
measured in the same run. Needs torch and transformers; not part of ctest.

    python3 tests/bench/cpu_vs_torch.py [--ftc build/ftc] [--steps 60]

Both sides train micro-batch 8 x seq 64 on the same byte data with AdamW (lr 3e-3),
for the same number of steps, after a few warm-up steps; both use every core
PyTorch or OpenBLAS choose. ftc runs the plan twice: as tiny.ft says (bf16 storage,
fp32 master weights and state) and at fp32, which is what the PyTorch step computes."""
import argparse, os, re, subprocess, sys, tempfile, time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))


def ftc_tokens_per_s(ftc, ft_text, data, steps, tmp, name):
    ft = os.path.join(tmp, name + ".ft")
    open(ft, "w").write(ft_text)
    plan = os.path.join(tmp, name + ".plan")
    subprocess.run([ftc, "compile", ft, "-o", plan], check=True, stdout=subprocess.DEVNULL)
    out = subprocess.run([ftc, "run", plan, "--data", data, "--steps", str(steps)], check=True,
                         capture_output=True, text=True).stdout
    rates = [float(m.group(1)) for m in re.finditer(r"tok/s (\d+)", out)]
    warm = rates[5:] if len(rates) > 10 else rates
    return sum(warm) / len(warm), out.strip().splitlines()[-1]


def torch_tokens_per_s(data_bytes, steps):
    cfg = Qwen2Config(vocab_size=256, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, rope_theta=1e6,
                      rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=128,
                      attn_implementation="eager")
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).float().train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.0)
    ids = torch.tensor(list(data_bytes), dtype=torch.long)
    B, S = 8, 64
    nwin = (len(ids) - 1) // S
    g = torch.Generator().manual_seed(0)
    rates = []
    for step in range(steps):
        t0 = time.perf_counter()
        w = torch.randint(0, nwin, (B,), generator=g)
        batch = torch.stack([ids[i * S:i * S + S + 1] for i in w.tolist()])
        logits = model(input_ids=batch[:, :S]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, 256),
                                                 batch[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        rates.append(B * S / (time.perf_counter() - t0))
    warm = rates[5:] if len(rates) > 10 else rates
    return sum(warm) / len(warm), float(loss)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ftc", default=os.path.join(root, "build", "ftc"))
    ap.add_argument("--steps", type=int, default=60)
    a = ap.parse_args()
    corpus = os.path.join(root, "tests", "data", "corpus.txt")
    tiny = open(os.path.join(root, "models", "tiny.ft")).read()
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "corpus.bin")
        subprocess.run([a.ftc, "data", "--bytes", corpus, "-o", data], check=True,
                       stdout=subprocess.DEVNULL)
        bf16, _ = ftc_tokens_per_s(a.ftc, tiny, data, a.steps, tmp, "tiny")
        fp32, _ = ftc_tokens_per_s(a.ftc, tiny.replace("precision = bf16", "precision = fp32"),
                                   data, a.steps, tmp, "tiny32")
    pt, _ = torch_tokens_per_s(open(corpus, "rb").read(), a.steps)
    print(f"tiny.ft, micro-batch 8 x seq 64, AdamW, {a.steps} steps, torch {torch.__version__}, "
          f"{torch.get_num_threads()} torch threads")
    print(f"{'':28s} {'tokens/s':>10s} {'vs torch':>9s}")
    print(f"{'PyTorch eager fp32':28s} {pt:10.0f} {1.0:9.2f}")
    print(f"{'ftc cpu, fp32 plan':28s} {fp32:10.0f} {fp32 / pt:9.2f}")
    print(f"{'ftc cpu, bf16 plan (tiny.ft)':28s} {bf16:10.0f} {bf16 / pt:9.2f}")


if __name__ == "__main__":
    sys.exit(main())
