"""`engine.command` (sim/config/engine_command.py): an engine's launch command read into its preset's flags as the
engine's own parser reads it, the options that change nothing simulated accepted and noted, and everything else
refused in one line."""

import re

import pytest
from helpers import run_refused
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config.engines import PRESETS
from sim.config.files import validate_scenario
from sim.errors import ConfigError

BASE = {"model": "llama-3.1-8b",  # the commands' model, m, names none the catalog has
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                     "lengths": {"kind": "fixed", "input_tokens": 500, "output_tokens": 100}},
        "run": {"num_requests": 20}}


def scenario(engine: dict, **sections):
    return validate_scenario({**BASE, **sections, "engine": engine})


def without_engine(sc) -> dict:
    dumped = sc.model_dump(mode="json")
    dumped.pop("engine")
    return dumped


def test_a_vllm_command_gives_the_scenario_its_flags_give_one_by_one():
    command = ("vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 2 --max-num-seqs 128 --max_model_len=4096 "
               "--no-enable-prefix-caching --gpu-mem 0.85 --port 8000 --host 0.0.0.0 --served-model-name a b "
               "--trust-remote-code --disable-log-requests --dtype bfloat16")
    from_command = scenario({"name": "vllm", "version": "0.11.0", "command": command})
    one_by_one = scenario({"name": "vllm", "version": "0.11.0", "tensor_parallel_size": 2, "max_num_seqs": 128,
                           "max_model_len": 4096, "enable_prefix_caching": False, "gpu_memory_utilization": 0.85})
    assert without_engine(from_command) == without_engine(one_by_one)
    assert from_command.hardware.tensor_parallel == 2 and from_command.scheduler.max_num_seqs == 128
    assert from_command.kv_cache.enable_prefix_caching is False and from_command.scheduler.max_model_len == 4096
    notes = from_command.engine.notes
    accepted = next(n for n in notes if "accepted, no effect" in n)
    assert "--port 8000" in accepted and "--served-model-name a b" in accepted and "--dtype" not in accepted
    assert any("'vllm serve meta-llama/Llama-3.1-8B-Instruct' not read" in n for n in notes)


def test_a_command_and_its_flag_given_apart_must_agree():
    same = scenario({"name": "vllm", "version": "0.11.0", "command": "vllm serve m --max-num-seqs 64",
                     "max_num_seqs": 64})
    assert same.scheduler.max_num_seqs == 64
    with pytest.raises(ConfigError, match=r"engine\.command '--max-num-seqs 64': contradicts engine\.max_num_seqs 128"):
        scenario({"name": "vllm", "version": "0.11.0", "command": "vllm serve m --max-num-seqs 64",
                  "max_num_seqs": 128})
    with pytest.raises(ConfigError, match=r"engine\.command '-tp 2': 2 contradicts hardware\.tensor_parallel 4"):
        scenario({"name": "vllm", "version": "0.11.0", "command": "vllm serve m -tp 2"},
                 hardware={"gpu": "h100-sxm", "tensor_parallel": 4})


@pytest.mark.parametrize("option, last, gone", [("--disable-log-requests", "0.16.0", "0.17.0"),
                                                 ("--guided-decoding-backend xgrammar", "0.11.2", "0.12.0"),
                                                 ("--use-v2-block-manager", "0.9.2", "0.10.0")])
def test_an_option_accepted_without_effect_is_refused_where_the_versions_parser_dropped_it(option, last, gone):
    """vLLM's parser refuses an option it no longer has (`vllm: error: unrecognized arguments`): so does the
    command, in one line naming it and the version that dropped it; older versions accept it and say so."""
    for version in ("0.6.0", last):
        sc = scenario({"name": "vllm", "version": version, "command": f"vllm serve m {option}"})
        assert any(option in n and "accepted, no effect" in n for n in sc.engine.notes)
    for version in (gone, "0.19.0"):
        with pytest.raises(ConfigError) as err:
            scenario({"name": "vllm", "version": version, "command": f"vllm serve m {option}"})
        assert str(err.value) == (f"engine.command {option!r}: not an option of vllm {version} (its parser refuses "
                                  f"it from {gone}); allowed: leave it out, or engine.version before {gone}")


def test_vllm_v0s_preemption_by_swapping_and_its_swap_space():
    """--preemption-mode swap (V0, to 0.10.x): a preempted request's KV to the --swap-space GiB a GPU of host memory
    (vllm/core/scheduler.py _preempt); 0.8.0-0.10.x fall back to V0 wherever the mode is given."""
    swapped = scenario({"name": "vllm", "version": "0.6.0",
                        "command": "vllm serve m --preemption-mode swap --swap-space 8"})
    assert (swapped.scheduler.preemption.mode, swapped.scheduler.preemption.swap_space_bytes) == ("swap", 8 << 30)
    assert any("--preemption-mode swap: a preempted request's KV goes to the 8 GiB" in n for n in swapped.engine.notes)
    fallback = scenario({"name": "vllm", "version": "0.9.2", "preemption_mode": "recompute"})
    assert any("--preemption-mode, which V1 does not take: it falls back to the V0 engine" in n
               for n in fallback.engine.notes)
    assert not any("falls back" in n for n in scenario({"name": "vllm", "version": "0.9.2"}).engine.notes)
    plain = scenario({"name": "vllm", "version": "0.11.0", "command": "vllm serve m --swap-space 16"})
    assert plain.scheduler.preemption.mode == "recompute"
    assert any("--swap-space: no effect here" in n for n in plain.engine.notes)
    for version, command, message in (
            ("0.11.0", "--preemption-mode swap", "engine.command '--preemption-mode swap': not a flag of vllm 0.11.0 "
             "(its parser refuses it from 0.11.0); allowed: leave it out, or engine.version before 0.11.0"),
            ("0.18.0", "--swap-space 16", "engine.command '--swap-space 16': not a flag of vllm 0.18.0 (its parser "
             "refuses it from 0.18.0); allowed: leave it out, or engine.version before 0.18.0"),
            ("0.6.0", "--preemption-mode never", "engine.command '--preemption-mode never': 'never' is not modelled; "
             "allowed: recompute, swap, or leave it out")):
        with pytest.raises(ConfigError, match="^" + re.escape(message) + "$"):
            scenario({"name": "vllm", "version": version, "command": f"vllm serve m {command}"})


def test_an_option_accepted_without_effect_in_the_releases_whose_parser_has_it():
    """vLLM's --calculate-kv-scales: in vllm/engine/arg_utils.py of 0.7.0 to 0.27.1 (every sdist 0.6.0-0.33.0 read);
    --max-logprobs and --max-parallel-loading-workers in every one."""
    for version in ("0.7.0", "0.27.1"):
        command = "vllm serve m --calculate-kv-scales --max-logprobs 5 --max-parallel-loading-workers 2"
        sc = scenario({"name": "vllm", "version": version, "command": command})
        assert any("--calculate-kv-scales, --max-logprobs 5, --max-parallel-loading-workers 2: accepted" in n
                   for n in sc.engine.notes)
    for version, why in (("0.6.6", "it came in 0.7.0"), ("0.28.0", "its parser refuses it from 0.28.0")):
        with pytest.raises(ConfigError, match=rf"^engine\.command '--calculate-kv-scales': not an option of vllm "
                                              rf"{version} \({why}\)"):
            scenario({"name": "vllm", "version": version, "command": "vllm serve m --calculate-kv-scales"})


def test_vllm_060s_switch_with_a_value_and_its_v0_flags():
    sc = scenario({"name": "vllm", "version": "0.6.3",
                   "command": "python3 -m vllm.entrypoints.openai.api_server --model m --max-model-len 4096 "
                              "--enable-chunked-prefill True --num-scheduler-steps 8"})
    assert sc.scheduler.chunked_prefill is True and sc.scheduler.decode_steps_per_schedule == 8


def test_sglang_reads_prefixes_and_its_aliases():
    sc = scenario({"name": "sglang", "version": "0.5.5",
                   "command": "python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp 2 --mem-frac 0.8 "
                              "--disable-radix-cache --max-running-requests 64 --random-seed 1"}, model="qwen3-8b")
    assert sc.hardware.tensor_parallel == 2 and sc.scheduler.max_num_seqs == 64
    assert sc.kv_cache.enable_prefix_caching is False
    again = scenario({"name": "sglang", "version": "0.5.5", "command": "sglang --tensor-parallel-size 2"})
    assert again.hardware.tensor_parallel == 2


def test_trtllm_serve_takes_exact_spellings_only():
    sc = scenario({"name": "trtllm", "version": "1.2.0rc1",
                   "command": "trtllm-serve Qwen/Qwen3-8B --max_batch_size 64 --free_gpu_memory_fraction 0.8 "
                              "--tensor_parallel_size 2 --enable_chunked_prefill --port 8000"}, model="qwen3-8b")
    assert sc.hardware.tensor_parallel == 2 and sc.scheduler.max_num_seqs == 64
    assert sc.scheduler.chunked_prefill is True
    with pytest.raises(ConfigError, match=r"engine\.command: '--tp' is not an option the trtllm preset reads"):
        scenario({"name": "trtllm", "version": "1.2.0rc1", "command": "trtllm-serve m --tp 2"})


def test_lmdeploy_api_server_command():
    sc = scenario({"name": "lmdeploy", "version": "0.16.0",
                   "command": "lmdeploy serve api_server internlm/internlm2_5-7b-chat --backend turbomind --tp 2 "
                              "--max-batch-size 256 --session-len 4096 --server-port 23333 --log-level INFO"},
                  model="llama-3.1-8b")
    assert sc.hardware.tensor_parallel == 2 and sc.scheduler.max_num_seqs == 256
    assert sc.scheduler.max_model_len == 4096
    with pytest.raises(ConfigError, match=r"engine\.command '--backend pytorch': 'pytorch' is not modelled; "
                                          r"allowed: turbomind"):
        scenario({"name": "lmdeploy", "version": "0.16.0", "command": "lmdeploy serve api_server m --backend pytorch"})


def test_quantization_fp8_is_w8a8_where_the_gpu_has_fp8_and_weight_only_elsewhere():
    # vLLM's Fp8LinearMethod: fp8 matrix products on sm_89+, weight-only Marlin below (an A100)
    h100 = scenario({"name": "vllm", "version": "0.11.0", "command": "vllm serve m --quantization fp8"})
    assert (h100.quantization.weights, h100.quantization.fp8_compute) == ("fp8", True)
    a100 = scenario({"name": "vllm", "version": "0.11.0", "command": "vllm serve m -q fp8"},
                    hardware={"gpu": "a100-80gb"})
    assert (a100.quantization.weights, a100.quantization.fp8_compute) == ("fp8", False)
    own = scenario({"name": "sglang", "version": "0.5.5", "quantization": "w8a8_fp8"},
                   quantization={"fp8_compute": False})
    assert (own.quantization.weights, own.quantization.fp8_compute) == ("fp8", False)  # the scenario's own wins
    with pytest.raises(ConfigError, match=r"engine\.quantization: 'fp8' contradicts quantization\.weights 'bf16'"):
        scenario({"name": "vllm", "version": "0.11.0", "quantization": "fp8"}, quantization={"weights": "bf16"})


@pytest.mark.parametrize("command, words", [
    (["vllm", "serve"], "engine.command: ['vllm', 'serve'] is not allowed; allowed: the vllm launch command as "
                        "one string"),
    ("vllm serve 'm", "does not split into words (No closing quotation)"),
    ("vllm serve m --foo 3", "engine.command: '--foo' is not an option the vllm preset reads; allowed: "
                             "--api-server-count"),
    ("vllm serve m --enable-log-outputs", "'--enable-log-outputs' is not an option"),  # adds work: not accepted
    ("vllm serve m --max-num-seqs", "engine.command: '--max-num-seqs' needs a value; allowed: --max-num-seqs <an "
                                    "integer>"),
    ("vllm serve m --max-num-seqs many", "engine.command: '--max-num-seqs many' is not allowed; allowed: an integer"),
    ("vllm serve m --enable", "engine.command: '--enable' is ambiguous (--enable-auto-tool-choice, "
                              "--enable-chunked-prefill, --enable-expert-parallel, --enable-extensible-kv-cache, "
                              "--enable-force-include-usage, "),
    ("vllm serve m --port", "engine.command: '--port' needs a value"),
    # an error the flag's own checks raise names the option as written
    ("vllm serve m --dtype float32", "engine.command '--dtype float32': 'float32' is not modelled; allowed: auto, "
                                     "half, float16, bfloat16"),
    ("vllm serve m --async-scheduling", "engine.command '--async-scheduling': true is not a flag of vLLM 0.9.2"),
    ("vllm serve m -q awq", "engine.command '-q awq': 'awq' is not modelled; allowed: fp8, mxfp4, modelopt_fp4, "
                            "nvfp4 (or leave it out and set quantization.weights)"),
])
def test_a_bad_command_is_one_line(command, words):
    with pytest.raises(ConfigError) as err:
        scenario({"name": "vllm", "version": "0.9.2", "command": command})
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_scenario_with_a_command_dumps_and_reads_back_to_itself():
    sc = scenario({"name": "sglang", "version": "0.5.5", "command": "sglang --max-running-requests 32 --port 1"})
    assert validate_scenario(sc.model_dump(mode="json")) == sc


def test_the_cli_refuses_a_bad_command_in_one_line_and_writes_nothing(tmp_path):
    line = run_refused(tmp_path, {**BASE, "engine": {"name": "vllm", "version": "0.11.0",
                                                     "command": "vllm serve m --speculative-config {}"}})
    assert "engine.command" in line and "--speculative-config" in line


# --- any command the preset's flags can spell reads back to those flags ----------------------------------------------


@st.composite
def spelled_commands(draw):
    """(engine, a command line, the flags it should read to): some of the preset's flags that have an option, each
    in one of its spellings, `=` or a separate value, among some of its accepted options and their values."""
    engine = draw(st.sampled_from(sorted(PRESETS)))
    preset = PRESETS[engine]
    words, expected = [f"{engine}-launcher", "some/model"], {}
    spellings = {}
    for spelled, (name, kind) in preset.options().items():
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if preset.flags[name].read is not None:  # (its words as the release reads them: its numbers are drawn here)
            kinds = tuple(k for k in kinds if k is not str)
        if str not in kinds:  # a word flag takes only its listed values; numbers, lists and switches are drawn here
            spellings.setdefault(name, []).append((spelled, kinds))
    for name in draw(st.lists(st.sampled_from(sorted(spellings)), unique=True, max_size=6)):
        spelled, kinds = draw(st.sampled_from(spellings[name]))
        if preset.syntax.underscores and spelled.startswith("--") and draw(st.booleans()):
            spelled = "--" + spelled[2:].replace("-", "_")
        if bool in kinds:
            value = draw(st.booleans()) if preset.syntax.negation else True
            words.append(spelled if value else "--no-" + spelled[2:])
        elif list in kinds:  # nargs '+'
            value = draw(st.lists(st.integers(1, 10**6), min_size=1, max_size=4))
            first = [f"{spelled}={value[0]}"] if draw(st.booleans()) else [spelled, str(value[0])]
            words += first + [str(v) for v in value[1:]]
        else:
            value = draw(st.integers(1, 10**6) if float not in kinds else
                         st.floats(0.01, 0.99, allow_nan=False).map(lambda x: round(x, 3)))
            words += [f"{spelled}={value}"] if draw(st.booleans()) else [spelled, str(value)]
        expected[name] = value
        if preset.inert and draw(st.booleans()):
            inert = draw(st.sampled_from(preset.inert))
            words += [inert.option] + (["x"] if inert.takes in ("one", "many") else [])
    return engine, " ".join(words), expected


@settings(max_examples=300, deadline=None)
@given(spelled_commands())
def test_any_command_the_presets_flags_spell_reads_back_to_them(drawn):
    engine, command, expected = drawn
    preset = PRESETS[engine]
    read = preset.read_command(command)
    assert read.flags == expected, command
    assert read.not_read == [f"{engine}-launcher", "some/model"]


@pytest.mark.parametrize("option, first", [("--reasoning-parser qwen3", "0.7.1"), ("--hf-token", "0.8.4"),
                                           ("--disable-uvicorn-access-log", "0.8.2"), ("--uds /tmp/s.sock", "0.10.1"),
                                           ("--h11-max-header-count 64", "0.10.1.1"),
                                           ("--enable-force-include-usage", "0.10.0"),
                                           ("--disable-access-log-for-endpoints /health,/metrics", "0.16.0"),
                                           ("--disable-cascade-attn", "0.8.2"), ("--enable-sleep-mode", "0.7.0"),
                                           ("--structured-outputs-config {}", "0.11.0"),
                                           ("--enable-log-requests", "0.10.1"),
                                           ("--allowed-local-media-path /data", "0.6.4"),
                                           ("--allowed-media-domains a.org b.org", "0.11.0"),
                                           ("--mm-processor-cache-gb 0", "0.10.1")])
def test_an_option_accepted_without_effect_is_refused_before_the_version_that_brought_it(option, first):
    sc = scenario({"name": "vllm", "version": first, "command": f"vllm serve m {option}"})
    assert any(option in n and "accepted, no effect" in n for n in sc.engine.notes)
    with pytest.raises(ConfigError) as err:
        scenario({"name": "vllm", "version": "0.6.0", "command": f"vllm serve m {option}"})
    assert str(err.value) == (f"engine.command {option!r}: not an option of vllm 0.6.0 (it came in {first}); "
                              f"allowed: leave it out, or engine.version {first} or later")


def test_vllms_api_server_options_are_accepted_to_the_last_release_read():
    """The API server's options without effect, read in every sdist to 0.33.0 (FrontendArgs, whose file moved twice):
    accepted there, and the note names each group once."""
    command = ("vllm serve m --host 0.0.0.0 --uds /tmp/s --ssl-ca-certs ca.pem --enable-ssl-refresh "
               "--log-config-file log.json --log-error-stack --enable-prompt-tokens-details "
               "--enable-server-load-tracking "
               "--chat-template-content-format openai --tool-parser-plugin p.py --trust-request-chat-template")
    note = next(n for n in scenario({"name": "vllm", "version": "0.33.0", "command": command}).engine.notes
                if "accepted, no effect" in n)
    assert "--uds /tmp/s" in note and "--trust-request-chat-template" in note
    for about in ("the server's address", "logging, whose cost", "what the responses and endpoints report",
                  "chat-template and tool-call parsing"):
        assert note.count(about) == 1, about
    # it logs every reply (work not priced): refused
    with pytest.raises(ConfigError, match=r"^engine\.command: '--enable-log-outputs' is not an option the vllm "):
        scenario({"name": "vllm", "version": "0.33.0", "command": "vllm serve m --enable-log-outputs"})


@pytest.mark.parametrize("version, command, words", [
    ("0.11.0", "--task generate --prefix-caching-hash-algo sha256 --limit-mm-per-prompt image=0", None),
    ("0.34.0", "--prefix-caching-hash-algo xxhash --limit-mm-per-prompt image=0", None),
    ("0.6.4", "--task auto", None),
    ("0.6.3", "--task generate", "not a flag of vllm 0.6.3 (it came in 0.6.4)"),
    ("0.13.0", "--task generate", "not a flag of vllm 0.13.0 (its parser refuses it from 0.13.0)"),
    ("0.11.0", "--task embed", "'embed' is not modelled; allowed: auto, generate"),
    ("0.8.2", "--prefix-caching-hash-algo sha256", "not an option of vllm 0.8.2 (it came in 0.8.3)"),
])
def test_vllms_task_hash_and_multimodal_options_as_its_sdists_have_them(version, command, words):
    # --task: ModelConfig.task in 0.6.4-0.12.x; --prefix-caching-hash-algo from 0.8.3; --limit-mm-per-prompt in every
    # sdist 0.6.0-0.34.0 (the workload is text)
    engine = {"name": "vllm", "version": version, "command": f"vllm serve m {command}"}
    if words is None:
        scenario(engine)
        return
    with pytest.raises(ConfigError) as err:
        scenario(engine)
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("version, command, words", [
    ("1.2.0rc1", "--backend pytorch --num_postprocess_workers 2", None),
    ("1.0.0", "--backend trt", "'trt' is not modelled; allowed: pytorch (the default)"),
    ("0.17", "--backend pytorch", "not modelled for TensorRT-LLM 0.17.0 (the preset takes its TensorRT engine flow"),
])
def test_trtllm_serves_backend_and_postprocess_workers(version, command, words):
    # tensorrt_llm/commands/serve.py at 00209af1: --backend pytorch (the default), tensorrt, _autodeploy;
    # --num_postprocess_workers 0 by default
    engine = {"name": "trtllm", "version": version, "command": f"trtllm-serve m {command}"}
    if words is None:
        assert any("--num_postprocess_workers 2: accepted, no effect" in n for n in scenario(engine).engine.notes)
        return
    with pytest.raises(ConfigError) as err:
        scenario(engine)
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("version, command, lpm", [
    ("0.3.0", "", "its default"), ("0.4.3.post2", "", "its default"), ("0.4.3.post3", "", None),
    ("0.5.5.post1", "--schedule-policy fcfs", None), ("0.5.5.post1", "--schedule-policy lpm", "--schedule-policy"),
    ("0.3.0", "--disable-radix-cache", None),  # no prefix cache: LPM is FCFS
    ("0.5.5.post1", "--schedule-policy random", "'random' is not modelled; allowed: fcfs, lpm"),
])
def test_sglangs_schedule_policy_lpm_by_default_to_0_4_3_post2_is_noted_over_a_prefix_cache(version, command, lpm):
    # server_args.py ServerArgs.schedule_policy: "lpm" to 0.4.3.post2, "fcfs" from 0.4.3.post3 (the PyPI wheels)
    engine = {"name": "sglang", "version": version, "command": f"python3 -m sglang.launch_server {command}"}
    if lpm is not None and "not modelled" in lpm:
        with pytest.raises(ConfigError, match=re.escape(lpm)):
            scenario(engine)
        return
    notes = [n for n in scenario(engine).engine.notes if "LPM" in n]
    assert (notes == []) is (lpm is None)
    assert lpm is None or f"LPM ({lpm}) admits the waiting requests with the longest cached prefix first" in notes[0]


@pytest.mark.parametrize("version, tp, given, default", [
    ("0.11.0", 2, "mp", "mp"), ("0.33.0", 1, "uni", "uni"), ("0.7.0", 1, "uni", "uni"), ("0.6.0", 4, "mp", "mp"),
    ("0.11.0", 2, "ray", "mp"), ("0.11.0", 1, "mp", "uni"), ("0.19.0", 8, "external_launcher", "mp"),
    ("0.6.6", 1, "mp", None), ("0.6.0", 1, "uni", None)])
def test_vllms_executor_is_accepted_where_it_names_the_default_for_the_gpus(version, tp, given, default):
    """ParallelConfig's default on one node (every sdist 0.6.0-0.34.0): mp for several GPUs, uni for one (0.6.x: no
    name, its GPU executor); the CPU terms are those executors', so any other is refused in one line."""
    command = f"vllm serve m -tp {tp} --distributed-executor-backend {given}"
    if given == default:
        assert scenario({"name": "vllm", "version": version, "command": command}).hardware.tensor_parallel == tp
        return
    gpus = f"{tp} GPU{'s' if tp > 1 else ''}"
    allowed = f"{default} (the default for {gpus}), or leave it out" if default else "leave it out"
    with pytest.raises(ConfigError) as err:
        scenario({"name": "vllm", "version": version, "command": command})
    assert str(err.value) == (f"engine.command '--distributed-executor-backend {given}': {given!r} is not modelled for "
                              f"vLLM {version} on {gpus} (the CPU terms are the default executor's); "
                              f"allowed: {allowed}")


def test_vllms_scheduling_policy_is_accepted_at_its_default():
    assert scenario({"name": "vllm", "version": "0.6.3", "command": "vllm serve m --scheduling-policy fcfs"})
    with pytest.raises(ConfigError, match=r"^engine\.command '--scheduling-policy priority': 'priority' is not "
                                          r"modelled; allowed: fcfs \(the default\), or leave it out$"):
        scenario({"name": "vllm", "version": "0.19.0", "command": "vllm serve m --scheduling-policy priority"})
    with pytest.raises(ConfigError, match=r"\(it came in 0\.6\.3\)"):
        scenario({"name": "vllm", "version": "0.6.2", "command": "vllm serve m --scheduling-policy fcfs"})


def test_sglang_options_are_read_as_the_named_versions_parser_has_them():
    """SGLang 0.3.0's parser has neither --page-size nor --model (--model-path only); 0.4.8.post1 has both, 0.4.8
    --page-size only (a post release's options are its own: read in each wheel's server_args.py)."""
    sc = scenario({"name": "sglang", "version": "0.4.8.post1", "command": "sglang --model m --page-size 16"})
    assert sc.kv_cache.block_size == 16
    with pytest.raises(ConfigError, match=r"^engine\.command '--model m': not an option of sglang 0\.4\.8 \(it came in "
                                          r"0\.4\.8\.post1\); allowed: leave it out, or engine\.version "
                                          r"0\.4\.8\.post1 or later$"):
        scenario({"name": "sglang", "version": "0.4.8", "command": "sglang --model m"})
    with pytest.raises(ConfigError, match=r"^engine\.command '--download-dir d': not an option of sglang 0\.3\.5 "):
        scenario({"name": "sglang", "version": "0.3.5", "command": "sglang --download-dir d"})
    assert scenario({"name": "sglang", "version": "0.4.0.post1", "command": "sglang --enable-ep-moe --tp 2"},
                    model="mixtral-8x7b").hardware.expert_parallel
    with pytest.raises(ConfigError, match=r"^engine\.command '--enable-ep-moe': not a flag of sglang 0\.4\.0 \(it came "
                                          r"in 0\.4\.0\.post1\)"):
        scenario({"name": "sglang", "version": "0.4.0", "command": "sglang --enable-ep-moe --tp 2"},
                 model="mixtral-8x7b")
    with pytest.raises(ConfigError, match=r"^engine\.command '--page-size 16': not a flag of sglang 0\.3\.0 \(it "
                                          r"came in 0\.4\.4\)"):
        scenario({"name": "sglang", "version": "0.3.0", "command": "sglang --page-size 16"})


@pytest.mark.parametrize("option, first", [("--enable-p2p-check", "0.3.0"), ("--enable-cache-report", "0.3.4"),
                                           ("--grammar-backend xgrammar", "0.3.5"),
                                           ("--constrained-json-whitespace-pattern '[ ]*'", "0.3.1.post1")])
def test_sglangs_options_without_effect_from_the_wheel_that_brought_them(option, first):
    """Read in every PyPI wheel 0.3.0-0.5.23: each is in server_args.py from `first` to 0.5.23."""
    for version in (first, "0.5.23"):
        sc = scenario({"name": "sglang", "version": version, "command": f"sglang --model-path m {option}"})
        assert any(option.split()[0] in n and "accepted, no effect" in n for n in sc.engine.notes)
    if first != "0.3.0":
        with pytest.raises(ConfigError, match=rf"^engine\.command '{re.escape(option.split()[0])}.*': not an option of "
                                              rf"sglang 0\.3\.0 \(it came in {re.escape(first)}\)"):
            scenario({"name": "sglang", "version": "0.3.0", "command": f"sglang --model-path m {option}"})


def test_sglangs_continuous_decode_steps_run_only_in_0_3_4_to_0_3_5_post2():
    """--num-continuous-decode-steps: 0.3.4-0.3.5.post2's scheduler.py runs N decode steps before it receives new
    requests (not modelled: refused above 1); from 0.3.6 the option is parsed and never read (noted, nothing
    changes)."""
    command = "sglang --model-path m --num-continuous-decode-steps 4"
    plain = scenario({"name": "sglang", "version": "0.5.5.post1", "command": "sglang --model-path m"})
    for version in ("0.3.6", "0.5.5.post1", "0.5.23"):
        sc = scenario({"name": "sglang", "version": version, "command": command})
        assert any("--num-continuous-decode-steps 4 changes nothing (parsed, never read since 0.3.6)" in n
                   for n in sc.engine.notes)
    same = scenario({"name": "sglang", "version": "0.5.5.post1", "command": command})
    assert without_engine(same) == without_engine(plain)
    for version in ("0.3.4", "0.3.5.post2"):
        assert scenario({"name": "sglang", "version": version,
                         "command": "sglang --model-path m --num-continuous-decode-steps 1"}).engine.name == "sglang"
        with pytest.raises(ConfigError) as err:
            scenario({"name": "sglang", "version": version, "command": command})
        assert str(err.value) == (f"engine.command '--num-continuous-decode-steps 4': 4 is not modelled for SGLang "
                                  f"{version}, whose scheduler runs that many decode steps before receiving requests "
                                  "(0.3.4-0.3.5.post2); allowed: 1, or leave it out")
    with pytest.raises(ConfigError, match=r"^engine\.command '--num-continuous-decode-steps 4': not a flag of sglang "
                                          r"0\.3\.3 \(it came in 0\.3\.4\)"):
        scenario({"name": "sglang", "version": "0.3.3", "command": command})


def test_sglangs_request_log_is_accepted_where_its_measurement_serves_the_release():
    """--log-requests: 0.5.5.post1's front-end measured alike with it on and off (engine_work.py); accepted from
    0.5.1, the first final release whose default level (2) is the one measured, at levels 0-2, without changing the
    scenario."""
    plain = scenario({"name": "sglang", "version": "0.5.5.post1", "command": "sglang --model-path m"})
    for level in ("", " --log-requests-level 1"):
        sc = scenario({"name": "sglang", "version": "0.5.5.post1",
                       "command": f"sglang --model-path m --log-requests{level}"})
        assert without_engine(sc) == without_engine(plain)
        assert any(f"--log-requests (level {level.split()[-1] if level else 2}): no work added" in n
                   for n in sc.engine.notes)
    with pytest.raises(ConfigError) as err:
        scenario({"name": "sglang", "version": "0.5.5.post1",
                  "command": "sglang --log-requests --log-requests-level 3"})
    assert str(err.value) == ("engine.command '--log-requests-level 3': 3 is not modelled; allowed: 0, 1, 2, or leave "
                              "it out")
    with pytest.raises(ConfigError) as err:
        scenario({"name": "sglang", "version": "0.4.10", "command": "sglang --log-requests"})
    assert str(err.value) == ("engine.command '--log-requests': not modelled for SGLang 0.4.10 (the request log was "
                              "measured in 0.5.5.post1, whose default level is that of the releases from 0.5.1); "
                              "allowed: leave it out, or SGLang 0.5.1 or later")
    assert scenario({"name": "sglang", "version": "0.5.1", "command": "sglang --log-requests"}).engine.name == "sglang"


def test_sglangs_tokenizer_workers_are_the_front_ends_processes():
    """--tokenizer-worker-num (from 0.5.2rc0): uvicorn workers, each with its own TokenizerManager."""
    sc = scenario({"name": "sglang", "version": "0.5.5.post1", "command": "sglang --tokenizer-worker-num 4"})
    assert sc.frontend.num_processes == 4 and sc.frontend.per_request_s > 0  # 0.5.5.post1's measured work, in each
    with pytest.raises(ConfigError, match=r"^engine\.command '--tokenizer-worker-num 4': not a flag of sglang 0\.5\.1 "
                                          r"\(it came in 0\.5\.2\)"):
        scenario({"name": "sglang", "version": "0.5.1", "command": "sglang --tokenizer-worker-num 4"})
    with pytest.raises(ConfigError, match=r"^engine\.command '--tokenizer-worker-num 0': 0 is not allowed"):
        scenario({"name": "sglang", "version": "0.5.23", "command": "sglang --tokenizer-worker-num 0"})


def test_sglangs_phase_attention_backends_name_the_measured_kernel_or_are_refused():
    """--prefill-/--decode-attention-backend (server_args.py from 0.4.9.post5): each phase's kernel, accepted where
    it is the one the SGLang tables of the GPU measured (fa3 on an H100), as --attention-backend is."""
    h100 = {"hardware": {"gpu": "h100-sxm"}}
    plain = scenario({"name": "sglang", "version": "0.5.5.post1", "command": "sglang --model-path m"}, **h100)
    sc = scenario({"name": "sglang", "version": "0.5.5.post1",
                   "command": "sglang --prefill-attention-backend fa3 --decode-attention-backend fa3"}, **h100)
    assert without_engine(sc) == without_engine(plain)
    assert ("SGLang 0.5.5.post1: --prefill-attention-backend fa3, --decode-attention-backend fa3, the kernel the "
            "SGLang tables of h100-sxm measured") in sc.engine.notes
    with pytest.raises(ConfigError) as err:
        scenario({"name": "sglang", "version": "0.5.5.post1",
                  "command": "sglang --prefill-attention-backend fa3 --decode-attention-backend flashinfer"}, **h100)
    assert str(err.value) == ("engine.command '--decode-attention-backend flashinfer': 'flashinfer' is not modelled "
                              "(the SGLang tables of h100-sxm measured fa3 attention); allowed: fa3, or leave it out")
    with pytest.raises(ConfigError, match=r"^engine\.command '--prefill-attention-backend fa3': not a flag of sglang "
                                          r"0\.4\.9\.post4 \(it came in 0\.4\.9\.post5\)"):
        scenario({"name": "sglang", "version": "0.4.9.post4", "command": "sglang --prefill-attention-backend fa3"},
                 **h100)


@pytest.mark.parametrize("option, why", [
    ("--skip-tokenizer-init", "True is not modelled; allowed: False (the default: the front-end tokenizes and "
     "detokenizes, as its measured work does; token ids in and out are not measured), or leave it out"),
    ("--enable-hierarchical-cache", "True is not modelled; allowed: False (the default: the radix cache in GPU memory "
     "only; its host-memory tier is not modelled), or leave it out"),
    ("--enable-nan-detection", "True is not modelled; allowed: False (the default: no check of every step's logits, "
     "which waits on the GPU and is not measured), or leave it out"),
    ("--enable-metrics", "True is not modelled; allowed: False (the default: no Prometheus counters; their work in "
     "the scheduler and in the front-end's every streamed chunk is not measured), or leave it out"),
    ("--sampling-backend pytorch", "'pytorch' is not modelled; allowed: flashinfer (the default where FlashInfer is "
     "installed, as SGLang's images ship it: the sampler of the runs the CPU terms were fitted on), or leave it out")])
def test_sglang_options_that_change_what_is_not_modelled_are_refused_with_their_reason(option, why):
    with pytest.raises(ConfigError) as err:
        scenario({"name": "sglang", "version": "0.5.5.post1", "command": f"sglang --model-path m {option}"})
    assert str(err.value) == f"engine.command '{option}': {why}"


def test_sglang_options_accepted_at_what_is_modelled_change_nothing():
    """--sampling-backend flashinfer (the default where installed) and --allow-auto-truncate (noted: an over-long
    request is rejected here, as without it) leave the scenario as without them; each refused before its wheel."""
    plain = scenario({"name": "sglang", "version": "0.5.5.post1", "command": "sglang --model-path m"})
    sc = scenario({"name": "sglang", "version": "0.5.5.post1",
                   "command": "sglang --model-path m --sampling-backend flashinfer --allow-auto-truncate"})
    assert without_engine(sc) == without_engine(plain)
    assert any(n.startswith("SGLang 0.5.5.post1 --allow-auto-truncate: a request longer than the context") and
               "is rejected here as without it" in n for n in sc.engine.notes)
    for option, first in (("--allow-auto-truncate", "0.4.1.post7"), ("--sampling-backend flashinfer", "0.3.1"),
                          ("--enable-nan-detection", "0.3.6")):
        with pytest.raises(ConfigError, match=rf"not a flag of sglang 0\.3\.0 \(it came in {re.escape(first)}\)"):
            scenario({"name": "sglang", "version": "0.3.0", "command": f"sglang {option}"})
    with pytest.raises(ConfigError, match=r"^engine\.command '--enable-nan-detection': not a flag of sglang 0\.5\.13 "
                                          r"\(its parser refuses it from 0\.5\.13\)"):
        scenario({"name": "sglang", "version": "0.5.13", "command": "sglang --enable-nan-detection"})


def test_vllms_generation_config_override_sets_sampling_defaults_only():
    """--override-generation-config (from 0.7.1): the sampling defaults change no price (noted); max_new_tokens,
    which caps every request's output (get_max_tokens), and keys vLLM does not read are refused in one line."""
    plain = scenario({"name": "vllm", "version": "0.11.0", "command": "vllm serve m"})
    sc = scenario({"name": "vllm", "version": "0.11.0",
                   "command": "vllm serve m --override-generation-config '{\"temperature\": 0, \"top_p\": 0.9}'"})
    assert without_engine(sc) == without_engine(plain)
    assert ("vLLM 0.11.0 --override-generation-config: the default sampling parameters (temperature 0, top_p 0.9) "
            "change no price here (the sampler is priced alike for every value)") in sc.engine.notes
    for mapping, why in (('{"max_new_tokens": 64}', "'max_new_tokens' is not modelled (it caps every request's output: "
                          "the workload's output lengths say that here)"),
                         ('{"do_sample": true}', "'do_sample' is not a key vLLM reads from it")):
        with pytest.raises(ConfigError) as err:
            scenario({"name": "vllm", "version": "0.11.0", "command": f"vllm serve m --override-generation-config "
                                                                      f"'{mapping}'"})
        assert str(err.value) == (f"engine.command '--override-generation-config {mapping}': {why}; allowed: "
                                  "temperature, top_p, top_k, min_p, repetition_penalty")
    with pytest.raises(ConfigError, match=r"not a flag of vllm 0\.7\.0 \(it came in 0\.7\.1\)"):
        scenario({"name": "vllm", "version": "0.7.0", "command": "vllm serve m --override-generation-config '{}'"})


@pytest.mark.parametrize("command, name, version", [
    ("vllm serve m --max-num-seqs 8", "vllm", "0.11.0"),
    ("/usr/bin/python3.11 -m vllm.entrypoints.openai.api_server --model m --max-num-seqs 8", "vllm", "0.6.3"),
    ("python -m sglang.launch_server --model-path m --max-running-requests 8", "sglang", "0.5.3.post3"),
    ("trtllm-serve m --max_batch_size 8", "trtllm", "1.2.0rc1"),
    ("lmdeploy serve api_server m --max-batch-size 8", "lmdeploy", "0.16.0"),
])
def test_the_commands_program_names_its_engine(command, name, version):
    named_by_command = scenario({"version": version, "command": command})
    assert named_by_command.engine.name == name
    assert named_by_command.scheduler.max_num_seqs == 8
    named = scenario({"name": name, "version": version, "command": command})
    assert named_by_command.model_dump() == named.model_dump()


def test_a_command_starting_another_engines_program_is_refused_and_an_unknown_one_names_none():
    with pytest.raises(ConfigError, match=r"^engine.command: 'python -m sglang.launch_server' starts SGLang, not "
                                          r"engine.name 'vllm'; allowed: engine.name sglang, or a vllm command$"):
        scenario({"name": "vllm", "version": "0.11.0", "command": "python -m sglang.launch_server --model-path m"})
    with pytest.raises(ConfigError, match=r"^engine.name: missing; allowed: vllm, sglang, trtllm, lmdeploy$"):
        scenario({"version": "0.11.0", "command": "./serve.sh --max-num-seqs 8"})


@pytest.mark.parametrize("command, version", [
    ("vllm serve Qwen/Qwen3-32B --max-num-seqs 8", "0.11.0"),
    ("vllm serve --max-num-seqs 8 --model=Qwen/Qwen3-32B", "0.11.0"),
    ("/usr/bin/python3.11 -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-32B --max-num-seqs 8", "0.6.3"),
    ("python -m sglang.launch_server --model-path Qwen/Qwen3-32B --max-running-requests 8", "0.5.3.post3"),
    ("python -m sglang.launch_server --model Qwen/Qwen3-32B --max-running-requests 8", "0.5.3.post3"),
    ("trtllm-serve Qwen/Qwen3-32B --max_batch_size 8", "1.2.0rc1"),
    ("trtllm-serve serve Qwen/Qwen3-32B --max_batch_size 8", "1.2.0rc1"),
    ("lmdeploy serve api_server Qwen/Qwen3-32B --max-batch-size 8", "0.16.0"),
])
def test_the_commands_model_is_the_scenarios_where_it_names_none(command, version):
    """A command serving Qwen3-32B priced the default Llama-3.1-8B, with a note, where the scenario named no model."""
    raw = {key: value for key, value in BASE.items() if key != "model"}
    engine = {"version": version, "command": command}
    sc = validate_scenario({**raw, "hardware": {"gpu": "h200"}, "engine": engine})
    assert sc.model == "qwen3-32b"
    named = validate_scenario({**raw, "model": "Qwen/Qwen3-32B", "hardware": {"gpu": "h200"}, "engine": engine})
    assert sc.model_dump(mode="json") == {**named.model_dump(mode="json"), "model": "qwen3-32b"}


def test_a_commands_fp8_checkpoint_brings_its_dtype():
    raw = {key: value for key, value in BASE.items() if key != "model"}
    sc = validate_scenario({**raw, "hardware": {"gpu": "h100-sxm"},
                            "engine": {"version": "0.11.0", "command": "vllm serve Qwen/Qwen3-32B-FP8"}})
    assert sc.model == "qwen3-32b-fp8" and sc.quantization.weights == "fp8"


def test_a_commands_model_beside_the_scenarios():
    engine = {"name": "vllm", "version": "0.11.0"}
    for served in ("/models/my-finetune", "meta-llama/Llama-3.1-8B-Instruct"):
        assert scenario({**engine, "command": f"vllm serve {served}"}).model == "llama-3.1-8b"  # the scenario's
    # a checkpoint the catalog lacks whose name says its weights: the scenario or the command's flags must say them
    fp8_named = {**engine, "command": "vllm serve meta-llama/Llama-3.1-8B-FP8"}
    with pytest.raises(ConfigError, match=r"^engine\.command: serves 'meta-llama/Llama-3.1-8B-FP8', whose name says "
                                          r"fp8 weights, not the scenario's 16-bit \(quantization.weights\); allowed: "
                                          r"quantization.weights fp8, or a command serving 16-bit weights$"):
        scenario(fp8_named)
    assert scenario(fp8_named, quantization={"weights": "fp8"}).quantization.weights == "fp8"
    assert scenario({**fp8_named, "command": fp8_named["command"] + " -q fp8"}).quantization.weights == "fp8"
    with pytest.raises(ConfigError, match=r"^engine\.command: serves 'Qwen/Qwen3-32B' \(qwen3-32b\), not the "
                                          r"scenario's model 'llama-3.1-8b'; allowed: the same model in both, or leave "
                                          r"the scenario's model out$"):
        scenario({**engine, "command": "vllm serve Qwen/Qwen3-32B"})
    with pytest.raises(ConfigError, match=r"serves 'meta-llama/Llama-2-70b-hf' \(llama-2-70b\), not the scenario's "
                                          r"model 'llama-2-7b'"):  # another size
        scenario({**engine, "command": "vllm serve meta-llama/Llama-2-70b-hf"}, model="llama-2-7b")
    # the same architecture in other weights: the scenario must say them
    fp8 = {**engine, "command": "vllm serve Qwen/Qwen3-32B-FP8"}
    with pytest.raises(ConfigError, match=r"^engine\.command: serves 'Qwen/Qwen3-32B-FP8' \(qwen3-32b-fp8, fp8 "
                                          r"weights\), not the scenario's model 'qwen3-32b' in 16-bit weights; "
                                          r"allowed: model: qwen3-32b-fp8, or quantization.weights fp8$"):
        scenario(fp8, model="qwen3-32b", hardware={"gpu": "h200"})
    assert scenario(fp8, model="qwen3-32b", hardware={"gpu": "h200"},
                    quantization={"weights": "fp8"}).quantization.weights == "fp8"
    with pytest.raises(ConfigError, match=r"serves 'Qwen/Qwen3-32B' \(qwen3-32b, 16-bit weights\), not the scenario's "
                                          r"model 'qwen3-32b-fp8' in fp8 weights; allowed: model: qwen3-32b, or "
                                          r"quantization.weights bf16$"):
        scenario({**engine, "command": "vllm serve Qwen/Qwen3-32B"}, model="qwen3-32b-fp8", hardware={"gpu": "h200"})


@pytest.mark.parametrize("served, says", [
    ("Qwen/Qwen3-8B-AWQ", "int4"), ("Qwen/Qwen3-8B-GPTQ-Int8", "int8"), ("Qwen/Qwen3-8B-GPTQ", "int4 or int8"),
    ("RedHatAI/Qwen3-8B-quantized.w4a16", "int4"), ("RedHatAI/Qwen3-8B-quantized.w8a8", "int8"),
    ("RedHatAI/Qwen3-8B-FP8-dynamic", "fp8")])
def test_a_quantized_checkpoints_name_says_its_weights(served, says):
    """An AWQ, GPTQ or compressed-tensors checkpoint beside `model: qwen3-8b` was priced in 16-bit weights."""
    engine = {"name": "vllm", "version": "0.11.0", "command": f"vllm serve {served}"}
    with pytest.raises(ConfigError, match=rf"^engine\.command: serves '{served}', whose name says {says} weights, "
                                          rf"not the scenario's 16-bit \(quantization.weights\); allowed: "
                                          rf"quantization.weights {says}, or a command serving 16-bit weights$"):
        scenario(engine, model="qwen3-8b")
    for weights in says.split(" or "):
        assert scenario(engine, model="qwen3-8b", quantization={"weights": weights}).quantization.weights == weights
    other = "fp8" if says != "fp8" else "int8"
    with pytest.raises(ConfigError, match=rf"whose name says {says} weights, not the scenario's {other} "):
        scenario(engine, model="qwen3-8b", quantization={"weights": other})


def test_a_commands_model_the_catalog_lacks_needs_the_scenarios_model(tmp_path):
    raw = {key: value for key, value in BASE.items() if key != "model"}
    raw["engine"] = {"version": "0.11.0", "command": "vllm serve /models/my-finetune --max-num-seqs 8"}
    line = run_refused(tmp_path, raw)
    assert line == ("error: engine.command: serves '/models/my-finetune', which is not a catalog model, and the "
                    "scenario names no model; allowed: a catalog model or its Hugging Face repo id (servesim catalog "
                    "models), or the scenario's model: (a catalog name, or {hf_config: path/to/config.json})")
    raw["engine"]["command"] = "vllm serve --max-num-seqs 8"  # no model named: the scenario's default, as before
    assert validate_scenario(raw).model == "llama-3.1-8b"
