"""trtllm-serve's `--extra_llm_api_options` (sim/config/engines/trtllm.py read_llm_api_options): its YAML given
inline as `engine.extra_llm_api_options`, each key the preset reads checked as the flag it spells, and refused in
one line naming the key where the preset does not model it."""

import pytest

from sim.config.files import validate_scenario
from sim.errors import ConfigError

BASE = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                     "lengths": {"kind": "fixed", "input_tokens": 500, "output_tokens": 100}},
        "run": {"num_requests": 20}}
SIZES = [512, 1, 2, 4, 8, 16, 32, 64, 128, 256]  # TensorRT-LLM sorts them
OPTIONS = {"print_iter_log": True, "max_batch_size": 512,
           "kv_cache_config": {"dtype": "fp8", "free_gpu_memory_fraction": 0.85, "enable_block_reuse": False},
           "scheduler_config": {"capacity_scheduler_policy": "MAX_UTILIZATION"},
           "cuda_graph_config": {"enable_padding": True, "batch_sizes": SIZES}}
FLAGS = {"max_batch_size": 512, "kv_cache_dtype": "fp8", "kv_cache_free_gpu_memory_fraction": 0.85,
         "enable_block_reuse": False, "scheduler_policy": "MAX_UTILIZATION", "cuda_graph_batch_sizes": sorted(SIZES)}


def scenario(version: str = "1.2.0rc1", **engine):
    return validate_scenario({**BASE, "engine": {"name": "trtllm", "version": version, **engine}})


def without_engine(sc) -> dict:
    dumped = sc.model_dump(mode="json")
    dumped.pop("engine")
    return dumped


def test_the_options_set_what_their_flags_set():
    sc = scenario(extra_llm_api_options=OPTIONS)
    assert sc.quantization.kv_cache == "fp8" and sc.kv_cache.free_memory_fraction == 0.85
    assert not sc.kv_cache.enable_prefix_caching and sc.scheduler.kv_reservation == "on_demand"
    assert sc.scheduler.cuda_graph_batch_sizes == sorted(SIZES) and sc.scheduler.max_num_seqs == 512
    assert without_engine(sc) == without_engine(scenario(**FLAGS))
    assert any("engine.extra_llm_api_options: print_iter_log: accepted, no effect" in n for n in sc.engine.notes)
    assert scenario().kv_cache.enable_prefix_caching and scenario().quantization.kv_cache == "bf16"


def test_the_options_and_the_command_agree_or_are_refused():
    command = "trtllm-serve m --max_batch_size 512"
    assert scenario(command=command, extra_llm_api_options=OPTIONS).scheduler.max_num_seqs == 512
    with pytest.raises(ConfigError) as err:
        scenario(command=command.replace("512", "256"), extra_llm_api_options=OPTIONS)
    assert str(err.value) == ("engine.extra_llm_api_options.max_batch_size: 512 contradicts engine.max_batch_size "
                              "256; allowed: give one of them, or the same value")


@pytest.mark.parametrize("options, message", [
    ({"kv_cache_config": {"max_tokens": 4096}}, "engine.extra_llm_api_options.kv_cache_config.max_tokens: not "
                                                "modelled; allowed: max_batch_size, "),
    ({"enable_attention_dp": True}, "engine.extra_llm_api_options.enable_attention_dp: not modelled"),
    ({"kv_cache_config": "fp8"}, "engine.extra_llm_api_options.kv_cache_config: 'fp8' is not allowed; allowed: a "
                                 "mapping"),
    ({"kv_cache_config": {"dtype": "nvfp4"}}, "engine.extra_llm_api_options.kv_cache_config.dtype: 'nvfp4' is not "
                                              "allowed; allowed: auto, fp8"),
    ({"kv_cache_config": {"free_gpu_memory_fraction": 1.5}},
     "engine.extra_llm_api_options.kv_cache_config.free_gpu_memory_fraction: 1.5 is not allowed; allowed: <= 1"),
    ({"max_batch_size": 0}, "engine.extra_llm_api_options.max_batch_size: 0 is not allowed"),
    ({"scheduler_config": {"capacity_scheduler_policy": "STATIC_BATCH"}},
     "engine.extra_llm_api_options.scheduler_config.capacity_scheduler_policy: 'STATIC_BATCH' is not allowed"),
    ({"cuda_graph_config": "off"}, "engine.extra_llm_api_options.cuda_graph_config: 'off' is not allowed; allowed: "
                                   "null (no CUDA graphs)"),
    ({"cuda_graph_config": {"max_batch_size": 256, "enable_padding": True}},
     "engine.extra_llm_api_options.cuda_graph_config: the sizes generated from max_batch_size (or 128) are not "
     "modelled"),
    ({"cuda_graph_config": {"batch_sizes": [1, 8]}},
     "engine.extra_llm_api_options.cuda_graph_config.enable_padding: False is not modelled"),
    ({"cuda_graph_config": {"batch_sizes": [1, 8], "enable_padding": True, "max_batch_size": 16}},
     "engine.extra_llm_api_options.cuda_graph_config.max_batch_size: 16 differs from max(batch_sizes) 8"),
    ({"cuda_graph_config": {"batch_sizes": [0, 8], "enable_padding": True}},
     "engine.extra_llm_api_options.cuda_graph_config.batch_sizes: [0, 8] is not allowed"),
    ("extra.yml", "engine.extra_llm_api_options: 'extra.yml' is a file, which ServeSim does not read"),
])
def test_what_the_preset_does_not_model_is_refused_in_one_line(options, message):
    with pytest.raises(ConfigError) as err:
        scenario(extra_llm_api_options=options)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_the_command_names_its_file_and_the_version_that_has_the_option():
    with pytest.raises(ConfigError, match=r"^engine\.command '--extra_llm_api_options extra\.yml': 'extra\.yml' is a "
                                          r"file, which ServeSim does not read; allowed: its YAML mapping as "
                                          r"engine\.extra_llm_api_options \(and the option left out of "
                                          r"engine\.command\)$"):
        scenario(command="trtllm-serve m --extra_llm_api_options extra.yml")
    with pytest.raises(ConfigError, match=r"^engine\.extra_llm_api_options: not a flag of trtllm 0\.17\.0 \(it came in "
                                          r"1\.0\)"):
        scenario("0.17", extra_llm_api_options={"max_batch_size": 8})


def test_the_cli_refuses_a_key_in_one_line_and_writes_nothing(tmp_path):
    from helpers import run_refused
    raw = {**BASE, "engine": {"name": "trtllm", "version": "1.2.0rc1",
                              "extra_llm_api_options": {"enable_attention_dp": True}}}
    assert run_refused(tmp_path, raw).startswith("error: engine.extra_llm_api_options.enable_attention_dp: not "
                                                 "modelled")


def test_a_scenario_with_the_options_dumps_and_reads_back_to_itself():
    sc = scenario(extra_llm_api_options=OPTIONS)
    assert validate_scenario(sc.model_dump(mode="json")) == sc


def test_cuda_graphs_by_default_and_with_padded_sizes():
    """cuda_graph_config's default (max_batch_size 128, no padding: sizes 1-31, 32, 64, 128) replays decode-only
    batches of up to 32 sequences; padded batch_sizes up to the largest; every other step pays the launch term. The
    0.x TensorRT flow is left as it was (no launch term)."""
    default = scenario().cost_model.overhead
    assert default.graph_max_seqs == 32 and default.launch_per_layer_s == 60e-6 and not default.graph_prefill
    assert scenario(extra_llm_api_options=OPTIONS).cost_model.overhead.graph_max_seqs == 512
    assert scenario(extra_llm_api_options={"cuda_graph_config": None}).cost_model.overhead.graph_max_seqs == 0
    assert not scenario("0.17").cost_model.overhead.launch_per_layer_s  # None: the engine default, none
