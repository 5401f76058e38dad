"""The catalog's models read from the Hugging Face config.json files shipped in sim/model/configs/: each file reads,
each is named in the README with the hash of the file shipped, a name (or a Hugging Face repo id) reads it, and a
checkpoint's own quantization comes with the name as with `{hf_config: path}`."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sim.config.files import validate_scenario
from sim.errors import ConfigError
from sim.model.catalog import MODEL_CONFIGS_DIR, MODELS, catalog_models, get_model, model_names, shipped_config
from sim.model.hf_config import load_hf_config
from sim.model.memory import kv_bytes_per_token
from sim.model.shapes import param_count

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p.stem for p in MODEL_CONFIGS_DIR.glob("*.json"))


def scenario(model, **extra) -> dict:
    return {"model": model, "hardware": {"gpu": extra.pop("gpu", "h100-sxm"), "tensor_parallel": extra.pop("tp", 1)},
            "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1},
                         "lengths": {"kind": "fixed", "input_tokens": 100, "output_tokens": 10}},
            "run": {"num_requests": 4, "seed": 0}, **extra}


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_config_is_a_catalog_model_read_as_its_file_reads(name):
    assert name in model_names() and name not in MODELS
    assert get_model(name) == load_hf_config(MODEL_CONFIGS_DIR / f"{name}.json", name)


def test_the_readme_names_every_file_with_the_hash_of_the_file_shipped():
    rows = dict(re.findall(r"^\| (\S+\.json) \| .+ \| ([0-9a-f]{16}) \|$",
                           (MODEL_CONFIGS_DIR / "README.md").read_text(), re.M))
    assert sorted(rows) == sorted(f"{name}.json" for name in SHIPPED)
    for file, digest in rows.items():
        assert hashlib.sha256((MODEL_CONFIGS_DIR / file).read_bytes()).hexdigest()[:16] == digest, file


def test_qwen3_32b_has_the_parameters_and_kv_its_config_gives():
    # By hand from the config (64 layers, hidden 5120, 64 heads and 8 KV heads of 128, intermediate 25600, vocab
    # 151936, embeddings untied): a layer's q and o 5120 x 8192 each, k and v 5120 x 1024 each, the gated MLP
    # 3 x 5120 x 25600, two norms of 5120: 487,598,080; 64 of them, two 151936 x 5120 embeddings and the final
    # norm: 32,762,106,880 (the model card's "32.8B"; the per-head q/k norms are not counted, hf_config IGNORED).
    model = get_model("qwen3-32b")
    assert param_count(model) == 64 * 487_598_080 + 2 * 151_936 * 5120 + 5120 == 32_762_106_880
    assert kv_bytes_per_token(model) == 64 * 2 * 8 * 128 * 2  # K and V, 8 heads of 128, bf16, every layer


@pytest.mark.parametrize("spelling", ["Qwen/Qwen3-32B", "QWEN3_32B", "qwen3-32b"])
def test_a_hugging_face_repo_id_or_another_spelling_names_the_same_model(spelling):
    assert get_model(spelling) is get_model("qwen3-32b")
    assert get_model("meta-llama/Llama-3.1-8B") is MODELS["llama-3.1-8b"]  # the written-out ones too


@pytest.mark.parametrize("name", ["../configs/qwen3-8b", "qwen3-8b.json", "README", "", "qwen3-99b"])
def test_a_name_that_is_no_shipped_file_is_refused_with_the_names_allowed(name):
    assert shipped_config(name) is None
    with pytest.raises(ConfigError) as err:
        get_model(name)
    message = str(err.value)
    assert message.startswith(f"model: unknown model {name!r}; allowed: opt-13b, ") and "\n" not in message
    assert ", qwen3-32b-fp8, " in message and message.endswith("or a config.json ({hf_config: path})")


def test_a_checkpoints_quantization_comes_with_its_name():
    fp8 = validate_scenario(scenario("qwen3-32b-fp8"))
    assert fp8.model == "qwen3-32b-fp8"  # the name kept: outputs say which model
    q = fp8.quantization
    assert (q.weights, q.fp8_block_scales, q.fp8_compute) == ("fp8", True, True)
    # an A100 has no fp8 tensor cores: the weights stay fp8, the products run in 16 bits
    assert validate_scenario(scenario("Qwen/Qwen3-32B-FP8", gpu="a100-80gb")).quantization.fp8_compute is False
    assert validate_scenario(scenario("gpt-oss-20b")).quantization.weights == "mxfp4"
    # what the scenario writes wins, and a 16-bit checkpoint adds nothing
    assert validate_scenario(scenario("qwen3-32b-fp8", quantization={"weights": "bf16"})).quantization.weights == "bf16"
    assert validate_scenario(scenario("qwen3-32b")).quantization.weights == "bf16"


def test_the_same_name_and_its_config_file_price_the_same_run(tmp_path):
    by_name = validate_scenario(scenario("deepseek-r1", tp=8, gpu="h200"))
    by_file = validate_scenario(scenario({"hf_config": str(MODEL_CONFIGS_DIR / "deepseek-r1.json")}, tp=8, gpu="h200"))
    assert by_file.model == get_model("deepseek-r1")
    assert by_name.quantization == by_file.quantization and by_name.cost_model == by_file.cost_model


def test_catalog_models_lists_them_with_the_checkpoints_dtype():
    out = subprocess.run([sys.executable, "-m", "sim.views.cli", "catalog", "models"], cwd=REPO, text=True,
                         capture_output=True, env={"COLUMNS": "300", "PATH": ""}, check=True).stdout
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.startswith("│")}
    assert set(catalog_models()) <= set(rows)
    assert rows["qwen3-32b-fp8"].rstrip("│ ").endswith("fp8") and rows["gpt-oss-120b"].rstrip("│ ").endswith("mxfp4")
    assert not rows["qwen3-32b"].rstrip("│ ").endswith(("fp8", "mxfp4"))


def test_the_docs_count_the_catalog_as_it_is():
    # (the count went stale once: "30 models" and "19 read" after DeepSeek-V3.2's config came in)
    repo = MODEL_CONFIGS_DIR.parents[2]
    total, shipped = len(model_names()), len(list(MODEL_CONFIGS_DIR.glob("*.json")))
    assert f"# {total} models:" in (repo / "README.md").read_text()
    said = " ".join((repo / "docs" / "scenarios.md").read_text().split())
    assert f"The catalog names {total} models" in said and f"and {shipped} read from the Hugging Face" in said
