"""Engine presets (issue 30): `engine: {name, version, <flags as the engine spells them>}` in a scenario.

A preset is data plus a policy (../shared/STYLE.md): from the engine, its version, the user's flags, the GPU and the
model it derives what that engine's own argument handling derives — the batch limits, the token budget, the KV
memory and block size, the scheduling rule (sim/sched/rules.py) and the engine's CPU terms — and writes them into
the scenario's sections *under* whatever the scenario itself says. So every value can be overridden: a scenario key
wins over the preset's default; a flag and the scenario key it maps to may both be given only if they agree.

It runs once, on the raw scenario before validation (`Scenario` calls `apply_engine_preset`), so the CLI, the
dashboard, the planner and the sweeps (which all validate raw scenarios, after merging variants and grid points)
see the same derived values, and a dumped scenario shows them.

Each engine's derivation cites the source file and version it follows, and `PresetResult.notes` lists what is an
approximation (a default read at another version than the one named).

The package, one module per concern: `base` (what a preset is made of, shared by every engine), one module per engine
(`vllm`, `sglang`, `trtllm`, `lmdeploy`: its rules, defaults, flags and options; a new engine is a new module and an
entry in `presets.PRESETS`), `fitted` (the fitted CPU terms, engine_terms.json), `engine_work` (the API server's
measured work and the CPU terms a preset writes), `presets` (the presets by name, and applying one to a raw scenario)
and `spread` (how far the terms can be trusted: the bands' draws). The names other layers use are imported here.
"""

from sim.config.engines.fitted import (NearestFit, TERMS_PATH, fit_name, fitted_terms, left_at_a_bound,
                                       release_distance, usable_terms)
from sim.config.engines.engine_work import (FRONTEND_CAPACITY_NOTE, TEMPLATE_PARSES, V0190_OVER_V0110, api_server_work,
                                            chat_template_parse)
from sim.config.engines.sglang import (SGLANG_INIT_NEW_TOKEN_RATIO, SGLANG_MIN_NEW_TOKEN_RATIO,
                                       SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR, SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS)
from sim.config.engines.presets import (PRESETS, apply_engine_preset, as_flag_error, colocated_only,
                                        command_served_model, fitted_versions, model_from_command, model_of_raw,
                                        named_engine, option_flag_name, preset_keys, preset_notes)
from sim.config.engines.spread import (ESTIMATE_RANGES, OTHER_VERSION_FACTORS, Z90, engine_model_misfit,
                                       engine_term_spread, with_engine_terms_drawn)

__all__ = ["ESTIMATE_RANGES", "FRONTEND_CAPACITY_NOTE", "NearestFit", "OTHER_VERSION_FACTORS", "PRESETS",
           "SGLANG_INIT_NEW_TOKEN_RATIO", "SGLANG_MIN_NEW_TOKEN_RATIO", "SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR",
           "SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS", "TEMPLATE_PARSES", "TERMS_PATH", "V0190_OVER_V0110", "Z90",
           "api_server_work", "apply_engine_preset", "as_flag_error", "chat_template_parse", "colocated_only",
           "command_served_model",
           "engine_model_misfit",
           "engine_term_spread",
           "fit_name", "fitted_terms", "fitted_versions", "left_at_a_bound", "model_from_command", "model_of_raw",
           "named_engine",
           "option_flag_name",
           "preset_keys", "preset_notes", "release_distance", "usable_terms", "with_engine_terms_drawn"]
