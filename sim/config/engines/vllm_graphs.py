"""Which of vLLM V1's steps replay a CUDA graph, from its compilation options (`-O`, `--compilation-config`,
`--optimization-level`, `--enforce-eager`), as each release's VllmConfig resolves them.

What the cost models price: a step replayed as a CUDA graph has no per-layer launch term, a step launched kernel by
kernel pays the eager estimate (sim/cost/overhead.py `vllm-eager`). vLLM's CUDAGraphMode names what runs as a graph:
NONE (no step), PIECEWISE (every step, attention between the pieces), FULL (every step, one graph), FULL_DECODE_ONLY
(decode-only steps; steps with prompt tokens run eagerly) and FULL_AND_PIECEWISE (full for decode, piecewise for the
rest; the default from 0.11.0). So NONE prices every step with the launch term, FULL_DECODE_ONLY the steps with
prompt tokens, and the other three none, as the preset prices vLLM V1 by default. Steps beyond the largest captured
size (512 sequences or tokens by default) run without a graph in vLLM, and are priced as graphed here, as by default:
their kernels outlast the launches.

Read in the PyPI sdists of 0.6.5, 0.8.0, 0.8.5, 0.9.0-0.9.2, 0.10.0-0.10.2, 0.11.0-0.11.2, 0.12.0-0.14.1, 0.16.0-0.34.0
(vllm/config.py, from 0.10.1 vllm/config/compilation.py and vllm/config/__init__.py, from 0.11.1 vllm/config/vllm.py;
the `-O` spellings in FlexibleArgumentParser, vllm/utils):

- 0.8.0-0.9.0: VllmConfig.__post_init__ sets level 3 (PIECEWISE) and use_cudagraph for V1 unless --enforce-eager,
  whatever was given: only --enforce-eager turns the graphs off.
- 0.9.1-0.10.0: level still set to 3; `use_cudagraph: false` turns the graphs off (its default is V1's true).
- 0.10.1-0.11.0: `cudagraph_mode`; absent, PIECEWISE (0.11.0: FULL_AND_PIECEWISE) at level 3, the default without
  --enforce-eager, else NONE. `use_cudagraph: false` means NONE and `full_cuda_graph: true` FULL, either beside
  `cudagraph_mode` a ValueError; a piecewise mode at another level fails an assertion.
- 0.11.1-0.11.2: `mode` replaces `level` (still read where mode is absent); the same rules, FULL_AND_PIECEWISE the
  default; use_cudagraph and full_cuda_graph gone.
- 0.12.0 on: `--optimization-level` (O2 by default; `-O<n>` spells it) sets the defaults: O0 no compilation and NONE,
  O1 PIECEWISE, O2 and O3 FULL_AND_PIECEWISE; a mode other than 3 (VLLM_COMPILE) turns any graph mode into NONE in
  0.12.0, a piecewise one only in 0.13.0-0.29.x, and from 0.30.0 drops the pieces (PIECEWISE to NONE,
  FULL_AND_PIECEWISE to FULL_DECODE_ONLY). `level` is gone from 0.18.0. --enforce-eager means NONE throughout.

The other compilation options (fusion passes, custom ops, Inductor's settings) change which kernels run, which the
cost models do not price apart: refused in one line.
"""

from __future__ import annotations

import json
from typing import Any

from sim.config.engines.base import Context, dotted_version, graph_terms, outside_versions
from sim.errors import ConfigError

GRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
PIECEWISE_MODES = ("PIECEWISE", "FULL_AND_PIECEWISE")  # CUDAGraphMode.requires_piecewise_compilation
COMPILE_MODES = {"NONE": 0, "STOCK_TORCH_COMPILE": 1, "DYNAMO_TRACE_ONCE": 2, "VLLM_COMPILE": 3}  # from 0.11.1
PIECEWISE_LEVEL = 3  # CompilationLevel.PIECEWISE, CompilationMode.VLLM_COMPILE

VLLM_COMPILATION_CONFIG_SINCE = (0, 6, 5)  # --compilation-config / -O in vllm/engine/arg_utils.py
VLLM_OPTIMIZATION_LEVEL_SINCE = (0, 12, 0)  # --optimization-level; -O spells it, -cc spells --compilation-config
VLLM_GRAPH_SWITCHES_FORCED_UNTIL = (0, 9, 1)  # use_cudagraph set for V1 whatever was given
VLLM_CUDAGRAPH_MODE_SINCE = (0, 10, 1)
VLLM_FULL_AND_PIECEWISE_DEFAULT_SINCE = (0, 11, 0)
VLLM_COMPILE_MODE_SINCE = (0, 11, 1)  # `mode` beside the deprecated `level`; use_cudagraph, full_cuda_graph gone
VLLM_PIECEWISE_ONLY_TO_NONE_SINCE = (0, 13, 0)  # a mode other than 3 turns only the piecewise graph modes to NONE
VLLM_WITHOUT_PIECEWISE_SINCE = (0, 30, 0)  # ... drops their pieces instead (CUDAGraphMode.without_piecewise)

# The keys of --compilation-config read here: (the first release that has each, the first that does not)
COMPILATION_KEYS = {"level": (VLLM_COMPILATION_CONFIG_SINCE, (0, 18, 0)),
                    "mode": (VLLM_COMPILE_MODE_SINCE, None),
                    "cudagraph_mode": (VLLM_CUDAGRAPH_MODE_SINCE, None),
                    "use_cudagraph": (VLLM_COMPILATION_CONFIG_SINCE, VLLM_COMPILE_MODE_SINCE),
                    "full_cuda_graph": ((0, 9, 0), VLLM_COMPILE_MODE_SINCE),
                    # the sizes captured: steps past the largest are priced as graphed (the module's docstring)
                    "cudagraph_capture_sizes": (VLLM_COMPILATION_CONFIG_SINCE, None),
                    "max_cudagraph_capture_size": (VLLM_COMPILE_MODE_SINCE, None)}
OPTIMIZATION_LEVEL_GRAPHS = ("NONE", "PIECEWISE", "FULL_AND_PIECEWISE", "FULL_AND_PIECEWISE")  # by level, 0.12.0 on
# What the sizes a run captures change here: nothing (the module's docstring), said wherever they are given
CAPTURE_SIZES = ("CUDA graph capture sizes: a step past the largest runs without a graph in vLLM and is priced as "
                 "graphed here, as steps past the default largest are")
# The options that set them, each (the first release whose vllm/engine/arg_utils.py has it, the first without), read
# in the sdists of 0.6.0-0.34.0: the graphs' batch sizes (SchedulerConfig.cuda_graph_sizes, then the compilation
# config's) and V0's longest context captured (ModelConfig.max_seq_len_to_capture)
CAPTURE_SIZE_OPTIONS = {"--cuda-graph-sizes": ("many", (0, 9, 0), (0, 13, 0)),
                        "--cudagraph-capture-sizes": ("many", VLLM_COMPILE_MODE_SINCE, None),
                        "--max-cudagraph-capture-size": ("one", VLLM_COMPILE_MODE_SINCE, None),
                        "--max-seq-len-to-capture": ("one", None, (0, 11, 0))}


def read_compilation_config(value: Any) -> dict[str, Any] | int:
    """--compilation-config as given: a mapping (a JSON object on the command line) or a level 0-3 (`-O 3` before
    0.12.0); anything else refused in one line."""
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            value = int(text)
        else:
            try:
                value = json.loads(text)
            except ValueError:
                value = text
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 3:
        return value
    if isinstance(value, dict):
        return value
    raise ConfigError(f"engine.compilation_config: {value!r} is not allowed; allowed: a mapping of vLLM's "
                      "compilation options (a JSON object on the command line), or a level 0-3")


def read_optimization_level(value: int) -> int:
    """--optimization-level: 0 to 3 (vLLM's OptimizationLevel)."""
    if not 0 <= value <= 3:
        raise ConfigError(f"engine.optimization_level: {value!r} is not allowed; allowed: 0, 1, 2 or 3")
    return value


def _level(given: dict[str, Any], key: str) -> int | None:
    """A compilation level or mode as a number (0-3; a mode's name from 0.11.1), None where absent."""
    value = given.get(key)
    if value is None:
        return None
    if isinstance(value, str) and value.upper() in COMPILE_MODES:
        return COMPILE_MODES[value.upper()]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 3:
        return value
    names = ", or one of " + ", ".join(COMPILE_MODES) if key == "mode" else ""
    raise ConfigError(f"engine.compilation_config.{key}: {value!r} is not allowed; allowed: 0, 1, 2 or 3{names}")


def _switch(given: dict[str, Any], key: str) -> bool | None:
    value = given.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise ConfigError(f"engine.compilation_config.{key}: {value!r} is not allowed; allowed: true or false")


def _given_graph_mode(given: dict[str, Any]) -> str | None:
    value = given.get("cudagraph_mode")
    if value is None:
        return None
    if isinstance(value, str) and value.upper() in GRAPH_MODES:
        return value.upper()
    raise ConfigError(f"engine.compilation_config.cudagraph_mode: {value!r} is not allowed; allowed: "
                      f"{', '.join(GRAPH_MODES)}")


def _capture_sizes(given: dict[str, Any]) -> None:
    sizes, largest = given.get("cudagraph_capture_sizes"), given.get("max_cudagraph_capture_size")
    if sizes is not None and not (isinstance(sizes, list) and all(isinstance(size, int) and not isinstance(size, bool)
                                                                  and size >= 1 for size in sizes)):
        raise ConfigError(f"engine.compilation_config.cudagraph_capture_sizes: {sizes!r} is not allowed; allowed: a "
                          "list of whole numbers >= 1")
    if largest is not None and (isinstance(largest, bool) or not isinstance(largest, int) or largest < 0):
        raise ConfigError(f"engine.compilation_config.max_cudagraph_capture_size: {largest!r} is not allowed; "
                          "allowed: a whole number >= 0")


def _checked_keys(ctx: Context, given: dict[str, Any]) -> None:
    """Every key of the compilation config one this release has and this module reads; refused in one line else."""
    for key in given:
        if key not in COMPILATION_KEYS:
            raise ConfigError(f"engine.compilation_config.{key}: not modelled (it changes which kernels run, which "
                              f"the cost models do not price apart); allowed: {', '.join(COMPILATION_KEYS)} where "
                              "the release has them, or leave it out")
        outside = outside_versions(ctx.version, ctx.version_text, *COMPILATION_KEYS[key])
        if outside:
            raise ConfigError(f"engine.compilation_config.{key}: not a compilation option of vLLM "
                              f"{ctx.version_text} ({outside[0]}); allowed: leave it out, or {outside[1]}")


def vllm_graph_mode(ctx: Context) -> tuple[str, str]:
    """(the CUDAGraphMode vLLM V1 resolves for the run, why: the options that decided it, '' for the default)."""
    v, flags = ctx.version, ctx.flags
    given = flags.get("compilation_config")
    if isinstance(given, int):
        if v >= VLLM_OPTIMIZATION_LEVEL_SINCE:
            raise ConfigError(f"engine.compilation_config: {given!r} is not allowed in vLLM {ctx.version_text}; "
                              "allowed: a mapping (the level a number was is --optimization-level / -O from "
                              f"{dotted_version(VLLM_OPTIMIZATION_LEVEL_SINCE)})")
        given = {"level": given}
    given = given or {}
    _checked_keys(ctx, given)
    _capture_sizes(given)
    level, mode = _level(given, "level"), _level(given, "mode")
    use_graphs, full = _switch(given, "use_cudagraph"), _switch(given, "full_cuda_graph")
    graph_mode = _given_graph_mode(given)
    if flags.get("enforce_eager"):
        return "NONE", "--enforce-eager"
    said = ", ".join(f"{key} {json.dumps(value) if isinstance(value, bool) else value}" for key, value in given.items()
                     if key in ("level", "mode", "cudagraph_mode", "use_cudagraph", "full_cuda_graph"))
    if v < VLLM_CUDAGRAPH_MODE_SINCE:
        if use_graphs is False and v >= VLLM_GRAPH_SWITCHES_FORCED_UNTIL:
            return "NONE", "use_cudagraph false"
        forced = "level 3 and use_cudagraph" if v < VLLM_GRAPH_SWITCHES_FORCED_UNTIL else "level 3"
        return ("FULL" if full else "PIECEWISE"), said and f"{said} (V1 sets {forced} whatever is given)"
    if v < VLLM_OPTIMIZATION_LEVEL_SINCE:
        for switch, meaning in ((use_graphs is False, "use_cudagraph"), (full is True, "full_cuda_graph")):
            if switch and graph_mode is not None:
                raise ConfigError(f"engine.compilation_config: {meaning} beside cudagraph_mode is refused by vLLM "
                                  f"{ctx.version_text} (\"mutually exclusive\"); allowed: cudagraph_mode alone")
        if use_graphs is False:
            graph_mode = "NONE"
        elif full:
            graph_mode = "FULL"
        compiled = (mode if mode is not None else level if level is not None else PIECEWISE_LEVEL) == PIECEWISE_LEVEL
        if graph_mode is None:
            default = "FULL_AND_PIECEWISE" if v >= VLLM_FULL_AND_PIECEWISE_DEFAULT_SINCE else "PIECEWISE"
            graph_mode = default if compiled else "NONE"
        elif graph_mode in PIECEWISE_MODES and not compiled:
            raise ConfigError(f"engine.compilation_config: cudagraph_mode {graph_mode} needs compilation level 3, "
                              f"which vLLM {ctx.version_text} asserts; allowed: level/mode 3, or cudagraph_mode NONE, "
                              "FULL or FULL_DECODE_ONLY")
        return graph_mode, said
    optimization = flags.get("optimization_level", 2)
    if "optimization_level" in flags:
        said = ", ".join(part for part in (f"-O{optimization}", said) if part)
    compiled = (mode if mode is not None else level if level is not None
                else PIECEWISE_LEVEL if optimization > 0 else 0) == PIECEWISE_LEVEL
    if graph_mode is None:
        graph_mode = OPTIMIZATION_LEVEL_GRAPHS[optimization]
    if not compiled and graph_mode != "NONE":  # (FULL and FULL_DECODE_ONLY need no compilation from 0.13.0)
        if v < VLLM_PIECEWISE_ONLY_TO_NONE_SINCE:
            graph_mode = "NONE"
        elif graph_mode in PIECEWISE_MODES:
            without_pieces = "FULL_DECODE_ONLY" if graph_mode == "FULL_AND_PIECEWISE" else "NONE"
            graph_mode = without_pieces if v >= VLLM_WITHOUT_PIECEWISE_SINCE else "NONE"
    return graph_mode, said


# vLLM V0 (worker/model_runner.py `_use_captured_graph`, read in 0.6.5, 0.7.0 and 0.7.3) replays its decode steps as
# CUDA graphs unless --enforce-eager, whatever the compilation level, which compiles the model's code only
V0_COMPILATION_KEYS = ("level", "cudagraph_capture_sizes")


def vllm_v0_compilation(ctx: Context, notes: list[str]) -> None:
    """--compilation-config under vLLM V0: a level and the capture sizes accepted (the graphs as without them),
    other keys refused in one line."""
    given = ctx.flags.get("compilation_config")
    if given is None:
        return
    given = {"level": given} if isinstance(given, int) else given
    for key in given:
        if key not in V0_COMPILATION_KEYS:
            raise ConfigError(f"engine.compilation_config.{key}: not modelled for vLLM {ctx.version_text}'s V0 "
                              f"engine; allowed: {', '.join(V0_COMPILATION_KEYS)}, or leave it out")
    _level(given, "level")
    _capture_sizes(given)
    notes.append(f"vLLM {ctx.version_text} (V0) compilation config: its decode steps replay CUDA graphs whatever the "
                 "level, as priced; the compiled model's kernels are not priced apart")


def vllm_graph_overhead(ctx: Context, overhead: dict[str, Any], max_num_seqs: int,
                        notes: list[str]) -> dict[str, Any]:
    """The preset's overhead section with the launch term where the run's steps leave CUDA graphs
    (`vllm_graph_mode`): the eager estimate for every step under NONE, for the steps with prompt tokens under
    FULL_DECODE_ONLY (decode batches up to `max_num_seqs` replay graphs); unchanged otherwise."""
    graph_mode, why = vllm_graph_mode(ctx)
    given = ctx.flags.get("compilation_config")
    if isinstance(given, dict) and ({"cudagraph_capture_sizes", "max_cudagraph_capture_size"} & set(given)):
        notes.append(f"vLLM {ctx.version_text} {CAPTURE_SIZES}")
    if graph_mode == "NONE":
        if why:
            notes.append(f"vLLM {ctx.version_text} {why}: no CUDA graphs (CUDAGraphMode NONE): every step pays the "
                         "eager launch term (cost_model.overhead.launch_per_layer_s, an estimate)")
        return {**overhead, "engine": "vllm-eager"}
    if graph_mode == "FULL_DECODE_ONLY":
        notes.append(f"vLLM {ctx.version_text} {why or 'defaults'}: CUDA graphs for decode-only steps "
                     "(FULL_DECODE_ONLY); steps with prompt tokens pay the eager launch term (an estimate)")
        return {**overhead, **graph_terms(max_num_seqs)}
    if why:
        notes.append(f"vLLM {ctx.version_text} {why}: CUDA graphs for every step ({graph_mode}), as priced by "
                     "default")
    return overhead
