"""A chat scenario's template tokens (issue 30): `workload.chat_template` from the model's own counts
(sim/model/chat_templates.py) where the scenario gives none, resolved on the raw scenario next to the engine preset,
so every way in (CLI, dashboard, planner, the published suite) prefills the same prompts, and a dumped scenario reads
back equal."""

from __future__ import annotations

from sim.model.chat_templates import chat_template_tokens
from sim.workload.generate import endpoint_of


def chat_template_defaults(data: dict) -> tuple[dict, str | None]:
    """(the raw scenario with `workload.chat_template` set where its endpoint is chat, it gives none and the model's
    template was counted, a line saying what was taken or that nothing was)."""
    workload = data.get("workload")
    if not isinstance(workload, dict) or endpoint_of(workload) != "chat" or "chat_template" in workload:
        return data, None
    prefix = workload.get("prefix")
    if isinstance(prefix, dict) and prefix.get("kind") == "multi_turn":
        return data, "chat template: not added to multi_turn conversations (their turns are not rendered one by one)"
    from sim.config.engines import model_of_raw
    model = model_of_raw(data)
    engine = data.get("engine")
    engine_name = engine.get("name") if isinstance(engine, dict) else getattr(engine, "name", None)
    model_type = model.model_type if model is not None else None
    counted = chat_template_tokens(model_type, engine_name, model.name if model is not None else None)
    if counted is None:
        named = model_type or (model.name if model is not None else "this model")
        return data, (f"chat template: {named}'s not counted (sim/model/chat_templates.py): the engine's prompts are "
                      "the sampled ones; workload.chat_template gives its tokens")
    note = (f"chat template: {counted.lead_tokens} tokens before each prompt, the same for every request, and "
            f"{counted.trail_tokens} after it, in the engine's prompt (the client's counts leave them out): "
            f"{counted.source} (sim/model/chat_templates.py)")
    return {**data, "workload": {**workload, "chat_template": counted.section()}}, note
