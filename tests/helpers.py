"""Small builders for unit tests of schedulers and KV managers (no event loop)."""

from __future__ import annotations

import itertools
from pathlib import Path

from sim.core.request import Request

_ids = itertools.count()


def make_request(prompt: int, output: int, arrival_s: float = 0.0, request_id: int | None = None) -> Request:
    return Request(next(_ids) if request_id is None else request_id, arrival_s, prompt, output)


# The small scenario most end-to-end tests start from: llama-3.1-8b on one H100, a light Poisson load of short
# fixed-length requests. A test states only what it changes (deep-merged, as scenario variants are).
SMALL_SCENARIO = {
    "name": "small",
    "model": "llama-3.1-8b",
    "hardware": {"gpu": "h100-sxm"},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 5},
                 "lengths": {"kind": "fixed", "input_tokens": 64, "output_tokens": 8}},
    "scheduler": {"max_model_len": 2048},
    "run": {"seed": 0, "num_requests": 20},
}


def small_scenario(changes: dict | None = None, **sections) -> dict:
    """SMALL_SCENARIO with `changes` (and keyword sections) deep-merged into it; a fresh dict every call."""
    from sim.config.files import deep_merge
    return deep_merge(deep_merge(SMALL_SCENARIO, changes or {}), sections)


# The fidelity harness's fixtures (recorded vLLM runs and the kernel profile they were compared with).
FIDELITY_FIXTURES = Path(__file__).parent / "fixtures" / "fidelity"


def run_fidelity_cli(args: list[str], capsys) -> tuple[int, object]:
    """(exit status, captured output) of `python -m calibrate.fidelity ARGS`, run in-process."""
    from calibrate.fidelity.__main__ import (
        main,  # the calibrate package, imported only by the tests that use it
    )
    try:
        code = main(args)
    except SystemExit as exit_:
        code = exit_.code
    return code, capsys.readouterr()
