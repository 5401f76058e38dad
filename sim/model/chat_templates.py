"""The tokens a chat request's template adds to the engine's prompt, per model (issue 30).

A client on /v1/chat/completions sends its prompt as one user message; the server renders it through the model's
chat template, and the engine prefills the rendered tokens. Benchmark clients count the message's own tokens
(`vllm bench serve`: `len(tokenizer(prompt).input_ids)`), so a published run's input tokens leave the template
out. `lead_tokens` come before the message and are the same for every request (an engine's prefix cache can share
them); `trail_tokens` come after it. Counted by `calibrate/chat_template_tokens.py` with each model's own tokenizer,
for one user message and nothing else in the request (its docstring names every template and tokenizer read).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChatTemplateTokens:
    lead_tokens: int  # before the user's message: the same for every request
    trail_tokens: int  # after it: the generation prompt
    source: str

    def section(self) -> dict[str, int]:
        """As `workload.chat_template` takes it."""
        return {"lead_tokens": self.lead_tokens, "trail_tokens": self.trail_tokens}


_QWEN3 = ChatTemplateTokens(3, 5, "Qwen3's template: '<|im_start|>user\\n', then "
                                  "'<|im_end|>\\n<|im_start|>assistant\\n'")
_GPT_OSS_VLLM = ChatTemplateTokens(66, 3, "vLLM's harmony rendering (0.10.2-0.11.0 serving_chat.py "
                                   "_make_request_with_harmony): system and empty developer messages, the user's")

# model_type -> engine -> its rendering; the engine "" is the one used for every other engine (and for a scenario
# that names none: vLLM's, the default engine).
CHAT_TEMPLATES: dict[str, dict[str, ChatTemplateTokens]] = {
    "qwen3": {"": _QWEN3},
    "qwen3_moe": {"": _QWEN3},
    # DeepSeek-R1's template (V3's model_type; V3's own template ends without '<think>\n': 2 fewer after)
    "deepseek_v3": {"": ChatTemplateTokens(1, 3, "DeepSeek-R1's template: '<｜User｜>' after the BOS the client "
                                                "counts, then '<｜Assistant｜><think>\\n'")},
    "gpt_oss": {
        "": _GPT_OSS_VLLM,
        "trtllm": ChatTemplateTokens(68, 3, "TensorRT-LLM's harmony adapter (tensorrt_llm/serve/harmony_adapter.py): "
                                            "system (channels analysis, commentary, final) and developer messages"),
        "sglang": ChatTemplateTokens(78, 3, "SGLang renders gpt-oss through the Hugging Face Jinja template "
                                            "(serving_chat.py _apply_jinja_template, 0.5.4.post2): its system message"),
    },
}


# The catalog's models (sim/model/catalog.py), which carry no model_type, by name: their Instruct releases' templates,
# the ones a chat endpoint serves.
_QWEN25 = ChatTemplateTokens(24, 5, "Qwen2.5-Instruct's template: its default system turn ('You are Qwen, created by "
                                    "Alibaba Cloud. You are a helpful assistant.'), then Qwen3's turns")
_LLAMA31 = ChatTemplateTokens(29, 5, "Llama 3.1 Instruct's template: the system header it always writes (cutting "
                                     "knowledge date, its default date 26 Jul 2024) after the BOS the client counts, "
                                     "the user header, then the assistant header")
CATALOG_CHAT_TEMPLATES: dict[str, ChatTemplateTokens] = {
    "llama-3.1-8b": _LLAMA31, "llama-3.1-70b": _LLAMA31, "qwen2.5-7b": _QWEN25, "qwen2.5-72b": _QWEN25,
}


def chat_template_tokens(model_type: str | None, engine: str | None, name: str | None = None
                         ) -> ChatTemplateTokens | None:
    """What the model's chat template adds, as `engine` renders it: by its Hugging Face `model_type`, else by its
    catalog `name`; None where it was not counted."""
    renderings = CHAT_TEMPLATES.get(model_type or "")
    if renderings is None:
        return CATALOG_CHAT_TEMPLATES.get(name or "")
    return renderings.get(engine or "", renderings[""])
