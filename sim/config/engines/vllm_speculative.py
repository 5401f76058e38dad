"""vLLM's `--speculative-config` as ServeSim's speculation, and what its method does to async scheduling.

The flag names a drafting method and how many tokens it drafts; what ServeSim prices is the scenario's `speculation`
section: its acceptance (no flag gives one: it is a property of the model pair and the traffic) and the drafter's
cost, `draft_model` for vLLM's draft_model method, `draft_cost_ratio` for every other (an EAGLE or MTP head, n-gram
or suffix lookups). So the flag needs that section, and a method that contradicts its drafter is refused in one line.

Read in the PyPI sdists of 0.10.0-0.14.0, 0.16.0-0.20.0, 0.24.0-0.34.0 (vllm/config/speculative.py SpeculativeMethod
and its __post_init__, before 0.11.0 in vllm/config.py or vllm/config/__init__.py; vllm/config/vllm.py
VllmConfig.__post_init__; vllm/engine/arg_utils.py; 0.15.x taken as 0.16.0, as elsewhere):

- methods: ngram, eagle, eagle3, deepseek_mtp and draft_model in every one (a draft model run by V1 from 0.16.0,
  refused before: `vllm.py`); mtp from 0.11.0; suffix from 0.11.1; medusa to 0.32.x; ngram_gpu from 0.18.0; dflash
  from 0.20.0. Others (mlp_speculator, extract_hidden_states, custom_class, dspark, a model's own MTP name) are
  refused in one line, and so is the flag where 0.10.x falls back to V0 (whose speculative decoding is not read).
- a method left out is inferred from the draft model's name and config, which ServeSim does not read: it must be
  named, except for `"model": "ngram"` (or "[ngram]"), which vLLM reads as the n-gram method.
- async scheduling (on by default from 0.14.0): kept on with the EAGLE family (eagle, eagle3, the MTP names,
  dflash), from 0.18.0 also ngram_gpu, from 0.28.0 also draft_model, and from 0.33.0 with any method; turned off by
  the others. Asked for (`--async-scheduling`) with any method in 0.10.0-0.11.0, vLLM raises ("Currently, speculative
  decoding is not supported with async scheduling", EngineArgs), and from 0.11.1 with a method it does not run with
  ("Currently, async scheduling is only supported with EAGLE/MTP ... kind of speculative decoding"): so does this.
  That explicit check took draft_model from 0.16.0 and ngram_gpu from 0.18.0.
"""

from __future__ import annotations

from typing import Any

from sim.config.engines.base import Context, dotted_version, get_key, json_mapping
from sim.errors import ConfigError

VLLM_SPECULATIVE_CONFIG_SINCE = (0, 8, 2)  # --speculative-config in vllm/engine/arg_utils.py
VLLM_SPECULATIVE_CONFIG_READ_SINCE = (0, 10, 0)  # the first release whose rules are read here (above)
EAGLE_FAMILY = ("eagle", "eagle3", "mtp", "deepseek_mtp", "dflash")
# method -> (the first release with it, the first without), within the releases read
METHODS = {"ngram": (None, None), "eagle": (None, None), "eagle3": (None, None), "mtp": ((0, 11, 0), None),
           "deepseek_mtp": (None, None), "suffix": ((0, 11, 1), None), "medusa": (None, (0, 33, 0)),
           "ngram_gpu": ((0, 18, 0), None), "dflash": ((0, 20, 0), None), "draft_model": (None, None)}
KEYS = ("method", "model", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min")
# Speculative decoding by a draft model (ServeSim's `speculation.draft_model`), read in the sdists of 0.8.0, 0.8.5,
# 0.9.0, 0.9.2, 0.10.0, 0.10.2, 0.11.0-0.14.0 and 0.16.0 (vllm/engine/arg_utils.py; 0.16.0's vllm/v1/spec_decode/
# draft_model.py): V1 runs n-gram (0.8), EAGLE
# (0.8.5), Medusa and MTP (0.9) drafters only, so 0.8.0-0.9.x fall back to V0 for a draft model ("Speculative
# Decoding"), 0.10.0-0.14.x refuse it ("Speculative decoding with draft model is not supported yet", a
# NotImplementedError), and from 0.16.0 V1 runs it (DraftModelProposer; 0.15.x taken as 0.16.0). A drafter given by
# its cost ratio alone (`draft_cost_ratio`: an EAGLE head, MTP, n-grams) stays on V1.
VLLM_V1_DRAFT_MODEL_FALLBACK_UNTIL = (0, 10)
VLLM_V1_DRAFT_MODEL_SINCE = (0, 15)
# async scheduling with a method outside the EAGLE family: method -> (explicitly asked from, on by default from); a
# draft model's asked from the first release whose V1 runs it
ASYNC_WITH = {"ngram_gpu": ((0, 18, 0), (0, 18, 0)), "draft_model": (VLLM_V1_DRAFT_MODEL_SINCE, (0, 28, 0))}
VLLM_ASYNC_WITH_SPECULATION_SINCE = (0, 11, 1)  # before: EngineArgs refuses async scheduling with any method
VLLM_ASYNC_WITH_ANY_METHOD_SINCE = (0, 33, 0)


def read_speculative_config(value: Any) -> dict[str, Any]:
    """--speculative-config as given: a mapping (a JSON object on the command line); anything else refused."""
    return json_mapping(value, "speculative_config", "vLLM's speculative options")


def speculative_method(ctx: Context) -> str | None:
    """The drafting method `--speculative-config` names (checked, with the scenario's speculation section), or None
    where the flag is not given."""
    given = ctx.flags.get("speculative_config")
    if given is None:
        return None
    if ctx.version < VLLM_SPECULATIVE_CONFIG_READ_SINCE:
        first = dotted_version(VLLM_SPECULATIVE_CONFIG_READ_SINCE)
        raise ConfigError(f"engine.speculative_config: not read for vLLM {ctx.version_text} (its methods and their "
                          f"rules are read from {first} on, where V1 runs them); allowed: vLLM {first} or later, or "
                          "leave it out and describe the drafter in the speculation section")
    unknown = sorted(set(given) - set(KEYS))
    if unknown:
        raise ConfigError(f"engine.speculative_config.{unknown[0]}: not a key ServeSim reads; allowed: "
                          f"{', '.join(KEYS)} (the others change the drafter's kernels or layout)")
    method = given.get("method")
    if method is None and given.get("model") in ("ngram", "[ngram]"):
        method = "ngram"
    if method == "[ngram]":
        method = "ngram"
    allowed = [name for name, (first, last) in METHODS.items()
               if (first is None or ctx.version >= first) and (last is None or ctx.version < last)]
    if method is None:
        raise ConfigError("engine.speculative_config.method: missing; allowed: name it (vLLM infers it from the draft "
                          f"model's name and config, which ServeSim does not read): {', '.join(allowed)}")
    if method not in allowed:
        raise ConfigError(f"engine.speculative_config.method: {method!r} is not a method ServeSim models for vLLM "
                          f"{ctx.version_text}; allowed: {', '.join(allowed)}")
    _check_drafter(ctx, method)
    return method


def _check_drafter(ctx: Context, method: str) -> None:
    """The scenario's speculation section must describe the drafter the method runs."""
    section = ctx.raw.get("speculation")
    if not isinstance(section, dict):
        raise ConfigError("engine.speculative_config: needs the scenario's speculation section (its acceptance, and "
                          "draft_model or draft_cost_ratio: what the drafter costs); allowed: add one, or leave the "
                          "flag out")
    drafts_by_model = section.get("draft_model") is not None
    if (method == "draft_model") != drafts_by_model:
        needed = "speculation.draft_model" if method == "draft_model" else "speculation.draft_cost_ratio"
        raise ConfigError(f"engine.speculative_config.method: {method!r} contradicts the speculation section's drafter "
                          f"({'draft_model' if drafts_by_model else 'draft_cost_ratio'}); allowed: {needed} for this "
                          "method, or a method that fits the section")


def speculative_values(ctx: Context, notes: list[str]) -> tuple[str | None, dict[str, Any]]:
    """The method `--speculative-config` names (`speculative_method`; None without the flag) and the scenario values it
    sets: its num_speculative_tokens (ServeSim's γ)."""
    method = speculative_method(ctx)
    if method is None:
        if isinstance(ctx.raw.get("speculation"), dict):
            drafter = "a draft model" if get_key(ctx.raw, "speculation.draft_model") else "an EAGLE, MTP or n-gram head"
            notes.append(f"vLLM {ctx.version_text}: the speculation section without --speculative-config taken as "
                         f"{drafter} (vLLM speculates only with the flag)")
        return None, {}
    given = ctx.flags["speculative_config"]
    tokens = given.get("num_speculative_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        raise ConfigError(f"engine.speculative_config.num_speculative_tokens: {tokens!r} is not allowed; allowed: a "
                          "whole number >= 1")
    lookup = [key for key in ("prompt_lookup_max", "prompt_lookup_min") if key in given]
    drafter = "speculation.draft_model" if method == "draft_model" else "speculation.draft_cost_ratio"
    notes.append(f"vLLM {ctx.version_text} --speculative-config method {method}: the drafter priced by {drafter}, "
                 "its tokens accepted as speculation.acceptance says"
                 + (f" ({' and '.join(lookup)}: the lookup window, priced as that acceptance)" if lookup else ""))
    return method, {} if tokens is None else {"speculation.num_speculative_tokens": tokens}


def refuse_asked_async(ctx: Context, method: str | None) -> None:
    """--async-scheduling beside speculative decoding refused in one line where vLLM raises (above): any speculation
    before 0.11.1 (named by the flag or not), then a `method` it does not run with."""
    if ctx.raw.get("speculation") is None and method is None:
        return
    if ctx.version < VLLM_ASYNC_WITH_SPECULATION_SINCE:
        raise ConfigError(f"engine.async_scheduling: true contradicts the scenario's speculation in vLLM "
                          f"{ctx.version_text} (\"Currently, speculative decoding is not supported with async "
                          "scheduling\", vllm/engine/arg_utils.py); allowed: leave it out, or vLLM 0.11.1 or later")
    if method is not None and not async_with_method(method, ctx.version, asked=True):
        raise ConfigError(f"engine.async_scheduling: true contradicts engine.speculative_config's method {method!r} "
                          f"in vLLM {ctx.version_text} (\"Currently, async scheduling is only supported with "
                          "EAGLE/MTP ... kind of speculative decoding\", vllm/config/vllm.py); allowed: leave it out, "
                          "or an EAGLE or MTP method")


def async_with_method(method: str, version: tuple[int, ...], asked: bool) -> bool:
    """Whether vLLM `version` schedules asynchronously with this drafting method: `asked` (--async-scheduling
    given: else it raises) or by default (else it turns async scheduling off)."""
    if version < VLLM_ASYNC_WITH_SPECULATION_SINCE:
        return False
    if version >= VLLM_ASYNC_WITH_ANY_METHOD_SINCE or method in EAGLE_FAMILY:
        return True
    since = ASYNC_WITH.get(method)
    return since is not None and version >= since[0 if asked else 1]
