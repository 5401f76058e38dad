"""The Streamlit page (AppTest) and files (issue 28): an uploaded scenario reaches no file of the server, a
trace with mixed time zones is one error on the page, and the page's stores leave a user's files as they were."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

pytest.importorskip("streamlit", reason="the dashboard needs the ui extra (streamlit)")
from streamlit.testing.v1 import AppTest  # noqa: E402

from helpers import APP_RUN_TIMEOUT_S, small_scenario  # noqa: E402

APP = str(Path(__file__).resolve().parents[2] / "app.py")
AZURE = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
         + "".join(f"2023-11-16 18:15:{s:02d}.5000000,{200 + s},{10 + s}\n" for s in range(40))).encode()
SMALL = small_scenario({"name": "uploaded", "run": {"num_requests": 40}})


def started(monkeypatch, uploads: Path) -> AppTest:
    monkeypatch.setenv("SERVESIM_UPLOAD_DIR", str(uploads))
    at = AppTest.from_file(APP, default_timeout=APP_RUN_TIMEOUT_S)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def upload(at: AppTest, *files: tuple[str, bytes]) -> AppTest:
    at.file_uploader(key="scenario_upload").set_value([(name, data, "application/octet-stream")
                                                      for name, data in files])
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def test_an_uploaded_scenario_naming_a_server_file_is_one_error_and_keeps_the_form(monkeypatch, tmp_path):
    at = started(monkeypatch, tmp_path / "uploads")
    before = at.code[0].value
    raw = {**SMALL, "model": {"hf_config": "/etc/passwd"}}
    upload(at, ("evil.yaml", yaml.safe_dump(raw).encode()))
    assert errors(at) == ["Could not load the scenario: model.hf_config: '/etc/passwd' is not a file uploaded with "
                          "this scenario, and an uploaded scenario opens no other file; allowed: the name of a "
                          "Hugging Face config.json uploaded with it (none uploaded yet)"]
    assert at.code[0].value == before  # the previous settings still run


def test_a_server_trace_named_by_an_uploaded_scenario_is_refused_whatever_its_spelling(monkeypatch, tmp_path):
    secret = tmp_path / "secret.csv"
    secret.write_bytes(AZURE)
    at = started(monkeypatch, tmp_path / "uploads")
    for spelling in (str(secret), f"file://{secret}", f"{tmp_path}/uploads/../secret.csv"):
        raw = {**SMALL, "workload": {"arrival": {"kind": "trace", "path": spelling}, "lengths": {"kind": "trace"}}}
        upload(at, (f"s{len(spelling)}.yaml", yaml.safe_dump(raw).encode()))
        assert len(errors(at)) == 1 and f"workload.arrival.path: '{spelling}' is not a file uploaded" in errors(at)[0]
        assert "kind: trace" not in at.code[0].value


def test_a_scenario_uploaded_with_its_trace_replays_the_uploaded_copy(monkeypatch, tmp_path):
    at = started(monkeypatch, tmp_path / "uploads")
    raw = {**SMALL, "workload": {"arrival": {"kind": "trace", "path": "/home/me/traces/mine.csv"},
                                 "lengths": {"kind": "trace"}}}
    upload(at, ("s.yaml", yaml.safe_dump(raw).encode()), ("mine.csv", AZURE))
    assert not errors(at), errors(at)
    assert at.table[0].value.iloc[:, 0].loc["finished"] == "40"
    stored = (tmp_path / "uploads" / f"{hashlib.sha256(AZURE).hexdigest()[:16]}.csv").resolve()
    assert yaml.safe_load(at.code[0].value)["workload"]["arrival"]["path"] == str(stored)


def test_the_sidebars_custom_model_cannot_name_a_server_file(monkeypatch, tmp_path):
    config = tmp_path / "config.json"
    config.write_bytes((Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "llama-3.1-8b.json").read_bytes())
    at = started(monkeypatch, tmp_path / "uploads")
    at.selectbox(key="0.model").set_value("custom…")
    at.run()
    at.text_area(key="0.model.custom").set_value(yaml.safe_dump({"hf_config": str(config)}))
    at.run()
    assert not at.exception
    assert errors(at) == [f"model.hf_config: '{config}' is not a file uploaded with this scenario, and an uploaded "
                          "scenario opens no other file; allowed: the name of a Hugging Face config.json uploaded "
                          "with it (none uploaded yet)"]


def test_a_trace_with_offsets_on_some_lines_only_is_one_error_in_the_sidebar(monkeypatch, tmp_path):
    at = started(monkeypatch, tmp_path / "uploads")
    at.selectbox(key="0.arrival.kind").set_value("trace")
    at.run()
    mixed = b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,2\n2023-11-16 19:15:47+01:00,10,2\n"
    at.file_uploader(key="trace_upload").set_value(("mixed.csv", mixed, "text/csv"))
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("line 3: TIMESTAMP='2023-11-16 19:15:47+01:00' has a UTC offset, but line 2" in e for e in errors(at))
    assert not list((tmp_path / "uploads").glob("*.csv"))  # a refused upload leaves nothing behind


def test_the_pages_stores_leave_a_users_files_byte_identical(monkeypatch, tmp_path):
    """A user's files in the upload folder, one of them at the very name the trace would be stored under."""
    folder = tmp_path / "uploads"
    folder.mkdir()
    planted = {"notes.txt": b"mine\n", f"{hashlib.sha256(AZURE).hexdigest()[:16]}.csv": b"my own csv\n",
               ".hidden": b"\x00\x01"}
    for name, data in planted.items():
        (folder / name).write_bytes(data)
    at = started(monkeypatch, folder)
    at.selectbox(key="0.arrival.kind").set_value("trace")
    at.run()
    at.file_uploader(key="trace_upload").set_value(("mine.csv", AZURE, "text/csv"))
    at.run()
    assert any("already holds other bytes" in e for e in errors(at)), errors(at)
    raw = {**SMALL, "workload": {"arrival": {"kind": "trace", "path": "mine.csv"}, "lengths": {"kind": "trace"}}}
    upload(at, ("s.yaml", yaml.safe_dump(raw).encode()), ("mine.csv", AZURE))
    assert any("already holds other bytes" in e for e in errors(at)), errors(at)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == planted
