"""Engine presets (sim/config/engines/): the defaults each engine derives for a GPU, overrides, and the bad input
that must be refused in one line (an unknown engine or version, a flag the preset does not know, a flag that
contradicts the preset or the scenario)."""

import math
import re
from pathlib import Path

import pytest
from helpers import run_refused

from sim.config.engines import fitted
from sim.config.engines.base import dotted_version, parse_version
from sim.config.files import validate_scenario
from sim.cost.overhead import ENGINE_DEFAULTS
from sim.errors import ConfigError
from sim.model.catalog import get_gpu, get_model

BASE = {"model": "llama-3.1-8b",  # a command's model, m, names none the catalog has
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                     "lengths": {"kind": "fixed", "input_tokens": 500, "output_tokens": 100}},
        "run": {"num_requests": 20}}


def scenario(engine: dict, **sections):
    return validate_scenario({**BASE, **sections, "engine": engine})


def test_vllm_v1_takes_its_openai_server_batch_defaults_from_the_gpu():
    # vllm/engine/arg_utils.py get_batch_defaults (v0.11.0): >= 70 GiB and not an A100: 8192 / 1024, else 2048 / 256
    h100 = scenario({"name": "vllm", "version": "0.11.0"}).scheduler
    assert (h100.max_num_batched_tokens, h100.max_num_seqs, h100.chunked_prefill) == (8192, 1024, True)
    assert h100.rule().is_default
    a100 = scenario({"name": "vllm", "version": "0.11.0"}, hardware={"gpu": "a100-80gb"}).scheduler
    assert (a100.max_num_batched_tokens, a100.max_num_seqs) == (2048, 256)


@pytest.mark.parametrize("version, gpu, batch", [
    ("0.8.2", "h200", (8192, 1024)), ("0.8.2", "b200", (2048, 1024)),  # by name; 1024 sequences on every GPU
    ("0.8.2", "a100-80gb", (2048, 1024)), ("0.8.3", "l40s", (2048, 1024)),
    ("0.8.4", "h100-sxm", (8192, 1024)), ("0.8.4", "b200", (2048, 256)),  # 0.8.4: the sequences by name too
    ("0.8.5", "a100-80gb", (8192, 1024)), ("0.8.5", "b200", (8192, 1024)),  # 0.8.5: >= 70 GiB, an A100 too
    ("0.8.5", "l40s", (2048, 256)),
    ("0.9.0", "a100-80gb", (2048, 256)), ("0.10.2", "b200", (8192, 1024)),  # from 0.9.0 not an A100 (0.11.0's rule)
    ("0.8.2", "h100-pcie", (8192, 1024)), ("0.10.2", "h100-nvl", (8192, 1024)),  # "NVIDIA H100 PCIe", "... NVL"
    ("0.8.2", "h20", (2048, 1024)), ("0.8.4", "h20", (2048, 256)),  # "NVIDIA H20": no "h100" or "h200" in it
    ("0.8.5", "h20", (8192, 1024)),  # 96 GB
    ("0.8.5", "a100-pcie", (8192, 1024)), ("0.9.0", "a100-pcie", (2048, 256)),  # "NVIDIA A100 80GB PCIe"
    ("0.8.4", "h800", (2048, 256)), ("0.9.0", "h800", (8192, 1024)),  # "NVIDIA H800": no "h100" in it; 80 GB
    ("0.9.0", "a800", (8192, 1024)),  # "NVIDIA A800-SXM4-80GB": 80 GB and no "a100" in it, so the big tier
])
def test_vllm_before_0_11_takes_the_batch_tiers_its_own_release_derives(version, gpu, batch):
    # vllm/engine/arg_utils.py EngineArgs._set_default_args_v1 in the PyPI sdists of 0.8.0-0.10.2: the device's name
    # ("h100" or "h200" in it) to 0.8.4, its memory from 0.8.5, and not an A100 from 0.9.0
    sc = scenario({"name": "vllm", "version": version}, hardware={"gpu": gpu})
    assert (sc.scheduler.max_num_batched_tokens, sc.scheduler.max_num_seqs) == batch
    assert not any("batch defaults" in n for n in sc.engine.notes)


@pytest.mark.parametrize("version, gpu, batch, utilization", [
    ("0.27.1", "b200", (8192, 1024), 0.92),  # 179 GiB: the >= 70 GiB tier until v0.28.0
    ("0.28.0", "b200", (16384, 1024), 0.92),  # v0.28.0: >= 160 GiB -> 16384 / 1024, whatever the name
    ("0.33.0", "h200", (8192, 1024), 0.92),  # 140 GiB stays in the middle tier
    ("0.33.0", "a100-80gb", (2048, 256), 0.92),
    ("0.19.1", "h100-sxm", (8192, 1024), 0.9),  # gpu_memory_utilization 0.92 from v0.20.0
])
def test_vllm_later_versions_take_their_own_batch_tiers_and_memory_share(version, gpu, batch, utilization):
    # vllm/engine/arg_utils.py get_batch_defaults, vllm/config/cache.py (the PyPI sdists of v0.16.0 to v0.33.0)
    sc = scenario({"name": "vllm", "version": version}, hardware={"gpu": gpu})
    assert (sc.scheduler.max_num_batched_tokens, sc.scheduler.max_num_seqs) == batch
    assert sc.kv_cache.gpu_memory_utilization == utilization
    assert sc.cost_model.overhead.overlap  # async scheduling on by default from v0.14.0


@pytest.mark.parametrize("version, gpu, block", [
    ("0.11.0", "h100-sxm", 64), ("0.17.1", "h200", 64), ("0.18.0", "h200", 16),  # FlashMLA's 64 forced to v0.17.x
    ("0.14.1", "b200", 128), ("0.16.0", "b200", 64), ("0.18.0", "b200", 32),  # CUTLASS, FlashInfer (forced), then
    ("0.11.0", "a100-80gb", 16),  # its smallest; no FlashMLA on Ampere
])
def test_vllm_forces_its_mla_kernels_block_size_by_gpu_architecture(version, gpu, block):
    # vllm/platforms/cuda.py check_and_update_config; DeepSeek-V2-Lite is MLA with qk_nope_head_dim 128
    sc = scenario({"name": "vllm", "version": version}, model="deepseek-v2-lite", hardware={"gpu": gpu})
    assert sc.kv_cache.block_size == block
    assert (block == 16) is not any("for an MLA model" in n for n in sc.engine.notes)
    dense = scenario({"name": "vllm", "version": version}, hardware={"gpu": gpu})
    assert dense.kv_cache.block_size == 16
    given = scenario({"name": "vllm", "version": version, "block_size": 32}, model="deepseek-v2-lite",
                     hardware={"gpu": gpu})
    assert given.kv_cache.block_size == 32  # --block-size wins


def test_vllm_034_sizes_its_kv_cache_after_warmup_in_blocks_of_64():
    # vllm/config/cache.py (DEFAULT_BLOCK_SIZE 64, gpu_memory_utilization None -> 1.0 with the extensible KV cache)
    # and v1/worker/extensible_kv_cache.py (1 GiB, 0.75 x the peak) in the 0.34.0 sdist; 0.33.0: 16 and 0.92
    new, old = (scenario({"name": "vllm", "version": v}) for v in ("0.34.0", "0.33.0"))
    assert (new.kv_cache.block_size, new.kv_cache.gpu_memory_utilization) == (64, 1.0)
    assert (new.kv_cache.transient_margin.floor_bytes, new.kv_cache.transient_margin.fraction) == (1 << 30, 0.75)
    assert any("extensible KV cache" in n for n in new.engine.notes)
    assert (old.kv_cache.block_size, old.kv_cache.gpu_memory_utilization, old.kv_cache.transient_margin) == (
        16, 0.92, None)
    given = scenario({"name": "vllm", "version": "0.34.0", "gpu_memory_utilization": 0.8, "block_size": 16})
    assert (given.kv_cache.gpu_memory_utilization, given.kv_cache.block_size) == (0.8, 16)
    assert given.kv_cache.transient_margin is not None  # vLLM keeps the margin under a given share too
    for flags in ({"enable_extensible_kv_cache": False}, {"num_gpu_blocks_override": 4096}):
        off = scenario({"name": "vllm", "version": "0.34.0", **flags})
        assert (off.kv_cache.gpu_memory_utilization, off.kv_cache.transient_margin) == (0.92, None)
    for model, gpu in (("deepseek-v2-lite", "h200"), ("deepseek-v2-lite", "b200")):  # the MLA backends take 64
        assert scenario({"name": "vllm", "version": "0.34.0"}, model=model,
                        hardware={"gpu": gpu}).kv_cache.block_size == 64


def test_vllm_034_holds_more_kv_than_033_by_what_its_sizing_frees():
    # the same H100 and batch limits: 0.34.0 holds the device less the weights, the peak and its margin; 0.33.0 holds
    # 0.92 of it less the weights and the peak. The difference in tokens is their difference in bytes.
    from sim.config.deployment import resolve
    from sim.model.memory import activation_bytes, kv_slot_bytes
    new, old = (scenario({"name": "vllm", "version": v, "block_size": 16}) for v in ("0.34.0", "0.33.0"))
    llama, h100 = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
    peak = activation_bytes(llama, new.scheduler.max_num_batched_tokens, new.scheduler.max_num_seqs,
                            logit_bytes=new.kv_cache.sampler_bytes_per_logit)
    freed = (h100.hbm_bytes - max(1 << 30, -(-3 * peak // 4))) - int(h100.hbm_bytes * 0.92)
    per_token = kv_slot_bytes(llama, "bf16", 1)
    gained = resolve(new).kv_capacity_tokens - resolve(old).kv_capacity_tokens
    assert abs(gained - freed / per_token) <= 2  # whole tokens of each


@pytest.mark.parametrize("version, block, allowed", [
    ("0.6.3", 64, "8, 16, 32"), ("0.6.4", 64, None), ("0.8.4", 1, "8, 16, 32, 64, 128"), ("0.8.5", 1, None),
    ("0.11.0", 256, "1, 8, 16, 32, 64, 128"), ("0.11.1", 256, None), ("0.17.1", 48, "1, 8, 16, 32, 64, 128, 256"),
    ("0.18.0", 48, None), ("0.11.0", 7, "1, 8, 16, 32, 64, 128"),
])
def test_vllm_block_size_takes_the_choices_of_the_release_parser(version, block, allowed):
    # vllm/engine/arg_utils.py --block-size choices, then vllm/config's BlockSize Literal, then (0.18.0) an int
    engine = {"name": "vllm", "version": version, "block_size": block}
    if allowed is None:
        assert scenario(engine).kv_cache.block_size == block
        return
    with pytest.raises(ConfigError) as err:
        scenario(engine)
    assert str(err.value) == (f"engine.block_size: {block} is not a choice of vLLM {version}'s --block-size; "
                              f"allowed: {allowed}")


def test_vllm_034_options():
    accepted = scenario({"name": "vllm", "version": "0.34.0", "command": "vllm serve m --checkpoint-prepare-on-startup "
                         "--cache-aware-admission-window 0 --cache-aware-admission-threshold 0.3"})
    assert accepted.kv_cache.block_size == 64
    with pytest.raises(ConfigError, match=r"^engine.cache_aware_admission_window: 4 is not modelled"):
        scenario({"name": "vllm", "version": "0.34.0", "cache_aware_admission_window": 4})
    with pytest.raises(ConfigError, match=r"^engine.enable_extensible_kv_cache: not a flag of vllm 0.33.0"):
        scenario({"name": "vllm", "version": "0.33.0", "enable_extensible_kv_cache": True})
    with pytest.raises(ConfigError, match=r"^engine.enable_extensible_kv_cache: true contradicts engine."
                                          r"num_gpu_blocks_override"):
        scenario({"name": "vllm", "version": "0.34.0", "enable_extensible_kv_cache": True,
                  "num_gpu_blocks_override": 100})


def test_vllm_015_is_read_as_016_and_says_so():
    notes = scenario({"name": "vllm", "version": "0.15.1"}).engine.notes
    assert any("v0.16.0's defaults assumed (PyPI has no 0.15 sdist" in n for n in notes)


def test_a_four_number_release_is_its_own_version_and_is_derived_as_its_release_line():
    # vLLM published 0.9.0.1 and 0.10.1.1 (PyPI): the preset takes them as the versions they are, not refuses them
    point = scenario({"name": "vllm", "version": "0.10.1.1"})
    assert point.engine.version == "0.10.1.1"
    plain = scenario({"name": "vllm", "version": "0.10.1"})
    assert (point.scheduler.max_num_seqs, point.scheduler.max_num_batched_tokens, point.cost_model.overhead) == (
        plain.scheduler.max_num_seqs, plain.scheduler.max_num_batched_tokens, plain.cost_model.overhead)
    with pytest.raises(ConfigError, match="'0.10.x' is not a vllm version the preset knows"):
        scenario({"name": "vllm", "version": "0.10.x"})


def test_a_version_is_read_as_pep_440_reads_it_two_numbers_as_the_release_ending_in_zero():
    # "0.11" is 0.11.0 (what pip installs for ==0.11): the same rules, defaults, fit and notes, the release named in
    # full. It took 0.10's side of every bound written as 0.11.0, and 0.11.0's measured API server work went unused.
    full = scenario({"name": "vllm", "version": "0.11.0"})
    for written in ("0.11", "v0.11.0", " 0.11 "):
        short = scenario({"name": "vllm", "version": written})
        assert short.engine.version == "0.11.0"
        assert short.model_dump() == full.model_dump() and short.engine.notes == full.engine.notes
    assert scenario({"name": "vllm", "version": "0.6"}).engine.version == "0.6.0"  # the oldest, refused before
    assert scenario({"name": "sglang", "version": "0.5.3.post3"}).engine.version == "0.5.3.post3"
    with pytest.raises(ConfigError, match=r"^engine\.version: '0\.5' is not a vllm version the preset knows"):
        scenario({"name": "vllm", "version": "0.5"})  # the words as written


def test_a_version_must_be_a_release_its_numbers_checked_against_the_index_list():
    from sim.config.engines.presets import PRESETS
    from sim.config.engines.releases import ENGINE_RELEASES, release_order
    for name, preset in PRESETS.items():  # each list spans its preset's versions, in PEP 440's order, once each
        releases = ENGINE_RELEASES[name]
        assert [release_order(r) for r in releases] == sorted({release_order(r) for r in releases})
        assert parse_version(releases[0])[:3] == preset.oldest and parse_version(releases[-1])[:2] == preset.newest[:2]
    # numbers no release has, and a post-release never published, are refused with the releases either side
    for name, written, around in (("vllm", "0.9.7", "0.9.2 and 0.10.0"), ("vllm", "0.11.5", "0.11.2 and 0.12.0"),
                                  ("vllm", "0.8.5.post2", "0.8.5.post1 and 0.9.0"),
                                  ("sglang", "0.5.3.post9", "0.5.3.post3 and 0.5.4"),
                                  ("trtllm", "0.15.1", "0.15.0 and 0.16.0"),
                                  ("lmdeploy", "0.12.4", "0.12.3 and 0.13.0")):
        with pytest.raises(ConfigError, match=rf"^engine\.version: '{re.escape(written)}' is not a {name} release "
                                              rf"\(PyPI's index on 2026-12-07\); allowed: a release of .*, the nearest "
                                              rf"{re.escape(around)}$"):
            scenario({"name": name, "version": written})
    # a release candidate or final of listed numbers is taken (engines tag them in git, containers carry them):
    # vLLM's 0.11.1rc1, TensorRT-LLM's 0.17.0 (the index has its .post1 only); none of them says it is unlisted
    for name, written in (("vllm", "0.11.1rc1"), ("trtllm", "0.17.0"), ("sglang", "0.5.3rc1")):
        notes = scenario({"name": name, "version": written}).engine.notes
        assert not any("newer than every release" in note for note in notes)
    # one newer than every listed release, within the newest minor, is taken as published since, and says so
    later = scenario({"name": "vllm", "version": "0.34.1"})
    assert later.engine.notes[0] == ("vLLM 0.34.1: newer than every release the preset lists (PyPI's index on "
                                     "2026-12-07, to 0.34.0), so modelled by the rules of the releases before it")
    listed = scenario({"name": "vllm", "version": "0.34.0"}).model_dump()
    assert listed == {**later.model_dump(), "engine": listed["engine"]}  # every other section as 0.34.0's


def test_a_fit_left_at_a_bound_serves_no_version_its_own_included():
    # engine_terms.json: vLLM 0.9.2's and SGLang 0.5.5.post1's GPUStack fit runs left the front-end latency at its
    # bound, and their CPU time a step took up what the model could not reproduce (9.9 and 17 ms, where SGLang
    # 0.5.5.post1's own scheduler was measured at 0.07 ms): neither fit is used, by its own version either. Each takes
    # the nearest fit that reproduced its runs, as the versions around it do, and says why.
    for name, version, nearest, around in (("vllm", "0.9.2", "0.11.0", ("0.9.1", "0.10.2")),
                                           ("sglang", "0.5.5.post1", "0.5.3.post3", ("0.5.6",))):
        table = fitted.fitted_table()["engines"][name]
        assert fitted.left_at_a_bound(table[version]["at_bound"]) and not table[nearest]["at_bound"]
        fits = fitted.nearest_fits(name, version)
        assert {(fit.version, fit.borrowed) for fit in fits.values()} == {(nearest, True)}, version
        _, where = fitted.fitted_terms(name, version)
        assert f"taken for {name} {version}, whose own fit left latency_s at a bound (its runs not reproduced" in where
        own = scenario({"name": name, "version": version}).cost_model.overhead.per_step_s
        assert own == pytest.approx(table[nearest]["terms"]["per_step_s"])
        assert own != pytest.approx(table[version]["terms"]["per_step_s"])
        for other in around:
            assert scenario({"name": name, "version": other}).cost_model.overhead.per_step_s == own, other


def test_a_post_release_and_its_release_are_told_apart_by_the_fits():
    # engine_terms.json fits SGLang 0.5.3 (its latency left at a bound: no version uses it) and 0.5.3.post3 apart;
    # one release's numbers, two suffixes. 0.5.3.post3 reads its own fit; 0.5.3 takes it and says why, in its own
    # words, where matching release numbers alone had called it 0.5.3's own; 0.5.3.post2, without a fit, takes it too.
    table = fitted.fitted_table()["engines"]["sglang"]
    assert fitted.left_at_a_bound(table["0.5.3"]["at_bound"]) and not table["0.5.3.post3"]["at_bound"]
    own = fitted.nearest_fits("sglang", "0.5.3.post3")
    assert {(fit.version, fit.borrowed) for fit in own.values()} == {("0.5.3.post3", False)}
    for version in ("0.5.3", "0.5.3.post2"):
        fits = fitted.nearest_fits("sglang", version)
        assert {(fit.version, fit.borrowed) for fit in fits.values()} == {("0.5.3.post3", True)}, version
    _, where = fitted.fitted_terms("sglang", "0.5.3")
    assert "taken for sglang 0.5.3, whose own fit left latency_s at a bound" in where
    _, where = fitted.fitted_terms("sglang", "0.5.3.post2")
    assert "taken for sglang 0.5.3.post2, which has no fit of its own" in where


def test_between_fits_of_one_release_the_same_suffix_then_the_nearer_post_release():
    good = {"at_bound": [], "not_pinned": []}
    table = {"engines": {"sglang": {"0.5.3": {"terms": {"per_step_s": 1e-3}, **good},
                                    "0.5.3.post3": {"terms": {"per_step_s": 2e-3}, **good}}}}
    pick = {version: fitted.nearest_fits("sglang", version, table)["per_step_s"]
            for version in ("0.5.3", "0.5.3.post1", "0.5.3.post2", "0.5.3.post3", "0.5.3rc0")}
    assert pick["0.5.3"] == fitted.NearestFit("0.5.3", 1e-3, False)
    assert pick["0.5.3.post3"] == fitted.NearestFit("0.5.3.post3", 2e-3, False)
    assert pick["0.5.3.post1"] == fitted.NearestFit("0.5.3", 1e-3, True)  # one post release away, post3 two
    assert pick["0.5.3.post2"] == fitted.NearestFit("0.5.3.post3", 2e-3, True)
    assert pick["0.5.3rc0"] == fitted.NearestFit("0.5.3", 1e-3, True)


def test_a_preset_reads_the_fits_it_is_handed_in_place_of_the_shipped_ones():
    """apply_engine_preset's `fits` (the published suite's fresh fit): the version's own terms from it, the versions
    without one borrowing its terms as they would the shipped ones, and where they come from said from it."""
    from sim.config.engines import apply_engine_preset
    table = fitted.fitted_table()
    vllm = table["engines"]["vllm"]
    mine = {**vllm["0.11.0"], "terms": {**vllm["0.11.0"]["terms"], "per_step_s": 2.5e-3}, "fitted_on": ["my run"]}
    handed = {**table, "engines": {**table["engines"], "vllm": {**vllm, "0.11.0": mine}}}
    raw = {**BASE, "model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"}}
    for version in ("0.11.0", "0.10.2"):  # 0.10.2 has no fit of its own: it takes 0.11.0's
        engine = {"name": "vllm", "version": version}
        applied = apply_engine_preset({**raw, "engine": engine}, fits=handed)
        overhead, notes = applied.overhead, applied.notes
        assert overhead["per_step_s"] == 2.5e-3
        assert any("fitted on my run (vllm 0.11.0)" in note for note in notes)
        shipped = apply_engine_preset({**raw, "engine": engine}).overhead
        assert shipped["per_step_s"] == vllm["0.11.0"]["terms"]["per_step_s"] != 2.5e-3


@pytest.mark.parametrize("version", ["0.8.0", "0.11.0", "0.18.0", "0.19.0", "0.33.0", "0.6.0"])
def test_vllm_admits_on_the_whole_prompt_and_says_where_that_stands_in(version):
    # v0.19.0's scheduler_reserve_full_isl; to v0.18 V1 admits on the first chunk's blocks, a rule the scenario can
    # ask for (`scheduler.admission: first_chunk`), which the preset does not take (sim/config/engines/ says why)
    sc = scenario({"name": "vllm", "version": version})
    assert sc.scheduler.admission == "whole_prompt" and sc.scheduler.rule().whole_prompt_admission
    stand_in = any("whole prompt's KV blocks" in n for n in sc.engine.notes)
    assert stand_in is ((0, 8) <= tuple(map(int, version.split("."))) < (0, 19))
    if version == "0.6.0":  # V0 without chunked prefill (a context of at most 32k) admits a prompt whole: the rule
        # has nothing to choose
        with pytest.raises(ConfigError, match="admission 'first_chunk' needs chunked_prefill true"):
            scenario({"name": "vllm", "version": version, "max_model_len": 4096},
                     scheduler={"admission": "first_chunk"})
        return
    given = scenario({"name": "vllm", "version": version}, scheduler={"admission": "first_chunk"})
    assert given.scheduler.admission == "first_chunk"  # the scenario's own value wins
    assert not given.scheduler.rule().whole_prompt_admission


def test_vllm_014_schedules_asynchronously_unless_told_or_unable():
    # vllm/config/vllm.py VllmConfig.__post_init__ (v0.14.0): async_scheduling None -> True, except with pipeline
    # parallelism or non-EAGLE speculative decoding; SchedulerConfig.async_scheduling was False through v0.13.0
    for version, overlap in (("0.11.0", False), ("0.12.0", False), ("0.13.0", False), ("0.14.0", True),
                             ("0.14.1", True)):
        sc = scenario({"name": "vllm", "version": version})
        assert bool(sc.cost_model.overhead.overlap) is overlap, version
        assert (sc.scheduler.max_num_batched_tokens, sc.scheduler.max_num_seqs) == (8192, 1024)  # as v0.11.0's
    default_on = scenario({"name": "vllm", "version": "0.14.0"})
    assert any("async scheduling on by default" in n for n in default_on.engine.notes)
    assert not scenario({"name": "vllm", "version": "0.14.0", "async_scheduling": False}).cost_model.overhead.overlap
    speculation = {"num_speculative_tokens": 3, "draft_cost_ratio": 0.1, "acceptance": {"kind": "fixed", "alpha": 0.7}}
    drafted = scenario({"name": "vllm", "version": "0.14.0"}, speculation=speculation)
    assert not drafted.cost_model.overhead.overlap
    # a drafter given by its cost alone names no method: a draft model's rule, said (test_vllm_speculative.py)
    assert any("off (a drafter whose method no --speculative-config names" in n for n in drafted.engine.notes)
    # v0.28.0 keeps a draft model asynchronous too
    assert scenario({"name": "vllm", "version": "0.28.0"}, speculation=speculation).cost_model.overhead.overlap
    for version, overlap in (("0.14.1", False), ("0.15.0", True), ("0.16.0", True), ("0.33.0", True)):
        piped = validate_scenario({**BASE, "model": "llama-3.1-70b", "hardware": {"tensor_parallel": 2,
                                   "pipeline_parallel": 2}, "engine": {"name": "vllm", "version": version}})
        assert bool(piped.cost_model.overhead.overlap) is overlap, version  # PP turns it off in v0.14.x only (0.15
        # is read as 0.16.0, as its note says)
    # v0.12+ borrow v0.11.0's fitted CPU terms, as any version without its own fit (said in the notes)
    assert (scenario({"name": "vllm", "version": "0.14.0"}).cost_model.overhead.per_step_s
            == scenario({"name": "vllm", "version": "0.11.0"}).cost_model.overhead.per_step_s)


def test_vllm_async_scheduling_overlaps_the_cpu_terms_with_the_gpu():
    from sim.run import simulate
    plain = scenario({"name": "vllm", "version": "0.11.0"})
    overlapped = scenario({"name": "vllm", "version": "0.11.0", "async_scheduling": True})
    assert not plain.cost_model.overhead.overlap and overlapped.cost_model.overhead.overlap
    assert overlapped.cost_model.overhead.per_step_s == plain.cost_model.overhead.per_step_s
    assert any("--async-scheduling" in n for n in overlapped.engine.notes)
    # a step takes the longer of kernels and CPU, not their sum: every token comes sooner
    faster, slower = simulate(overlapped).summary, simulate(plain).summary
    assert faster["tpot_s_mean"] < slower["tpot_s_mean"]

def test_vllm_v0_without_chunked_prefill_runs_prefill_only_steps_under_a_whole_context_budget():
    s = scenario({"name": "vllm", "version": "0.6.3", "num_scheduler_steps": 8},
                 scheduler={"max_model_len": 4096}).scheduler
    assert not s.chunked_prefill and not s.mixed_batches
    assert s.max_num_batched_tokens == 4096 and s.max_num_seqs == 256  # max(max_model_len, 2048)
    assert s.decode_steps_per_schedule == 8
    short = scenario({"name": "vllm", "version": "0.6.3"}, scheduler={"max_model_len": 1024}).scheduler
    assert short.max_num_batched_tokens == 2048
    # the engine's own flag (--max-model-len) reaches the derivation as the scenario's key does
    flag = scenario({"name": "vllm", "version": "0.6.3", "max_model_len": 4096}).scheduler
    assert flag.max_num_batched_tokens == 4096 and flag.max_model_len == 4096


@pytest.mark.parametrize("version, budget", [("0.6.0", 512), ("0.6.4", 512), ("0.6.5", 2048), ("0.7.3", 2048)])
def test_vllm_v0_chunks_prefills_above_a_32k_context_unless_told(version, budget):
    # vllm/engine/arg_utils.py create_engine_config: enable_chunked_prefill None and max_model_len > 32768 -> True;
    # vllm/config.py SchedulerConfig: a chunked budget of 512 tokens to v0.6.4, 2048 from v0.6.5 (PyPI sdists)
    long = scenario({"name": "vllm", "version": version}).scheduler  # Llama 3.1 8B: 131072 tokens
    assert long.chunked_prefill and long.mixed_batches and long.max_num_batched_tokens == budget
    assert any("chunked prefill on: max_model_len 131072 is above 32768" in n
               for n in scenario({"name": "vllm", "version": version}).engine.notes)
    at_32k = scenario({"name": "vllm", "version": version, "max_model_len": 32768}).scheduler
    assert not at_32k.chunked_prefill and at_32k.max_num_batched_tokens == 32768
    told = scenario({"name": "vllm", "version": version, "enable_chunked_prefill": False}).scheduler
    assert not told.chunked_prefill and told.max_num_batched_tokens == 131072
    speculation = {"num_speculative_tokens": 3, "draft_cost_ratio": 0.1, "acceptance": {"kind": "fixed", "alpha": 0.7}}
    assert not scenario({"name": "vllm", "version": version}, speculation=speculation).scheduler.chunked_prefill
    windowed = {**get_model("mistral-7b-v0.1").model_dump(exclude_none=True), "max_context": 65536}
    assert not scenario({"name": "vllm", "version": version}, model=windowed).scheduler.chunked_prefill
    # v0.6.0 alone keeps it off with prefix caching
    cached = scenario({"name": "vllm", "version": version, "enable_prefix_caching": True}).scheduler
    assert cached.chunked_prefill is (version != "0.6.0")


def test_vllm_v0_multi_step_with_chunked_prefill_keeps_prompts_whole():
    # v0.6.3 on: multi-step runs with chunked prefill, under max(max_model_len, 2048) ("Multi-step Chunked-Prefill
    # doesn't allow prompt-chunking"); before v0.6.3 the engine refuses the pair, tested with the bad input below
    s = scenario({"name": "vllm", "version": "0.6.3", "num_scheduler_steps": 8}).scheduler
    assert s.chunked_prefill and s.decode_steps_per_schedule == 8 and s.max_num_batched_tokens == 131072


def test_sglang_derives_its_memory_fraction_and_runs_separate_batches_with_the_new_token_ratio():
    # H100 SXM: 81,559 MiB; reserved = 512 + 1.5 x 8192 + 2 x 256 + 1 x 1 / 8 x 1024 = 13,440 MiB;
    # (81,559 - 13,440) / 81,559 = 0.8352 -> 0.835. H200 at TP 8: 512 + 12,288 + 1,024 + 1,024 = 14,848 of
    # 143,771 MiB -> 0.897.
    sc = scenario({"name": "sglang", "version": "0.5.3.post3"})
    assert sc.kv_cache.gpu_memory_utilization == 0.835 and sc.kv_cache.block_size == 1
    assert sc.scheduler.max_num_batched_tokens == 8192 and not sc.scheduler.mixed_batches
    assert sc.scheduler.new_token_ratio.init == 0.7
    assert 2048 <= sc.scheduler.max_num_seqs <= 4096
    h200 = scenario({"name": "sglang", "version": "0.5.5.post1"}, model="llama-3.1-70b",
                    hardware={"gpu": "h200", "tensor_parallel": 8})
    assert h200.kv_cache.gpu_memory_utilization == 0.897
    mixed = scenario({"name": "sglang", "version": "0.5.3", "enable_mixed_chunk": True})
    assert mixed.scheduler.mixed_batches



@pytest.mark.parametrize("version, gpu, tp, chunk, fraction", [
    # reserved MiB = 512 + 1.5 x chunk + 2 x graph batch + tp / 8 x 1024 (+ 8 per prefill graph from 0.5.10), at least
    # 10,240 on a GPU over 60 GiB; fraction = (nvidia-smi MiB - reserved) / MiB, rounded to 3 places
    ("0.5.9", "h100-sxm", 1, 8192, 0.835),  # 13,440 of 81,559
    ("0.5.10", "h100-sxm", 1, 8192, 0.830),  # + 58 prefill graphs x 8 = 13,904
    ("0.5.23", "h200", 8, 8192, 0.893),  # 512 + 12,288 + 1,024 + 1,024 + 464 = 15,312 of 143,771
    ("0.5.23", "b200", 1, 16384, 0.854),  # >= 160 GiB: 16,384 tokens, graphs to 512; 74 prefill graphs: 26,832
    ("0.5.5.post1", "l40s", 1, 4096, 0.851),  # < 60 GiB: 4,096 tokens, graphs to 32, no floor: 6,848 of 46,068
    ("0.5.23", "l40s", 1, 4096, 0.843),  # + 50 prefill graphs: 7,248
])
def test_sglang_takes_its_chunk_and_memory_share_from_the_gpus_memory_tier(version, gpu, tp, chunk, fraction):
    # server_args.py _handle_gpu_memory_settings (0.5.5.post1), arg_groups/memory_hook.py (0.5.23)
    sc = scenario({"name": "sglang", "version": version}, model="llama-3.1-70b" if tp > 1 else "llama-3.1-8b",
                  hardware={"gpu": gpu, "tensor_parallel": tp})
    assert (sc.scheduler.max_num_batched_tokens, sc.kv_cache.gpu_memory_utilization) == (chunk, fraction)


def test_sglang_dp_attention_without_dp_is_turned_off_after_reserving_its_memory():
    # server_args.py (0.5.3 .. 0.5.13): _handle_gpu_memory_settings reserves cuda_graph_max_bs x dp_size x 3 MiB, and
    # x 1.5 more above 300, then _handle_data_parallelism turns dp attention off at dp_size 1. H200 at TP 8 (graph
    # batch 512): 14,848 + 1,536 + 768 = 17,152 of 143,771 MiB -> 0.881 (0.897 without the flag).
    h200 = {"model": "llama-3.1-70b", "hardware": {"gpu": "h200", "tensor_parallel": 8}}
    plain = scenario({"name": "sglang", "version": "0.5.3"}, **h200)
    flagged = scenario({"name": "sglang", "version": "0.5.3", "enable_dp_attention": True}, **h200)
    assert plain.kv_cache.gpu_memory_utilization == 0.897
    assert flagged.kv_cache.gpu_memory_utilization == round((143771 - 17152) / 143771, 3) == 0.881
    assert any("turned off" in n and "less KV" in n for n in flagged.engine.notes)
    # otherwise the same engine: its chunk, batches and ratio are untouched (dp attention never took effect)
    assert flagged.scheduler == plain.scheduler
    # H100 at TP 1 (graph batch 256, not above 300), 0.5.13 (58 prefill graphs x 8 MiB from 0.5.10):
    # 13,440 + 464 + 768 = 14,672 of 81,559 MiB
    one = scenario({"name": "sglang", "version": "0.5.13", "enable_dp_attention": True, "dp_size": 1})
    assert one.kv_cache.gpu_memory_utilization == round((81559 - 14672) / 81559, 3) == 0.82
    given = scenario({"name": "sglang", "version": "0.5.3", "enable_dp_attention": True, "mem_fraction_static": 0.8})
    assert given.kv_cache.gpu_memory_utilization == 0.8
    assert not any("less KV" in n for n in given.engine.notes)


def test_sglangs_running_requests_may_exceed_its_chunk_as_its_decode_batches_run_apart():
    # Two L4s (the 20-35 GiB tier's 2048-token chunk): max_running_requests = min(max(kv_tokens / 4096 x 512, 2048),
    # 4096, kv_tokens // 2) = 4096, which SGLang runs (its decode batches are not cut by the chunk). It was refused
    # here as "max_num_batched_tokens must be >= max_num_seqs", a bound of mixed steps and of vLLM's SchedulerConfig.
    from sim.run import simulate
    pair = scenario({"name": "sglang", "version": "0.5.3.post3"}, model="llama-2-7b",
                    hardware={"gpu": "l4", "tensor_parallel": 2})
    assert (pair.scheduler.max_num_seqs, pair.scheduler.max_num_batched_tokens) == (4096, 2048)
    assert not pair.scheduler.rule().mixed_batches
    assert len(simulate(pair).requests) == BASE["run"]["num_requests"]
    # mixed chunks too: a prefill joins only where the chunk has room beside the running decodes, as SGLang's
    # PrefillAdder leaves it (the chunk less the running requests)
    mixed = scenario({"name": "sglang", "version": "0.5.3.post3", "enable_mixed_chunk": True}, model="llama-2-7b",
                     hardware={"gpu": "l4", "tensor_parallel": 2})
    assert mixed.scheduler.rule().mixed_batches and mixed.scheduler.max_num_seqs == 4096
    # vLLM cuts a step's decodes to its budget and refuses a budget below max_num_seqs (SchedulerConfig)
    with pytest.raises(ConfigError, match=r"^engine.max_num_batched_tokens \(sets scheduler.max_num_batched_tokens\): "
                                          r"200 must be >= max_num_seqs \(256\)"):
        scenario({"name": "vllm", "version": "0.6.0", "max_num_batched_tokens": 200}, model="llama-2-7b")
    with pytest.raises(ConfigError, match=r"^scheduler.max_num_batched_tokens: 200 must be >= max_num_seqs \(256\)"):
        validate_scenario({**BASE, "scheduler": {"max_num_batched_tokens": 200, "max_num_seqs": 256,
                                                 "mixed_batches": False}})  # no engine: vLLM V1's scheduler


def test_sglang_small_gpus_tier_and_the_prefill_graphs_exceptions():
    l4 = {"hardware": {"gpu": "l4"}, "model": "llama-2-7b"}  # 23,034 MiB: the 20-35 GiB tier
    assert scenario({"name": "sglang", "version": "0.5.19"}, **l4).scheduler.max_num_batched_tokens == 2048
    assert scenario({"name": "sglang", "version": "0.5.20"}, **l4).scheduler.max_num_batched_tokens == 4096
    mla = {"model": "deepseek-v2-lite", "hardware": {"gpu": "h200"}}
    with_graphs = scenario({"name": "sglang", "version": "0.5.12"}, **mla)  # an MLA model reserves 1.5 GiB
    without = scenario({"name": "sglang", "version": "0.5.16"}, **mla)  # none for MLA in 0.5.15-0.5.17
    # 512 + 1.5 x 8192 + 2 x 256 + 128 = 13,440 MiB, + 1,536 with the graphs (both above the 10,240 floor)
    assert with_graphs.kv_cache.gpu_memory_utilization == round((143771 - 13440 - 1536) / 143771, 3) == 0.896
    assert without.kv_cache.gpu_memory_utilization == round((143771 - 13440) / 143771, 3) == 0.907
    assert any("off for MLA models in 0.5.15-0.5.17" in n for n in without.engine.notes)
    piped = validate_scenario({**BASE, "model": "llama-3.1-70b", "hardware": {"tensor_parallel": 2,
                               "pipeline_parallel": 2}, "engine": {"name": "sglang", "version": "0.5.23"}})
    assert any("off with pipeline parallelism" in n for n in piped.engine.notes)
    # SGLang's ratio floor is init x 0.14 (new_token_ratio_tracker.py), whatever --schedule-conservativeness
    cautious = scenario({"name": "sglang", "version": "0.5.23", "schedule_conservativeness": 0.5})
    ratio = cautious.scheduler.new_token_ratio
    assert (ratio.init, ratio.min) == (0.35, pytest.approx(0.049))


@pytest.mark.parametrize("version, gpu, tp, fraction, chunk, graphs", [
    # server_args.py __post_init__ and cuda_graph_runner.py get_batch_sizes_to_capture of each wheel; nvidia-smi MiB:
    # H100 81,559, H200 143,771, L4 23,034
    ("0.4.0", "h100-sxm", 1, 0.88, 8192, 160),  # by TP
    ("0.4.0", "h100-sxm", 4, 0.85, 8192, 160),
    ("0.4.0", "l4", 4, 0.85, 2048, 8),  # below 25,000 MiB; 80 at TP >= 4 only from 0.4.0.post1
    ("0.4.0.post1", "l4", 4, 0.85, 2048, 80),
    ("0.4.5.post2", "h200", 1, 0.88, 8192, 160),
    ("0.4.5.post3", "h200", 1, (143771 - 13 * 1024) / 143771, 8192, 256),  # above 81,920: memory less 13 GiB
    # from 0.4.6.post2: 0.88, then above 96 GiB min(0.88 + 48 GiB x 0.12 / memory, (memory - 18 GiB) / memory)
    ("0.4.6.post2", "h200", 1, (143771 - 18 * 1024) / 143771, 8192, 256),
    # 0.4.7.post1 to 0.5.3rc0: reserved (9.5 + TP x PP / 2) GiB below 90 GiB, (12 + ...) below 160 GiB, 2.8 + TP / 10
    # below 35 GiB; fraction to 3 places
    ("0.4.7.post1", "h100-sxm", 1, 0.874, 8192, 160),  # 10,240 MiB
    ("0.5.2", "h100-sxm", 4, 0.856, 8192, 160),  # 11,776 MiB
    ("0.5.3rc0", "h200", 1, 0.911, 8192, 256),  # 12,800 MiB (a pre-release of 0.5.3: the rule before it)
    ("0.5.2", "l4", 1, 0.871, 2048, 8),  # 2,969.6 MiB
    ("0.5.3", "h100-sxm", 1, 0.835, 8192, 256),  # 0.5.3's own rule
])
def test_sglang_before_053_sizes_its_memory_chunk_and_graphs_by_its_own_rules(version, gpu, tp, fraction, chunk,
                                                                              graphs):
    sc = scenario({"name": "sglang", "version": version}, model="llama-2-7b",
                  hardware={"gpu": gpu, "tensor_parallel": tp})
    assert sc.kv_cache.gpu_memory_utilization == pytest.approx(fraction, abs=1e-12)
    assert (sc.scheduler.max_num_batched_tokens, sc.cost_model.overhead.graph_max_seqs) == (chunk, graphs)


def test_sglang_before_053_cuts_its_graph_list_by_a_given_size_and_never_extends_it():
    # 0.4.x-0.5.3rc0 capture a fixed list (to 160 on an H100) and keep the sizes <= --cuda-graph-max-bs
    assert scenario({"name": "sglang", "version": "0.5.2", "cuda_graph_max_bs": 64}).cost_model.overhead \
        .graph_max_seqs == 64
    assert scenario({"name": "sglang", "version": "0.5.2", "cuda_graph_max_bs": 512}).cost_model.overhead \
        .graph_max_seqs == 160
    assert scenario({"name": "sglang", "version": "0.5.3", "cuda_graph_max_bs": 512}).cost_model.overhead \
        .graph_max_seqs == 512  # 0.5.3 generates its list up to the given size
    assert scenario({"name": "sglang", "version": "0.3.6", "cuda_graph_max_bs": 512}).cost_model.overhead \
        .graph_max_seqs == 160  # 0.3.x's list ends at 160 too


@pytest.mark.parametrize("version, flags, fraction, graph_max_seqs, graph_prefill", [
    # H100 (81,559 MiB), TP 1: reserved = 512 + 1.5 x 8192 + 2 x graph batch (the tier's 256) + 128 (+ 58 prefill
    # graphs x 8 = 464 from 0.5.10), fraction = (81,559 - reserved) / 81,559 to 3 places
    ("0.5.3", {}, 0.835, 256, False),  # 13,440; prefill steps run eagerly
    ("0.5.3", {"cuda_graph_max_bs": 64}, 0.840, 64, False),  # 13,056
    ("0.5.3", {"cuda_graph_max_bs": 1024}, 0.816, 1024, False),  # 14,976
    ("0.5.3", {"cuda_graph_bs": [1, 2, 4, 8, 16, 32, 64]}, 0.840, 64, False),  # cuda_graph_max_bs = max(the list)
    ("0.5.5", {"cuda_graph_bs": [8, 64], "cuda_graph_max_bs": 512}, 0.840, 64, False),  # the list's max replaces it
    ("0.5.10", {}, 0.830, 256, True),  # 13,904
    ("0.5.13", {"disable_cuda_graph": True}, 0.830, 0, True),  # nothing freed; the prefill graphs stay
    ("0.5.14", {"disable_cuda_graph": True}, 0.835, 0, False),  # the prefill graphs' 464 freed, the decode's kept
    ("0.5.15", {"disable_cuda_graph": True}, 0.841, 0, False),  # 12,928: neither reserved
    ("0.5.16", {"cuda_graph_max_bs_decode": 64}, 0.834, 64, True),  # 13,520
    ("0.5.19", {"cuda_graph_max_bs": 64, "cuda_graph_max_bs_decode": 64}, 0.834, 64, True),  # one setting, twice
    ("0.5.22", {"max_running_requests": 100}, 0.833, 100, True),  # 13,592: the default graphs stop at the limit
    ("0.5.22", {"max_running_requests": 100, "cuda_graph_max_bs_decode": 300}, 0.828, 300, True),  # 13,992
])
def test_sglangs_cuda_graphs_set_its_memory_and_which_steps_launch_eagerly(version, flags, fraction, graph_max_seqs,
                                                                           graph_prefill):
    # server_args.py _handle_gpu_memory_settings (0.5.3-0.5.17), arg_groups/memory_hook.py reserve_for_graph_mb
    # (0.5.18-0.5.23), cuda_graph_runner.py can_run (a decode batch above the largest graph runs eagerly)
    sc = scenario({"name": "sglang", "version": version, **flags})
    overhead = sc.cost_model.overhead
    assert sc.kv_cache.gpu_memory_utilization == fraction
    assert (overhead.graph_max_seqs, overhead.graph_prefill) == (graph_max_seqs, graph_prefill)
    assert overhead.launch_per_layer_s == ENGINE_DEFAULTS["vllm-eager"].launch_per_layer_s  # the eager estimate


def test_sglangs_cuda_graph_list_replaces_its_default_list_as_each_version_reads_it():
    # cuda_graph_runner.py: the list given is captured, to 0.5.3rc0 each size no larger than cuda_graph_max_bs (160
    # by default on a large GPU to 0.4.5.post2, none after; 8 on a small GPU; a given one replaces the default)
    def graphs(version, gpu="h100-sxm", **flags):
        return scenario({"name": "sglang", "version": version, **flags},
                        hardware={"gpu": gpu}).cost_model.overhead.graph_max_seqs
    assert graphs("0.4.3", cuda_graph_bs=[1, 2, 4, 300]) == 160
    assert graphs("0.4.6", cuda_graph_bs=[1, 2, 4, 300]) == 300  # (the default list ends at 160 on an H100)
    assert graphs("0.4.6", cuda_graph_bs=[1, 2, 4, 300], cuda_graph_max_bs=100) == 100
    assert graphs("0.5.2", "l4", cuda_graph_bs=[4, 16]) == 8  # a 23,034 MiB GPU: cuda_graph_max_bs 8
    from_command = scenario({"name": "sglang", "version": "0.5.5.post1",
                             "command": "python3 -m sglang.launch_server --cuda-graph-bs 1 2 4 8 --port 30000"})
    assert from_command.cost_model.overhead.graph_max_seqs == 8
    assert any("--cuda-graph-bs: decode batches up to 8 run as CUDA graphs" in n for n in from_command.engine.notes)
    for engine, message in (
            ({"version": "0.4.1", "cuda_graph_bs": [8]}, "engine.cuda_graph_bs: not a flag of sglang 0.4.1 (it came "
             "in 0.4.1.post5); allowed: leave it out, or engine.version 0.4.1.post5 or later"),
            ({"version": "0.5.14", "cuda_graph_bs": [8]}, "engine.cuda_graph_bs: not modelled for SGLang 0.5.14 "
             "(from 0.5.14 an alias of --cuda-graph-bs-decode in its cuda_graph_config, whose rules were not read); "
             "allowed: --cuda-graph-max-bs-decode, or a version before 0.5.14"),
            ({"version": "0.5.20", "cuda_graph_bs": [8]}, "engine.cuda_graph_bs: not a flag of sglang 0.5.20 (its "
             "parser refuses it from 0.5.20); allowed: leave it out, or engine.version before 0.5.20"),
            ({"version": "0.5.5", "cuda_graph_bs": [0, 8]}, "engine.cuda_graph_bs: [0, 8] is not allowed; allowed: a "
             "list of whole numbers >= 1"),
            ({"version": "0.5.5", "command": "python3 -m sglang.launch_server --cuda-graph-bs --port 1"},
             "engine.command: '--cuda-graph-bs' needs a value; allowed: --cuda-graph-bs <integer> ...")):
        with pytest.raises(ConfigError, match="^" + re.escape(message) + "$"):
            scenario({"name": "sglang", **engine})


def test_sglangs_cuda_graph_options_are_read_as_each_version_reads_them():
    old = scenario({"name": "sglang", "version": "0.3.0", "disable_cuda_graph": True})
    assert old.cost_model.overhead.graph_max_seqs == 0
    assert any("--disable-cuda-graph: its decode steps run without CUDA graphs" in n for n in old.engine.notes)
    assert scenario({"name": "sglang", "version": "0.3.0"}).cost_model.overhead.graph_max_seqs == 160
    given = scenario({"name": "sglang", "version": "0.3.6", "cuda_graph_max_bs": 32})
    assert given.cost_model.overhead.graph_max_seqs == 32
    cases = [
        ({"name": "sglang", "version": "0.3.4.post2", "cuda_graph_max_bs": 64},
         "engine.cuda_graph_max_bs: not a flag of sglang 0.3.4.post2 (it came in 0.3.5); allowed: leave it out, or "
         "engine.version 0.3.5 or later"),
        ({"name": "sglang", "version": "0.5.20", "command": "sglang serve --cuda-graph-max-bs 64"},
         "engine.command '--cuda-graph-max-bs 64': not a flag of sglang 0.5.20 (its parser refuses it from 0.5.20); "
         "allowed: leave it out, or engine.version before 0.5.20"),
        ({"name": "sglang", "version": "0.5.13", "command": "sglang serve --cuda-graph-max-bs-decode 64"},
         "engine.command '--cuda-graph-max-bs-decode 64': not a flag of sglang 0.5.13 (it came in 0.5.14); allowed: "
         "leave it out, or engine.version 0.5.14 or later"),
        ({"name": "sglang", "version": "0.5.16", "cuda_graph_max_bs": 64, "cuda_graph_max_bs_decode": 32},
         "engine.cuda_graph_max_bs: 64 contradicts engine.cuda_graph_max_bs_decode 32 (one setting, its old and new "
         "spelling); allowed: give one of them, or the same value"),
        ({"name": "sglang", "version": "0.5.16", "command": "sglang serve --cuda-graph-max-bs=0"},
         "engine.command '--cuda-graph-max-bs=0': 0 is not allowed; allowed: a whole number >= 1"),
    ]
    for engine, message in cases:
        with pytest.raises(ConfigError) as err:
            scenario(engine)
        assert str(err.value) == message
    given = scenario({"name": "sglang", "version": "0.5.5.post1",
                      "command": "python -m sglang.launch_server --model-path m --cuda-graph-max-bs 32 "
                                 "--disable-cuda-graph"})
    # 512 + 12,288 + 2 x 32 + 128 = 12,992 MiB: 0.5.5 reserves the decode graphs it does not run
    assert given.cost_model.overhead.graph_max_seqs == 0 and given.kv_cache.gpu_memory_utilization == 0.841


def test_vllms_num_gpu_blocks_override_sets_its_kv_blocks_whatever_the_memory_holds():
    # V0 llm_engine.py _initialize_kv_caches, V1 kv_cache_utils.py may_override_num_blocks: num_blocks = the override
    from sim.run import simulate
    assert scenario({"name": "vllm", "version": "0.11.0"}).kv_cache.capacity_tokens is None
    # (max_model_len 1,024: vLLM does not start with a KV cache that cannot hold one request of max_model_len)
    v1 = scenario({"name": "vllm", "version": "0.11.0", "num_gpu_blocks_override": 100, "max_model_len": 1024})
    v0 = scenario({"name": "vllm", "version": "0.6.0", "command": "vllm serve m --num-gpu-blocks-override 100 "
                   "--max-model-len 1024"})
    wide = scenario({"name": "vllm", "version": "0.19.0", "num_gpu_blocks_override": 100, "block_size": 32,
                     "max_model_len": 1024})
    assert (v1.kv_cache.capacity_tokens, v0.kv_cache.capacity_tokens, wide.kv_cache.capacity_tokens) == (1600, 1600,
                                                                                                          3200)
    assert any("--num-gpu-blocks-override 100: 1,600 KV tokens" in n for n in v1.engine.notes)
    # 1,600 tokens hold two of the base workload's 600-token requests: they outgrow it and preempt, where the
    # memory's own pool (hundreds of thousands of tokens) never does
    assert simulate(v1).summary["preemptions"] > 0
    assert simulate(scenario({"name": "vllm", "version": "0.11.0"})).summary["preemptions"] == 0
    gpt_oss = {"hf_config": str(Path(__file__).parents[2] / "sim" / "model" / "configs" / "gpt-oss-20b.json")}
    with pytest.raises(ConfigError, match=r"^engine.num_gpu_blocks_override: 100 is not modelled for .*sliding-window"):
        scenario({"name": "vllm", "version": "0.11.0", "num_gpu_blocks_override": 100}, model=gpt_oss,
                 quantization={"weights": "mxfp4"})


def test_vllms_kv_cache_memory_bytes_holds_whole_blocks_of_its_bytes_a_gpu():
    # V1's gpu_worker.py determine_available_memory returns kv_cache_memory_bytes (0.10.2+): Llama-3.1-8B keeps
    # 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 128 KiB a token, so 20 GiB is 163,840 tokens; an fp8 cache
    # twice that; two pipeline stages, 16 layers each, twice again; under TP 2 each GPU keeps half a token's KV
    gib20 = 20 << 30
    plain = scenario({"name": "vllm", "version": "0.11.0", "kv_cache_memory_bytes": gib20})
    assert plain.kv_cache.capacity_tokens == 163_840
    assert any("--kv-cache-memory-bytes 21474836480: 163,840 KV tokens" in n for n in plain.engine.notes)
    fp8 = scenario({"name": "vllm", "version": "0.11.0", "kv_cache_memory_bytes": gib20, "kv_cache_dtype": "fp8"})
    staged = scenario({"name": "vllm", "version": "0.11.0", "kv_cache_memory_bytes": gib20,
                       "pipeline_parallel_size": 2})
    split = scenario({"name": "vllm", "version": "0.11.0", "kv_cache_memory_bytes": gib20, "tensor_parallel_size": 2})
    assert (fp8.kv_cache.capacity_tokens, staged.kv_cache.capacity_tokens, split.kv_cache.capacity_tokens) == (
        2 * 163_840, 2 * 163_840, 2 * 163_840)
    odd = scenario({"name": "vllm", "version": "0.34.0", "kv_cache_memory_bytes": gib20 + 100})  # 64-token blocks
    assert odd.kv_cache.capacity_tokens == 163_840 and odd.kv_cache.transient_margin is None
    both = scenario({"name": "vllm", "version": "0.11.0", "kv_cache_memory_bytes": gib20, "num_gpu_blocks_override": 9,
                     "max_model_len": 144})
    assert both.kv_cache.capacity_tokens == 9 * 16  # the block override is applied last, as vLLM applies it
    for engine, words in (({"version": "0.10.1.1"}, "not a flag of vllm 0.10.1.1 (it came in 0.10.2)"),
                          ({"version": "0.11.0", "kv_cache_memory_bytes": 1000}, "1000 holds no 16-token block")):
        with pytest.raises(ConfigError, match=re.escape(f"engine.kv_cache_memory_bytes: {words}")):
            scenario({"name": "vllm", "kv_cache_memory_bytes": 10**9, **engine})


@pytest.mark.parametrize("gpu, engine, result", [
    ("h100-sxm", {"version": "0.5.5.post1", "attention_backend": "fa3"}, "fa3"),
    ("h200", {"version": "0.5.5.post1", "command": "python3 -m sglang.launch_server --attention-backend=fa3"}, "fa3"),
    ("b200", {"version": "0.5.14", "attention_backend": "trtllm_mha"}, "trtllm_mha"),
    ("l40s", {"version": "0.3.6", "attention_backend": "flashinfer"}, "flashinfer"),
    ("h100-sxm", {"version": "0.5.5.post1", "attention_backend": "triton"},
     "engine.attention_backend: 'triton' is not modelled (the SGLang tables of h100-sxm measured fa3 attention); "
     "allowed: fa3, or leave it out"),
    ("a100-80gb", {"version": "0.5.5.post1", "attention_backend": "flashinfer"},
     "engine.attention_backend: 'flashinfer' is not modelled (no SGLang attention kernel is measured on a100-80gb); "
     "allowed: leave it out"),
    ("h100-sxm", {"version": "0.4.3", "command": "python3 -m sglang.launch_server --attention-backend fa3"},
     "engine.command '--attention-backend fa3': 'fa3' is not a value of sglang 0.4.3's --attention-backend (it came "
     "in 0.4.4.post2); allowed: another value, or engine.version 0.4.4.post2 or later"),
    ("h100-sxm", {"version": "0.3.0", "attention_backend": "fa3"},
     "engine.attention_backend: not a flag of sglang 0.3.0 (it came in 0.3.1); allowed: leave it out, or "
     "engine.version 0.3.1 or later"),
])
def test_sglangs_attention_backend_is_the_kernel_its_tables_measured_or_refused(gpu, engine, result):
    import json
    from sim.cost.measured import tables_dir
    if result in ("fa3", "trtllm_mha", "flashinfer"):
        notes = scenario({"name": "sglang", **engine}, hardware={"gpu": gpu}).engine.notes
        assert any(f"--attention-backend {result}, the kernel the SGLang tables of {gpu} measured" in n for n in notes)
        meta = json.loads((tables_dir(gpu, "sglang") / "meta.json").read_text())["tables"]
        assert meta["context_attention"]["kernels"]["bf16"] == meta["generation_attention"]["kernels"]["bf16"] == result
    else:
        with pytest.raises(ConfigError) as err:
            scenario({"name": "sglang", **engine}, hardware={"gpu": gpu})
        assert str(err.value) == result


@pytest.mark.parametrize("version, gpu, model, default", [
    ("0.4.4.post3", "h200", "llama-3.1-8b", "flashinfer"),  # before 0.4.5.post1: FlashInfer for MHA on every GPU
    ("0.4.5", "h100-sxm", "llama-3.1-8b", "flashinfer"),
    ("0.4.4.post3", "h200", "deepseek-v2-lite", "triton"),  # an MLA model: Triton
    ("0.3.0", "a100-80gb", "llama-3.1-8b", "flashinfer"),
    ("0.4.5.post1", "h100-sxm", "llama-3.1-8b", None),  # fa3 on Hopper, the kernel the tables measured
    ("0.4.5.post3", "h200", "deepseek-v2-lite", None),
    ("0.4.0", "l40s", "llama-3.1-8b", None),  # L40S's SGLang tables measured FlashInfer itself
    ("0.3.0", "h100-sxm", "deepseek-v2-lite", None),  # 0.3.x's MLA (--enable-mla) not read
])
def test_sglang_says_where_its_default_attention_kernel_is_not_the_one_its_tables_measured(version, gpu, model,
                                                                                          default):
    # model_executor/model_runner.py and server_args.py in the sdists of 0.3.0-0.4.10.post2: FlashInfer (an MLA model:
    # Triton) by default until 0.4.5.post1 made FA3 the default on Hopper
    notes = scenario({"name": "sglang", "version": version}, model=model, hardware={"gpu": gpu}).engine.notes
    said = [n for n in notes if "by default (fa3 on Hopper from 0.4.5.post1" in n]
    if default is None:
        assert not said
    else:
        assert len(said) == 1 and f"runs {default} " in said[0] and f"tables of {gpu} measured" in said[0]
    given = scenario({"name": "sglang", "version": "0.4.5", "attention_backend": "fa3"}).engine.notes
    assert not any("by default (fa3" in n for n in given)  # a kernel named on the command line is its own note


def test_sglangs_max_total_tokens_caps_its_kv_pool_and_its_request_pool_as_each_version_sizes_them():
    # model_runner.py: capacity = min(profiled, given), page-aligned; max_running_requests = min(capacity // 2,
    # max_num_reqs), max_num_reqs = min(max(tokens / context_len x 512, 2048), 4096 (0.3.0: 5120)) of the capped
    # tokens in 0.3.0 and from 0.5.10, of the profiled ones in 0.4.6-0.5.9
    profiled = scenario({"name": "sglang", "version": "0.5.5.post1"}, model="llama-2-7b").kv_cache.capacity_tokens
    assert profiled is None  # no cap: the pool is what the memory holds
    mid = scenario({"name": "sglang", "version": "0.5.5.post1", "max_total_tokens": 20000}, model="llama-2-7b")
    new = scenario({"name": "sglang", "version": "0.5.13", "max_total_tokens": 20000}, model="llama-2-7b")
    old = scenario({"name": "sglang", "version": "0.3.0", "max_total_tokens": 20000}, model="llama-2-7b")
    assert mid.kv_cache.capacity_tokens == new.kv_cache.capacity_tokens == old.kv_cache.capacity_tokens == 20000
    # Llama 2's 4,096-token context: the profiled ~100k tokens give max_num_reqs 4096; 20,000 give 2,500
    assert mid.scheduler.max_num_seqs == 4096  # min(4096, 10,000): sized before the cap
    assert new.scheduler.max_num_seqs == 2500  # min(2500, 10,000)
    assert old.scheduler.max_num_seqs == 2499  # min(10,000, 2500 - 1)
    tight = scenario({"name": "sglang", "version": "0.5.5.post1", "max_total_tokens": 3000}, model="llama-2-7b")
    assert tight.scheduler.max_num_seqs == 1500  # half the capped tokens
    paged = scenario({"name": "sglang", "version": "0.5.13", "max_total_tokens": 100_001, "page_size": 16})
    assert paged.kv_cache.capacity_tokens == 100_000
    huge = scenario({"name": "sglang", "version": "0.5.13", "max_total_tokens": 10**8})
    assert 300_000 < huge.kv_cache.capacity_tokens < 10**8  # never raised: the profiled value
    assert any("above the" in n and "the profiled value is used" in n for n in huge.engine.notes)
    # the prefill CUDA graphs stop at it (0.5.10+): 38 sizes up to 1,024 tokens, 304 MiB instead of 58's 464
    graphs = scenario({"name": "sglang", "version": "0.5.13", "max_total_tokens": 1024})
    assert graphs.kv_cache.gpu_memory_utilization == round((81559 - 13440 - 304) / 81559, 3) == 0.831
    with pytest.raises(ConfigError, match=r"^engine.max_total_tokens: 0 is not allowed; allowed: a whole number >= 1$"):
        scenario({"name": "sglang", "version": "0.5.13", "max_total_tokens": 0})
    gpt_oss = {"hf_config": str(Path(__file__).parents[2] / "sim" / "model" / "configs" / "gpt-oss-20b.json")}
    with pytest.raises(ConfigError, match=r"^engine.max_total_tokens: 50000 is not modelled for .*own sliding-window "
                                          r"pool"):
        scenario({"name": "sglang", "version": "0.5.13", "max_total_tokens": 50000}, model=gpt_oss,
                 quantization={"weights": "mxfp4"})


def test_sglang_030_takes_its_memory_fraction_from_tp_and_caps_running_requests_by_half_the_kv():
    # the sglang==0.3.0 wheel: server_args.py mem_fraction_static 0.88 (TP 1), 0.87 (2), 0.85 (4), 0.83 (8);
    # tp_worker.py max_running_requests = min(KV tokens // 2, max_num_reqs - 1); model_runner.py max_num_reqs =
    # min(max(KV tokens / context_len x 512, 2048), 5120); chunked_prefill_size 8192 on any GPU
    from sim.config.deployment import resolve
    a100 = scenario({"name": "sglang", "version": "0.3.0", "disable_radix_cache": True}, hardware={"gpu": "a100-80gb"})
    assert a100.kv_cache.gpu_memory_utilization == 0.88 and a100.kv_cache.block_size == 1
    assert a100.scheduler.max_num_batched_tokens == 8192 and a100.scheduler.chunked_prefill
    assert not a100.scheduler.mixed_batches
    ratio = a100.scheduler.new_token_ratio  # global_config.py: 0.7, less 0.001 a decode step, down to 0.1
    assert (ratio.init, ratio.min, ratio.decay_steps) == (0.7, 0.1, 600)
    cautious = scenario({"name": "sglang", "version": "0.3.0", "schedule_conservativeness": 2.0}).scheduler
    assert (cautious.new_token_ratio.init, cautious.new_token_ratio.min, cautious.new_token_ratio.decay_steps) == (
        0.7, 0.2, 500)  # 0.3.0 scales the floor, not the start (0.5.x scales the start)
    kv = resolve(a100).kv_capacity_tokens
    assert kv / 131072 * 512 < 2048 and a100.scheduler.max_num_seqs == 2047  # llama-3.1-8b's 128k context
    assert not a100.kv_cache.enable_prefix_caching
    short = scenario({"name": "sglang", "version": "0.3.0", "context_length": 4096}, hardware={"gpu": "a100-80gb"})
    assert short.scheduler.max_num_seqs == 5119  # KV / 4096 x 512 is far above 5120: the clip, less one
    for tp, fraction in ((2, 0.87), (4, 0.85), (8, 0.83)):
        sc = scenario({"name": "sglang", "version": "0.3.0"}, model="llama-3.1-70b",
                      hardware={"gpu": "h100-sxm", "tensor_parallel": tp})
        assert sc.kv_cache.gpu_memory_utilization == fraction
    l4 = scenario({"name": "sglang", "version": "0.3.0"}, hardware={"gpu": "l4"}, model="llama-2-7b")
    assert l4.scheduler.max_num_batched_tokens == 8192  # 0.3.0 has no per-GPU table (0.5.x refuses an L4)
    later = scenario({"name": "sglang", "version": "0.3.6", "enable_torch_compile": True})
    assert any("0.3.0's defaults and scheduling assumed" in n for n in later.engine.notes)
    assert any("--enable-torch-compile" in n and "not modelled" in n for n in later.engine.notes)

def test_trtllm_reserves_whole_sequences_and_sizes_its_cache_from_free_memory():
    sc = scenario({"name": "trtllm", "version": "1.2.0rc1"})
    assert sc.scheduler.kv_reservation == "whole_output" and sc.kv_cache.free_memory_fraction == 0.9
    assert (sc.scheduler.max_num_seqs, sc.scheduler.max_num_batched_tokens, sc.kv_cache.block_size) == (2048, 8192, 32)
    loose = scenario({"name": "trtllm", "version": "1.2.0rc1", "scheduler_policy": "MAX_UTILIZATION",
                      "cuda_graph_batch_sizes": [1, 8, 4]})
    assert loose.scheduler.kv_reservation == "on_demand"
    assert loose.scheduler.rule().cuda_graph_batch_sizes == (1, 4, 8)


def test_trtllm_13_release_candidates_take_the_read_defaults_and_say_so():
    # no 1.3 source on PyPI (stubs); AIConfigurator 0.12.0's trtllm backend states the same fraction and budget
    sc = scenario({"name": "trtllm", "version": "1.3.0rc20"})
    assert (sc.kv_cache.free_memory_fraction, sc.scheduler.max_num_batched_tokens) == (0.9, 8192)
    assert any("1.3.0rc20: no source of it could be read here" in n for n in sc.engine.notes)
    assert not any("could be read here" in n for n in scenario({"name": "trtllm", "version": "1.2.0"}).engine.notes)
    with pytest.raises(ConfigError, match="'1.4.0rc1' is not a trtllm version the preset knows; allowed: 0.14.0 to "
                                          "1.3.x"):
        scenario({"name": "trtllm", "version": "1.4.0rc1"})


def test_the_free_memory_fraction_scales_the_kv_left_after_weights_and_activations():
    from sim.config.deployment import resolve
    full = resolve(validate_scenario({**BASE, "kv_cache": {"free_memory_fraction": 1.0}}))
    part = resolve(validate_scenario({**BASE, "kv_cache": {"free_memory_fraction": 0.5}}))
    assert abs(part.kv_capacity_tokens - full.kv_capacity_tokens / 2) <= 1


def test_the_free_memory_fraction_applies_to_every_pipeline_stage_too():
    from sim.config.deployment import resolve
    base = {**BASE, "model": "llama-3.1-70b", "hardware": {"tensor_parallel": 2, "pipeline_parallel": 2}}
    full = resolve(validate_scenario({**base, "kv_cache": {"free_memory_fraction": 1.0}}))
    part = resolve(validate_scenario({**base, "kv_cache": {"free_memory_fraction": 0.5}}))
    assert abs(part.kv_capacity_tokens - full.kv_capacity_tokens / 2) <= 1


def test_sglangs_new_token_ratio_admits_beside_speculation_and_can_be_set_aside():
    # (SGLang's own speculative rules: tests/unit/test_sglang_speculative.py)
    from sim.run import simulate
    speculation = {"num_speculative_tokens": 3, "draft_cost_ratio": 0.1, "acceptance": {"kind": "fixed", "alpha": 0.7}}
    ratio = scenario({"name": "sglang", "version": "0.5.3"}, speculation=speculation)
    aside = scenario({"name": "sglang", "version": "0.5.3"}, speculation=speculation,
                     scheduler={"new_token_ratio": None})
    assert ratio.scheduler.new_token_ratio is not None and aside.scheduler.new_token_ratio is None
    assert len(simulate(ratio).requests) == len(simulate(aside).requests) == BASE["run"]["num_requests"]


def test_a_scenario_key_overrides_the_preset_and_a_flag_sets_its_key():
    sc = scenario({"name": "vllm", "version": "0.11.0", "max_num_seqs": 64}, scheduler={"max_num_batched_tokens": 512})
    assert sc.scheduler.max_num_seqs == 64 and sc.scheduler.max_num_batched_tokens == 512
    # the preset's CPU terms go to the cost model unless it names its own
    assert sc.cost_model.overhead.engine == "vllm-cudagraph"
    own = scenario({"name": "vllm", "version": "0.11.0"}, cost_model={"kind": "roofline", "step_overhead_s": 0.001})
    assert own.cost_model.overhead is None
    eager = scenario({"name": "vllm", "version": "0.11.0", "enforce_eager": True})
    assert eager.cost_model.overhead.engine == "vllm-eager"


LLAMA2_7B_A100 = {"model": "llama-2-7b", "hardware": {"gpu": "a100-80gb"}}


def test_lmdeploy_turbomind_takes_its_config_ini_and_runs_a_context_pass_before_each_decode_pass():
    # benchmark/benchmark_7b.sh at ebe90bc9: max_context_token_num 4, cache_chunk_size -1, cache_max_entry_count
    # 1000 (> 1: that many 128-token k/v blocks), max_batch_size 128; session_len 4096 + 8 (lmdeploy convert llama2)
    sc = scenario({"name": "lmdeploy", "version": "0.1.0a1", "max_context_token_num": 4, "cache_chunk_size": -1,
                   "cache_max_entry_count": 1000, "max_batch_size": 128}, **LLAMA2_7B_A100)
    s = sc.scheduler
    assert s.rule().context_pass and s.mixed_batches and not s.chunked_prefill
    assert s.rule().describe() == "a context-decode pass in each iteration that admits prompts"
    assert s.max_num_seqs == 128 and s.max_num_batched_tokens == 128 * 4104  # no per-iteration token budget
    assert s.max_model_len == 4096  # session_len 4104, cut to Llama-2's context
    assert (sc.kv_cache.block_size, sc.kv_cache.capacity_tokens) == (128, 1000 * 128)


def test_lmdeploy_sizes_its_blocks_from_the_gpus_total_memory_and_cuts_session_len_to_them():
    # lmdeploy convert's default cache_max_entry_count 0.5 (< 1): 0.5 x 85,899,345,920 B of blocks of
    # 2 x 80 layers x (8 kv heads / TP 4) x 128 tokens x 128 x 2 B = 10,485,760 B: 4,096 blocks per GPU
    sc = scenario({"name": "lmdeploy", "version": "v0.1.0a0", "tp": 4}, model="llama-2-70b",
                  hardware={"gpu": "a100-80gb"})
    assert sc.hardware.tensor_parallel == 4 and sc.scheduler.max_num_seqs == 64  # convert's max_batch_size
    assert sc.kv_cache.capacity_tokens == 4096 * 128
    # 10 blocks hold 1,280 tokens: LlamaV2.cc cuts session_len to them
    small = scenario({"name": "lmdeploy", "version": "0.1.0a1", "cache_max_entry_count": 10, "session_len": 2048},
                     **LLAMA2_7B_A100).scheduler
    assert small.max_model_len == 1280 and small.max_num_batched_tokens == 64 * 1280


@pytest.mark.parametrize("gpu, batch", [("h100-sxm", 1024), ("h200", 1024), ("a100-80gb", 384), ("a100-40gb", 384),
                                        ("l40s", 128), ("b200", 128), ("h800", 1024), ("a800", 384), ("h20", 128)])
def test_lmdeploy_one_pass_turbomind_takes_its_batch_from_the_gpus_name_and_its_budget_from_it(gpu, batch):
    # lmdeploy/utils.py get_max_batch_size (v0.10.0-v0.16.0): a100/a800 384, h100/h800/l20y/h200 1024, else 128;
    # turbomind.cc: a pass's tokens max_prefill_token_num 8192 + max_batch_size
    s = scenario({"name": "lmdeploy", "version": "0.16.0"}, hardware={"gpu": gpu}).scheduler
    assert (s.max_num_seqs, s.max_num_batched_tokens) == (batch, 8192 + batch)
    assert s.chunked_prefill and s.mixed_batches and s.admission == "whole_prompt"
    assert s.preemption.victim == "last_admitted" and s.preemption.mode == "recompute"  # the latest arrivals yield
    assert s.prefill_context_tokens == 131072  # session_len: Llama-3.1-8B's context (context_token_resource.h)
    short = scheduler_of({"name": "lmdeploy", "version": "0.16.0", "session_len": 4096}, gpu)
    assert (short.max_model_len, short.prefill_context_tokens) == (4096, 4096)
    tiny = scheduler_of({"name": "lmdeploy", "version": "0.16.0", "session_len": 100, "max_batch_size": 128}, gpu)
    assert tiny.prefill_context_tokens == 100 * 100  # turbomind.cc: session_len <= max_batch_size is squared
    own = scenario({"name": "lmdeploy", "version": "0.16.0"}, hardware={"gpu": gpu}, scheduler={"max_model_len": 8192})
    assert own.scheduler.prefill_context_tokens == 8192  # the scenario's own length is the session's
    own = scenario({"name": "lmdeploy", "version": "0.12.0", "max_batch_size": 100, "max_prefill_token_num": 1001,
                    "tp": 4}, model="llama-3.1-70b", hardware={"gpu": gpu}).scheduler
    assert (own.max_num_seqs, own.max_num_batched_tokens) == (100, 1104)  # 1101 rounded up to a multiple of TP 4


def scheduler_of(engine: dict, gpu: str):
    return scenario(engine, hardware={"gpu": gpu}).scheduler


def test_lmdeploy_one_pass_turbomind_sizes_its_cache_from_the_memory_free_after_the_weights():
    # turbomind.cc: cache_max_entry_count (0.8) x cudaMemGetInfo's free bytes once the weights are loaded, before the
    # activations: 0.8 x (HBM - weights) in 64-token blocks
    from sim.model.memory import kv_slot_bytes, weight_bytes_per_gpu
    from sim.run import deployment_of
    model, gpu = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
    sc = scenario({"name": "lmdeploy", "version": "0.16.0"})
    assert (sc.kv_cache.block_size, sc.kv_cache.free_memory_fraction) == (64, 0.8)
    free = gpu.hbm_bytes - weight_bytes_per_gpu(model, "bf16", 1)
    slots = int(free * 0.8) // kv_slot_bytes(model, "bf16", 1)
    assert abs(deployment_of(sc).kv_capacity_tokens - slots) <= 64  # whole blocks
    half = scenario({"name": "lmdeploy", "version": "0.16.0", "cache_max_entry_count": 0.4})
    assert deployment_of(half).kv_capacity_tokens == pytest.approx(slots / 2, abs=64)
    # to v0.14.x a count >= 1 is a number of blocks
    blocks = scenario({"name": "lmdeploy", "version": "0.14.0", "cache_max_entry_count": 1000})
    assert blocks.kv_cache.capacity_tokens == 64_000
    int8 = scenario({"name": "lmdeploy", "version": "0.16.0", "quant_policy": 8, "communicator": "cuda-ipc"})
    assert int8.quantization.kv_cache == "int8" and int8.hardware.all_reduce == "custom"
    assert scenario({"name": "lmdeploy", "version": "0.16.0"}).hardware.all_reduce == "nccl"


def test_a_dumped_scenario_validates_to_itself():
    sc = scenario({"name": "sglang", "version": "0.5.3.post3"})
    again = validate_scenario(sc.model_dump(mode="json"))
    assert again == sc


@pytest.mark.parametrize(("engine", "sections", "words"), [
    ({"name": "lmdeploy-turbomind", "version": "0.1.0a1"}, {}, "engine.name: 'lmdeploy-turbomind' is not an engine "
                                                                "preset"),
    ({"name": "lmdeploy", "version": "0.1.0"}, {}, "is not a TurboMind scheduler the lmdeploy preset models"),
    ({"name": "lmdeploy", "version": "0.1.0a2"}, {}, "v0.1.0a2 unified the prefill and decode passes"),
    ({"name": "lmdeploy", "version": "0.2.0"}, {}, "engine.version: '0.2.0' is not a TurboMind scheduler the "
     "lmdeploy preset models; allowed: 0.1.0a0, 0.1.0a1, 0.12.0 to 0.16.x"),
    ({"name": "lmdeploy", "version": "0.17.0"}, {}, "engine.version: '0.17.0' is not a lmdeploy version the preset "
     "knows; allowed: 0.1.0a0, 0.1.0a1, 0.12.0 to 0.16.x"),
    ({"name": "lmdeploy", "version": "0.16.0", "step_length": 1}, {},
     "engine.step_length: not a flag of lmdeploy 0.16.0 (a config.ini key of 0.1.0a"),
    ({"name": "lmdeploy", "version": "0.1.0a1", "quant_policy": 8}, {},
     "engine.quant_policy: not a config.ini key of lmdeploy 0.1.0a1"),
    ({"name": "lmdeploy", "version": "0.15.0", "cache_max_entry_count": 1000}, {},
     "engine.cache_max_entry_count: 1000 is not allowed by lmdeploy 0.15.0; allowed: a fraction of the free GPU "
     "memory in (0, 1"),
    ({"name": "lmdeploy", "version": "0.16.0", "quant_policy": 4}, {}, "engine.quant_policy: 4 is not modelled"),
    ({"name": "lmdeploy", "version": "0.16.0"}, {"quantization": {"kv_cache": "fp8"}},
     "quantization.kv_cache: 'fp8' contradicts engine lmdeploy"),
    ({"name": "lmdeploy", "version": "0.16.0", "quant_policy": 8}, {"quantization": {"kv_cache": "bf16"}},
     "engine.quant_policy: 8 (sets quantization.kv_cache 'int8') contradicts quantization.kv_cache 'bf16'"),
    ({"name": "lmdeploy", "version": "0.16.0", "session_len": 4096}, {"scheduler": {"max_model_len": 2048}},
     "engine.session_len: 4096 contradicts scheduler.max_model_len 2048"),
    ({"name": "lmdeploy", "version": "0.16.0", "communicator": "mpi"}, {},
     "engine.communicator: 'mpi' is not allowed; allowed: nccl, cuda-ipc, native"),
    ({"name": "lmdeploy", "version": "0.1.0a1", "session_len": 2048}, {"scheduler": {"max_model_len": 1024}},
     "engine.session_len: 2048 contradicts scheduler.max_model_len 1024"),
    ({"name": "lmdeploy", "version": "0.1.0a1", "step_length": 2}, {}, "engine.step_length: 2 is not modelled"),
    ({"name": "lmdeploy", "version": "0.1.0a1", "cache_max_entry_count": 0}, {},
     "engine.cache_max_entry_count: 0 is not allowed"),
    ({"name": "lmdeploy", "version": "0.1.0a1", "max_running_requests": 8}, {},
     "engine.max_running_requests: not a flag of the lmdeploy preset"),
    ({"name": "lmdeploy", "version": "0.1.0a1", "max_batch_size": 128}, {"scheduler": {"max_num_seqs": 64}},
     "engine.max_batch_size: 128 contradicts scheduler.max_num_seqs 64"),
    ({"name": "lmdeploy", "version": "0.1.0a1"}, {"scheduler": {"chunked_prefill": True}},
     "context_pass needs chunked_prefill false"),
    ({"name": "vllm", "version": "0.3.0"}, {}, "engine.version: '0.3.0' is not a vllm version"),
    ({"name": "vllm", "version": "0.35.0"}, {}, "engine.version: '0.35.0' is not a vllm version the preset knows; "
     "allowed: 0.6.0 to 0.34.x"),
    ({"name": "sglang", "version": "0.2.9"}, {}, "engine.version: '0.2.9' is not a sglang version the preset knows; "
     "allowed: 0.3.0 to 0.5.x"),
    ({"name": "vllm", "version": "0.9.7"}, {}, "engine.version: '0.9.7' is not a vllm release (PyPI's index on "
     "2026-12-07); allowed: a release of 0.6.0 to 0.34.x, the nearest 0.9.2 and 0.10.0"),
    ({"name": "vllm", "version": 0.11}, {}, "engine.version: 0.11 is not allowed"),
    ({"name": "vllm", "version": "0.11.0", "max_running_requests": 8}, {}, "engine.max_running_requests: not a flag"),
    ({"name": "vllm", "version": "0.9.2", "num_scheduler_steps": 8}, {}, "V1 has no multi-step"),
    ({"name": "vllm", "version": "0.11.0", "num_scheduler_steps": 1}, {},
     "engine.num_scheduler_steps: not a flag of vllm 0.11.0 (its parser refuses it from 0.10.1)"),
    ({"name": "vllm", "version": "0.11.0", "enable_chunked_prefill": False}, {}, "V1 always chunks"),
    ({"name": "vllm", "version": "0.9.2", "async_scheduling": True}, {},
     "engine.async_scheduling: true is not a flag of vLLM 0.9.2; allowed: vLLM 0.10.0 or later"),
    ({"name": "vllm", "version": "0.6.2", "num_scheduler_steps": 8, "enable_chunked_prefill": True}, {},
     "not supported by vLLM 0.6.2; allowed: vLLM 0.6.3 or later"),
    ({"name": "vllm", "version": "0.6.0", "num_scheduler_steps": 10}, {},
     "engine.num_scheduler_steps: 10 is refused by vLLM 0.6.0 with max_model_len 131072 (above 32768 it turns "
     "chunked prefill on"),
    ({"name": "vllm", "version": "0.6.3", "num_scheduler_steps": 8}, {"hardware": {"pipeline_parallel": 2}},
     "with chunked prefill and pipeline_parallel 2 is not supported by vLLM 0.6.3"),
    ({"name": "vllm", "version": "0.11.0", "max_num_seqs": 64}, {"scheduler": {"max_num_seqs": 32}},
     "engine.max_num_seqs: 64 contradicts scheduler.max_num_seqs 32"),
    ({"name": "vllm", "version": "0.11.0", "max_num_seqs": "many"}, {},
     "engine.max_num_seqs: 'many' is not allowed; allowed: an integer"),
    # A flag's value out of its field's bounds is named as the flag the user wrote, and said to be out of bounds
    # before anything it might contradict.
    ({"name": "vllm", "version": "0.11.0", "max_num_seqs": -1}, {"scheduler": {"max_num_seqs": 32}},
     "engine.max_num_seqs: -1 is not allowed; allowed: >= 1"),
    ({"name": "vllm", "version": "0.11.0", "max_num_batched_tokens": 0}, {},
     "engine.max_num_batched_tokens: 0 is not allowed; allowed: >= 1"),
    ({"name": "vllm", "version": "0.11.0", "gpu_memory_utilization": 1.5}, {},
     "engine.gpu_memory_utilization: 1.5 is not allowed; allowed: <= 1"),
    ({"name": "trtllm", "version": "1.2.0rc1", "max_batch_size": 0}, {},
     "engine.max_batch_size: 0 is not allowed; allowed: >= 1"),
    ({"version": "0.11.0"}, {}, "engine.name: missing; allowed: vllm, sglang, trtllm, lmdeploy"),
    ({"name": "sglang"}, {}, "engine.version: missing; allowed: a quoted version string of sglang"),
    ({"name": "trtllm", "version": "1.0.0", "scheduler_policy": "FIFO"}, {}, "engine.scheduler_policy: 'FIFO'"),
    # TensorRT-LLM's KV blocks hold a power of 2 tokens, more than 1 (its docs/source/features/kvcache.md); 48 and 1
    # were taken and priced as blocks it never allocates
    ({"name": "trtllm", "version": "1.2.0rc1", "tokens_per_block": 48}, {},
     "engine.tokens_per_block: 48 is not allowed; allowed: a power of 2 greater than 1"),
    ({"name": "trtllm", "version": "1.2.0rc1", "tokens_per_block": 1}, {},
     "engine.tokens_per_block: 1 is not allowed; allowed: a power of 2 greater than 1"),
    ({"name": "sglang", "version": "0.5.23", "chunked_prefill_size": "big"}, {},
     "engine.chunked_prefill_size: 'big' is not allowed"),
    ({"name": "sglang", "version": "0.3.0", "disable_radix_cache": True, "enable_prefix_caching": True}, {},
     "engine.disable_radix_cache: true contradicts engine.enable_prefix_caching: true"),
    ({"name": "sglang", "version": "0.5.3"}, {"scheduler": {"batching": "static"}},
     "scheduler.batching: 'static' contradicts engine sglang"),
    ({"name": "sglang", "version": "0.5.3", "enable_dp_attention": True, "dp_size": 8}, {},
     "engine.tp_size: missing beside dp_size: 8 with --enable-dp-attention; allowed: SGLang's --tp T"),
    ({"name": "sglang", "version": "0.5.16", "enable_dp_attention": True}, {},
     "engine.enable_dp_attention: true is not modelled for SGLang 0.5.16; allowed: SGLang 0.5.3 to 0.5.13"),
    ({"name": "sglang", "version": "0.3.0", "enable_dp_attention": True}, {}, "engine.enable_dp_attention"),
])
def test_bad_engine_input_is_one_line(engine, sections, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        scenario(engine, **sections)


@pytest.mark.parametrize("name", [[], {"vllm": 1}, 3])
def test_an_engine_name_that_is_not_text_is_refused_in_one_line(name):
    # (a list or a mapping is not hashable: looked up among the presets as it was, it raised a TypeError)
    with pytest.raises(ConfigError) as err:
        scenario({"name": name, "version": "0.11.0"})
    assert str(err.value) == f"engine.name: {name!r} is not an engine preset; allowed: vllm, sglang, trtllm, lmdeploy"


@pytest.mark.parametrize(("name", "meant"), [("TensorRT-LLM", "trtllm"), ("trt_llm", "trtllm"), ("vLLM", "vllm"),
                                             ("SGLang", "sglang"), ("turbomind", None)])
def test_an_engine_named_as_its_project_spells_it_is_offered_the_presets_name(name, meant):
    with pytest.raises(ConfigError) as err:
        scenario({"name": name, "version": "0.11.0"})
    said = f" (did you mean {meant!r}?)" if meant else ""
    assert str(err.value) == (f"engine.name: {name!r} is not an engine preset{said}; allowed: vllm, sglang, trtllm, "
                              "lmdeploy")


@pytest.mark.parametrize(("flag", "said"), [
    ("max-num-seqs", " (did you mean 'max_num_seqs'?)"),  # as the command line spells it
    ("max_num_seq", " (did you mean 'max_num_seqs'?)"),
    ("mem_fraction_static", " (a flag of the sglang preset)"),
    ("max_batch_size", " (a flag of the trtllm and lmdeploy presets)"),
    ("frobnicate", "")])
def test_a_flag_the_preset_does_not_have_is_offered_the_one_meant(flag, said):
    with pytest.raises(ConfigError) as err:
        scenario({"name": "vllm", "version": "0.11.0", flag: 8})
    assert str(err.value).startswith(f"engine.{flag}: not a flag of the vllm preset{said}; allowed: api_server_count, ")


def test_the_cli_refuses_an_unknown_engine_version_in_one_line_and_writes_nothing(tmp_path):
    line = run_refused(tmp_path, {**BASE, "engine": {"name": "vllm", "version": "9.9.9"}})
    assert "engine.version" in line and "9.9.9" in line


def test_a_run_names_its_engine_and_what_the_preset_approximates():
    from sim.run import simulate
    result = simulate(scenario({"name": "vllm", "version": "0.9.2"}))
    assert result.extras["engine"] == "vllm 0.9.2"
    notes = result.extras["engine_notes"]
    assert any("whole prompt's KV blocks are free" in n for n in notes)  # 0.9.2 admits on the first chunk
    assert any("fitted on" in n for n in notes)  # where its CPU terms and front-end come from


def test_a_run_reads_the_notes_kept_when_the_preset_was_applied_and_the_dump_leaves_them_out(monkeypatch):
    import yaml

    from sim.config.engines import presets
    from sim.run import simulate
    sc = scenario({"name": "vllm", "version": "0.9.2"})
    assert any("whole prompt's KV blocks are free" in n for n in sc.engine.notes)
    dumped = sc.to_yaml()
    assert "whole prompt's KV blocks" not in dumped
    assert validate_scenario(yaml.safe_load(dumped)) == sc  # read back, the preset derives the same notes again

    def derive_again(*args, **kwargs):
        raise AssertionError("the preset was derived again")

    monkeypatch.setattr(presets, "_derive", derive_again)
    assert simulate(sc).extras["engine_notes"] == sc.engine.notes



@pytest.mark.parametrize("gpu, message", [
    (-1, r"^hardware\.gpu: -1 is not allowed; allowed: a catalog name or an inline GPUSpec mapping$"),
    ({**get_gpu("h100-sxm").model_dump(), "bf16_flops_per_s": "x"},
     r"^hardware\.gpu\.bf16_flops_per_s: \"x\" is not allowed; allowed: a number$"),
    ({"bf16_flops_per_s": 1e15}, r"^hardware\.gpu\.name: missing; it is required$"),
])
def test_a_preset_refuses_a_gpu_it_cannot_read_in_one_line(gpu, message):
    # the preset derives its defaults from the GPU before validation reads it (found by test_no_traceback's fuzzing)
    with pytest.raises(ConfigError, match=message):
        scenario({"name": "vllm", "version": "0.11.0"}, hardware={"gpu": gpu})


def test_a_gpu_that_is_neither_name_nor_mapping_reads_the_same_with_a_preset_or_without():
    # one field, one wording: the preset's early check and validation's own
    lines = []
    for sections in ({"engine": {"name": "sglang", "version": "0.5.3.post3"}}, {}):
        with pytest.raises(ConfigError) as refused:
            validate_scenario({**BASE, **sections, "hardware": {"gpu": [1]}})
        lines.append(str(refused.value))
    assert lines[0] == lines[1] == ("hardware.gpu: [1] is not allowed; "
                                    "allowed: a catalog name or an inline GPUSpec mapping")


@pytest.mark.parametrize("engine", [{"name": "sglang", "version": "0.5.3.post3"}, {"name": "sglang", "version": "0.4.6"},
                                    {"name": "trtllm", "version": "1.2.0rc1"}])
def test_a_preset_whose_front_end_does_not_queue_says_so_unless_the_user_adds_work_that_queues(engine):
    from sim.config.engines import FRONTEND_CAPACITY_NOTE
    preset = scenario(engine)
    assert preset.frontend.latency_s > 0 and preset.frontend.per_request_s == 0  # the fitted delay alone
    assert FRONTEND_CAPACITY_NOTE in preset.engine.notes
    frontend = {"num_processes": 1, "per_request_s": 0.004, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0,
                "latency_s": 0.03}
    own = scenario(engine, frontend=frontend)
    assert own.frontend.per_request_s == 0.004 and FRONTEND_CAPACITY_NOTE not in own.engine.notes


def test_vllm_0_11_0s_api_server_does_its_measured_work_in_turn():
    """vLLM 0.11.0's V1 API server, run for real (benchmarks/bench_vllm_api_server.py), on each endpoint: 1.57 ms a
    request and 2.18 us a prompt token in on /v1/completions, 3.30 ms and 3.52 us on /v1/chat/completions (its
    template parse apart), 20 us a streamed token out (a loaded server's, its tokens merged into fewer chunks); on its
    one process in event-loop order, the fitted delay beside it."""
    from sim.config.engines import FRONTEND_CAPACITY_NOTE
    preset = scenario({"name": "vllm", "version": "0.11.0"})
    fe = preset.frontend
    assert (fe.per_request_s, fe.per_prompt_token_s, fe.per_output_chunk_s) == (1.57e-3, 2.18e-6, 20e-6)
    assert fe.discipline == "event_loop" and fe.num_processes == 1 and fe.latency_s > 0
    assert FRONTEND_CAPACITY_NOTE not in preset.engine.notes
    assert any("measured by running vLLM 0.11.0's server code (benchmarks/bench_vllm_api_server.py) on "
               "/v1/completions" in n for n in preset.engine.notes)
    chat = scenario({"name": "vllm", "version": "0.11.0"}, workload={**BASE["workload"], "endpoint": "chat"})
    assert (chat.frontend.per_prompt_token_s, chat.frontend.per_output_chunk_s) == (3.52e-6, 20e-6)
    assert any("on /v1/chat/completions, Qwen3's chat template rendered" in n for n in chat.engine.notes)
    for version, measured in (("0.10.1", 1.57e-3), ("0.11.1", 1.57e-3)):  # 0.10.2's and 0.11.0's, lent (below)
        assert scenario({"name": "vllm", "version": version}).frontend.per_request_s == measured


def test_vllm_v1s_memory_profile_holds_its_samplers_copies_of_the_logits():
    # vLLM V1's profiling run samples max_num_seqs rows with top-k and top-p set; FlashInfer's path holds the bf16
    # logits, their fp32 copy, the top-k-masked copy and its softmax: 2 + 4 + 4 + 4 bytes a logit
    from sim.model.memory import LOGIT_BYTES, activation_bytes
    from sim.run import deployment_of
    v1 = scenario({"name": "vllm", "version": "0.11.0"})
    assert v1.kv_cache.sampler_bytes_per_logit == 14 and any("14 bytes a logit" in n for n in v1.engine.notes)
    v0 = scenario({"name": "vllm", "version": "0.6.0"})
    assert v0.kv_cache.sampler_bytes_per_logit == LOGIT_BYTES  # V0's profile: not read
    own = scenario({"name": "vllm", "version": "0.11.0"}, kv_cache={"sampler_bytes_per_logit": 28})
    assert own.kv_cache.sampler_bytes_per_logit == 28  # a user's own (PyTorch's sort-based path) wins
    model = get_model("llama-3.1-8b")
    rows = v1.scheduler.max_num_seqs  # 1,024 on an H100, below the 8,192-token budget
    extra = activation_bytes(model, 8192, rows, logit_bytes=14) - activation_bytes(model, 8192, rows)
    # 14 bytes a logit put the sampling phase (the forward's output and the logits) above the forward's peak, which
    # 4 bytes a logit leave it under: the extra is the sampling phase's excess over the forward
    forward = (2 * 8192 * model.hidden_size + 8192 * 2 * model.ffn_size) * 2
    sampling = 8192 * model.hidden_size * 2 + rows * model.vocab_size * 14
    assert sampling > forward > 8192 * model.hidden_size * 2 + rows * model.vocab_size * 4
    assert extra == sampling - forward
    plain = scenario({"name": "vllm", "version": "0.11.0"}, kv_cache={"sampler_bytes_per_logit": LOGIT_BYTES})
    d, p = deployment_of(v1), deployment_of(plain)
    assert p.kv_capacity_tokens - d.kv_capacity_tokens == pytest.approx(extra / d.kv_bytes_per_token_per_gpu, abs=2)
    with pytest.raises(ConfigError):
        activation_bytes(model, 8192, rows, logit_bytes=0)


def test_sglang_sizes_its_kv_pool_after_the_weights_alone():
    # SGLang's KV pool: the memory free once the weights are loaded, less (1 - mem_fraction_static) of the GPU
    # (model_runner.py profile_max_num_token); its activations run in that remainder, so none come out of the pool
    from sim.model.memory import kv_slot_bytes, weight_bytes_per_gpu
    from sim.run import deployment_of
    model, gpu = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
    for version in ("0.5.3.post3", "0.3.0"):
        s = scenario({"name": "sglang", "version": version})
        assert s.kv_cache.profile_activations is False
        assert any("profile_max_num_token" in n for n in s.engine.notes)
        pool = int(gpu.hbm_bytes * s.kv_cache.gpu_memory_utilization) - weight_bytes_per_gpu(model, "bf16", 1)
        assert deployment_of(s).kv_capacity_tokens == pool // kv_slot_bytes(model, "bf16", 1)
    own = scenario({"name": "sglang", "version": "0.5.3.post3"}, kv_cache={"profile_activations": True})
    assert own.kv_cache.profile_activations is True  # a user's own wins, and the preset says nothing of it
    assert not any("profile_max_num_token" in n for n in own.engine.notes)
    default = scenario({"name": "sglang", "version": "0.5.3.post3"})
    assert deployment_of(own).kv_capacity_tokens < deployment_of(default).kv_capacity_tokens
    # vLLM profiles a forward pass and its sampler before sizing its cache: the activations come out of its budget
    assert scenario({"name": "vllm", "version": "0.11.0"}).kv_cache.profile_activations is True


@pytest.mark.parametrize("engine, flag", [
    ({"name": "vllm", "version": "0.14.1"}, "pipeline_parallel_size"),  # async scheduling off with PP in 0.14.x
    ({"name": "sglang", "version": "0.5.23"}, "pp_size"),  # no prefill CUDA graphs with PP
    ({"name": "trtllm", "version": "1.2.0rc1"}, "pp_size"),
])
def test_the_engines_pipeline_flag_derives_as_the_scenarios_pipeline_parallel(engine, flag):
    base = {**BASE, "model": "llama-3.1-70b"}
    by_key = validate_scenario({**base, "hardware": {"tensor_parallel": 2, "pipeline_parallel": 2}, "engine": engine})
    by_flag = validate_scenario({**base, "hardware": {"tensor_parallel": 2}, "engine": {**engine, flag: 2}})
    assert by_flag.hardware.pipeline_parallel == 2
    assert by_flag.model_dump(exclude={"engine"}) == by_key.model_dump(exclude={"engine"})
    assert by_flag.engine.notes == by_key.engine.notes
    with pytest.raises(ConfigError) as err:
        validate_scenario({**base, "hardware": {"tensor_parallel": 2, "pipeline_parallel": 4},
                           "engine": {**engine, flag: 2}})
    assert str(err.value).startswith(f"engine.{flag}: 2 contradicts hardware.pipeline_parallel 4")


def test_sglangs_pp_size_is_refused_before_it_existed():
    with pytest.raises(ConfigError) as err:
        scenario({"name": "sglang", "version": "0.3.0", "pp_size": 2})
    assert str(err.value).startswith("engine.pp_size: not a flag of sglang 0.3.0 (it came in 0.4.6.post2)")
    # a post release counts: server_args.py has --pp-size from 0.4.6.post2, not in 0.4.6 or 0.4.6.post1
    with pytest.raises(ConfigError, match=r"^engine.pp_size: not a flag of sglang 0.4.6.post1 \(it came in "):
        scenario({"name": "sglang", "version": "0.4.6.post1", "pp_size": 2}, model="llama-3.1-70b",
                 hardware={"pipeline_parallel": 2})
    assert scenario({"name": "sglang", "version": "0.4.6.post2", "pp_size": 2}, model="llama-3.1-70b",
                    hardware={"pipeline_parallel": 2}).hardware.pipeline_parallel == 2


@pytest.mark.parametrize("engine, fp8", [({"name": "vllm", "version": "0.11.0"}, "fp8_e4m3"),
                                         ({"name": "sglang", "version": "0.5.3.post3"}, "fp8_e5m2")])
def test_the_engines_kv_cache_dtype_flag_sets_the_kv_bytes_the_preset_sizes_memory_with(engine, fp8):
    by_key = scenario(engine, quantization={"kv_cache": "fp8"})
    by_flag = scenario({**engine, "kv_cache_dtype": fp8})
    assert by_flag.quantization.kv_cache == "fp8"
    assert by_flag.model_dump(exclude={"engine"}) == by_key.model_dump(exclude={"engine"})
    if engine["name"] == "sglang":  # its request slots follow the KV tokens (8B, H100: 2048 in bf16, 3299 in fp8)
        assert by_flag.scheduler.max_num_seqs > scenario(engine).scheduler.max_num_seqs
    auto = scenario({**engine, "kv_cache_dtype": "auto"})  # the model's own dtype: nothing set
    assert auto.model_dump(exclude={"engine"}) == scenario(engine).model_dump(exclude={"engine"})
    with pytest.raises(ConfigError) as err:
        scenario({**engine, "kv_cache_dtype": fp8}, quantization={"kv_cache": "bf16"})
    assert str(err.value).startswith(f"engine.kv_cache_dtype: {fp8!r} (sets quantization.kv_cache 'fp8') contradicts "
                                     "quantization.kv_cache 'bf16'")
    with pytest.raises(ConfigError) as err:
        scenario({**engine, "kv_cache_dtype": "int4"})
    assert str(err.value).startswith("engine.kv_cache_dtype: 'int4' is not allowed; allowed: auto, ")


@pytest.mark.parametrize("version, parse_ms", [
    ("0.8.1", None), ("0.8.2", 7.5), ("0.9.1", 7.5), ("0.9.2", None), ("0.10.2", None), ("0.11.0", 17.9),
    ("0.11.1", None), ("0.6.0", None),
])
def test_vllm_parses_the_chat_template_per_request_only_in_the_versions_that_do(version, parse_ms):
    # vllm/entrypoints/chat_utils.py of each release: resolve_chat_template_content_format uncached 0.8.2-0.9.1,
    # resolve_chat_template_kwargs uncached in 0.11.0 only (benchmarks/bench_chat_template.py)
    from sim.config.engines import chat_template_parse
    parse = chat_template_parse(parse_version(version), "qwen3", "chat")
    assert (parse.work_s * 1e3 if parse else None) == (pytest.approx(parse_ms) if parse_ms else None)
    assert chat_template_parse(parse_version(version), "qwen3", "completions") is None  # no template rendered
    assert chat_template_parse(parse_version(version), "gpt_oss", "chat") is None  # openai_harmony renders it


GPT_OSS_20B = str(Path(__file__).resolve().parents[2] / "sim" / "model" / "configs" / "gpt-oss-20b.json")


def test_vllm_0110_chat_requests_queue_their_template_parse_on_the_api_server():
    from sim.config.engines import TEMPLATE_PARSES, api_server_work
    parse = TEMPLATE_PARSES[-1]  # 17.9 ms
    intake = api_server_work((0, 11, 0), "vllm", "chat").per_request_s  # 3.30 ms: 0.11.0's chat endpoint
    completions = api_server_work((0, 11, 0)).per_request_s  # 1.57 ms
    chat = {**BASE["workload"], "endpoint": "chat"}
    burst = scenario({"name": "vllm", "version": "0.11.0"}, workload={**chat, "arrival": {"kind": "burst"}})
    assert burst.frontend.per_request_s == intake + parse.work_s and burst.frontend.discipline == "event_loop"
    assert any("parses the chat template again" in n for n in burst.engine.notes)
    closed = scenario({"name": "vllm", "version": "0.11.0"},
                      workload={**chat, "arrival": {"kind": "closed_loop", "num_users": 4, "think_time_s": 0.0}})
    assert closed.frontend.per_request_s == intake + parse.work_s and closed.frontend.discipline == "fifo"
    # no parse: completions (the default endpoint), 0.10.2's chat (its own intake alone), gpt-oss's chat (0.11.0's
    # completions row: openai_harmony renders it, where the chat row was measured through a Jinja template)
    for plain, work in ((scenario({"name": "vllm", "version": "0.11.0"}), completions),
                        (scenario({"name": "vllm", "version": "0.10.2"}, workload=chat),
                         api_server_work((0, 10, 2)).per_request_s),
                        (scenario({"name": "vllm", "version": "0.11.0"}, workload=chat,
                                  model={"hf_config": GPT_OSS_20B}), completions)):
        assert plain.frontend.per_request_s == work
        assert not any("parses the chat template again" in n for n in plain.engine.notes)
    assert any("rendered by openai_harmony" in n for n in plain.engine.notes)  # the last: gpt-oss
    assert any("take the API server's work measured on /v1/completions" in n for n in plain.engine.notes)
    frontend = {"num_processes": 1, "per_request_s": 0.004, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0}
    own = scenario({"name": "vllm", "version": "0.11.0"}, workload=chat, frontend=frontend)
    assert own.frontend.per_request_s == 0.004  # the user's own front-end wins
    assert not any("parses the chat template again" in n for n in own.engine.notes)


def test_vllm_060s_measured_api_server_work_queues_on_its_front_end():
    # benchmarks/bench_vllm_api_server.py ran 0.6.0's own API server and RPC path (and 0.10.2's and 0.11.0's V1 server)
    from sim.config.engines import api_server_work
    work = api_server_work((0, 6, 0))
    burst = scenario({"name": "vllm", "version": "0.6.0"}, workload={**BASE["workload"], "arrival": {"kind": "burst"}})
    fe = burst.frontend
    assert (fe.per_request_s, fe.per_prompt_token_s, fe.per_output_chunk_s, fe.discipline) == (
        work.per_request_s, work.per_prompt_token_s, work.per_output_chunk_s, "event_loop")
    assert any("its API server's own work, measured" in n for n in burst.engine.notes)
    assert not any(n.startswith("front-end: a fitted delay that does not queue") for n in burst.engine.notes)
    chat = scenario({"name": "vllm", "version": "0.6.0"}, workload={**BASE["workload"], "endpoint": "chat"})
    assert chat.frontend.per_request_s == work.per_request_s  # no per-request template parse in 0.6.0
    closed = scenario({"name": "vllm", "version": "0.6.0"},
                      workload={**BASE["workload"], "arrival": {"kind": "closed_loop", "num_users": 4,
                                                                "think_time_s": 0.0}})
    assert closed.frontend.per_request_s == work.per_request_s and closed.frontend.discipline == "fifo"
    v0102 = scenario({"name": "vllm", "version": "0.10.2"}, workload={**BASE["workload"], "arrival": {"kind": "burst"}})
    assert (v0102.frontend.per_request_s, v0102.frontend.per_prompt_token_s, v0102.frontend.per_output_chunk_s,
            v0102.frontend.discipline) == (1.57e-3, 1.99e-6, 23e-6, "event_loop")
    own = scenario({"name": "vllm", "version": "0.6.0"},
                   frontend={"per_request_s": 0.004, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0})
    assert (own.frontend.per_request_s, own.frontend.per_output_chunk_s) == (0.004, 0.0)  # the user's own wins
    assert not any("its API server's own work" in n for n in own.engine.notes)


@pytest.mark.parametrize("version, endpoint, measured", [
    ("0.6.3", "completions", (0, 6, 0)), ("0.7.3", "chat", (0, 6, 0)),  # V0's API server: 0.6.0's
    ("0.8.2", "completions", (0, 8, 4)), ("0.9.0", "completions", (0, 9, 2)),  # V1's: the nearest measured V1
    ("0.8.4", "chat", (0, 10, 2)), ("0.9.2", "chat", (0, 10, 2)), ("0.10.1", "completions", (0, 10, 2)),  # release
    ("0.11.1", "chat", (0, 11, 0)), ("0.12.0", "completions", (0, 13, 0)), ("0.13.0", "chat", (0, 11, 0)),
    ("0.16.0", "completions", (0, 19, 0)), ("0.34.0", "chat", (0, 19, 0))])
def test_a_vllm_version_not_measured_takes_the_nearest_measured_releases_work_of_its_server_kind(version, endpoint,
                                                                                                  measured):
    # its fitted front-end latency (0.6.0's or 0.11.0's fit) was fitted beside measured work, which it now does too
    from sim.config.engines import api_server_work
    from sim.config.engines.engine_work import lent_api_server_work
    assert api_server_work(parse_version(version), "vllm", endpoint) is None
    row = api_server_work(measured, "vllm", endpoint)
    assert lent_api_server_work(version, "vllm", endpoint) == row
    sc = scenario({"name": "vllm", "version": version},
                  workload={**BASE["workload"], "arrival": {"kind": "burst"}, "endpoint": endpoint})
    fe = sc.frontend
    assert (fe.per_prompt_token_s, fe.per_output_chunk_s, fe.discipline) == (
        row.per_prompt_token_s, row.per_output_chunk_s, row.discipline)
    assert fe.per_request_s >= row.per_request_s  # (with 0.8.2-0.9.1's chat-template parse on top)
    said = dotted_version(measured)
    assert any(f"measured by running vLLM {said}'s server code" in n and f"(its own not measured: vLLM {said}'s, the "
               "nearest measured release whose API server is of its kind" in n for n in sc.engine.notes)
    assert not any(n.startswith("front-end: a fitted delay that does not queue") for n in sc.engine.notes)


def test_front_end_work_is_lent_only_where_the_fitted_latency_was_fitted_beside_measured_work():
    # SGLang's fits (0.5.3.post3, 0.3.0) were made without measured work; only 0.5.5.post1's own row is measured
    from sim.config.engines.engine_work import lent_api_server_work
    assert lent_api_server_work("0.5.6.post2", "sglang", "completions") is None
    assert scenario({"name": "sglang", "version": "0.5.6.post2"}).frontend.per_request_s == 0
    assert lent_api_server_work("1.0.0", "trtllm", "completions") is None
    empty = {"engines": {"vllm": {}}}  # no fits: no fitted latency, nothing lent
    assert lent_api_server_work("0.13.0", "vllm", "completions", empty) is None


def test_lent_front_end_work_is_drawn_wider_in_a_band():
    from sim.config.engines import engine_term_spread
    from sim.config.engines.spread import OTHER_RELEASE_WORK_FACTOR, _sigma_of_factor
    own = {t.key: t for t in engine_term_spread(scenario({"name": "vllm", "version": "0.13.0"}))}
    lent = {t.key: t for t in engine_term_spread(scenario({"name": "vllm", "version": "0.12.0"}))}
    for key in ("frontend.per_request_s", "frontend.per_prompt_token_s"):
        assert lent[key].point == own[key].point and "0.12.0, which takes 0.13.0's" in lent[key].source
        assert "which takes" not in own[key].source
        assert lent[key].sigma_log == pytest.approx(math.hypot(own[key].sigma_log,
                                                               _sigma_of_factor(OTHER_RELEASE_WORK_FACTOR)))


@pytest.mark.parametrize("version", [(0, 8, 4), (0, 9, 2), (0, 13, 0)])
def test_a_vllm_release_run_in_turn_with_0110_does_0110s_work_times_its_ratios_on_completions_alone(version):
    # benchmarks/bench_vllm_api_server.py ran 0.13.0's server in one window with 0.11.0's (12-07 04:09), 0.8.4's and
    # 0.9.2's in another (06:09); their chat render was not run, so their chat requests take the nearest measured
    # chat row (lent_api_server_work)
    from sim.config.engines import api_server_work
    from sim.config.engines.engine_work import RATIOS_TO_V0110
    base, work = api_server_work((0, 11, 0)), api_server_work(version)
    for term, ratio in RATIOS_TO_V0110[version].items():
        assert getattr(work, term) == pytest.approx(getattr(base, term) * ratio, rel=1e-12)
    assert work.endpoints == ("completions",) and work.discipline == "event_loop" and work.scaled_from
    assert api_server_work(version, "vllm", "chat") is None and api_server_work(version[:2] + (version[2] + 1,)) is None
    sc = scenario({"name": "vllm", "version": dotted_version(version)},
                  workload={**BASE["workload"], "arrival": {"kind": "burst"}})
    assert (sc.frontend.per_prompt_token_s, sc.frontend.per_output_chunk_s) == (
        work.per_prompt_token_s, work.per_output_chunk_s)
    assert sc.frontend.per_request_s >= work.per_request_s  # (with 0.8.2-0.9.1's chat-template parse on top)
    assert any(f"measured by running vLLM {dotted_version(version)}'s server code (benchmarks/bench_vllm_api_server.py)"
               f" on /v1/completions as {work.scaled_from}:" in n for n in sc.engine.notes)


def test_vllm_0190s_api_server_work_is_0110s_times_the_ratios_measured_side_by_side_and_queues_on_both_endpoints():
    # benchmarks/bench_vllm_api_server.py ran 0.19.0's server in one window with 0.11.0's: its row is 0.11.0's
    # /v1/completions row scaled term by term, for 0.19.x alone, and serves the chat endpoint too (as 0.10.2's)
    from sim.config.engines import V0190_OVER_V0110, api_server_work
    base, work = api_server_work((0, 11, 0)), api_server_work((0, 19, 0))
    for term, ratio in V0190_OVER_V0110.items():
        assert getattr(work, term) == pytest.approx(getattr(base, term) * ratio, rel=1e-12) and ratio != 1.0
    assert work.discipline == "event_loop" and api_server_work((0, 19, 0), "vllm", "chat") == work
    for other in ((0, 18, 0), (0, 19, 1), (0, 20, 0)):
        assert api_server_work(other) is None
    for endpoint in ("completions", "chat"):
        sc = scenario({"name": "vllm", "version": "0.19.0"},
                      workload={**BASE["workload"], "arrival": {"kind": "burst"}, "endpoint": endpoint})
        fe = sc.frontend
        assert (fe.per_request_s, fe.per_prompt_token_s, fe.per_output_chunk_s, fe.discipline) == (
            work.per_request_s, work.per_prompt_token_s, work.per_output_chunk_s, "event_loop")
        assert any(f"as {work.scaled_from}:" in n for n in sc.engine.notes)  # the note says how it was derived
    assert work.scaled_from and not base.scaled_from


def test_sglang_0555s_measured_front_end_work_queues_first_come_first_served_and_other_versions_have_none():
    # benchmarks/bench_sglang_tokenizer_manager.py ran SGLang 0.5.5.post1's own launch_server (its TokenizerManager)
    # on each endpoint: a chat request's work is its own row, not the completions one's
    from sim.config.engines import api_server_work, engine_term_spread
    completions, chat = api_server_work((0, 5, 5), "sglang"), api_server_work((0, 5, 5), "sglang", "chat")
    assert api_server_work((0, 5, 5)) is None  # not vLLM's
    assert chat.per_request_s > completions.per_request_s  # the chat request model and the template render
    for endpoint, work in (("completions", completions), ("chat", chat)):
        burst = scenario({"name": "sglang", "version": "0.5.5.post1"},
                         workload={**BASE["workload"], "endpoint": endpoint, "arrival": {"kind": "burst"}})
        fe = burst.frontend
        assert (fe.per_request_s, fe.per_prompt_token_s, fe.per_output_chunk_s, fe.discipline) == (
            work.per_request_s, work.per_prompt_token_s, work.per_output_chunk_s, "fifo")
        said = {"completions": "on /v1/completions:", "chat": "on /v1/chat/completions, Qwen3's chat template"}
        assert any(n.startswith("SGLang 0.5.5.post1: its HTTP front-end's own work (the TokenizerManager")
                   and said[endpoint] in n and "us a streamed chunk on the way out" in n for n in burst.engine.notes)
    for other in ("0.5.3.post3", "0.5.4.post2", "0.5.6"):  # measured for 0.5.5.post1 alone
        fe = scenario({"name": "sglang", "version": other}).frontend
        assert fe is None or (fe.per_request_s, fe.per_prompt_token_s) == (0, 0)
    spreads = {s.key: s for s in engine_term_spread(scenario({"name": "sglang", "version": "0.5.5.post1"}))}
    assert spreads["frontend.per_request_s"].point == completions.per_request_s
    assert spreads["frontend.per_output_chunk_s"].point == completions.per_output_chunk_s


def test_a_burst_reaches_sglang_0555_one_request_after_another():
    # first come, first served of n pieces of work that arrive together, a + b x L each: the k-th leaves at
    # k x (a + b x L)
    from sim.config.engines import api_server_work
    from sim.run import simulate
    work, n, prompt = api_server_work((0, 5, 5), "sglang"), 20, 500
    sc = scenario({"name": "sglang", "version": "0.5.5.post1"},
                  workload={**BASE["workload"], "arrival": {"kind": "burst"}})
    records = simulate(sc).requests.sort_values("arrival_s")
    each = work.per_request_s + work.per_prompt_token_s * prompt
    assert records["arrival_s"].to_numpy() == pytest.approx([k * each for k in range(1, n + 1)], rel=1e-9)


def test_a_burst_reaches_vllm_060_together_after_every_requests_intake():
    # processor sharing of n pieces of work that arrive together, a + b x L each: every one ends at n x (a + b x L)
    from sim.config.engines import api_server_work
    from sim.run import simulate
    work, n, prompt = api_server_work((0, 6, 0)), 20, 500
    sc = scenario({"name": "vllm", "version": "0.6.0"}, workload={**BASE["workload"], "arrival": {"kind": "burst"}})
    records = simulate(sc).requests
    each = work.per_request_s + work.per_prompt_token_s * prompt
    assert records["arrival_s"].to_numpy() == pytest.approx([n * each] * n, rel=1e-9)


def test_a_burst_of_chat_requests_reaches_vllm_0110_together_after_all_their_parses():
    # processor sharing of n equal pieces of work that arrive together: every one ends at n x the work, here
    # 0.11.0's chat intake of a 500-token prompt and its template parse: 3.30 ms + 500 x 3.52 us + 17.9 ms = 22.96 ms
    from sim.run import simulate
    n = 20
    sc = scenario({"name": "vllm", "version": "0.11.0"},
                  workload={**BASE["workload"], "endpoint": "chat", "arrival": {"kind": "burst"}})
    records = simulate(sc).requests
    assert records["arrival_s"].to_numpy() == pytest.approx([n * 22.96e-3] * n, rel=1e-9)
    assert (records["client_send_s"] == 0).all()


def test_an_install_without_the_fitted_terms_is_refused_not_priced_with_estimates(monkeypatch, tmp_path):
    """The shipped fits unreadable (an install without its data: tests/unit/test_packaging.py) fail in one line."""
    monkeypatch.setattr(fitted, "TERMS_PATH", tmp_path / "engine_terms.json")
    fitted.fitted_table.cache_clear()
    try:
        with pytest.raises(ConfigError, match=r"^engine presets: their fitted terms, .*engine_terms\.json, cannot be "
                                              r"read \(FileNotFoundError\); allowed: an install that ships them"):
            scenario({"name": "vllm", "version": "0.11.0"})
    finally:
        fitted.fitted_table.cache_clear()


@pytest.mark.parametrize(("engine", "version", "first"), [("sglang", "0.4.10.post2", "0.5.0"),
                                                           ("vllm", "0.10.0", "0.10.1")])
def test_a_release_before_its_engine_ran_gpt_oss_refuses_it(engine, version, first):
    """SGLang's models folder gained gpt_oss.py in 0.5.0rc0 (not in 0.4.10.post2's wheel); vLLM's registry in 0.10.1."""
    gpt_oss = {"hf_config": str(Path(__file__).parents[2] / "sim" / "model" / "configs" / "gpt-oss-20b.json")}
    raw = {"model": gpt_oss, "hardware": {"gpu": "h100-sxm"}, "engine": {"name": engine, "version": version},
           "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1.0},
                        "lengths": {"kind": "fixed", "input_tokens": 100, "output_tokens": 10}}}
    with pytest.raises(ConfigError, match=rf"^engine.version: \w+ {version} has no gpt_oss model \(its .+ gained it in "
                                          rf"{first}\); allowed: {first} or later$"):
        validate_scenario(raw)
    raw["engine"]["version"] = "0.5.0rc0" if engine == "sglang" else first
    assert validate_scenario(raw).engine.name == engine


# fp8 weights on a GPU without fp8 tensor cores (A100): each engine's own rule, read in its releases
# (sim/config/engines/vllm.py, sglang.py, trtllm.py): None where it runs them weight-only, else words of why not
@pytest.mark.parametrize(("engine", "version", "model", "block", "refused"), [
    ("vllm", "0.6.0", "llama-3.1-8b", False, None),  # Marlin below SM89 from 0.6.0
    ("vllm", "0.8.5", "llama-3.1-8b", True, "takes block-scaled fp8 weights from 0.9.0"),
    ("vllm", "0.9.0", "llama-3.1-8b", True, None),
    ("vllm", "0.8.5", "mixtral-8x7b", False, "takes fp8 experts from 0.9.0"),
    ("vllm", "0.9.0", "mixtral-8x7b", False, None),
    ("sglang", "0.4.0", "llama-3.1-8b", False, None),  # vLLM's Fp8LinearMethod
    ("sglang", "0.4.0", "llama-3.1-8b", True, "takes no block-scaled weights"),
    ("sglang", "0.4.6", "llama-3.1-8b", False, "only with SGLANG_FORCE_FP8_MARLIN=1"),
    ("sglang", "0.5.1", "llama-3.1-8b", True, None),  # can_auto_enable_marlin_fp8
    ("sglang", "0.5.5.post1", "mixtral-8x7b", False, "fp8 MoE kernels need SM89"),
    ("trtllm", "0.14.0", "llama-3.1-8b", False, "FP8 kernels need SM89 or later"),
    ("trtllm", "1.2.0rc1", "llama-3.1-8b", True, "FP8 kernels need SM89 or later"),
])
def test_fp8_weights_on_a_gpu_without_fp8_cores_run_only_where_the_engine_runs_them(engine, version, model, block,
                                                                                     refused):
    tp = 2 if model == "mixtral-8x7b" else 1
    sections = {"model": model, "hardware": {"gpu": "a100-80gb", "tensor_parallel": tp},
                "quantization": {"weights": "fp8", "fp8_block_scales": block}}
    if refused is None:
        spec = scenario({"name": engine, "version": version}, **sections)
        assert (spec.quantization.weights, spec.quantization.fp8_compute) == ("fp8", False)  # weight-only
        return
    kind = "block-scaled " if block else ""
    with pytest.raises(ConfigError) as err:
        scenario({"name": engine, "version": version}, **sections)
    message = str(err.value)
    assert message.startswith(f"quantization.weights: {kind}fp8 weights on a100-80gb, which has no fp8 tensor cores, "
                              f"are not run by ")
    assert refused in message and "\n" not in message
    assert message.endswith("allowed: bf16 weights, or a GPU with an fp8 rate (h100-sxm, h100-pcie, h100-nvl, h800, h20, "
                            "h200, b200, b300, gb200, gb300, l40s, l40, rtx-pro-6000, l4)")
    # the same weights on a GPU with fp8 tensor cores run (W8A8 where asked)
    sections["hardware"]["gpu"] = "h100-sxm"
    assert scenario({"name": engine, "version": version}, **sections).quantization.weights == "fp8"


def test_fp8_weights_set_by_an_engine_flag_are_refused_in_that_flags_name_and_the_cli_writes_nothing(tmp_path):
    raw = {**BASE, "hardware": {"gpu": "a100-80gb"},
           "engine": {"name": "sglang", "version": "0.4.6", "command": "python -m sglang.launch_server "
                      "--model-path x --quantization fp8"}}
    with pytest.raises(ConfigError, match=r"^engine.command '--quantization fp8': fp8 weights on a100-80gb, which has "
                                          r"no fp8 tensor cores, are not run by SGLang 0.4.6"):
        validate_scenario(raw)
    assert "not run by SGLang 0.4.6" in run_refused(tmp_path, raw)


@pytest.mark.parametrize(("engine", "sections", "rule"), [
    ({"name": "trtllm", "version": "0.14.0"}, {}, "scheduler.kv_reservation 'whole_output' (engine trtllm sets it)"),
    ({"name": "sglang", "version": "0.5.5.post1", "disable_radix_cache": True}, {},
     "scheduler.new_token_ratio (engine sglang sets it)"),
    (None, {"scheduler": {"kv_reservation": "whole_output"}}, "scheduler.kv_reservation 'whole_output'"),
])
def test_a_rule_that_reserves_blocks_with_a_region_per_request_is_refused_in_one_line(engine, sections, rule):
    """(it raised a ValueError from the scheduler's constructor, a traceback, when the run started)"""
    from sim.config.deployment import resolve
    raw = {**BASE, **sections, "kv_cache": {"layout": "contiguous", "reserve": "max_len"}}
    if engine is not None:
        raw["engine"] = engine
    with pytest.raises(ConfigError) as err:
        resolve(validate_scenario(raw))
    assert str(err.value) == (f"kv_cache.layout: 'contiguous' is not modelled with {rule}, which reserves blocks; "
                              "allowed: 'paged'")


@pytest.mark.parametrize(("engine", "gpu", "given", "fp8_compute"), [
    ({"name": "vllm", "version": "0.11.0"}, "h100-sxm", None, True),  # Fp8LinearMethod: W8A8 on SM89+
    ({"name": "sglang", "version": "0.5.5.post1"}, "l40s", None, True),
    ({"name": "trtllm", "version": "1.2.0rc1"}, "h100-sxm", None, True),
    ({"name": "vllm", "version": "0.11.0"}, "a100-80gb", None, False),  # weight-only, by Marlin
    ({"name": "trtllm", "version": "1.2.0rc1"}, "h100-sxm", False, False),  # the scenario's own value wins
    ({"name": "lmdeploy", "version": "0.14.0"}, "h100-sxm", None, False),  # TurboMind's fp8 handling not read
    (None, "h100-sxm", None, False),  # no engine: fp8 weights alone, as asked
])
def test_an_engine_runs_the_scenarios_fp8_weights_w8a8_where_the_gpu_has_fp8_cores(engine, gpu, given, fp8_compute):
    quantization = {"weights": "fp8"} | ({} if given is None else {"fp8_compute": given})
    raw = {**BASE, "hardware": {"gpu": gpu}, "quantization": quantization}
    if engine is not None:
        raw["engine"] = engine
    spec = validate_scenario(raw)
    assert spec.quantization.fp8_compute is fp8_compute
    if engine is not None and engine["name"] != "lmdeploy" and fp8_compute:  # its own FP8 rows price it
        assert spec.cost_model_choice.startswith(f"measured: {engine['name']} kernel tables of {gpu}")


@pytest.mark.parametrize(("version", "weights", "allowed"), [
    ("0.1.0a1", "fp8", "bf16, fp16, int4"), ("0.1.0a1", "int8", "bf16, fp16, int4"),
    ("0.14.0", "int8", "bf16, fp16, int4, fp8, mxfp4"), ("0.16.0", "nvfp4", "bf16, fp16, int4, fp8, mxfp4"),
])
def test_lmdeploy_refuses_weights_its_turbomind_does_not_load(version, weights, allowed):
    """TurboMind's converter formats (lmdeploy.py LMDEPLOY_WEIGHTS): v0.1.0 fp16, bf16 and AWQ's 4-bit; v0.12-v0.16
    those, GPTQ, fp8 in 128-wide blocks and mxfp4. The same scenario with 16-bit weights runs."""
    sections = {"model": "llama-2-7b", "hardware": {"gpu": "h200"}, "quantization": {"weights": weights}}
    with pytest.raises(ConfigError) as err:
        scenario({"name": "lmdeploy", "version": version}, **sections)
    assert str(err.value) == (f"quantization.weights: {weights!r} is not a weight format LMDeploy {version}'s "
                              f"TurboMind loads (its converter's formats); allowed: {allowed}")
    sections["quantization"] = {"weights": "fp16"}
    assert scenario({"name": "lmdeploy", "version": version}, **sections).quantization.weights == "fp16"


@pytest.mark.parametrize("version", ["0.1.0a1", "0.12.0", "0.16.0"])
def test_lmdeploy_turbomind_does_not_speculate(version):
    """v0.12.0 and v0.16.0's async_engine.py warn that TurboMind does not speculate and run it without; v0.1.0a has
    no speculative option. A speculation section there is refused in one line."""
    speculation = {"draft_cost_ratio": 0.1, "acceptance": {"kind": "fixed", "alpha": 0.7}}
    with pytest.raises(ConfigError) as err:
        scenario({"name": "lmdeploy", "version": version}, model="llama-2-7b", speculation=speculation)
    assert str(err.value).startswith(f"speculation: LMDeploy {version}'s TurboMind does not speculate") \
        and str(err.value).endswith("allowed: no speculation section")


def test_a_tree_of_drafts_under_vllm_is_said_to_be_a_what_if():
    tree = {"draft_cost_ratio": 0.1, "num_speculative_tokens": 3, "draft_tree_width": 4, "num_verified_tokens": 8}
    sc = scenario({"name": "vllm", "version": "0.11.0"}, speculation=tree)
    assert sc.speculation.verified_tokens() == 8
    assert any("speculative_token_tree, which is not read here" in note for note in sc.engine.notes)


def test_tensorrt_llms_own_speculative_rules_are_said_to_be_unread():
    speculation = {"draft_cost_ratio": 0.1, "acceptance": {"kind": "fixed", "alpha": 0.7}}
    sc = scenario({"name": "trtllm", "version": "1.0.0"}, speculation=speculation)
    assert any(note.startswith("TensorRT-LLM: its own speculative decoding") for note in sc.engine.notes)
    assert not any("speculative" in note for note in scenario({"name": "trtllm", "version": "1.0.0"}).engine.notes)


def test_mxfp4_weights_on_a_dense_model_are_refused_as_the_weights_not_as_the_presets_padding():
    """(vLLM's preset derived its MXFP4 experts' padding for a model with no experts, and the error named
    quantization.expert_padding, which the scenario never gave)"""
    with pytest.raises(ConfigError, match=r"^quantization.weights: 'mxfp4' stores a mixture of experts' routed experts "
                                          r"\(gpt-oss\), and llama-3.1-8b has none; allowed: "):
        scenario({"name": "vllm", "version": "0.11.0"}, model="llama-3.1-8b", quantization={"weights": "mxfp4"})


@pytest.mark.parametrize(("engine", "sections", "message"), [
    ({"name": "vllm", "version": "0.11.0", "num_gpu_blocks_override": 10**12}, {},
     "engine.num_gpu_blocks_override: 1000000000000 is not allowed; allowed: a whole number >= 1 and <= 33,554,432"),
    ({"name": "sglang", "version": "0.5.5.post1", "max_running_requests": 10**12}, {},
     "engine.max_running_requests: 1000000000000 is not allowed; allowed: <= 1048576"),
    ({"name": "lmdeploy", "version": "0.14.0", "max_batch_size": 10**12}, {},
     "engine.max_batch_size: 1000000000000 is not allowed; allowed: <= 1048576"),
    (None, {"kv_cache": {"capacity_tokens": 10**15}},
     "kv_cache.capacity_tokens: 1,000,000,000,000,000 tokens per replica are 62,500,000,000,000 blocks of 16, more "
     "than ServeSim holds (33,554,432); allowed: at most 536,870,912 tokens"),
    (None, {"kv_cache": {"capacity_tokens": 10_000_000}, "hardware": {"num_replicas": 64}},
     "kv_cache.capacity_tokens: 10,000,000 tokens per replica over 64 replicas are 40,000,000 blocks of 16, more than "
     "ServeSim holds in one run (33,554,432); allowed: at most 8,388,608 tokens per replica at 64 replicas "
     "(kv_cache.capacity_tokens), or fewer replicas (hardware.num_replicas)"),
])
def test_a_pool_or_batch_larger_than_the_simulator_holds_is_refused_before_any_array_is_sized(engine, sections,
                                                                                              message):
    """(each ran out of memory sizing an array by it: a MemoryError traceback, or the host's OOM killer; the pinned
    capacity in the SimPy engine's free list, `sim/kv/block_pool.py`, and with prefix caching the compiled core's)"""
    from sim.config.deployment import resolve
    raw = {**BASE, **sections} | ({"engine": engine} if engine else {})
    with pytest.raises(ConfigError) as err:
        resolve(validate_scenario(raw))
    assert str(err.value) == message


def test_data_parallel_pools_larger_than_the_simulator_holds_together_are_refused_before_any_array_is_sized():
    """(SGLang --dp-size 64 of Llama-3.1-8B over eight B200s each: 64 pools of ~10M one-token pages, each within the
    bound alone; one of their arrays alone needed 64 x 410 MiB, a MemoryError traceback under a 12 GB limit, 12-05)"""
    from sim.kv.paged import MAX_KV_BLOCKS
    raw = {**BASE, "model": "llama-3.1-8b", "hardware": {"gpu": "b200", "tensor_parallel": 8},
           "engine": {"name": "sglang", "version": "0.4.6", "dp_size": 64}}
    with pytest.raises(ConfigError) as err:
        validate_scenario(raw)
    per_replica = int(str(err.value).split(" tokens per replica")[0].split(": ")[1].replace(",", ""))
    assert per_replica <= MAX_KV_BLOCKS < per_replica * 64  # each pool alone would pass; together they do not
    assert str(err.value).endswith(f"allowed: at most {MAX_KV_BLOCKS // 64:,} tokens per replica at 64 replicas "
                                   "(kv_cache.capacity_tokens), or fewer replicas (hardware.num_replicas)")


@pytest.mark.parametrize(("engine", "message"), [
    ({"name": "sglang", "version": "0.3.0", "tp_size": 0}, "engine.tp_size: 0 is not allowed; allowed: >= 1"),
    ({"name": "sglang", "version": "0.4.6", "tp_size": 0}, "engine.tp_size: 0 is not allowed; allowed: >= 1"),
    ({"name": "lmdeploy", "version": "0.14.0", "tp": 0}, "engine.tp: 0 is not allowed; allowed: >= 1"),
    ({"name": "lmdeploy", "version": "0.1.0a1", "cache_block_seq_len": 0},
     "engine.cache_block_seq_len: 0 is not allowed; allowed: >= 1"),
])
def test_a_flag_value_the_scenario_key_refuses_is_refused_before_the_derivation_reads_it(engine, message):
    """(the derivations divided by them or looked them up first: a StopIteration or ZeroDivisionError traceback)"""
    with pytest.raises(ConfigError) as err:
        scenario(engine)
    assert str(err.value) == message


def test_an_sglang_chunk_whose_memory_rule_leaves_nothing_is_refused_in_that_flags_name():
    """(10^12 tokens: the prefill graphs' sizes were listed one by one and ran out of memory; counted, the rule
    reserves more than the GPU has, as SGLang would fail to start)"""
    from sim.config.engines.sglang import _sglang_prefill_graph_sizes
    assert _sglang_prefill_graph_sizes(4096) == 8 + 14 + 8 + 8 + 12  # 4-32/4, 48-256/16, 288-512/32, 576-1024/64, ...
    assert _sglang_prefill_graph_sizes(8192) == 50 + 8  # ... 1280-4096/256, then 4608-8192 by 512
    with pytest.raises(ConfigError, match=r"^engine.chunked_prefill_size: SGLang 0.5.20's memory rule reserves "
                                          r"[\d,]+ MiB of h100-sxm's [\d,]+ \(a 1000000000000-token chunk"):
        scenario({"name": "sglang", "version": "0.5.20", "chunked_prefill_size": 10**12})


def test_prefix_caching_an_engine_turns_on_with_a_contiguous_layout_is_refused_naming_the_engine():
    from sim.config.deployment import resolve
    raw = {**BASE, "kv_cache": {"layout": "contiguous", "reserve": "max_len"},
           "engine": {"name": "vllm", "version": "0.11.0"}}
    with pytest.raises(ConfigError) as err:
        resolve(validate_scenario(raw))
    assert str(err.value) == ("kv_cache.enable_prefix_caching: needs layout 'paged' (on by default in engine vllm); "
                              "allowed: kv_cache.layout 'paged', or enable_prefix_caching false")
    raw["kv_cache"]["enable_prefix_caching"] = False  # the engine's flag off: a region per request runs
    assert resolve(validate_scenario(raw)).kv_capacity_tokens > 0


def test_vllms_long_prefill_token_threshold_caps_a_prompts_chunk_where_its_v1_scheduler_reads_it():
    capped = scenario({"name": "vllm", "version": "0.11.0",
                       "command": "vllm serve m --long-prefill-token-threshold 512"})
    assert capped.scheduler.max_prefill_chunk_tokens == 512 and capped.scheduler.prefill_chunk_cap_when_alone
    assert capped.scheduler.rule().describe() == "a prompt computes at most 512 tokens a step"
    newest = scenario({"name": "vllm", "version": "0.34.0", "long_prefill_token_threshold": 512})
    assert newest.scheduler.max_prefill_chunk_tokens == 512 and not newest.scheduler.prefill_chunk_cap_when_alone
    assert not newest.scheduler.prefill_chunk_cap_fair_share
    adaptive = scenario({"name": "vllm", "version": "0.31.0", "command": "vllm serve m --long-prefill-token-threshold "
                                                                         "512 --long-prefill-token-threshold-adaptive"})
    assert adaptive.scheduler.rule().prefill_chunk_cap_fair_share
    with pytest.raises(ConfigError, match=r"not a flag of vllm 0.30.0 \(it came in 0.31.0\)"):
        scenario({"name": "vllm", "version": "0.30.0", "long_prefill_token_threshold_adaptive": True})
    for version in ("0.8.2", "0.6.3"):  # V1 reads it from 0.8.3; V0 only among concurrent partial prefills
        spec = {"name": "vllm", "version": version, "long_prefill_token_threshold": 512}
        if version == "0.6.3":
            with pytest.raises(ConfigError, match=r"engine.long_prefill_token_threshold: not a flag of vllm 0.6.3 "
                                                  r"\(it came in 0.8.0\)"):
                scenario(spec)
            continue
        sc = scenario(spec)
        assert sc.scheduler.max_prefill_chunk_tokens is None
        assert any("no effect (V1's scheduler reads it from 0.8.3)" in note for note in sc.engine.notes)
    uncapped = scenario({"name": "vllm", "version": "0.11.0", "long_prefill_token_threshold": 0})
    assert uncapped.scheduler.rule().is_default
    with pytest.raises(ConfigError, match="contradict"):
        scenario({"name": "vllm", "version": "0.11.0", "long_prefill_token_threshold": 512},
                 scheduler={"max_prefill_chunk_tokens": 256, "chunked_prefill": True})
    with pytest.raises(ConfigError, match="max_prefill_chunk_tokens needs chunked_prefill true"):
        validate_scenario({**BASE, "scheduler": {"max_prefill_chunk_tokens": 256}})


@pytest.mark.parametrize("version, flags, refused", [
    ("0.11.0", {"max_num_partial_prefills": 1, "max_long_partial_prefills": 1}, None),
    ("0.7.3", {"max_num_partial_prefills": 1}, None),
    ("0.11.0", {"max_num_partial_prefills": 4}, "engine.max_num_partial_prefills: 4 is not modelled; allowed: 1"),
    ("0.26.0", {"max_long_partial_prefills": 2}, "engine.max_long_partial_prefills: 2 is not modelled; allowed: 1"),
    ("0.7.2", {"max_num_partial_prefills": 1}, r"not a flag of vllm 0.7.2 \(it came in 0.7.3\)"),
    ("0.27.0", {"max_long_partial_prefills": 1}, r"not a flag of vllm 0.27.0 \(its parser refuses it from 0.27.0\)"),
])
def test_vllms_partial_prefill_limits_are_taken_at_their_default_only(version, flags, refused):
    # concurrent partial prefills are V0's; V1 refuses any other value (vllm/engine/arg_utils.py, 0.7.3-0.26.x)
    if refused is None:
        default = scenario({"name": "vllm", "version": version})
        given = scenario({"name": "vllm", "version": version, **flags})
        assert given.scheduler == default.scheduler and given.cost_model == default.cost_model
        return
    with pytest.raises(ConfigError, match=refused):
        scenario({"name": "vllm", "version": version, **flags})


def test_vllms_throughput_performance_mode_doubles_the_default_batch_limits_only():
    # vllm/engine/arg_utils.py (0.17.0-0.34.0): "If throughput mode is set, double max_num_batched_tokens and
    # max_num_seqs" where neither is given
    default = scenario({"name": "vllm", "version": "0.20.0"}).scheduler
    throughput = scenario({"name": "vllm", "version": "0.20.0", "command": "vllm serve m --performance-mode "
                                                                           "throughput"}).scheduler
    assert (default.max_num_batched_tokens, default.max_num_seqs) == (8192, 1024)  # an H100's tier
    assert (throughput.max_num_batched_tokens, throughput.max_num_seqs) == (16384, 2048)
    given = scenario({"name": "vllm", "version": "0.20.0", "performance_mode": "throughput", "max_num_seqs": 256})
    assert (given.scheduler.max_num_batched_tokens, given.scheduler.max_num_seqs) == (16384, 256)
    interactive = scenario({"name": "vllm", "version": "0.34.0", "performance_mode": "interactivity"})
    assert interactive.scheduler == scenario({"name": "vllm", "version": "0.34.0"}).scheduler
    assert any("interactivity" in note for note in interactive.engine.notes)
    with pytest.raises(ConfigError, match=r"engine.performance_mode: not a flag of vllm 0.16.0 \(it came in 0.17.0\)"):
        scenario({"name": "vllm", "version": "0.16.0", "performance_mode": "throughput"})
    with pytest.raises(ConfigError, match="engine.performance_mode: 'fast' is not modelled; allowed: balanced"):
        scenario({"name": "vllm", "version": "0.20.0", "performance_mode": "fast"})


@pytest.mark.parametrize("version, runs", [("0.7.3", "V0"), ("0.8.5", "V0 fallback"), ("0.9.2", "V0 fallback"),
                                           ("0.10.0", None), ("0.14.1", None), ("0.16.0", "V1"), ("0.28.0", "V1")])
def test_vllm_runs_a_draft_models_speculation_as_each_release_does(version, runs):
    # V1 ran n-gram, EAGLE, Medusa and MTP drafters only: 0.8-0.9 fall back to V0 for a draft model, 0.10-0.14 refuse
    # it, 0.16 on run it (vllm/engine/arg_utils.py, vllm/v1/spec_decode/draft_model.py)
    draft = {"num_speculative_tokens": 4, "draft_model": "llama-3.1-8b", "acceptance": {"kind": "fixed", "alpha": 0.7}}
    sections = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "tensor_parallel": 4}, "speculation": draft}
    if runs is None:
        with pytest.raises(ConfigError, match=rf"speculation.draft_model: not run by vLLM {version} "):
            scenario({"name": "vllm", "version": version}, **sections)
        ratio = {**draft, "draft_model": None, "draft_cost_ratio": 0.05}  # an EAGLE head, MTP or n-grams: V1
        drafted = scenario({"name": "vllm", "version": version}, **{**sections, "speculation": ratio})
        assert drafted.scheduler.mixed_batches and drafted.scheduler.chunked_prefill
        return
    sc = scenario({"name": "vllm", "version": version}, **sections)
    fell_back = any("speculative decoding by a draft model, which V1 does not run" in n for n in sc.engine.notes)
    assert fell_back is (runs == "V0 fallback")
    assert sc.scheduler.chunked_prefill is (runs == "V1")  # V0: no chunked prefill with speculation


def test_vllm_v1_ignores_disable_frontend_multiprocessing_and_v0_is_refused_it():
    sc = scenario({"name": "vllm", "version": "0.11.0", "disable_frontend_multiprocessing": True})
    assert sc.frontend == scenario({"name": "vllm", "version": "0.11.0"}).frontend
    assert any("--disable-frontend-multiprocessing: ignored by V1" in n for n in sc.engine.notes)
    for version in ("0.6.0", "0.7.3"):
        with pytest.raises(ConfigError, match="engine.disable_frontend_multiprocessing: not modelled for vLLM "
                                              f"{version}'s V0 engine"):
            scenario({"name": "vllm", "version": version, "disable_frontend_multiprocessing": True})
    with pytest.raises(ConfigError, match=r"not a flag of vllm 0\.19\.0"):
        scenario({"name": "vllm", "version": "0.19.0", "disable_frontend_multiprocessing": True})


@pytest.mark.parametrize("flags, message", [
    ({"long_prefill_token_threshold": -1}, "engine.long_prefill_token_threshold: -1 is not allowed; allowed: a whole "
                                           "number >= 0 (0: no cap)"),
    ({"version": "0.34.0", "cache_aware_admission_window": 3},
     "engine.cache_aware_admission_window: 3 is not modelled; allowed: 0 (the default: admission in arrival"),
    ({"num_gpu_blocks_override": 0}, "engine.num_gpu_blocks_override: 0 is not allowed; allowed: a whole number >= 1 "
                                     "and <= 33,554,432"),
])
def test_vllm_number_flags_out_of_range_are_refused_by_the_shared_checks(flags, message):
    with pytest.raises(ConfigError) as err:
        scenario({"name": "vllm", "version": "0.20.0", **flags})
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_vllm_model_impl_takes_vllms_own_implementation_only():
    assert scenario({"name": "vllm", "version": "0.20.0", "model_impl": "vllm"}).scheduler == \
        scenario({"name": "vllm", "version": "0.20.0"}).scheduler
    with pytest.raises(ConfigError, match="engine.model_impl: 'transformers' is not modelled; allowed: auto, vllm"):
        scenario({"name": "vllm", "version": "0.20.0", "model_impl": "transformers"})
    with pytest.raises(ConfigError, match=r"engine.model_impl: not a flag of vllm 0\.7\.1 \(it came in 0\.7\.2\)"):
        scenario({"name": "vllm", "version": "0.7.1", "model_impl": "auto"})


DISAGGREGATED = {"num_replicas": 1, "disaggregation": {"prefill": {"num_replicas": 1}, "decode": {"num_replicas": 1},
                                                      "link": "nvlink4"}}


@pytest.mark.parametrize("engine", [{"name": "vllm", "version": "0.11.0"}, {"name": "sglang", "version": "0.5.5.post1"},
                                    {"name": "trtllm", "version": "1.2.0rc1"}])
def test_what_a_preset_brings_that_disaggregation_lacks_is_named_in_one_line(tmp_path, engine):
    """A preset's front-end and prefix caching beside hardware.disaggregation were refused one at a time, the first as
    "frontend: not allowed with hardware.disaggregation", a key the scenario never wrote."""
    label = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}[engine["name"]]
    raw = {**BASE, "hardware": DISAGGREGATED, "engine": engine}
    assert run_refused(tmp_path, raw) == (
        f"error: hardware.disaggregation: engine {label} {engine['version']} brings its API front-end and prefix "
        "caching, not modelled with a disaggregated deployment yet; allowed: frontend: null and "
        "kv_cache.enable_prefix_caching: false (simulated without them), or a colocated deployment")
    with pytest.raises(ConfigError, match=r"^hardware\.disaggregation: engine \S+ \S+ brings prefix caching, not "
                                          r"modelled .*; allowed: kv_cache\.enable_prefix_caching: false \(simulated "
                                          r"without it\), or a colocated deployment$"):
        scenario(engine, hardware=DISAGGREGATED, frontend=None)
    sc = scenario(engine, hardware=DISAGGREGATED, frontend=None, kv_cache={"enable_prefix_caching": False})
    assert sc.frontend is None and not sc.kv_cache.enable_prefix_caching
    # what the scenario writes itself is its own to answer for: the scenario's checks name it
    with pytest.raises(ConfigError, match=r"^frontend: not allowed with hardware\.disaggregation"):
        scenario(engine, hardware=DISAGGREGATED, kv_cache={"enable_prefix_caching": False},
                 frontend={"per_request_s": 1e-3, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0})


def test_a_scenarios_frontend_null_is_said_where_the_preset_fitted_a_front_end_latency():
    notes = " ".join(scenario({"name": "vllm", "version": "0.11.0"}, frontend=None).engine.notes)
    assert "no front-end (the scenario's frontend: null), so neither its fitted latency" in notes
    assert "front-end latency fitted" not in notes and "API server's capacity is not modelled" not in notes
    notes = " ".join(scenario({"name": "vllm", "version": "0.11.0"}).engine.notes)
    assert "CPU terms and front-end latency fitted" in notes and "frontend: null" not in notes
