"""A quantized checkpoint's own quantization as the scenario's default (`sim.model.checkpoint_quant` reads it).

`model: {hf_config: path}`, or a catalog name read from a shipped config.json (`model: qwen3-32b-fp8`), is read
here, once, on the raw scenario, before the engine preset and the cost-model choice run, so that both see the dtype
the checkpoint is stored in. What the scenario writes wins: this fills only what it leaves out, and says nothing
about a what-if (a bf16 variant of an fp8 checkpoint is the user's to ask).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from sim.errors import ConfigError
from sim.model.catalog import resolve_gpu, shipped_config, shipped_quantization
from sim.model.hf_config import read_model_and_quantization
from sim.model.memory import WEIGHT_DTYPES


def runs_fp8_products(gpu) -> bool:
    """Whether fp8 weights' matrix products run in fp8 on this GPU: where it has an fp8 rate (the engines run a W8A8
    checkpoint's, or vLLM's --quantization fp8, in fp8 there, and dequantize the weights elsewhere: vLLM's
    Fp8LinearMethod falls back to weight-only Marlin below sm_89)."""
    return gpu.fp8_flops_per_s is not None


def _gpu_has_fp8(hardware: Any) -> bool:
    """`runs_fp8_products` for the scenario's raw `hardware` section (False where its GPU cannot be read yet)."""
    try:
        return runs_fp8_products(resolve_gpu(hardware.get("gpu", "h100-sxm") if isinstance(hardware, dict)
                                             else "h100-sxm"))
    except (ConfigError, ValidationError, TypeError):
        return False  # validation names a bad GPU in its own words


def checkpoint_defaults(data: dict) -> dict:
    """The raw scenario with an `{hf_config}` model read into its ModelSpec (a shipped config's name kept) and, where
    the config declares a quantization and the scenario's `quantization` leaves it out: the weights' dtype, and for
    fp8 weights stored as the checkpoint stores them, its block scales and (on a GPU with an fp8 rate) fp8 matrix
    products. A quantization ServeSim cannot read, with no `quantization.weights` given, is an error: never priced as
    bf16."""
    value = data.get("model")
    if isinstance(value, dict) and "hf_config" in value:
        spec, quant = read_model_and_quantization(value, "model")
        data = {**data, "model": spec}
    elif isinstance(value, str) and shipped_config(value) is not None:
        quant = shipped_quantization(value)  # a catalog name read from a shipped config.json, its checkpoint's dtype
    else:
        return data
    given = data.get("quantization")
    if quant is None or not (given is None or isinstance(given, dict)):
        return data  # not quantized, or a malformed section validation reports
    given = dict(given or {})
    if quant.weights is None:
        if "weights" not in given:
            raise ConfigError(f"model.hf_config: the checkpoint's {quant.describe()}; allowed: say how its weights "
                              f"are stored with quantization.weights ({', '.join(WEIGHT_DTYPES)})")
        return data
    filled = {"weights": quant.weights, **given}
    if filled["weights"] == quant.weights == "fp8":
        filled.setdefault("fp8_block_scales", quant.fp8_block_scales)
        filled.setdefault("fp8_compute", quant.fp8_activations and _gpu_has_fp8(data.get("hardware")))
    return {**data, "quantization": filled}
