import os

# Triton reads TRITON_INTERPRET when a kernel module is first imported, and pytest-xdist runs test files in
# any order in one worker: the first file that imports triton decides for all. The suite runs on CPUs (CI has
# no GPU), where Triton kernels can only run under the interpreter, so it is set before anything imports it.
# On a GPU machine, run with TRITON_INTERPRET=0 to test the compiled kernels.
os.environ.setdefault("TRITON_INTERPRET", "1")
# The suite checks the compiled core against the SimPy engine on small runs: compile it even on a cold numba
# cache (sim/compiled/engine.py COLD_CORE_MAX_REQUESTS), here and in the CLI processes tests start.
os.environ.setdefault("SERVESIM_COMPILE_WHEN_COLD", "1")

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
