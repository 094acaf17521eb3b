#!/usr/bin/env python3
"""st_meta.py FILE KEY VALUE: sets KEY of a safetensors file's __metadata__ to the string
VALUE; st_meta.py FILE --tensor NAME dtype|shape VALUE: declares tensor NAME with another
dtype (F16) or shape (256,64,1); st_meta.py FILE --rename NAME NEW: names tensor NAME NEW.
In place: the header rewritten, the tensors' bytes
untouched; for tests that feed ftc checkpoints whose header lies."""
import json
import struct
import sys

path = sys.argv[1]
with open(path, "rb") as f:
    blob = f.read()
n = struct.unpack("<Q", blob[:8])[0]
header = json.loads(blob[8:8 + n])
if sys.argv[2] == "--rename":
    header[sys.argv[4]] = header.pop(sys.argv[3])
elif sys.argv[2] == "--tensor":
    name, key, value = sys.argv[3:6]
    header[name][key] = [int(d) for d in value.split(",")] if key == "shape" else value
else:
    header.setdefault("__metadata__", {})[sys.argv[2]] = sys.argv[3]
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)   # the data stays 8-byte aligned
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + blob[8 + n:])
