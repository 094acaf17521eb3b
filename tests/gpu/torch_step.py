#!/usr/bin/env python3
"""The training step ftc plans, in transformers (+ PEFT for LoRA) on the same GPU: the
baseline tests/gpu/run.sh sets ftc's measured step beside.

    python3 tests/gpu/torch_step.py --config tests/fixtures/qwen2-7b.config.json \\
        --seq 2048 --micro 1 --accum 4 --steps 6 --checkpointing 0 \\
        --lora-r 8 --lora-alpha 16 --lora-dropout 0.05 --lora-targets q_proj,v_proj

What it runs, chosen to be the usual fast PyTorch recipe for the same step:
- the model from the Hugging Face config, random weights (initialised on the GPU),
  SDPA attention;
- full fine-tuning: fp32 parameters, bf16 autocast (mixed precision, as ftc's bf16
  precision keeps fp32 master weights); LoRA: the base model in bf16, frozen, PEFT's
  adapters in fp32 under bf16 autocast;
- gradient checkpointing (non-reentrant) when ftc's plan recomputes, none when it keeps
  activations;
- `micro` sequences per forward/backward, `accum` of them per optimizer step (loss / accum),
  fused AdamW (lr 2e-4, betas 0.9/0.999, eps 1e-8, no weight decay), zero_grad(set_to_none);
- random token ids (the loss is the model's own shifted cross-entropy).

Prints one JSON line: the mean step time after the first (seconds, CUDA-synchronised),
tokens/s, torch.cuda.max_memory_reserved and max_memory_allocated (bytes), and the device
memory in use by the process at the end (cudaMemGetInfo: context, cuBLAS and the caching
allocator's reserve), the figure comparable with ftc's measured "in use".

--dry-run checks the arguments and the config and prints what it would build, without
importing torch (for a machine with no GPU).
"""
import argparse
import json
import sys
import time


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="Hugging Face config.json")
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--micro", type=int, required=True, help="sequences per micro-step")
    ap.add_argument("--accum", type=int, required=True, help="micro-steps per optimizer step")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--checkpointing", type=int, choices=(0, 1), required=True)
    ap.add_argument("--lora-r", type=int, default=0)
    ap.add_argument("--lora-alpha", type=float, default=16.0)
    ap.add_argument("--lora-dropout", type=float, default=0.0)
    ap.add_argument("--lora-targets", default="q_proj,v_proj")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    for name in ("seq", "micro", "accum", "steps"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be at least 1")
    if a.steps < 2:
        ap.error("--steps must be at least 2 (the first is warm-up)")
    if a.lora_r < 0:
        ap.error("--lora-r must not be negative")
    return a


def main():
    a = parse()
    with open(a.config) as f:
        cfg = json.load(f)
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"):
        if key not in cfg:
            sys.exit(f"{a.config}: no '{key}'")
    what = {"model": cfg.get("model_type", "?"), "layers": cfg["num_hidden_layers"],
            "hidden": cfg["hidden_size"], "vocab": cfg["vocab_size"], "seq": a.seq,
            "micro": a.micro, "accum": a.accum, "steps": a.steps,
            "checkpointing": bool(a.checkpointing),
            "lora": {"r": a.lora_r, "alpha": a.lora_alpha, "dropout": a.lora_dropout,
                     "targets": a.lora_targets.split(",")} if a.lora_r else None}
    if a.dry_run:
        print(json.dumps({"dry_run": True, **what}))
        return

    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.AutoConfig.from_pretrained(a.config)
    config.use_cache = False
    lora = a.lora_r > 0
    dtype = torch.bfloat16 if lora else torch.float32
    with torch.device("cuda"):
        try:
            model = transformers.AutoModelForCausalLM.from_config(
                config, attn_implementation="sdpa", dtype=dtype)
        except TypeError:   # transformers before dtype= (torch_dtype=)
            model = transformers.AutoModelForCausalLM.from_config(
                config, attn_implementation="sdpa", torch_dtype=dtype)
    if a.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if lora:
        import peft
        model = peft.get_peft_model(model, peft.LoraConfig(
            r=a.lora_r, lora_alpha=a.lora_alpha, lora_dropout=a.lora_dropout,
            target_modules=a.lora_targets.split(","), bias="none", task_type="CAUSAL_LM"))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=2e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                            fused=True)
    gen = torch.Generator(device="cuda").manual_seed(1)

    def step():
        for _ in range(a.accum):
            ids = torch.randint(0, config.vocab_size, (a.micro, a.seq), device="cuda", generator=gen)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss / a.accum
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    loss = step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(a.steps - 1):
        loss = step()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / (a.steps - 1)
    free, total = torch.cuda.mem_get_info()
    print(json.dumps({**what, "step_s": dt, "tokens_per_s": a.seq * a.micro * a.accum / dt,
                      "loss": float(loss) * a.accum,
                      "max_reserved": torch.cuda.max_memory_reserved(),
                      "max_allocated": torch.cuda.max_memory_allocated(),
                      "process_in_use": total - free, "device_total": total,
                      "torch": torch.__version__, "transformers": transformers.__version__}))


if __name__ == "__main__":
    main()
