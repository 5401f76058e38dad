"""The dashboard is a server (issue 28): an uploaded scenario opens only files uploaded with it in this session,
never a file of the server; and what the dashboard stores never replaces or deletes a file it did not create.

Every path-valued scenario field (sim.config.file_access.FILE_FIELDS) is tried with a real file of the server
that would be read successfully if it were opened: the refusal is one line, and nothing is opened."""

from __future__ import annotations

import copy
import hashlib
import os
import typing
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from helpers import small_scenario
from sim.config import file_access
from sim.config.file_access import FILE_FIELDS, PROFILE_NAME_FIELDS, anchor_file_fields, file_refs
from sim.config.files import anchor_paths
from sim.config.schema import Scenario
from sim.errors import ConfigError, ServeSimError
from sim.views import dashboard as dash

ROOT = Path(__file__).resolve().parents[2]
HF_CONFIG = (ROOT / "tests" / "fixtures" / "hf" / "llama-3.1-8b.json").read_bytes()
AZURE = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
         + "".join(f"2023-11-16 18:15:{s:02d}.0000000,{100 + s},{20 + s}\n" for s in range(30))).encode()
BASE = small_scenario({"run": {"num_requests": 30}})
PROBES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def sha_name(data: bytes, ext: str) -> str:
    return f"{hashlib.sha256(data).hexdigest()[:16]}.{ext}"


def snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry under `folder`: a file's bytes, a symlink's target."""
    out: dict[str, bytes | str] = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.is_symlink():
            out[rel] = "-> " + os.readlink(p)
        elif p.is_file():
            out[rel] = p.read_bytes()
    return out


@pytest.fixture
def server(tmp_path, monkeypatch):
    """A server's files a scenario must not reach (a valid trace and a valid config.json), a working folder
    holding copies of them, and a home folder holding them too."""
    secret = tmp_path / "server" / "secret"
    secret.mkdir(parents=True)
    (secret / "trace.csv").write_bytes(AZURE)
    (secret / "config.json").write_bytes(HF_CONFIG)
    cwd = tmp_path / "server" / "cwd"
    (cwd / "traces").mkdir(parents=True)
    (cwd / "traces" / "t.csv").write_bytes(AZURE)
    (cwd / "config.json").write_bytes(HF_CONFIG)
    (cwd / "link.csv").symlink_to(secret / "trace.csv")
    home = tmp_path / "server" / "home"
    home.mkdir()
    (home / "trace.csv").write_bytes(AZURE)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    return tmp_path / "server"


def with_file(field: tuple[str, ...], value: str) -> dict:
    """BASE with `value` at one file field (and what that field needs around it to be a valid scenario)."""
    raw = copy.deepcopy(BASE)
    if field == ("workload", "arrival", "path"):
        raw["workload"] = {"arrival": {"kind": "trace", "path": value}, "lengths": {"kind": "trace"}}
    elif field == ("workload", "lengths", "path"):
        raw["workload"]["lengths"] = {"kind": "empirical", "path": value, "input_column": "ContextTokens",
                                      "output_column": "GeneratedTokens"}
    elif field == ("cost_model", "profile"):
        raw["cost_model"] = {"kind": "calibrated", "profile": value}
    elif field == ("model", "hf_config"):
        raw["model"] = {"hf_config": value}
    elif field == ("speculation", "draft_model", "hf_config"):
        raw["speculation"] = {"draft_model": {"hf_config": value}}
    else:  # pragma: no cover - a field added to FILE_FIELDS needs a case here
        raise AssertionError(f"no builder for {field}")
    return raw


def server_file(field: tuple[str, ...], server: Path) -> Path:
    return server / "secret" / ("config.json" if field[-1] == "hf_config" else "trace.csv")


def refused(raw: dict, uploads: dash.Uploads | None = None) -> str:
    with pytest.raises(ConfigError) as err:
        dash.form_from_yaml(yaml.safe_dump(raw), "up.yaml", uploads)
    message = str(err.value)
    assert "\n" not in message
    return message


FIELDS = [f.keys for f in FILE_FIELDS]
IDS = [f.name for f in FILE_FIELDS]


# --------------------------------------------------------------------------------------------------
# Reading: only what was uploaded


def test_hf_config_etc_passwd_is_refused_before_anything_is_opened(monkeypatch):
    opened = []
    monkeypatch.setattr("sim.model.hf_config.read_hf_config", lambda *a, **k: opened.append(a))
    message = refused(with_file(("model", "hf_config"), "/etc/passwd"))
    assert message.startswith("model.hf_config: '/etc/passwd' is not a file uploaded with this scenario")
    assert "allowed: the name of a Hugging Face config.json uploaded with it (none uploaded yet)" in message
    assert opened == []


@pytest.mark.parametrize("field", FIELDS, ids=IDS)
def test_every_file_field_refuses_a_readable_server_file(server, field):
    target = server_file(field, server)
    for value in (str(target), os.path.relpath(target), f"file://{target}"):
        message = refused(with_file(field, value))
        assert message.startswith(f"{'.'.join(field)}: '{value}' is "), message


@pytest.mark.parametrize("field", FIELDS, ids=IDS)
def test_every_file_field_refuses_a_server_file_in_a_variant(server, field):
    raw = copy.deepcopy(BASE)
    override = with_file(field, str(server_file(field, server)))
    raw["variants"] = {"a": {}, "b": {field[0]: override[field[0]]}}
    assert refused(raw).startswith(f"variants.b.{'.'.join(field)}: ")


def test_a_relative_path_that_exists_in_the_working_folder_is_not_opened(server):
    raw = with_file(("workload", "arrival", "path"), "traces/t.csv")
    assert refused(raw).startswith("workload.arrival.path: 'traces/t.csv' is not a file uploaded with this scenario")


def test_a_scenario_uploaded_with_its_trace_and_config_runs_on_the_uploaded_files(server, tmp_path):
    raw = with_file(("workload", "arrival", "path"), "../../shared/traces/mine.csv")  # its path on the user's machine
    raw["model"] = {"hf_config": "models/llama.json"}
    folder, uploads = tmp_path / "uploads", dash.Uploads()
    files = [("s.yaml", yaml.safe_dump(raw).encode()), ("mine.csv", AZURE), ("llama.json", HF_CONFIG)]
    form, _ = dash.load_scenario_upload(files, folder, uploads)
    trace_path = Path(form.base["workload"]["arrival"]["path"])
    assert trace_path == (folder / sha_name(AZURE, "csv")).resolve()
    scenario = next(iter(form.scenario_set().variants.values()))
    assert scenario.model.num_layers == 32 and scenario.model.vocab_size == 128256  # read from the upload
    assert dash.current_rate(scenario) == pytest.approx(29 / 29)  # 30 requests a second apart
    # The session may name them again later (the sidebar's custom model YAML, a re-upload of the download).
    assert uploads.resolve("mine.csv") == trace_path and uploads.resolve(str(trace_path)) == trace_path
    again, _ = dash.form_from_yaml(form.to_yaml(), "downloaded.yaml", uploads)
    assert again.base["workload"]["arrival"]["path"] == str(trace_path)


def test_a_session_trace_upload_may_be_named_by_a_later_scenario(tmp_path):
    uploads = dash.Uploads()
    stored = dash.save_uploaded_trace(AZURE, "conv.csv", tmp_path / "uploads")
    uploads.add("conv.csv", stored)
    form, _ = dash.form_from_yaml(yaml.safe_dump(with_file(("workload", "arrival", "path"), "conv.csv")),
                                  "s.yaml", uploads)
    assert form.base["workload"]["arrival"]["path"] == str(stored)
    assert "conv.csv" in refused(with_file(("workload", "arrival", "path"), "other.csv"), uploads)


def test_the_sidebars_settings_are_checked_too(server):
    """The custom model YAML in the sidebar is typed on the page: the same rule applies before any validation."""
    form = dash.Form(base={**BASE, "model": {"hf_config": str(server / "secret" / "config.json")}})
    with pytest.raises(ConfigError, match=r"^model\.hf_config: '.*config\.json' is not a file uploaded"):
        dash.confined_form(form, dash.Uploads())
    assert dash.confined_form(dash.Form(), dash.Uploads()).to_raw() == dash.Form().to_raw()


def test_a_calibrated_profile_folder_is_refused_and_shipped_names_must_be_plain(server):
    message = refused(with_file(("cost_model", "profile"), str(ROOT / "calibrate" / "profiles" / "h100-sxm")))
    assert "cost_model.profile: " in message and "allowed: leave it out" in message
    for bad in ("../../../../etc", "..", "a/b", "a\\b"):
        raw = {**BASE, "cost_model": {"kind": "calibrated", "profile_device": bad}}
        assert refused(raw).startswith(f"cost_model.profile_device: {bad!r} names a folder of shipped profiles")
    inline = {**BASE, "model": {"name": "../../x", "num_layers": 2}, "cost_model": {"kind": "calibrated"}}
    assert refused(inline).startswith("model.name: '../../x' names a folder")
    shipped = {**BASE, "cost_model": {"kind": "calibrated", "profile_device": "h100-sxm"}}
    kept = copy.deepcopy(shipped)
    file_access.confine_file_fields(shipped, dash.Uploads().resolve, "none")  # a shipped profile, by name: fine
    assert shipped == kept


# Spellings of a server file: absolute, relative with any number of '..', '~', 'file://', doubled slashes,
# './' segments, backslashes, a symlink in the working folder, and names of files that were uploaded.
SEGMENTS = st.lists(st.sampled_from(["..", ".", "", "secret", "cwd", "home", "traces", "server", "~", "link.csv",
                                     "trace.csv", "config.json", "t.csv", "etc", "passwd", "mine.csv", "%2e%2e"]),
                    min_size=1, max_size=8)
PREFIXES = st.sampled_from(["", "/", "./", "~/", "file://", "file:///", "//", "\\\\", "C:\\", "../" * 6])


@PROBES
@given(segments=SEGMENTS, prefix=PREFIXES, separator=st.sampled_from(["/", "\\", "//"]),
       field=st.sampled_from(FIELDS), absolute_secret=st.booleans())
def test_no_spelling_reaches_a_file_outside_the_uploads(server, tmp_path, segments, prefix, separator, field,
                                                         absolute_secret):
    folder = tmp_path / "uploads"
    uploads = dash.Uploads()
    uploads.add("mine.csv", dash.save_uploaded_trace(AZURE, "mine.csv", folder))
    stored = dash.store_upload(HF_CONFIG, "cfg.json", folder, extensions=dash.COMPANION_EXTENSIONS)[0]
    uploads.add("cfg.json", stored)
    value = str(server_file(field, server)) if absolute_secret else prefix + separator.join(segments)
    raw = with_file(field, value)
    try:
        form, _ = dash.form_from_yaml(yaml.safe_dump(raw), "up.yaml", uploads)
    except ServeSimError as err:
        assert "\n" not in str(err)
        return
    allowed = {p.resolve() for p in folder.iterdir()}
    for ref in file_refs(form.to_raw()):
        opened = Path(ref.value).resolve()
        assert opened in allowed and opened.parent == folder.resolve(), (value, ref.value)


@PROBES
@given(name=st.text(st.sampled_from("./\\~:abc%\x00 "), min_size=0, max_size=12).map(lambda s: s + ".csv"))
def test_an_uploaded_files_name_never_decides_where_it_is_stored(tmp_path, name):
    folder = tmp_path / "uploads"
    outside = snapshot(tmp_path)
    path = dash.save_uploaded_trace(AZURE, name, folder)
    assert path == (folder / sha_name(AZURE, "csv")).resolve()
    assert set(snapshot(tmp_path)) - set(outside) <= {f"uploads/{sha_name(AZURE, 'csv')}"}


def test_an_uploaded_file_stays_private_to_its_owner_whatever_the_umask(tmp_path):
    """A user's trace is their data: unlike an output (sim/atomic_files.py new_temporary), an upload is stored 0o600
    (tempfile's private file, linked into place), even under a umask that would let others read it."""
    old = os.umask(0o022)
    try:
        path = dash.save_uploaded_trace(AZURE, "t.csv", tmp_path / "uploads")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o600


# --------------------------------------------------------------------------------------------------
# The registry of file fields is the CLI's too


def _models_in(annotation) -> list[type[BaseModel]]:
    found = [annotation] if isinstance(annotation, type) and issubclass(annotation, BaseModel) else []
    return found + [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _schema_fields(model: type[BaseModel], keys: tuple = (), seen: tuple = ()):
    for name, info in model.model_fields.items():
        yield keys + (name,), info
        for sub in _models_in(info.annotation):
            if sub not in seen:
                yield from _schema_fields(sub, keys + (name,), seen + (sub,))


def test_every_path_valued_schema_field_is_in_the_registry():
    """A path field added to the schema must be added to FILE_FIELDS (or the dashboard would open it)."""
    registered = {f.keys for f in FILE_FIELDS}
    names = set(PROFILE_NAME_FIELDS) | {("cost_model", "engine")}  # engine: looked up among shipped folder names
    for keys, info in _schema_fields(Scenario):
        text = (info.description or "").lower()
        if keys[-1] in ("path", "profile") or keys[-1].endswith(("_path", "_file", "_dir", "_folder")):
            assert keys in registered, keys
        if "{hf_config:" in text:
            assert keys + ("hf_config",) in registered, keys
        if "calibrate/profiles/<" in text and "str" in str(info.annotation):
            assert keys in names, keys


@pytest.mark.parametrize("section", ["base", "variant"])
def test_the_registry_anchors_exactly_what_the_cli_anchors(tmp_path, section):
    for name in ("t.csv", "l.csv", "cfg.json", "d.json"):
        (tmp_path / name).write_text("x")
    (tmp_path / "prof").mkdir()
    values = {("workload", "arrival", "path"): "t.csv", ("workload", "lengths", "path"): "l.csv",
              ("cost_model", "profile"): "prof", ("model", "hf_config"): "cfg.json",
              ("speculation", "draft_model", "hf_config"): "d.json"}
    assert set(values) == {f.keys for f in FILE_FIELDS}
    holder: dict = {}
    for keys, value in values.items():
        node = holder
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    raw = holder if section == "base" else {"variants": {"v": holder}}
    cli, ours = copy.deepcopy(raw), copy.deepcopy(raw)
    anchor_paths(cli, tmp_path)
    anchor_file_fields(ours, tmp_path)
    assert cli == ours and cli != raw
    assert len(file_refs(ours)) == len(values)


@pytest.mark.parametrize("raw", [None, [], {"variants": ["a", "b"]}, {"variants": {"a": None, "b": [1]}},
                                 {"workload": [1], "model": "llama-3.1-8b", "speculation": {"draft_model": "x"}},
                                 {"workload": {"arrival": {"path": None}}, "cost_model": "roofline"}])
def test_odd_shapes_hold_no_file_fields_and_anchor_without_a_traceback(tmp_path, raw):
    """Shapes validation refuses later (with its one line) must not break the walk that comes first."""
    kept = copy.deepcopy(raw)
    assert file_refs(raw) == []
    anchor_file_fields(raw, tmp_path)
    file_access.confine_file_fields(raw, dash.Uploads().resolve, "none")
    assert raw == kept


def test_plain_names():
    assert all(file_access.plain_name(n) for n in ("h100-sxm", "llama-3.1-8b", "My GPU (v2)", "a..b"))
    assert not any(file_access.plain_name(n) for n in ("", ".", "..", "a/b", "a\\b", "/", "a\x00", 3, None))


# --------------------------------------------------------------------------------------------------
# Writing: never over a file the dashboard did not create


def test_a_users_file_at_the_stored_name_is_never_replaced(tmp_path):
    folder = tmp_path / "uploads"
    folder.mkdir()
    name = sha_name(AZURE, "csv")
    (folder / name).write_bytes(b"my own notes, not a trace\n")
    (folder / "notes.txt").write_text("keep me\n")
    before = snapshot(folder)
    with pytest.raises(ConfigError) as err:
        dash.save_uploaded_trace(AZURE, "mine.csv", folder)
    assert f"'{folder / name}' already holds other bytes" in str(err.value) and "\n" not in str(err.value)
    assert snapshot(folder) == before  # byte-identical, and no temporary file left


def test_a_symlink_or_folder_at_the_stored_name_is_refused_and_left(tmp_path):
    folder = tmp_path / "uploads"
    folder.mkdir()
    target = tmp_path / "elsewhere.csv"
    target.write_bytes(AZURE)  # even with the very bytes: a link leads out of the folder
    (folder / sha_name(AZURE, "csv")).symlink_to(target)
    (folder / sha_name(AZURE, "jsonl")).mkdir()
    before, target_before = snapshot(folder), target.read_bytes()
    with pytest.raises(ConfigError, match="is not a file this dashboard stored"):
        dash.save_uploaded_trace(AZURE, "t.csv", folder)
    with pytest.raises(ConfigError, match="is not a file this dashboard stored"):
        dash.save_uploaded_trace(AZURE, "t.jsonl", folder)
    assert snapshot(folder) == before and target.read_bytes() == target_before


def test_a_users_identical_file_is_used_but_never_deleted_when_the_upload_is_refused(tmp_path):
    folder = tmp_path / "uploads"
    folder.mkdir()
    broken = AZURE.replace(b"18:15:07.0000000,107", b"18:15:07.0000000,1e20")
    (folder / sha_name(broken, "csv")).write_bytes(broken)  # the user's file, which happens to hold these bytes
    (folder / sha_name(AZURE, "csv")).write_bytes(AZURE)
    before = snapshot(folder)
    with pytest.raises(ServeSimError, match="line 9: ContextTokens=1e"):
        dash.save_uploaded_trace(broken, "b.csv", folder)
    assert dash.save_uploaded_trace(AZURE, "a.csv", folder) == (folder / sha_name(AZURE, "csv")).resolve()
    assert snapshot(folder) == before


def test_a_refused_scenario_removes_only_the_files_it_stored(tmp_path):
    folder = tmp_path / "uploads"
    folder.mkdir()
    (folder / sha_name(HF_CONFIG, "json")).write_bytes(HF_CONFIG)  # already there (the user's, or earlier)
    (folder / "notes.txt").write_text("keep me\n")
    before = snapshot(folder)
    bad = {**BASE, "model": {"hf_config": "cfg.json"}, "workload": {
        "arrival": {"kind": "trace", "path": "mine.csv", "time_scale": -1}, "lengths": {"kind": "trace"}}}
    uploads = dash.Uploads()
    with pytest.raises(ConfigError, match="time_scale"):
        dash.load_scenario_upload([("s.yaml", yaml.safe_dump(bad).encode()), ("mine.csv", AZURE),
                                   ("cfg.json", HF_CONFIG)], folder, uploads)
    assert snapshot(folder) == before and uploads.files == {}


@pytest.mark.parametrize("files, words", [
    ([("mine.csv", AZURE)], "0 scenario files (none)"),
    ([("a.yaml", b"name: a\n"), ("b.yml", b"name: b\n")], "2 scenario files (a.yaml, b.yml)"),
    ([("s.yaml", b"name: a\n"), ("x.exe", b"MZ")], "extension 'exe'"),
    ([("s.yaml", b"name: a\n"), ("t.csv", AZURE), ("dir/t.csv", AZURE + b"2023-11-16 18:16:00,1,1\n")],
     "two files named 't.csv'"),
])
def test_a_bad_batch_is_one_line_and_stores_nothing(tmp_path, files, words):
    folder = tmp_path / "uploads"
    with pytest.raises(ConfigError) as err:
        dash.load_scenario_upload(files, folder, dash.Uploads())
    assert words in str(err.value) and "\n" not in str(err.value)
    assert not folder.exists() or not list(folder.iterdir())


def test_an_upload_folder_that_is_a_file_is_one_line_and_left(tmp_path):
    folder = tmp_path / "uploads"
    folder.write_text("a user's file\n")
    with pytest.raises(ConfigError, match="cannot store it in"):
        dash.save_uploaded_trace(AZURE, "t.csv", folder)
    assert folder.read_text() == "a user's file\n"


def test_a_stored_file_swapped_for_a_symlink_is_no_longer_opened(tmp_path, server):
    folder = tmp_path / "uploads"
    uploads = dash.Uploads()
    stored = dash.save_uploaded_trace(AZURE, "mine.csv", folder)
    uploads.add("mine.csv", stored)
    stored.unlink()
    stored.symlink_to(server / "secret" / "trace.csv")
    assert uploads.resolve("mine.csv") is None
    assert "is not a file uploaded" in refused(with_file(("workload", "arrival", "path"), "mine.csv"), uploads)


# --------------------------------------------------------------------------------------------------
# Traces through the dashboard's store: the loader's rules, one line, nothing kept when refused


def test_an_uploaded_trace_with_different_offsets_replays_on_the_utc_timeline(tmp_path):
    rows = b"".join(f"2023-11-16 {18 + h:02d}:15:{s:02d}+{h:02d}:00,100,10\n".encode()
                    for s, h in zip(range(0, 40, 2), [0, 1, 2, 5] * 5))  # one request every 2 s in UTC
    stored = dash.save_uploaded_trace(b"TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows, "zones.csv",
                                      tmp_path / "uploads")
    uploads = dash.Uploads()
    uploads.add("zones.csv", stored)
    form, _ = dash.form_from_yaml(yaml.safe_dump(with_file(("workload", "arrival", "path"), "zones.csv")),
                                  "s.yaml", uploads)
    scenario = next(iter(form.scenario_set().variants.values()))
    assert dash.current_rate(scenario) == pytest.approx(0.5)  # 19 gaps over 38 s
    np.testing.assert_allclose(np.diff(scenario.workload.arrival.recorded_arrival_s()), 2.0)


@pytest.mark.parametrize("rows, words", [
    (b"2023-11-16 18:15:46,1,1\n2023-11-16 18:15:47Z,1,1\n",
     "line 3: TIMESTAMP='2023-11-16 18:15:47Z' has a UTC offset"),
    (b"2023-11-16 18:15:46,1e20,1\n", "line 2: ContextTokens=1e+20 is not allowed; allowed: a whole number from 0"),
])
def test_a_refused_trace_upload_is_one_line_and_keeps_nothing(tmp_path, rows, words):
    with pytest.raises(ServeSimError) as err:
        dash.save_uploaded_trace(b"TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows, "t.csv", tmp_path / "uploads")
    assert str(err.value).startswith("trace upload: '") and words in str(err.value) and "\n" not in str(err.value)
    assert list((tmp_path / "uploads").iterdir()) == []
