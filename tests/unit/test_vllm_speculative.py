"""vLLM's `--speculative-config` (sim/config/engines/vllm_speculative.py): the method and γ it names, with the
scenario's speculation section, and what the method does to async scheduling in each release."""

import re

import pytest

from sim.config.files import validate_scenario
from sim.errors import ConfigError

BASE = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                     "lengths": {"kind": "fixed", "input_tokens": 500, "output_tokens": 100}},
        "run": {"num_requests": 20}}
HEAD = {"draft_cost_ratio": 0.05, "acceptance": {"kind": "fixed", "alpha": 0.7}}
DRAFT_MODEL = {"draft_model": "llama-3.1-8b", "acceptance": {"kind": "fixed", "alpha": 0.7}}


def scenario(version: str, speculation: dict | None = HEAD, **flags):
    raw = {**BASE, "engine": {"name": "vllm", "version": version, **flags}}
    if speculation is not None:
        raw["speculation"] = speculation
    return validate_scenario(raw)


def overlapped(sc) -> bool:
    return bool(sc.cost_model.overhead.overlap)


def test_the_flags_tokens_become_the_speculation_sections_and_its_method_is_said():
    sc = scenario("0.20.0", speculative_config={"method": "eagle3", "num_speculative_tokens": 3})
    assert sc.speculation.num_speculative_tokens == 3 and sc.speculation.draft_cost_ratio == 0.05
    assert any("--speculative-config method eagle3" in note for note in sc.engine.notes)
    # without num_speculative_tokens the section's own γ stays
    assert scenario("0.20.0", speculative_config={"method": "ngram"}).speculation.num_speculative_tokens == 4


# (version, method, async scheduling by default), each read in that release's VllmConfig.__post_init__
@pytest.mark.parametrize("version, method, on", [
    ("0.14.0", "eagle", True), ("0.14.0", "mtp", True), ("0.14.0", "ngram", False), ("0.14.0", "suffix", False),
    ("0.16.0", "draft_model", False), ("0.17.0", "deepseek_mtp", True),
    ("0.18.0", "ngram_gpu", True), ("0.20.0", "dflash", True), ("0.27.0", "draft_model", False),
    ("0.28.0", "draft_model", True), ("0.28.0", "ngram", False), ("0.32.0", "medusa", False),
    ("0.33.0", "ngram", True), ("0.34.0", "suffix", True),
])
def test_async_scheduling_by_default_follows_the_method_as_each_release_does(version, method, on):
    speculation = DRAFT_MODEL if method == "draft_model" else HEAD
    sc = scenario(version, speculation, speculative_config={"method": method})
    assert overlapped(sc) is on
    said = next(note for note in sc.engine.notes if "async scheduling" in note and "vllm/config/vllm.py" in note)
    assert ("on by default" in said) is on and (on or method in said)


def test_a_drafter_without_the_flag_is_taken_as_a_draft_models_rule_and_said_so():
    sc = scenario("0.20.0")
    assert not overlapped(sc)
    assert any("no --speculative-config names" in note for note in sc.engine.notes)
    assert overlapped(scenario("0.20.0", speculative_config={"method": "eagle"}))
    assert overlapped(scenario("0.28.0", DRAFT_MODEL))  # a draft model: its own rule, on from 0.28.0
    assert not overlapped(scenario("0.27.0", DRAFT_MODEL))


def test_asking_for_async_scheduling_with_a_method_it_does_not_run_with_is_refused_as_vllm_raises():
    with pytest.raises(ConfigError, match="engine.async_scheduling: true contradicts engine.speculative_config's "
                                          "method 'ngram' in vLLM 0.20.0"):
        scenario("0.20.0", speculative_config={"method": "ngram"}, async_scheduling=True)
    assert overlapped(scenario("0.20.0", speculative_config={"method": "eagle"}, async_scheduling=True))
    assert overlapped(scenario("0.16.0", DRAFT_MODEL, speculative_config={"method": "draft_model"},
                               async_scheduling=True))  # asked, a draft model runs async from 0.16.0
    assert overlapped(scenario("0.33.0", speculative_config={"method": "ngram"}, async_scheduling=True))
    # 0.10.0-0.11.0: EngineArgs refuses async scheduling with any speculation, named by the flag or not
    with pytest.raises(ConfigError, match="engine.async_scheduling: true contradicts the scenario's speculation in "
                                          "vLLM 0.11.0"):
        scenario("0.11.0", speculative_config={"method": "eagle"}, async_scheduling=True)
    with pytest.raises(ConfigError, match="engine.async_scheduling: true contradicts the scenario's speculation in "
                                          "vLLM 0.10.2"):
        scenario("0.10.2", async_scheduling=True)
    assert overlapped(scenario("0.11.1", speculative_config={"method": "eagle"}, async_scheduling=True))


def test_the_flag_is_refused_where_vllm_falls_back_to_v0():
    raw = {**BASE, "hardware": {"gpu": "a100-80gb"}, "quantization": {"kv_cache": "fp8"}, "speculation": HEAD,
           "engine": {"name": "vllm", "version": "0.10.0", "speculative_config": {"method": "eagle"}}}
    with pytest.raises(ConfigError, match="engine.speculative_config: not modelled where vLLM 0.10.0 falls back to V0"):
        validate_scenario(raw)
    assert scenario("0.10.0", speculative_config={"method": "eagle"}).speculation.draft_cost_ratio == 0.05


@pytest.mark.parametrize("version, command, method, tokens", [
    ("0.20.0", "vllm serve m --speculative-config '{\"method\": \"eagle\", \"num_speculative_tokens\": 2}'",
     "eagle", 2),
    ("0.20.0", "vllm serve m --speculative-config '{\"model\": \"[ngram]\", \"num_speculative_tokens\": 5, "
     "\"prompt_lookup_max\": 4}'", "ngram", 5),
])
def test_a_launch_command_spells_it_as_a_json_object(version, command, method, tokens):
    sc = scenario(version, command=command)
    assert sc.speculation.num_speculative_tokens == tokens
    assert any(f"method {method}" in note for note in sc.engine.notes)


@pytest.mark.parametrize("version, speculation, config, message", [
    ("0.9.2", HEAD, {"method": "eagle"}, "engine.speculative_config: not read for vLLM 0.9.2"),
    ("0.10.2", HEAD, {"method": "mtp"}, "'mtp' is not a method servesim models for vllm 0.10.2"),
    ("0.11.0", HEAD, {"method": "suffix"}, "'suffix' is not a method servesim models for vllm 0.11.0"),
    ("0.8.0", HEAD, {"method": "eagle"}, "engine.speculative_config: not a flag of vllm 0.8.0 (it came in 0.8.2)"),
    ("0.20.0", None, {"method": "eagle"}, "engine.speculative_config: needs the scenario's speculation section"),
    ("0.20.0", HEAD, {"model": "yuhuili/EAGLE-LLaMA3-Instruct-8B"}, "engine.speculative_config.method: missing"),
    ("0.20.0", HEAD, {"method": "mlp_speculator"},
     "engine.speculative_config.method: 'mlp_speculator' is not a method servesim models"),
    ("0.17.0", HEAD, {"method": "ngram_gpu"}, "'ngram_gpu' is not a method servesim models for vllm 0.17.0"),
    ("0.33.0", HEAD, {"method": "medusa"}, "'medusa' is not a method servesim models for vllm 0.33.0"),
    ("0.20.0", HEAD, {"method": "draft_model"}, "'draft_model' contradicts the speculation section's drafter "
                                                "(draft_cost_ratio)"),
    ("0.20.0", DRAFT_MODEL, {"method": "eagle"}, "'eagle' contradicts the speculation section's drafter "
                                                 "(draft_model)"),
    ("0.20.0", HEAD, {"method": "eagle", "draft_tensor_parallel_size": 2},
     "engine.speculative_config.draft_tensor_parallel_size: not a key ServeSim reads"),
    ("0.20.0", HEAD, {"method": "eagle", "num_speculative_tokens": 0},
     "engine.speculative_config.num_speculative_tokens: 0 is not allowed"),
    ("0.20.0", {**HEAD, "num_speculative_tokens": 4}, {"method": "eagle", "num_speculative_tokens": 3},
     "engine.speculative_config: {'method': 'eagle', 'num_speculative_tokens': 3} (sets "
     "speculation.num_speculative_tokens 3) contradicts speculation.num_speculative_tokens 4"),
    ("0.20.0", HEAD, "{\"method\": ", "engine.speculative_config: '{\"method\": ' is not allowed"),
])
def test_what_the_flag_cannot_say_is_refused_in_one_line(version, speculation, config, message):
    with pytest.raises(ConfigError) as err:
        scenario(version, speculation, speculative_config=config)
    assert message.lower() in str(err.value).lower() and "\n" not in str(err.value)


def test_the_cli_refuses_it_in_one_line_and_writes_nothing(tmp_path):
    from helpers import run_refused
    command = "vllm serve m --speculative-config '{\"method\": \"eagle\"}'"
    line = run_refused(tmp_path, {**BASE, "engine": {"name": "vllm", "version": "0.20.0", "command": command}})
    assert "engine.command '--speculative-config" in line and "needs the scenario's speculation section" in line


def test_a_scenario_with_the_flag_dumps_and_reads_back_to_itself():
    sc = scenario("0.20.0", command="vllm serve m --speculative-config '{\"method\": \"mtp\", "
                                    "\"num_speculative_tokens\": 2}'")
    assert validate_scenario(sc.model_dump(mode="json")) == sc


def test_an_unnamed_method_lists_the_releases_own_methods_and_a_command_names_the_option():
    with pytest.raises(ConfigError) as err:
        scenario("0.11.0", command="vllm serve m --speculative-config '{\"num_speculative_tokens\": 3}'")
    assert str(err.value).startswith("engine.command '--speculative-config {\"num_speculative_tokens\": 3}': method: "
                                     "missing")
    assert str(err.value).endswith("ngram, eagle, eagle3, mtp, deepseek_mtp, medusa, draft_model")


@pytest.mark.parametrize("engine, option", [
    ({"name": "vllm", "version": "0.11.0", "command": "vllm serve meta-llama/Llama-3.1-8B-Instruct"},
     "--speculative-config in the command (the section then prices its drafter), "),
    ({"name": "vllm", "version": "0.9.2", "command": "vllm serve meta-llama/Llama-3.1-8B-Instruct"},
     "(its --speculative-config is read from vLLM 0.10.0) "),
    ({"name": "sglang", "version": "0.5.5.post1", "command": "python -m sglang.launch_server --model-path m"},
     "--speculative-algorithm in the command (the section then prices its drafter), ")])
def test_a_launch_command_without_its_speculation_flag_beside_a_speculation_section_is_refused(engine, option):
    """A variant's `vllm serve M` without --speculative-config, beside an inherited speculation section, speculated."""
    flag = "--speculative-config" if engine["name"] == "vllm" else "--speculative-algorithm"
    label = {"vllm": "vLLM", "sglang": "SGLang"}[engine["name"]]
    with pytest.raises(ConfigError, match=re.escape(
            f"speculation: engine.command has no {flag}, so the {label} {engine['version']} it starts does not "
            f"speculate; allowed: {option}the engine's flags as keys in place of the command (the section then taken "
            "as its drafter), or no speculation section (speculation: null in a variant)")):
        validate_scenario({**BASE, "engine": engine, "speculation": HEAD})
    assert validate_scenario({**BASE, "engine": engine}).speculation is None
    speculating = {**engine, "command": engine["command"] + (
        " --speculative-config '{\"method\": \"eagle3\", \"num_speculative_tokens\": 3}'" if engine["name"] == "vllm"
        else " --speculative-algorithm EAGLE")}
    if engine["version"] != "0.9.2":
        assert validate_scenario({**BASE, "engine": speculating, "speculation": HEAD}).speculation is not None


def test_the_section_without_the_flag_and_without_a_command_is_taken_as_its_drafter_and_said():
    notes = " ".join(scenario("0.11.0").engine.notes)
    assert ("vLLM 0.11.0: the speculation section without --speculative-config taken as an EAGLE, MTP or n-gram head "
            "(vLLM speculates only with the flag)") in notes
    assert "without --speculative-config" not in " ".join(
        scenario("0.11.0", speculative_config={"method": "eagle3"}).engine.notes)
