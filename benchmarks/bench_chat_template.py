"""What one chat request costs vLLM's API server in the versions that parse the chat template anew per request
(issue 30): the number behind `sim/config/engines/engine_work.py` TEMPLATE_PARSES.

vLLM's OpenAI server renders a /v1/chat/completions request's messages through the model's Jinja chat template in its
event loop, synchronously. Rendering a compiled template is cheap (transformers caches the compiled template). Two
version ranges also parse the template's source again for every request, read in each release's
vllm/entrypoints/chat_utils.py:

- 0.8.2 to 0.9.1: `resolve_chat_template_content_format` (no longer cached from 0.8.2) runs `_detect_content_format`,
  which parses the template (`_try_extract_ast`: environment.parse) and walks its loops; cached again in 0.9.2
  (`@lru_cache` on `_detect_content_format`, vLLM pull request 20065: "6-8 seconds delay" for 1,000 requests).
- 0.11.0: `resolve_chat_template_kwargs` builds a sandboxed environment, parses the template and runs
  `jinja2.meta.find_undeclared_variables` (a code-generation pass) for every request; cached from 0.11.1
  (`_cached_resolve_chat_template_kwargs`). Absent from 0.10.2 and earlier.

This script times those two per-request passes as those versions run them (the same jinja2 calls and environment
options), and the cached render beside them, on this machine's CPU, for a chat template given as a file (the template
text itself, or a Hugging Face tokenizer_config.json holding it: the model's own, e.g. from the Hugging Face cache).
Each is timed in rounds of 0.5 s of back-to-back calls in one process; the minimum over rounds is the cost on an
unloaded core, the median what a shared core gave.

    taskset -c 1 .venv/bin/python benchmarks/bench_chat_template.py PATH [--rounds 7] [--processes 3]

Needs jinja2 (the dashboard extras install it). Prints the machine and one Markdown row per pass.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibrate.fidelity.machine import allowed_cores, cpuinfo  # noqa: E402

ENV_OPTIONS = {"trim_blocks": True, "lstrip_blocks": True}  # transformers' and vLLM's template environment


def _environment():
    """The sandboxed environment vLLM 0.11.0's resolve_chat_template_kwargs builds per request (transformers'
    template compiler builds the same one: its `generation` tag and loop controls)."""
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    import jinja2.sandbox

    class AssistantTracker(jinja2.ext.Extension):  # the `{% generation %}` block, parsed as transformers does
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            call = self.call_method("_generation_support")
            return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    return jinja2.sandbox.ImmutableSandboxedEnvironment(
        **ENV_OPTIONS, extensions=[AssistantTracker, jinja2.ext.loopcontrols])


def parse_and_variables(template: str) -> set:
    """vLLM 0.11.0, per chat request: a new environment, the template parsed, its undeclared variables found."""
    import jinja2.meta
    return jinja2.meta.find_undeclared_variables(_environment().parse(template))


def parse_and_walk(environment, template: str) -> bool:
    """vLLM 0.8.2-0.9.1, per chat request (`_detect_content_format`): the template parsed in the (cached) compiled
    template's environment, then its loops walked. vLLM tests each loop for one over a message's content; the test
    here is simpler, the parse (most of the time) the same."""
    import jinja2.nodes
    ast = environment.parse(template)
    return any(isinstance(loop.iter, jinja2.nodes.Getattr) or isinstance(loop.iter, jinja2.nodes.Getitem)
               for loop in ast.find_all(jinja2.nodes.For))


def read_template(path: Path) -> str:
    """The template text: the file itself, or the `chat_template` of a tokenizer_config.json."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        template = json.loads(text).get("chat_template")
        if isinstance(template, list):  # named templates: the default one
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        if not isinstance(template, str):
            raise SystemExit(f"{path}: no chat_template string; allowed: a tokenizer_config.json with one, or a "
                             ".jinja file")
        return template
    return text


def time_rounds(call, rounds: int, round_s: float = 0.5) -> list[float]:
    """Seconds per call in each round (back-to-back calls for `round_s`), after five warm-up calls."""
    for _ in range(5):
        call()
    out = []
    for _ in range(rounds):
        start, n = time.perf_counter(), 0
        while time.perf_counter() - start < round_s:
            call()
            n += 1
        out.append((time.perf_counter() - start) / n)
    return out


def one_process(template: str, rounds: int) -> dict[str, list[float]]:
    environment = _environment()
    compiled = environment.from_string(template)
    messages = [{"role": "user", "content": "word " * 200}]
    return {
        "0.11.0: parse + undeclared variables": time_rounds(lambda: parse_and_variables(template), rounds),
        "0.8.2-0.9.1: parse + loop walk": time_rounds(lambda: parse_and_walk(environment, template), rounds),
        "render (compiled, every version)": time_rounds(
            lambda: compiled.render(messages=messages, add_generation_prompt=True, tools=None), rounds),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("template", type=Path, help="a chat template (.jinja) or a tokenizer_config.json")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--processes", type=int, default=3, help="fresh processes, one after the other")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    template = read_template(args.template)
    if args.worker:
        print(json.dumps(one_process(template, args.rounds)))
        return 0
    import jinja2
    samples: dict[str, list[float]] = {}
    for _ in range(args.processes):
        out = subprocess.run([sys.executable, __file__, str(args.template), "--rounds", str(args.rounds), "--worker"],
                             check=True, capture_output=True, text=True).stdout
        for name, values in json.loads(out).items():
            samples.setdefault(name, []).extend(values)
    info = cpuinfo()
    flags = ", ".join(f for f in ("avx2", "avx512f", "amx_tile") if info.get(f))
    print(f"machine: {info['cpu_model']} ({flags}), {os.cpu_count()} hardware threads, this process on cores "
          f"{allowed_cores()}, {platform.python_implementation()} {platform.python_version()}, jinja2 "
          f"{jinja2.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"template: {args.template.name}, {len(template):,} characters; {args.processes} processes x "
          f"{args.rounds} rounds of 0.5 s\n")
    print("| per chat request | min ms | median ms | max ms |\n| --- | ---: | ---: | ---: |")
    for name, values in samples.items():
        print(f"| {name} | {min(values) * 1e3:.2f} | {statistics.median(values) * 1e3:.2f} | "
              f"{max(values) * 1e3:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
