"""A chat request's template tokens in the engine's prompt (sim/model/chat_templates.py, workload.chat_template)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.config.files import validate_scenario
from sim.errors import ConfigError
from sim.frontend import FrontendStage
from sim.model.chat_templates import chat_template_tokens
from sim.run import make_workload

CONFIGS = Path(__file__).resolve().parents[2] / "sim" / "model" / "configs"


def chat(model: str, engine: dict | None = None, **workload) -> dict:
    raw = {"model": {"hf_config": str(CONFIGS / f"{model}.json")},
           "workload": {"arrival": {"kind": "burst"}, "lengths": {"kind": "fixed", "input_tokens": 100,
                                                                   "output_tokens": 10},
                        "endpoint": "chat", **workload},
           "run": {"num_requests": 4, "seed": 0}}
    if engine is not None:
        raw["engine"] = engine
    return raw


def test_each_model_and_renderer_takes_its_own_count():
    assert chat_template_tokens("qwen3", None).section() == {"lead_tokens": 3, "trail_tokens": 5}
    assert chat_template_tokens("qwen3_moe", "sglang") == chat_template_tokens("qwen3", None)
    assert chat_template_tokens("deepseek_v3", "vllm").section() == {"lead_tokens": 1, "trail_tokens": 3}
    assert chat_template_tokens("gpt_oss", "vllm").lead_tokens == 66
    assert chat_template_tokens("gpt_oss", None) == chat_template_tokens("gpt_oss", "vllm")  # the default engine
    assert chat_template_tokens("gpt_oss", "sglang").lead_tokens == 78
    assert chat_template_tokens("gpt_oss", "trtllm").lead_tokens == 68
    assert chat_template_tokens("llama", "vllm") is None and chat_template_tokens(None, None) is None
    # the catalog's models, without a model_type, by name
    assert chat_template_tokens(None, "sglang", "llama-3.1-70b").section() == {"lead_tokens": 29, "trail_tokens": 5}
    assert chat_template_tokens(None, None, "qwen2.5-7b").lead_tokens == 24
    assert chat_template_tokens(None, None, "mistral-7b-v0.1") is None


def test_the_engine_prefills_the_template_and_the_front_end_tokenizes_what_was_sent():
    sc = validate_scenario(chat("qwen3-8b", {"name": "vllm", "version": "0.11.0"}))
    assert sc.workload.chat_template.model_dump() == {"lead_tokens": 3, "trail_tokens": 5}
    assert any(n.startswith("chat template: 3 tokens before") for n in sc.engine.notes)
    workload = make_workload(sc)
    assert workload.input_tokens.tolist() == [108] * 4 and workload.sent_tokens.tolist() == [100] * 4
    assert workload.prefix_ids is None  # 3 tokens fill no 16-token unit: nothing to share
    stage = FrontendStage(sc.frontend, workload, num_replicas=1)  # the preset's front-end, one process
    intake_s = sc.frontend.per_request_s + sc.frontend.per_prompt_token_s * 100
    assert stage.inbound.arrival_s.max() == pytest.approx(4 * intake_s)  # the burst's intake, in any order


def test_a_long_lead_is_one_shared_prefix_where_the_engine_caches():
    sc = validate_scenario(chat("gpt-oss-20b", {"name": "vllm", "version": "0.11.0"}))
    assert sc.kv_cache.enable_prefix_caching  # V1's default
    workload = make_workload(sc)
    assert workload.input_tokens.tolist() == [169] * 4
    ids = [p.tolist() for p in workload.prefix_ids]
    assert all(p[:4] == [0, 1, 2, 3] for p in ids)  # 66 tokens: four whole 16-token units, the same for all
    assert len({tuple(p[4:]) for p in ids}) == 4  # the rest each request's own
    sglang = validate_scenario(chat("gpt-oss-20b", {"name": "sglang", "version": "0.5.4.post2"}))
    assert make_workload(sglang).input_tokens.tolist() == [181] * 4  # its Jinja template's 78 + 3


def test_a_scenario_without_an_engine_or_on_completions_or_with_its_own_count():
    plain = validate_scenario(chat("gpt-oss-20b"))
    assert plain.workload.chat_template.lead_tokens == 66  # vLLM's rendering, the default engine
    completions = chat("qwen3-8b")
    completions["workload"]["endpoint"] = "completions"
    sc = validate_scenario(completions)
    assert sc.workload.chat_template is None and make_workload(sc).input_tokens.tolist() == [100] * 4
    own = validate_scenario(chat("qwen3-8b", chat_template={"lead_tokens": 40, "trail_tokens": 2}))
    assert make_workload(own).input_tokens.tolist() == [142] * 4
    assert validate_scenario(own.model_dump(mode="json", exclude_none=True)) == own  # reads back equal
    catalog = {**chat("qwen3-8b", {"name": "vllm", "version": "0.11.0"}), "model": "llama-3.1-8b"}
    assert validate_scenario(catalog).workload.chat_template.lead_tokens == 29  # a catalog model, by its name
    uncounted = validate_scenario({**catalog, "model": "mistral-7b-v0.1"})  # a base model: no chat template counted
    assert uncounted.workload.chat_template is None
    assert any("chat template: mistral-7b-v0.1's not counted" in n for n in uncounted.engine.notes)


def test_every_raw_reader_of_the_endpoint_takes_the_workloads_default():
    # the chat template, the presets' front-end rows and a named benchmark client read `workload.endpoint` before
    # validation, through one helper whose default is WorkloadSpec's
    from sim.workload.generate import WorkloadSpec, endpoint_of
    assert endpoint_of({}) == endpoint_of(None) == WorkloadSpec.model_fields["endpoint"].default == "completions"
    assert endpoint_of({"endpoint": "chat"}) == endpoint_of(validate_scenario(chat("qwen3-8b")).workload) == "chat"
    plain = chat("qwen3-8b", {"name": "vllm", "version": "0.11.0"})
    del plain["workload"]["endpoint"]  # no endpoint: completions everywhere, no template, the completions row
    sc = validate_scenario(plain)
    from sim.config.engines import api_server_work
    assert sc.workload.chat_template is None
    assert sc.frontend.per_request_s == api_server_work((0, 11, 0), "vllm", "completions").per_request_s


@pytest.mark.parametrize("workload, message", [
    ({"endpoint": "completions", "chat_template": {"lead_tokens": 3, "trail_tokens": 5}},
     "workload.chat_template: not allowed with workload.endpoint 'completions'"),
    ({"prefix": {"kind": "multi_turn", "turns_mean": 2, "think_time_s": 1}, "arrival": {"kind": "poisson",
                                                                                      "rate_per_s": 1},
      "chat_template": {"lead_tokens": 3, "trail_tokens": 5}},
     "workload.chat_template: not allowed with workload.prefix.kind 'multi_turn'"),
    ({"chat_template": {"lead_tokens": -1, "trail_tokens": 5}}, "workload.chat_template.lead_tokens"),
])
def test_bad_template_input_is_one_line(workload, message):
    with pytest.raises(ConfigError) as err:
        validate_scenario(chat("qwen3-8b", **workload))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_presets_cache_prefixes_as_their_engines_do():
    base = {"workload": {"arrival": {"kind": "burst"}, "lengths": {"kind": "fixed", "input_tokens": 100,
                                                                     "output_tokens": 10}},
            "run": {"num_requests": 4}}
    one = lambda name, version, **flags: validate_scenario(  # noqa: E731
        {**base, "engine": {"name": name, "version": version, **flags}}).kv_cache.enable_prefix_caching
    assert one("vllm", "0.11.0") and not one("vllm", "0.11.0", enable_prefix_caching=False)
    assert not one("vllm", "0.6.3")  # V0: off unless asked
    assert one("sglang", "0.5.3.post3") and not one("sglang", "0.5.3.post3", disable_radix_cache=True)
    assert one("trtllm", "1.2.0rc1") and not one("trtllm", "0.14.0")


def test_a_model_whose_every_layer_slides_keeps_its_window_freeing():
    # ServeSim frees no windowed blocks under prefix caching, so the preset leaves caching off there, and says so
    sc = validate_scenario({"model": "mistral-7b-v0.1", "engine": {"name": "vllm", "version": "0.11.0"},
                            "workload": {"arrival": {"kind": "burst"},
                                         "lengths": {"kind": "fixed", "input_tokens": 100, "output_tokens": 10}},
                            "run": {"num_requests": 4}})
    assert not sc.kv_cache.enable_prefix_caching
    assert any("prefix caching left off for mistral-7b-v0.1" in n for n in sc.engine.notes)
