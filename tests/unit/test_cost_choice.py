"""The cost model a scenario gets when it names none (sim/config/cost_choice.py, issue 30 item 6): the most accurate
source available, in the issue's order, the same through every way in, and named in the outputs."""

import pytest
import yaml

from sim.config.cost_choice import TIERS, default_cost_model, tier_of
from sim.config.files import build_scenario_set, validate_scenario
from sim.run import make_cost_model

BASE = {"workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                     "lengths": {"kind": "fixed", "input_tokens": 200, "output_tokens": 20}},
        "run": {"num_requests": 10}}


def chosen(**sections):
    sc = validate_scenario({**BASE, **sections})
    return sc.cost_model, sc.cost_model_choice


def test_the_h100_8b_quickstart_setup_gets_its_shipped_whole_step_profile():
    cm, why = chosen()
    assert cm.kind == "calibrated" and cm.overhead.engine == "vllm-cudagraph"
    assert why.startswith("calibrated: shipped whole-step profile h100-sxm/llama-3.1-8b/tp1")


def test_no_profile_falls_to_the_measured_tables_then_the_learned_roofline_then_the_roofline():
    cm, why = chosen(hardware={"gpu": "h100-sxm", "tensor_parallel": 2})  # no shipped tp2 profile of the 8B
    assert cm.kind == "measured" and why.startswith("measured: vllm kernel tables of h100-sxm")
    cm, why = chosen(hardware={"gpu": "l4"}, quantization={"weights": "fp8"})  # no tables for the L4 (fp8 to fit)
    assert cm.kind == "roofline" and cm.efficiencies == "learned" and why.startswith("learned:")
    cm, why = chosen(attention={"kernel": "materialized"}, scheduler={"chunked_prefill": True})
    assert cm.kind == "roofline" and cm.efficiencies == "catalog" and why.startswith("roofline:")


def test_a_quantized_or_speculative_run_skips_the_bf16_profile():
    cm, _ = chosen(quantization={"weights": "fp8", "kv_cache": "fp8", "fp8_compute": True})
    assert cm.kind == "measured"
    # fp8 weights alone are weight-only fp8 (the schema's default), which the tables' W8A8 rows would price too
    # fast: the learned roofline, where the measured model would refuse the scenario it was chosen for
    cm, why = chosen(quantization={"weights": "fp8"})
    assert cm.kind == "roofline" and cm.efficiencies == "learned" and "fp8_compute: false" in why
    make_cost_model(validate_scenario({**BASE, "quantization": {"weights": "fp8"}}))  # builds: no refusal
    cm, _ = chosen(speculation={"num_speculative_tokens": 3, "draft_cost_ratio": 0.1,
                                "acceptance": {"kind": "fixed", "alpha": 0.7}})
    assert cm.kind == "measured"


def test_an_engine_gets_its_own_kernel_tables_and_a_named_cost_model_is_kept():
    cm, why = chosen(engine={"name": "trtllm", "version": "1.2.0rc1"}, hardware={"gpu": "h100-sxm",
                                                                                "tensor_parallel": 2})
    assert cm.kind == "measured" and cm.tables == "trtllm" and "trtllm kernel tables" in why
    sc = validate_scenario({**BASE, "cost_model": {"kind": "roofline"}})
    assert sc.cost_model.kind == "roofline" and sc.cost_model_choice is None


def test_variants_that_name_no_cost_model_share_the_best_tier_all_of_them_have():
    raw = {**BASE, "variants": {"tp1": {}, "tp2": {"hardware": {"tensor_parallel": 2}}}}
    sset = build_scenario_set(raw)
    kinds = {name: sc.cost_model.kind for name, sc in sset.items()}
    assert kinds == {"tp1": "measured", "tp2": "measured"}  # not a profile for one and tables for the other
    alone = build_scenario_set({**BASE, "variants": {"a": {}, "b": {"scheduler": {"max_num_seqs": 8}}}})
    assert {sc.cost_model.kind for _, sc in alone.items()} == {"calibrated"}


def test_a_dumped_scenario_reads_back_equal_and_an_edit_chooses_again():
    sc = validate_scenario(BASE)
    again = validate_scenario(yaml.safe_load(sc.to_yaml()))
    assert again == sc
    edited = yaml.safe_load(sc.to_yaml())
    edited["hardware"]["gpu"] = "l4"  # no profile, no tables there: chosen again, a lower tier
    edited["quantization"]["weights"] = "fp8"  # (to fit its 24 GB)
    moved = validate_scenario(edited)
    assert moved.cost_model.efficiencies == "learned" and tier_of(moved.cost_model_choice) == TIERS.index("learned")


def test_the_choice_is_named_in_the_result():
    from sim.run import simulate
    result = simulate(validate_scenario(BASE))
    assert result.extras["cost_model_label"] == "calibrated + vllm-cudagraph overhead (default)"
    assert result.extras["cost_model_choice"].startswith("calibrated: shipped whole-step profile")
    assert "StepProfileCostModel" in repr(make_cost_model(validate_scenario(BASE)))


@pytest.mark.parametrize("garbage", [{"quantization": {"weights": []}}, {"hardware": {"gpu": {"name": 3}}},
                                     {"hardware": {"tensor_parallel": "two"}}])
def test_malformed_values_do_not_break_the_choice(garbage):
    cm, why = default_cost_model({**BASE, **garbage})
    assert cm["kind"] == "roofline" and why.startswith("roofline")


def test_a_disaggregated_run_names_the_chosen_model_as_a_colocated_one_does():
    # both paths label through sim/run.py cost_model_extras: "(default)" wherever the model was chosen
    from sim.api import load_scenario_set
    from sim.run import simulate
    variants = load_scenario_set("scenarios/disaggregated.yaml").variants
    for name in ("colocated", "disaggregated-1p1d"):
        scenario = variants[name].model_copy(update={"run": variants[name].run.model_copy(
            update={"num_requests": 20})})
        extras = simulate(scenario).extras
        assert extras["cost_model_label"].endswith(" (default)"), (name, extras["cost_model_label"])
        assert extras["cost_model_choice"] == scenario.cost_model_choice


def test_why_the_measured_tables_were_not_taken_is_said_by_the_cli(tmp_path):
    from helpers import servesim
    from sim.config.cost_choice import measured_refused
    _, why = chosen(quantization={"weights": "fp8"})  # weight-only fp8: the tables hold W8A8 rows only
    assert measured_refused(why).startswith("quantization.fp8_compute: false with weights 'fp8'")
    assert measured_refused(chosen()[1]) is None and measured_refused(None) is None  # a profile: nothing refused
    assert measured_refused(chosen(hardware={"gpu": "h100-sxm", "tensor_parallel": 2})[1]) is None  # the tables
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**BASE, "quantization": {"weights": "fp8"}}))
    out = servesim("run", path, "-q", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    printed = " ".join(out.stdout.split())  # (the narrow test console wraps long lines)
    note = f"note: scenario: default cost model: not the measured kernel tables: {measured_refused(why)}"
    assert " ".join(note.split()) in printed and printed.count("default cost model") == 1


def test_an_fp8_scenario_takes_a_whole_step_profile_measured_in_fp8_and_only_that(tmp_path, monkeypatch):
    """`calibrate steps --weights fp8` writes a W8A8 profile (steps/<engine>-fp8): a W8A8 scenario that asks for a
    calibrated model is priced from it, a bf16 one from the bf16 profile beside it, weight-only fp8 from neither; the
    default for W8A8 stays the measured tables (the engines' own fp8 GEMM kernel, not cuBLASLt's)."""
    import json
    import shutil

    from sim.config.deployment import calibrated_profile_dir, gpu_spec, model_spec
    from sim.cost import calibrated
    from sim.cost.profile_meta import check_profile_dtypes
    from sim.errors import ConfigError
    shipped = calibrated.PROFILES_DIR / "h200" / "llama-3.1-8b" / "tp1" / "steps" / "fused"
    base = tmp_path / "h200" / "llama-3.1-8b" / "tp1" / "steps"
    shutil.copytree(shipped, base / "fused")
    shutil.copytree(shipped, base / "fused-fp8")
    meta = json.loads((base / "fused-fp8" / "meta.json").read_text())
    meta.update(weight_dtype="fp8", fp8_compute=True)
    (base / "fused-fp8" / "meta.json").write_text(json.dumps(meta))
    monkeypatch.setattr(calibrated, "PROFILES_DIR", tmp_path)

    def profile_of(**sections):
        sc = validate_scenario({**BASE, "hardware": {"gpu": "h200"}, **sections})
        if sc.cost_model.kind != "calibrated":
            return sc, None
        return sc, calibrated_profile_dir(sc, model_spec(sc), gpu_spec(sc))

    sc, folder = profile_of()
    assert sc.cost_model.kind == "calibrated" and folder.name == "fused"
    w8a8 = {"weights": "fp8", "fp8_compute": True}
    sc, folder = profile_of(quantization=w8a8)
    assert sc.cost_model.kind == "measured" and folder is None
    sc, folder = profile_of(quantization=w8a8, cost_model={"kind": "calibrated"})
    assert folder.name == "fused-fp8"
    make_cost_model(sc)  # builds from the fp8 profile
    sc = validate_scenario({**BASE, "hardware": {"gpu": "h200"}, "quantization": {"weights": "fp8"},
                            "cost_model": {"kind": "calibrated"}})  # weight-only: its GEMMs are not W8A8's
    with pytest.raises(ConfigError, match=r"^quantization.fp8_compute: false is not measured"):
        make_cost_model(sc)
    with pytest.raises(ConfigError, match=r"^quantization.fp8_compute: false is not measured .*allowed: true"):
        check_profile_dtypes(meta, base / "fused-fp8", "fp8", "bf16", fp8_compute=False)
    with pytest.raises(ConfigError, match=r"^quantization.weights: 'bf16' is not measured .*allowed: fp8"):
        check_profile_dtypes(meta, base / "fused-fp8", "bf16", "bf16")


def test_gpt_oss_on_an_a100_gets_vllms_tables_where_vllm_runs_marlin_and_the_learned_roofline_elsewhere():
    # vLLM runs gpt-oss's MXFP4 experts with Marlin on an A100 (its preset says quantization.moe_kernel: marlin),
    # which its A100 tables price from the Marlin rows they hold (borrowed from SGLang's, meta.json); SGLang runs
    # another kernel there, measured nowhere, and a scenario without an engine names no kernel
    from pathlib import Path
    oss = str(Path(__file__).resolve().parents[2] / "sim" / "model" / "configs" / "gpt-oss-20b.json")
    on_a100 = {"model": {"hf_config": oss}, "hardware": {"gpu": "a100-80gb"}}
    cm, why = chosen(**on_a100, engine={"name": "vllm", "version": "0.11.0"})
    assert cm.kind == "measured" and why.startswith("measured: vllm kernel tables of a100-80gb")
    cm, why = chosen(**on_a100, engine={"name": "sglang", "version": "0.5.4.post2"})
    assert cm.kind == "roofline" and cm.efficiencies == "learned" and "only Marlin's MXFP4" in why
    cm, why = chosen(**on_a100)
    assert cm.kind == "roofline" and cm.efficiencies == "learned"
