"""`servesim sweep --band` (issue 31): each point's row gets <metric>_lo / <metric>_hi, the band is part of the
sweep's identity (a table of another band, or of none, is not resumed), and a resumed banded sweep reruns nothing."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

import sim.tools.sweep as sweep_mod
from helpers import small_scenario
from sim.bands import BAND_METRICS, simulate_with_band
from sim.config.files import validate_scenario
from sim.tools.sweep import apply_point, variant_raw
from sim.views.cli import main

SMALL = small_scenario({"run": {"num_requests": 40}})


def _run_cli(capsys, *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
        raise SystemExit(0)
    return exit_info.value.code, capsys.readouterr().err.strip()


def _sweep(tmp_path, capsys, out, *extra: str) -> tuple[int, str]:
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    return _run_cli(capsys, "sweep", str(path), "--grid", "rate=4,16", "--out", str(out), "--backend", "serial",
                    "-q", *extra)


def test_a_banded_sweep_has_lo_and_hi_columns_equal_to_each_points_band(tmp_path, capsys):
    out = tmp_path / "sweep.csv"
    code, err = _sweep(tmp_path, capsys, out, "--band", "90")
    assert code == 0, err
    frame = pd.read_csv(out)
    assert len(frame) == 2 and (frame["band_level"] == 0.9).all() and (frame["band_replications"] == 19).all()
    for name in BAND_METRICS:
        assert (frame[f"{name}_lo"] <= frame[f"{name}_hi"]).all(), name
    assert (frame["e2e_s_p99_lo"] < frame["e2e_s_p99_hi"]).all()
    # each row's edges are the band of that point, as `servesim run --band` gives it
    raw = dict(SMALL, run={**SMALL["run"], "band": 90.0})
    for rate, row in zip((4, 16), frame.to_dict("records")):
        scenario = validate_scenario(apply_point(variant_raw(raw, None), {"rate": rate}))
        band = simulate_with_band(scenario).summary["band"]
        assert [row["ttft_s_p99_lo"], row["ttft_s_p99_hi"]] == pytest.approx(band["ttft_s_p99"], rel=1e-12)
        assert [row["goodput_rps_lo"], row["goodput_rps_hi"]] == pytest.approx(band["goodput_rps"], rel=1e-12)
    # a heavier load moves the band up
    assert frame["e2e_s_p99_hi"].iloc[1] > frame["e2e_s_p99_hi"].iloc[0]


def test_a_banded_sweep_resumes_only_with_the_same_band(tmp_path, capsys, monkeypatch):
    out = tmp_path / "sweep.csv"
    assert _sweep(tmp_path, capsys, out, "--band", "90")[0] == 0
    first = pd.read_csv(out)
    calls = []
    monkeypatch.setattr(sweep_mod, "run_point", lambda task: calls.append(task) or {})
    code, err = _sweep(tmp_path, capsys, out, "--band", "90")
    assert code == 0 and calls == []
    pd.testing.assert_frame_equal(first, pd.read_csv(out))
    for other in ((), ("--band", "80")):  # no band, another band: another sweep
        code, err = _sweep(tmp_path, capsys, out, *other)
        assert code == 2 and err.count("\n") == 0 and "different scenario" in err
    assert calls == []


def test_a_sweep_without_a_band_has_no_band_columns(tmp_path, capsys):
    out = tmp_path / "sweep.csv"
    assert _sweep(tmp_path, capsys, out)[0] == 0
    frame = pd.read_csv(out)
    assert not [c for c in frame.columns if c.endswith(("_lo", "_hi")) or c.startswith("band_")]


def test_a_bad_band_on_a_sweep_is_one_line_and_exit_2(tmp_path, capsys):
    code, err = _sweep(tmp_path, capsys, tmp_path / "sweep.csv", "--band", "150")
    assert code == 2 and err.count("\n") == 0 and "run.band: 150.0 is not allowed; allowed: < 100" in err
    assert not (tmp_path / "sweep.csv").exists()
