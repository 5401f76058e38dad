"""Sane values (issue 28, "Sizes" and "Accepted silently, but wrong"): what a sane value check catches is refused
up front, in one line that says what it caught.

Sizes: a run of more requests than MAX_NUM_REQUESTS (a count, or rate x duration with no count), more drafted
tokens than MAX_SPECULATIVE_TOKENS, a plan-pools budget above MAX_POOL_SPLIT_GPUS, integers longer than any
setting (scenario YAML, `--set`, a Hugging Face config.json) and model sizes above MAX_MODEL_DIM. These classes
are open-ended, so hypothesis draws the values; each is refused before anything is sampled or simulated, with
the field and the limit named. Silently wrong: a YAML key given twice, a NaN or infinite GPU price, an unknown
GPU in `plan --gpus`, a draft model with another vocabulary, a whole-step table in micro- or milliseconds or
with rows beyond the model's context.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import small_scenario
from sim.config.files import MAX_INT_DIGITS, build_scenario_set, parse_yaml
from sim.sched.speculative import MAX_SPECULATIVE_TOKENS
from sim.errors import ConfigError
from sim.model.catalog import GPUS, MODELS
from sim.model.specs import MAX_MODEL_DIM
from sim.tools.planner import plan_settings
from sim.tools.pool_split import MAX_POOL_SPLIT_GPUS
from sim.views.cli import main
from sim.workload.generate import MAX_NUM_REQUESTS

ROOT = Path(__file__).resolve().parents[2]
HF = ROOT / "tests" / "fixtures" / "hf"
SHIPPED_STEPS = ROOT / "calibrate" / "profiles" / "h100-sxm" / "llama-3.1-8b" / "tp1" / "steps" / "fused"
SMALL = small_scenario({"slo": {"ttft_s": 1.0}})
# Many examples, each a whole CLI call on one scenario file: function-scoped fixtures (capsys) are reset by hand.
PROPERTY = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def small_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("sane") / "small.yaml"
    path.write_text(yaml.safe_dump(SMALL, sort_keys=False))
    return str(path)


@pytest.fixture(autouse=True)
def narrow_console(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")  # the one line must not wrap on a narrow console


def refused(argv: list[str], capsys, run=main) -> str:
    """The one `error:` line of a command that must exit 2 without a traceback."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        run(argv)
    captured = capsys.readouterr()
    assert exit_info.value.code == 2, (exit_info.value.code, captured.err)
    assert "Traceback" not in captured.err + captured.out
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    return lines[0]


def accepted(argv: list[str], capsys) -> str:
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out


# --- sizes: the requests of one run --------------------------------------------------------------------------

@PROPERTY
@given(n=st.integers(min_value=MAX_NUM_REQUESTS + 1, max_value=10 ** 40))
def test_any_count_above_the_limit_is_refused_naming_the_field_and_limit(n, small_file, capsys):
    line = refused(["validate", small_file, "--set", f"run.num_requests={n}"], capsys)
    assert line.startswith("error: run.num_requests: ") and str(n) in line
    assert f"<= {MAX_NUM_REQUESTS}" in line


@PROPERTY
@given(n=st.integers(min_value=1, max_value=MAX_NUM_REQUESTS))
def test_any_count_up_to_the_limit_is_accepted(n, small_file, capsys):
    assert "valid" in accepted(["validate", small_file, "--set", f"run.num_requests={n}"], capsys)


def test_the_limit_admits_ten_times_the_largest_benchmark():
    assert MAX_NUM_REQUESTS >= 10 * 1_000_000  # benchmarks/bench_engine.py runs 1M requests


@PROPERTY
@given(rate=st.floats(min_value=1e-3, max_value=1e6), factor=st.floats(min_value=1.01, max_value=1e12))
def test_a_duration_with_no_count_is_refused_when_rate_times_duration_exceeds_the_limit(rate, factor, small_file,
                                                                                        capsys):
    duration_s = factor * MAX_NUM_REQUESTS / rate
    line = refused(["validate", small_file, "--set", "run.num_requests=null", "--set", f"run.duration_s={duration_s!r}",
                    "--set", f"workload.arrival.rate_per_s={rate!r}"], capsys)
    assert line.startswith("error: run.duration_s: ") and f"{MAX_NUM_REQUESTS:,}" in line
    assert "run.num_requests" in line  # what to do instead


@PROPERTY
@given(rate=st.floats(min_value=1e-3, max_value=1e6), factor=st.floats(min_value=1e-6, max_value=0.99))
def test_a_duration_with_no_count_within_the_limit_is_accepted(rate, factor, small_file, capsys):
    duration_s = factor * MAX_NUM_REQUESTS / rate
    assert "valid" in accepted(["validate", small_file, "--set", "run.num_requests=null", "--set",
                                f"run.duration_s={duration_s!r}", "--set", f"workload.arrival.rate_per_s={rate!r}"],
                               capsys)


def test_the_issue_cases_are_refused_up_front_and_write_nothing(tmp_path, small_file, capsys):
    out = tmp_path / "out"
    for overrides, words in ((["run.num_requests=10000000000"], ["run.num_requests:", "10000000000", "<= 10000000"]),
                             (["run.num_requests=null", "run.duration_s=1e9"],
                              ["run.duration_s:", "1e+09 s at 5 req/s", "5e+09 requests", "10,000,000"])):
        sets = [a for o in overrides for a in ("--set", o)]
        line = refused(["run", small_file, *sets, "-q", "--out", str(out)], capsys)
        assert all(w in line for w in words), line
        assert not out.exists()


def test_a_schedule_is_integrated_not_averaged(small_file, capsys):
    """A schedule that does not repeat holds its last rate: 1e6 req/s after a quiet first step is far over the
    limit, though the schedule's mean rate over one pass (~1 req/s) times the duration is not."""
    arrival = "{kind: schedule, repeat: false, steps: [{duration_s: 1000000, rate_per_s: 0.001}, " \
              "{duration_s: 1, rate_per_s: 1000000}]}"
    line = refused(["validate", small_file, "--set", f"workload.arrival={arrival}", "--set", "run.num_requests=null",
                    "--set", "run.duration_s=5000000"], capsys)
    assert line.startswith("error: run.duration_s: 5e+06 s at the schedule's rates")


def test_turns_of_a_conversation_count(small_file, capsys):
    prefix = "{kind: multi_turn, turns_mean: 10, think_time_s: 5}"
    base = ["validate", small_file, "--set", f"workload.prefix={prefix}", "--set", "run.num_requests=null"]
    line = refused(base + ["--set", "run.duration_s=300000"], capsys)  # 5 req/s x 10 turns x 3e5 s = 1.5e7
    assert "x 10 turns per conversation" in line and "1.5e+07 requests" in line
    assert "valid" in accepted(base + ["--set", "run.duration_s=150000"], capsys)


def test_a_variant_over_the_limit_is_named(tmp_path, capsys):
    data = small_scenario({"variants": {"long": {"run": {"num_requests": None, "duration_s": 1e8}}}})
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump(data))
    assert refused(["validate", str(path)], capsys).startswith("error: variants.long.run.duration_s: ")


def test_a_rate_set_after_validation_is_checked_before_sampling():
    """The planner and sweeps change a validated scenario's rate: generating its workload checks again."""
    from sim.workload.generate import WorkloadSpec, generate_workload
    spec = WorkloadSpec.model_validate(SMALL["workload"])
    faster = spec.model_copy(update={"arrival": spec.arrival.with_rate(1e6)})
    with pytest.raises(ConfigError, match=r"run\.duration_s: 3600 s at 1e\+06 req/s"):
        generate_workload(faster, seed=0, num_requests=None, duration_s=3600.0, max_context=2048)


# --- sizes: drafted tokens, GPU budgets, integers, model sizes --------------------------------------------------

@PROPERTY
@given(gamma=st.integers(min_value=MAX_SPECULATIVE_TOKENS + 1, max_value=10 ** 30))
def test_more_drafted_tokens_than_the_limit_are_refused(gamma, small_file, capsys):
    line = refused(["validate", small_file, "--set",
                    f"speculation={{draft_cost_ratio: 0.1, num_speculative_tokens: {gamma}}}"], capsys)
    assert line.startswith("error: speculation.num_speculative_tokens: ") and f"<= {MAX_SPECULATIVE_TOKENS}" in line


def test_drafted_tokens_up_to_the_limit_are_accepted(small_file, capsys):
    for gamma in (1, 4, MAX_SPECULATIVE_TOKENS):
        assert "valid" in accepted(["validate", small_file, "--set",
                                    f"speculation={{draft_cost_ratio: 0.1, num_speculative_tokens: {gamma}}}"], capsys)


@PROPERTY
@given(gpus=st.integers(min_value=MAX_POOL_SPLIT_GPUS + 1, max_value=10 ** 9))
def test_plan_pools_refuses_a_budget_above_the_limit_before_simulating(gpus, small_file, capsys):
    line = refused(["plan-pools", small_file, "--gpus", str(gpus), "-q"], capsys)
    assert line.startswith(f"error: --gpus: {gpus} is not allowed") and f"2 to {MAX_POOL_SPLIT_GPUS}" in line


@PROPERTY
@given(digits=st.integers(min_value=MAX_INT_DIGITS + 1, max_value=6000))
def test_an_overlong_integer_in_scenario_yaml_is_refused_with_its_line(digits, tmp_path_factory, capsys):
    path = tmp_path_factory.mktemp("long") / "long.yaml"
    text = yaml.safe_dump(SMALL, sort_keys=False)
    path.write_text(text.replace("seed: 0", "seed: " + "9" * digits))
    line_no = text.splitlines().index("  seed: 0") + 1
    line = refused(["validate", str(path)], capsys)
    assert f"long.yaml' line {line_no}: an integer of {digits:,} digits is not allowed" in line


def test_an_overlong_integer_in_set_is_refused(small_file, capsys):
    line = refused(["validate", small_file, "--set", "run.seed=" + "7" * 5001], capsys)
    assert line == f"error: --set: run.seed: an integer of 5,001 digits is not allowed; allowed: at most " \
                   f"{MAX_INT_DIGITS} digits"


def hf_config(tmp: Path, **changes) -> Path:
    config = json.loads((HF / "llama-3.1-8b.json").read_text())
    text = json.dumps({k: v for k, v in config.items() if k not in changes})
    extra = ", ".join(f'"{k}": {v}' for k, v in changes.items())  # raw JSON: integers of any length
    path = tmp / "config.json"
    path.write_text(text[:-1] + ", " + extra + "}")
    return path


@PROPERTY
@given(key=st.sampled_from(["vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size",
                            "max_position_embeddings", "num_attention_heads"]),
       value=st.one_of(st.integers(min_value=MAX_MODEL_DIM + 1, max_value=10 ** 4000).map(str),
                       st.integers(min_value=101, max_value=6000).map(lambda d: "9" * d),
                       st.sampled_from(["1e30", "1e400", "-1e30"])))
def test_catalog_import_refuses_a_huge_size_naming_the_key(key, value, tmp_path_factory, capsys):
    path = hf_config(tmp_path_factory.mktemp("hf"), **{key: value})
    line = refused(["catalog", "import", str(path)], capsys)
    assert line.startswith(f"error: catalog import: '{path}': {key} = ")
    assert f"allowed: an integer >= 1 and <= {MAX_MODEL_DIM:,} (MAX_MODEL_DIM)" in line and len(line) < 300


def test_the_issue_case_a_5001_digit_integer_in_config_json(tmp_path, capsys):
    path = hf_config(tmp_path, vocab_size="9" * 5001)
    assert "vocab_size = <an integer of 5,001 digits> is not allowed" in refused(["catalog", "import", str(path)],
                                                                                 capsys)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(small_scenario({"model": {"hf_config": "config.json"}})))
    assert refused(["validate", str(scenario)], capsys).startswith("error: model.hf_config: ")


def test_an_inline_model_size_above_the_limit_is_refused(small_file, capsys):
    line = refused(["validate", small_file, "--set",
                    f"model={json.dumps(MODELS['llama-3.1-8b'].model_dump(mode='json') | {'vocab_size': 10 ** 30})}"],
                   capsys)
    assert line.startswith("error: model.vocab_size: ") and f"<= {MAX_MODEL_DIM}" in line


def test_every_catalog_model_is_within_the_size_limit():
    for model in MODELS.values():
        sizes = [v for v in model.model_dump().values() if isinstance(v, int) and not isinstance(v, bool)]
        assert max(sizes) <= MAX_MODEL_DIM


# --- accepted silently, but wrong: duplicate YAML keys ---------------------------------------------------------

DUPLICATES = [
    ("top-level", "name: a\nrun: {seed: 0, num_requests: 20}\nrun: {seed: 1}\n", "key 'run'", 3, 2),
    ("nested", "name: a\nrun:\n  seed: 0\n  num_requests: 5\n  seed: 1\n", "key 'seed'", 5, 3),
    ("flow", "name: a\nslo: {ttft_s: 1, ttft_s: 2}\n", "key 'ttft_s'", 2, 2),
    ("in-a-variant", "name: a\nvariants:\n  x: {run: {seed: 1}}\n  x: {run: {seed: 2}}\n", "key 'x'", 4, 3),
]


@pytest.mark.parametrize("text, key, line_no, first", [c[1:] for c in DUPLICATES], ids=[c[0] for c in DUPLICATES])
def test_a_duplicate_key_is_refused_by_the_cli_with_both_lines(tmp_path, capsys, text, key, line_no, first):
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    line = refused(["validate", str(path)], capsys)
    assert f"dup.yaml' line {line_no}: {key} is given twice in one mapping (first on line {first})" in line


@pytest.mark.parametrize("text, key", [(c[1], c[2]) for c in DUPLICATES], ids=[c[0] for c in DUPLICATES])
def test_a_duplicate_key_is_refused_by_the_dashboard(text, key):
    import sim.views.dashboard as dash
    with pytest.raises(ConfigError) as err:
        dash.parse_scenario_yaml(text, "up.yaml")
    assert "\n" not in str(err.value) and str(err.value).startswith("up.yaml line ") and key in str(err.value)
    with pytest.raises(ConfigError, match="given twice"):
        dash.form_from_yaml(text, "up.yaml")


def test_a_duplicate_key_in_a_set_value_is_refused(small_file, capsys):
    line = refused(["validate", small_file, "--set", "hardware={gpu: h100-sxm, gpu: a100-80gb}"], capsys)
    assert line.startswith("error: --set: hardware: key 'gpu' is given twice")


def test_a_merge_key_may_still_be_overridden():
    """`<<: *base` then an explicit key is YAML's way to override, not a duplicate; also when the merged mapping
    itself merges another (merging rewrites a mapping's pairs in place: the check must see them as written)."""
    text = ("defaults: &arrival {kind: poisson, rate_per_s: 5}\n"
            "workload:\n  arrival: {<<: *arrival, rate_per_s: 7}\n")
    assert parse_yaml(text, "m.yaml")["workload"]["arrival"] == {"kind": "poisson", "rate_per_s": 7}
    nested = "a: &a {k: 1, j: 3}\nx: {base: &b {<<: *a, k: 2}}\nc: {<<: *b, m: 4}\n"
    assert parse_yaml(nested, "n.yaml") == yaml.safe_load(nested)


# --- accepted silently, but wrong: prices, GPU names -----------------------------------------------------------

@pytest.mark.parametrize("price", ["nan", "inf", "NaN", "Infinity"])
def test_a_nan_or_infinite_price_is_refused(tmp_path, small_file, capsys, price):
    line = refused(["plan", small_file, "--price", f"h100-sxm={price}", "-q", "--backend", "serial",
                    "--out", str(tmp_path / "p")], capsys)
    assert line.startswith("error: --price: h100-sxm=") and "a finite number" in line
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("price", [math.nan, math.inf, -1.0])
def test_plan_settings_refuses_a_price_that_would_rank_wrongly(price):
    with pytest.raises(ConfigError, match="--price: h100-sxm="):
        plan_settings(SMALL, prices={"h100-sxm": price})
    assert plan_settings(SMALL, prices={"h100-sxm": 2.5}).prices == {"h100-sxm": 2.5}


@pytest.mark.parametrize("where, value", [("search.prices_per_gpu_hour", "{h100-sxm: .nan}"),
                                          ("hardware.gpu", json.dumps(GPUS["h100-sxm"].model_dump(mode="json")
                                                                      | {"name": "x", "price_per_hour": "nan"}))])
def test_a_nan_price_in_the_scenario_is_refused(small_file, capsys, where, value):
    value = value.replace('"nan"', ".nan")
    line = refused(["validate", small_file, "--set", f"{where}={value}"], capsys)
    assert "nan is not allowed; allowed: a finite number" in line


def test_an_unknown_gpu_in_plan_gpus_is_one_line_listing_the_catalog(tmp_path, small_file, capsys):
    line = refused(["plan", small_file, "--gpus", "h100-sxm,mi300x", "-q", "--backend", "serial",
                    "--out", str(tmp_path / "p")], capsys)
    assert line == f"error: --gpus: unknown gpu 'mi300x'; allowed: {', '.join(GPUS)}"


def test_an_unknown_gpu_in_search_gpus_is_refused_too():
    with pytest.raises(ConfigError, match=r"^search\.gpus: unknown gpu 'h100' \(did you mean 'h100-sxm' or "
                                          r"'h100-pcie' or 'h100-nvl'\?\); allowed: a100-40gb"):
        plan_settings(small_scenario({"slo": {"ttft_s": 1.0}, "search": {"gpus": ["h100", "a100-80gb"]}}))


def test_catalog_gpus_in_any_spelling_are_kept():
    assert plan_settings(SMALL, gpus=["H100_SXM", "a100-80gb"]).gpus == ["H100_SXM", "a100-80gb"]


# --- accepted silently, but wrong: a draft with another vocabulary --------------------------------------------

def test_a_draft_with_another_vocabulary_is_refused_naming_both_sizes(small_file, capsys):
    line = refused(["validate", small_file, "--set", "speculation={draft_model: llama-2-7b}"], capsys)
    assert line == ("error: speculation.draft_model: llama-2-7b has vocab_size 32,000, llama-3.1-8b has 128,256; "
                    "allowed: a draft with the target's vocabulary (the same vocab_size)")


def test_a_draft_with_the_same_vocabulary_is_accepted(small_file, capsys):
    assert "valid" in accepted(["validate", small_file, "--set", "model=llama-2-13b", "--set",
                                "speculation={draft_model: llama-2-7b}"], capsys)
    shipped = build_scenario_set(parse_yaml((ROOT / "scenarios" / "speculative.yaml").read_bytes(), "s"))
    assert all(s.speculation is None or s.speculation.draft_spec().vocab_size == 128256
               for s in shipped.variants.values())


# --- accepted silently, but wrong: whole-step tables ----------------------------------------------------------

GOOD_TABLE = ("kind,prefill_tokens,decode_batch,decode_context,step_s\n"
              "prefill,128,0,0,0.01\ndecode,0,4,512,0.008\ndecode,0,4,2048,0.009\n")


def import_steps(tmp: Path, table: str, *extra: str):
    """argv and main of `python -m calibrate import-steps` for `table` written to tmp."""
    from calibrate.cli import main as calibrate_main
    path = tmp / "table.csv"
    path.write_text(table)
    argv = ["import-steps", str(path), "--model", "llama-3.1-8b", "--tp", "1", "--device-name", "test GPU",
            "--out", str(tmp / "profile"), *extra]
    return argv, calibrate_main


@pytest.mark.parametrize("scale, words", [
    (1e6, ["line 2", "step_s 10000 is more than 600 s for one step (MAX_STEP_S)"]),
    (1e3, ["line 3", "step_s 8 is more than 1 s for a GPU decode step of 4 sequence(s)"]),
], ids=["microseconds", "milliseconds"])
def test_a_table_not_in_seconds_is_refused_naming_column_value_and_unit(tmp_path, capsys, scale, words):
    table = GOOD_TABLE.replace("0.01\n", f"{0.01 * scale:g}\n").replace("0.008\n", f"{0.008 * scale:g}\n") \
        .replace("0.009\n", f"{0.009 * scale:g}\n")
    argv, run = import_steps(tmp_path, table)
    line = refused(argv, capsys, run)
    assert line.startswith("error: TABLE: ") and "table.csv" in line
    assert all(w in line for w in words), line
    assert "allowed: seconds (a table in milliseconds or microseconds: divide its times by 1,000 or 1,000,000)" in line
    assert not (tmp_path / "profile").exists()


def test_a_cpu_table_may_have_slow_decode_steps(tmp_path, capsys):
    table = GOOD_TABLE.replace("0.008\n", "2.5\n").replace("0.009\n", "3.0\n").replace("0.01\n", "4.0\n")
    argv, run = import_steps(tmp_path, table, "--device", "cpu")
    assert run(argv) == 0 and (tmp_path / "profile" / "steps.csv").exists()
    argv, run = import_steps(tmp_path, table)  # the same times from a GPU are milliseconds
    assert "GPU decode step" in refused(argv, capsys, run)


def test_rows_beyond_the_models_context_are_refused(tmp_path, capsys):
    argv, run = import_steps(tmp_path, GOOD_TABLE.replace("4,2048", "4,200000"))
    line = refused(argv, capsys, run)
    assert "line 4: decode_context 200000 is beyond llama-3.1-8b's max_context 131072" in line
    argv, run = import_steps(tmp_path, GOOD_TABLE.replace("prefill,128,", "prefill,140000,"))
    assert "line 2: prefill_context + prefill_tokens 140000 is beyond" in refused(argv, capsys, run)


def test_a_profile_in_microseconds_is_refused_when_a_scenario_uses_it(tmp_path, capsys):
    """The issue's case: the table imported as seconds gave a TPOT of 6,629 s per token."""
    profile = tmp_path / "profile"
    shutil.copytree(SHIPPED_STEPS, profile)
    rows = pd.read_csv(profile / "steps.csv")
    for col in ("step_s", "p20_s", "p80_s"):
        rows[col] *= 1e6
    rows.to_csv(profile / "steps.csv", index=False)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(small_scenario({"cost_model": {"kind": "calibrated", "profile": "profile"}})))
    line = refused(["validate", str(path)], capsys)
    assert line.startswith("error: cost_model.profile: ") and "steps.csv' line 2: step_s 6457.76 is more than" in line


def test_the_shipped_whole_step_profiles_pass_the_checks():
    from sim.cost.steps import load_step_profile
    folders = sorted(p.parent for p in (ROOT / "calibrate" / "profiles").glob("*/*/tp*/steps/*/steps.csv"))
    assert len(folders) >= 10
    for folder in folders:
        load_step_profile(folder)  # raises on a row the checks refuse


@pytest.mark.parametrize("key, value, needle", [
    ("hardware.num_replicas", "5000", "hardware.num_replicas"),
    ("hardware.tensor_parallel", "100000", "hardware.tensor_parallel"),
    ("search.max_replicas", "99999", "search.max_replicas"),
])
def test_replica_and_gpu_counts_beyond_their_limit_are_refused(tmp_path, capsys, key, value, needle):
    from sim.views.cli import main
    with pytest.raises(SystemExit) as exit_info:
        main(["validate", str(Path(__file__).resolve().parents[2] / "scenarios" / "capacity_plan.yaml"), "--set",
              f"{key}={value}"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and needle in err and err.count("\n") == 0, err


def test_a_trace_replay_slowed_beyond_the_limit_is_refused():
    from sim.workload.arrivals import MAX_TIME_SCALE
    from sim.config.files import validate_arrival
    from sim.errors import ConfigError
    with pytest.raises(ConfigError, match="time_scale"):
        validate_arrival({"kind": "trace", "path": "x.csv", "time_scale": MAX_TIME_SCALE * 10})


def test_a_grid_value_the_scenario_reader_refuses_is_refused_in_one_line():
    from sim.errors import ConfigError
    from sim.tools.sweep import parse_grid
    with pytest.raises(ConfigError, match="digits"):
        parse_grid(["scheduler.max_num_seqs=1" + "0" * 200])


@pytest.mark.parametrize("option, value", [("--seeds", "99999999999999999999"), ("--max-replicas", "5000"),
                                           ("--tp", "1,4096"), ("--pp", "0")])
def test_plan_options_beyond_their_limits_are_refused_before_planning(tmp_path, capsys, option, value):
    from sim.views.cli import main
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", str(Path(__file__).resolve().parents[2] / "scenarios" / "capacity_plan.yaml"), option, value,
              "-q", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and option in err and err.count("\n") == 0, err
    assert not (tmp_path / "o").exists()
