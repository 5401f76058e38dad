"""vLLM's compilation options (`-O`, `--compilation-config`, `--optimization-level`) as each release resolves its
CUDA graph mode (sim/config/engines/vllm_graphs.py), and the launch term the steps outside graphs then pay."""

import pytest

from sim.config.files import validate_scenario
from sim.core.step_plan import StepPlan
from sim.cost.overhead import ENGINE_DEFAULTS
from sim.errors import ConfigError
from sim.run import overhead_of

BASE = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                     "lengths": {"kind": "fixed", "input_tokens": 500, "output_tokens": 100}},
        "run": {"num_requests": 20}}
EAGER_LAUNCH_S = ENGINE_DEFAULTS["vllm-eager"].launch_per_layer_s


def scenario(version: str, **flags):
    return validate_scenario({**BASE, "engine": {"name": "vllm", "version": version, **flags}})


def graphs(sc) -> str:
    """Which steps the scenario's overhead prices as CUDA graphs: all, decode (decode-only steps), or none."""
    o = sc.cost_model.overhead
    if o.engine == "vllm-eager" and not o.graph_max_seqs and not o.graph_prefill:
        return "none"
    if o.launch_per_layer_s and o.graph_max_seqs and not o.graph_prefill:
        return "decode"
    assert o.engine == "vllm-cudagraph" and not o.launch_per_layer_s, o
    return "all"


def graph_note(sc) -> str:
    return next((note for note in sc.engine.notes if "CUDA graphs" in note and "compil" not in note.lower()
                 or "CUDAGraphMode" in note), "")


# (version, flags, which steps replay graphs), each read in that release's VllmConfig (the module's docstring)
CASES = [
    ("0.11.0", {}, "all"),
    ("0.11.0", {"enforce_eager": True}, "none"),
    # 0.8.0-0.9.0 set level 3 and use_cudagraph for V1 whatever is given; 0.9.1 on honour use_cudagraph
    ("0.8.5", {"compilation_config": {"use_cudagraph": False, "level": 0}}, "all"),
    ("0.9.0", {"compilation_config": {"use_cudagraph": False}}, "all"),
    ("0.9.1", {"compilation_config": {"use_cudagraph": False}}, "none"),
    ("0.10.0", {"compilation_config": {"level": 0}}, "all"),  # (level set to 3 in 0.10.0)
    ("0.10.0", {"compilation_config": {"full_cuda_graph": True}}, "all"),
    # 0.10.1-0.11.x: a level other than 3 means NONE unless a cudagraph_mode is given
    ("0.10.1", {"compilation_config": 0}, "none"),
    ("0.10.2", {"compilation_config": {"level": 2}}, "none"),
    ("0.11.0", {"compilation_config": 3}, "all"),
    ("0.11.0", {"compilation_config": {"cudagraph_mode": "FULL_DECODE_ONLY"}}, "decode"),
    ("0.11.0", {"compilation_config": {"level": 0, "cudagraph_mode": "full_decode_only"}}, "decode"),
    ("0.11.0", {"compilation_config": {"use_cudagraph": False}}, "none"),
    ("0.11.1", {"compilation_config": {"mode": "NONE"}}, "none"),
    ("0.11.2", {"compilation_config": {"level": 0, "mode": 3}}, "all"),  # mode wins over level
    # 0.12.0 on: the optimization level's defaults
    ("0.12.0", {"optimization_level": 0}, "none"),
    ("0.12.0", {"optimization_level": 1}, "all"),
    ("0.34.0", {"optimization_level": 3}, "all"),
    # a compilation mode other than 3: every graph mode NONE in 0.12.0, the piecewise ones only in 0.13.0-0.29.x,
    # their pieces dropped from 0.30.0
    ("0.12.0", {"compilation_config": {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"}}, "none"),
    ("0.13.0", {"compilation_config": {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"}}, "decode"),
    ("0.13.0", {"compilation_config": {"mode": 0}}, "none"),
    ("0.29.0", {"compilation_config": {"mode": 0}}, "none"),
    ("0.30.0", {"compilation_config": {"mode": 0}}, "decode"),
    ("0.30.0", {"compilation_config": {"mode": 0, "cudagraph_mode": "PIECEWISE"}}, "none"),
    ("0.30.0", {"optimization_level": 1, "compilation_config": {"mode": 0}}, "none"),
    ("0.20.0", {"optimization_level": 2, "enforce_eager": True}, "none"),
]


@pytest.mark.parametrize("version, flags, expected", CASES)
def test_each_release_resolves_its_cuda_graph_mode_as_its_vllm_config_does(version, flags, expected):
    sc = scenario(version, **flags)
    assert graphs(sc) == expected
    if flags and expected != "all":
        assert graph_note(sc), sc.engine.notes  # the run says which steps leave graphs, and why


def test_decode_only_graphs_price_the_launch_on_steps_with_prompt_tokens_only():
    sc = scenario("0.20.0", max_num_seqs=128, compilation_config={"cudagraph_mode": "FULL_DECODE_ONLY"})
    overhead = overhead_of(sc.cost_model.overhead)
    assert overhead.graph_max_seqs == 128 and not overhead.graph_prefill
    assert overhead.launch_per_layer_s == EAGER_LAUNCH_S
    default = overhead_of(scenario("0.20.0", max_num_seqs=128).cost_model.overhead)
    layers, tiny_kernels_s = 32, 1e-6
    decode = StepPlan(num_decode_seqs=128, decode_context_tokens=128 * 600, num_sampled_seqs=128)
    prefill = StepPlan(prefill_request_ids=[0], prefill_chunk_tokens=[500], prefill_context_tokens=[0],
                       num_sampled_seqs=1)
    # a decode step replays its graph, as by default
    assert overhead.step_time(tiny_kernels_s, decode, layers) == default.step_time(tiny_kernels_s, decode, layers)
    # a step with a prompt launches 32 layers' kernels one by one, which outlast the tiny kernels (async
    # scheduling, on by default in 0.20.0: the step takes the longer of the GPU's part and the CPU terms)
    cpu_s = default.step_time(0.0, prefill, layers)  # the CPU terms alone (kernels of no time, no launch term)
    assert overhead.overlap
    assert overhead.step_time(tiny_kernels_s, prefill, layers) == pytest.approx(max(layers * EAGER_LAUNCH_S, cpu_s))
    assert overhead.step_time(tiny_kernels_s, prefill, layers) > default.step_time(tiny_kernels_s, prefill, layers)


@pytest.mark.parametrize("version, command, expected", [
    ("0.11.0", "vllm serve m -O3", "all"),
    ("0.11.0", "vllm serve m -O0", "none"),
    ("0.11.0", "vllm serve m -O 0", "none"),
    ("0.11.0", "vllm serve m -O=0", "none"),
    ("0.11.0", "vllm serve m -O '{\"cudagraph_mode\": \"FULL_DECODE_ONLY\"}'", "decode"),
    ("0.11.0", "vllm serve m --compilation-config '{\"level\": 1}'", "none"),
    ("0.12.0", "vllm serve m -O0", "none"),  # -O<n> is the optimization level from 0.12.0
    ("0.12.0", "vllm serve m -O 1", "all"),
    ("0.12.0", "vllm serve m --optimization-level 0", "none"),
    ("0.34.0", "vllm serve m -cc '{\"cudagraph_mode\": \"NONE\"}'", "none"),
    ("0.34.0", "vllm serve m --compilation_config='{\"mode\": 0}'", "decode"),
])
def test_a_launch_command_spells_them_as_each_releases_parser_does(version, command, expected):
    assert graphs(scenario(version, command=command)) == expected


@pytest.mark.parametrize("version, flags, message", [
    ("0.6.4", {"command": "vllm serve m -O3"}, "'-O3' is not an option the vllm preset reads"),
    ("0.6.4", {"compilation_config": 3}, "engine.compilation_config: not a flag of vllm 0.6.4 (it came in 0.6.5)"),
    ("0.11.0", {"command": "vllm serve m -cc '{\"level\": 3}'"}, "'-cc' is not an option the vllm preset reads"),
    ("0.11.0", {"optimization_level": 0}, "engine.optimization_level: not a flag of vllm 0.11.0 (it came in "
                                          "0.12.0)"),
    ("0.12.0", {"compilation_config": 3}, "engine.compilation_config: 3 is not allowed in vLLM 0.12.0"),
    ("0.12.0", {"optimization_level": 4}, "engine.optimization_level: 4 is not allowed; allowed: 0, 1, 2 or 3"),
    ("0.34.0", {"compilation_config": {"pass_config": {"enable_fusion": True}}},
     "engine.compilation_config.pass_config: not modelled"),
    ("0.34.0", {"compilation_config": {"level": 3}}, "engine.compilation_config.level: not a compilation option of "
                                                     "vLLM 0.34.0 (its parser refuses it from 0.18.0)"),
    ("0.11.0", {"compilation_config": {"cudagraph_mode": "FULL", "full_cuda_graph": True}},
     "full_cuda_graph beside cudagraph_mode is refused by vLLM 0.11.0"),
    ("0.11.0", {"compilation_config": {"cudagraph_mode": "PIECEWISE", "level": 0}},
     "cudagraph_mode PIECEWISE needs compilation level 3"),
    ("0.11.0", {"compilation_config": {"cudagraph_mode": "SOMETIMES"}},
     "engine.compilation_config.cudagraph_mode: 'SOMETIMES' is not allowed"),
    ("0.11.0", {"compilation_config": {"cudagraph_capture_sizes": [0, 8]}},
     "engine.compilation_config.cudagraph_capture_sizes: [0, 8] is not allowed"),
    ("0.11.0", {"command": "vllm serve m --compilation-config '{\"level\": '"}, "engine.command '--compilation-config"),
    ("0.7.3", {"compilation_config": {"cudagraph_mode": "NONE"}}, "not modelled for vLLM 0.7.3's V0 engine"),
])
def test_what_the_release_does_not_take_is_refused_in_one_line(version, flags, message):
    with pytest.raises(ConfigError) as err:
        scenario(version, **flags)
    assert message.lower() in str(err.value).lower() and "\n" not in str(err.value)


def test_v0_compiles_its_model_but_keeps_its_decode_graphs():
    sc = scenario("0.7.3", command="vllm serve m -O3")
    assert graphs(sc) == "all" and any("(V0) compilation config" in note for note in sc.engine.notes)
    assert graphs(scenario("0.7.3", enforce_eager=True, compilation_config={"level": 3})) == "none"


def test_capture_sizes_are_taken_and_said_to_be_priced_as_by_default():
    sc = scenario("0.20.0", compilation_config={"cudagraph_capture_sizes": [1, 2, 4, 8]})
    assert graphs(sc) == "all"
    assert any("capture sizes" in note for note in sc.engine.notes)


@pytest.mark.parametrize("version, command, refused", [
    ("0.10.2", "--cuda-graph-sizes 1 2 4 8 --max-seq-len-to-capture 8192", None),
    ("0.12.0", "--cuda-graph-sizes 512 --cudagraph-capture-sizes 1 2 4 --max-cudagraph-capture-size 4", None),
    ("0.13.0", "--cuda-graph-sizes 512", "its parser refuses it from 0.13.0"),
    ("0.11.0", "--max-seq-len-to-capture 8192", "its parser refuses it from 0.11.0"),
    ("0.11.0", "--max-cudagraph-capture-size 4", "it came in 0.11.1"),
])
def test_the_capture_size_options_are_taken_where_the_release_has_them(version, command, refused):
    if refused:
        with pytest.raises(ConfigError, match=refused):
            scenario(version, command=f"vllm serve m {command} --port 8000")
        return
    sc = scenario(version, command=f"vllm serve m {command} --port 8000")
    assert graphs(sc) == "all"
    said = next(note for note in sc.engine.notes if "accepted, no effect" in note)
    assert "CUDA graph capture sizes" in said and all(word in said for word in command.split() if word[0] == "-")


def test_the_cli_refuses_a_compilation_option_it_does_not_price_in_one_line_and_writes_nothing(tmp_path):
    from helpers import run_refused
    command = "vllm serve m -cc '{\"pass_config\": {\"enable_fusion\": true}}'"
    line = run_refused(tmp_path, {**BASE, "engine": {"name": "vllm", "version": "0.20.0", "command": command}})
    assert line.startswith("error: engine.command '-cc {") and "}': pass_config: not modelled" in line


def test_a_bad_value_is_refused_beside_enforce_eager_too():
    with pytest.raises(ConfigError, match="engine.compilation_config.cudagraph_mode: 'SOMETIMES' is not allowed"):
        scenario("0.20.0", enforce_eager=True, compilation_config={"cudagraph_mode": "SOMETIMES"})
