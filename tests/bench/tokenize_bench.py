#!/usr/bin/env python3
"""ftc data --tokenizer against Hugging Face tokenizers' batch encoding, on the same machine,
side by side.

    python3 tests/bench/tokenize_bench.py [--ftc build/ftc] [--mb 100] [--vocab 32000] [--runs 3]

Makes (in a temporary directory, nothing is kept) a JSONL file of about --mb MB of
{"text": ...} records, deterministic from a seed: words drawn from the repository's own
Markdown (English prose and code), numbers, punctuation, runs of white space, and a share
of Chinese, Cyrillic and emoji; then trains a byte-level BPE tokenizer of --vocab tokens
the way Qwen2's is built (NFC, Qwen2's split regex, ByteLevel) on a sample of it, with
tokenizers. Then, each --runs times, the best kept:
  - ftc data --tokenizer tok.json data.jsonl -o out.bin   (read, parse, encode, write)
  - tokenizers: Tokenizer.encode_batch over every record's text (the texts already in
    memory, the JSON already parsed: the encoding alone), on all cores as it runs by
    default, and the same with the JSON parsing counted
  - both again on one thread (ftc data --threads 1; tokenizers with
    TOKENIZERS_PARALLELISM=false), which a machine shared with other work disturbs less
and prints MB/s for each and ftc's ratio to each. ftc's ids are checked equal to
tokenizers' on every record first. Needs the tokenizers package (not needed by CI).
"""

import argparse
import glob
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import time

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def words(repo):
    text = []
    for path in sorted(glob.glob(os.path.join(repo, "**", "*.md"), recursive=True)) + \
            sorted(glob.glob(os.path.join(repo, "runtime", "*.c"))):
        with open(path, encoding="utf-8", errors="replace") as f:
            text.append(f.read())
    return " ".join(text).split()


def make_jsonl(path, mb, repo, seed=1234):
    rng = random.Random(seed)
    vocab = words(repo)
    cjk = [chr(c) for c in range(0x4E00, 0x4E00 + 3000)]
    cyr = [chr(c) for c in range(0x430, 0x450)]
    emoji = ["\U0001F600", "\U0001F44D\U0001F3FD", "\u2764\ufe0f", "\U0001F680", "\U0001F468\u200D\U0001F4BB"]
    total, target = 0, mb * 1_000_000
    texts = []
    with open(path, "w", encoding="utf-8") as f:
        while total < target:
            parts = []
            for _ in range(rng.randint(20, 400)):
                r = rng.random()
                if r < 0.80:
                    parts.append(rng.choice(vocab))
                elif r < 0.86:
                    parts.append(str(rng.randint(0, 10 ** rng.randint(1, 9))))
                elif r < 0.90:
                    parts.append("".join(rng.choice(cjk) for _ in range(rng.randint(1, 12))))
                elif r < 0.93:
                    parts.append("".join(rng.choice(cyr) for _ in range(rng.randint(2, 9))))
                elif r < 0.95:
                    parts.append(rng.choice(emoji))
                elif r < 0.98:
                    parts.append(rng.choice(["\n", "\n\n", "  ", "\t", "    ", "\r\n"]))
                else:
                    parts.append(rng.choice([",", ".", ";", "(", ")", "'s", "'ll", "\"", "--", "..."]))
            text = " ".join(parts)
            line = json.dumps({"text": text}, ensure_ascii=False) + "\n"
            f.write(line)
            texts.append(text)
            total += len(line.encode("utf-8"))
    return texts, total


def train_tokenizer(path, texts, vocab):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts[: max(1, len(texts) // 10)], trainer=trainer)
    tok.save(path)
    return tok


def read_tokens(path):
    with open(path, "rb") as f:
        d = f.read()
    w, n, flags = struct.unpack("<IQQ", d[12:32])
    return list(struct.unpack("<%d%s" % (n, "H" if w == 2 else "I"), d[64:64 + w * n]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ftc", default="build/ftc")
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    ftc = os.path.abspath(a.ftc)
    with tempfile.TemporaryDirectory() as tmp:
        data, tokpath, out = (os.path.join(tmp, n) for n in ("data.jsonl", "tok.json", "out.bin"))
        texts, nbytes = make_jsonl(data, a.mb, repo)
        tok = train_tokenizer(tokpath, texts, a.vocab)
        print(f"data: {len(texts)} records, {nbytes / 1e6:.1f} MB; tokenizer: vocab {tok.get_vocab_size()}, "
              f"Qwen2-style (NFC, split regex, ByteLevel); {os.cpu_count()} CPUs; tokenizers "
              f"{__import__('tokenizers').__version__}")

        # ftc's ids against tokenizers' (each record then the end-of-sequence token)
        subprocess.run([ftc, "data", "--tokenizer", tokpath, data, "-o", out], check=True, capture_output=True)
        eos = tok.token_to_id("<|endoftext|>")
        want = []
        for enc in tok.encode_batch(texts):
            want += enc.ids + ([eos] if not enc.ids or enc.ids[-1] != eos else [])
        got = read_tokens(out)
        if got != want:
            at = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
            sys.exit(f"ids differ: {len(got)} from ftc, {len(want)} from tokenizers; first difference at {at}")
        print(f"ids: equal ({len(got)} tokens)")

        with open(data, encoding="utf-8") as f:
            lines = f.readlines()
        cmd = [ftc, "data", "--tokenizer", tokpath, data, "-o", out]
        runs = {k: [] for k in ("ftc", "hf", "hf_json", "ftc1", "hf1")}
        for _ in range(a.runs):
            t = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            runs["ftc"].append(time.perf_counter() - t)
            t = time.perf_counter()
            tok.encode_batch(texts)
            runs["hf"].append(time.perf_counter() - t)
            t = time.perf_counter()
            tok.encode_batch([json.loads(l)["text"] for l in lines])
            runs["hf_json"].append(time.perf_counter() - t)
            t = time.perf_counter()
            subprocess.run(cmd + ["--threads", "1"], check=True, capture_output=True)
            runs["ftc1"].append(time.perf_counter() - t)
            os.environ["TOKENIZERS_PARALLELISM"] = "false"
            t = time.perf_counter()
            tok.encode_batch(texts)
            runs["hf1"].append(time.perf_counter() - t)
            del os.environ["TOKENIZERS_PARALLELISM"]
        mb = nbytes / 1e6
        best = {k: min(v) for k, v in runs.items()}
        rows = [("ftc data (read, parse, encode, write)", "ftc", "ftc"),
                ("tokenizers encode_batch (encoding alone)", "hf", "ftc"),
                ("tokenizers json.loads + encode_batch", "hf_json", "ftc"),
                ("ftc data --threads 1", "ftc1", "ftc1"),
                ("tokenizers encode_batch, one thread", "hf1", "ftc1")]
        print(f"best of {a.runs} runs; ratio: how many times faster ftc is (ftc's row of the same threads)")
        print("| | seconds | MB/s | ftc's speed / this |")
        print("| --- | --- | --- | --- |")
        for label, k, base in rows:
            print(f"| {label} | {best[k]:.2f} | {mb / best[k]:.1f} | {best[k] / best[base]:.2f} |")


if __name__ == "__main__":
    main()
