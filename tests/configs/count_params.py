#!/usr/bin/env python3
"""The parameter count transformers gives each config here (num_parameters() of the causal
LM built on the meta device: no memory, no weights), written to counts.txt as
"<config> <count>" lines, for tests/configs.sh to check ftc's counts against without PyTorch.

    pip install torch transformers        # no network: the configs are the files here
    python3 tests/configs/count_params.py
"""
import glob
import os

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

here = os.path.dirname(os.path.abspath(__file__))
transformers.utils.logging.set_verbosity_error()
lines = []
for path in sorted(glob.glob(os.path.join(here, "*.json"))):
    config = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    name = os.path.basename(path)[:-len(".json")]
    lines.append(f"{name} {model.num_parameters()}")
    print(lines[-1], type(model).__name__)
with open(os.path.join(here, "counts.txt"), "w") as f:
    f.write(f"# transformers {transformers.__version__}, torch {torch.__version__}: num_parameters() on "
            "the meta device (tests/configs/count_params.py)\n")
    f.write("\n".join(lines) + "\n")
