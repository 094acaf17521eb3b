#!/usr/bin/env python3
"""st_meta.py FILE KEY VALUE: sets KEY of a safetensors file's __metadata__ to the string
VALUE in place (the header rewritten, the tensors' bytes untouched), for tests that feed
ftc checkpoints whose metadata lies."""
import json
import struct
import sys

path, key, value = sys.argv[1:4]
with open(path, "rb") as f:
    blob = f.read()
n = struct.unpack("<Q", blob[:8])[0]
header = json.loads(blob[8:8 + n])
header.setdefault("__metadata__", {})[key] = value
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)   # the data stays 8-byte aligned
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + blob[8 + n:])
