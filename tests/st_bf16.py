#!/usr/bin/env python3
"""st_bf16.py IN OUT: a copy of safetensors file IN with its F32 tensors in BF16 (rounded to
nearest even), the others as they are; st_bf16.py --dtypes FILE: each tensor's name and dtype,
a line each, sorted. For tests that need a checkpoint of another precision (no numpy)."""
import json
import struct
import sys


def read(path):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    return json.loads(blob[8:8 + n]), blob[8 + n:]


if sys.argv[1] == "--dtypes":
    header, _ = read(sys.argv[2])
    for name in sorted(k for k in header if k != "__metadata__"):
        print(name, header[name]["dtype"])
    sys.exit(0)
header, data = read(sys.argv[1])
out, body = {}, bytearray()
for name, t in header.items():
    if name == "__metadata__":
        out[name] = t
        continue
    raw = data[t["data_offsets"][0]:t["data_offsets"][1]]
    if t["dtype"] == "F32":
        bits = struct.unpack(f"<{len(raw) // 4}I", raw)
        half = [((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF if (b & 0x7F800000) != 0x7F800000
                else (b >> 16) | (0x40 if b & 0xFFFF else 0) for b in bits]
        raw = struct.pack(f"<{len(half)}H", *half)
        t = dict(t, dtype="BF16")
    out[name] = dict(t, data_offsets=[len(body), len(body) + len(raw)])
    body += raw
text = json.dumps(out, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + bytes(body))
