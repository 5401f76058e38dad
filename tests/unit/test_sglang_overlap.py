"""SGLang's overlap scheduler (sim/config/engines/sglang.py `sglang_overlap_work`): where a run has none (the flag,
pipeline parallelism, speculative decoding without spec v2, a release without it) and its CPU terms were fitted on a
release that runs with it, the scheduler's measured work a step (SGLANG_SCHEDULER_WORK) is added to them, by hand."""

import sys
from pathlib import Path

import numpy as np
import pytest

from sim.config.engines.fitted import nearest_fits
from sim.config.engines.sglang import SGLANG_SCHEDULER_WORK
from sim.config.files import validate_scenario
from sim.cost.overhead import ENGINE_DEFAULTS
from sim.errors import ConfigError
from sim.run import simulate

BASE = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
        "workload": {"arrival": {"kind": "closed_loop", "num_users": 1, "think_time_s": 0.0},
                     "lengths": {"kind": "fixed", "input_tokens": 300, "output_tokens": 40}},
        "run": {"num_requests": 3, "seed": 0, "fast_decode": False}}
EAGLE = {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
         "speculative_num_draft_tokens": 4}
SECTION = {"draft_cost_ratio": 0.05, "acceptance": {"kind": "fixed", "alpha": 0.7}}
STEP_S, SEQ_S = SGLANG_SCHEDULER_WORK["per_step_s"], SGLANG_SCHEDULER_WORK["per_seq_s"]
DEFAULT_SEQ_S = ENGINE_DEFAULTS["vllm-cudagraph"].per_seq_s


def scenario(version: str, flags: dict | None = None, **sections):
    return validate_scenario({**BASE, **sections, "engine": {"name": "sglang", "version": version, **(flags or {})}})


def stored_step_s(version: str) -> float:
    return nearest_fits("sglang", version)["per_step_s"].value


def test_disable_overlap_schedule_adds_the_schedulers_work_to_the_terms_fitted_with_it():
    # 0.5.3.post3's own fit (its c4 run, the overlap on): per_step_s as stored; without the overlap, + 0.073 ms a
    # step and + 6.56 us a running request over the preset's 10 us estimate
    on = scenario("0.5.3.post3").cost_model.overhead
    off = scenario("0.5.3.post3", {"disable_overlap_schedule": True}).cost_model.overhead
    fitted = stored_step_s("0.5.3.post3")
    assert on.per_step_s == fitted and on.per_seq_s is None
    assert off.per_step_s == pytest.approx(fitted + 0.073e-3, rel=1e-12)
    assert off.per_seq_s == pytest.approx(10e-6 + 6.56e-6, rel=1e-12) == DEFAULT_SEQ_S + SEQ_S
    assert off.overlap is None  # priced serially, as the fitted terms are


def test_each_step_lasts_the_schedulers_work_longer_without_the_overlap():
    on = simulate(scenario("0.5.3.post3")).steps
    off = simulate(scenario("0.5.3.post3", {"disable_overlap_schedule": True})).steps
    assert len(on) == len(off) and (on.num_seqs.values == off.num_seqs.values).all()
    extra = off.duration_s.values - on.duration_s.values
    np.testing.assert_allclose(extra, STEP_S + SEQ_S * on.num_seqs.values, rtol=1e-9, atol=1e-15)


def test_sglang_turns_the_overlap_off_itself_for_speculation_before_spec_v2_and_for_pipelines():
    eagle_053 = scenario("0.5.3.post3", EAGLE, speculation=SECTION).cost_model.overhead
    assert eagle_053.per_step_s == pytest.approx(stored_step_s("0.5.3.post3") + STEP_S, rel=1e-12)
    # from 0.5.14 spec v2 always keeps the overlap on: nothing added, unless the flag turns it off
    eagle_v2 = scenario("0.5.14", EAGLE, speculation=SECTION).cost_model.overhead
    assert eagle_v2.per_seq_s is None
    eagle_v2_off = scenario("0.5.14", {**EAGLE, "disable_overlap_schedule": True}, speculation=SECTION)
    assert eagle_v2_off.cost_model.overhead.per_seq_s == pytest.approx(DEFAULT_SEQ_S + SEQ_S, rel=1e-12)
    piped = validate_scenario({**BASE, "model": "llama-3.1-70b",
                               "hardware": {"gpu": "h100-sxm", "tensor_parallel": 2, "pipeline_parallel": 2},
                               "engine": {"name": "sglang", "version": "0.5.3.post3"}}).cost_model.overhead
    assert piped.per_seq_s == pytest.approx(DEFAULT_SEQ_S + SEQ_S, rel=1e-12)


def test_a_release_without_the_overlap_gets_the_work_on_terms_fitted_with_it():
    # 0.3.0 has no overlap scheduler; its own per-step fit was not pinned, so it takes 0.5.3.post3's, fitted with it
    fit = nearest_fits("sglang", "0.3.0")["per_step_s"]
    assert fit.version == "0.5.3.post3" and fit.borrowed
    assert scenario("0.3.0").cost_model.overhead.per_step_s == pytest.approx(fit.value + STEP_S, rel=1e-12)


def test_the_flag_before_its_release_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"disable_overlap_schedule.*0\.3\.6") as err:
        scenario("0.3.5", {"disable_overlap_schedule": True})
    assert "\n" not in str(err.value)


def test_the_preset_reads_the_published_suites_own_fit_with_its_rule():
    """The suite hands its fit to the preset (`with_this_fit`): 0.3.0's own fit, had its runs pinned it, is of runs
    without the overlap, the work inside it (nothing added); unpinned, 0.3.0 takes 0.5.3.post3's, fitted with the
    overlap, and the work is added to it as to the stored one."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import published_suite as ps
    case = next(c for c in ps.load_suite().cases if c.engine.key == "sglang" and c.engine.version == "0.3.0")
    model = ps.COST_MODELS[ps.DEFAULT_COST_MODEL]
    pinned = ps.scenario(case, model, {"per_step_s": 1e-3})
    assert pinned["cost_model"]["overhead"]["per_step_s"] == 1e-3
    unpinned = ps.scenario(case, model, {"per_step_s": 1e-3, "per_step_s not pinned": 1e-3})
    assert "cost_model" not in unpinned  # the preset's own terms, as a user's scenario gets them
    assert validate_scenario(unpinned).cost_model.overhead.per_step_s == pytest.approx(
        stored_step_s("0.3.0") + STEP_S, rel=1e-12)  # 0.5.3.post3's, borrowed
