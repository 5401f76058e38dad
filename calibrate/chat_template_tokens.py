"""How many tokens a chat request's template adds to its prompt: the numbers behind sim/model/chat_templates.py.

A client that calls /v1/chat/completions sends one user message; the server renders it through the model's chat
template and the engine prefills the rendered tokens. `vllm bench serve` counts the message's own tokens
(`len(tokenizer(prompt).input_ids)`, vllm/benchmarks/datasets.py), so a published run's input tokens leave the
template out. This script renders one user message as each server renders it, with the model's own tokenizer, and
prints the tokens ahead of the message (`lead`: the same for every request, so an engine's prefix cache can share
them) and after it (`trail`), less what the client's count already holds (a BOS it adds itself).

The renderings, each as the named source writes it for one user message, nothing else in the request:

- Qwen3 (every size and the MoE models): its Hugging Face chat template's user turn
  `'<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n'` and generation prompt
  `'<|im_start|>assistant\\n'` (no system turn unless the request sends one; thinking on by default, so no empty
  `<think>` block). Tokenizer: Qwen's BPE, `qwen.tiktoken` as the PyPI package dashscope ships it (151,643 tokens,
  the vocabulary Qwen2 and Qwen3 keep), its special tokens `<|im_start|>` 151644 and `<|im_end|>` 151645.
- Qwen2.5 (Instruct): the same turns after its default system turn, `'<|im_start|>system\\nYou are Qwen, created by
  Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n'`, which its template writes when the request sends none.
- Llama 3.1 (Instruct): its template's `{{- bos_token }}`, the system header it always writes
  (`'<|start_header_id|>system<|end_header_id|>\\n\\n'`, `'Cutting Knowledge Date: December 2023\\n'`,
  `'Today Date: 26 Jul 2024\\n\\n'`, its default date, then `'<|eot_id|>'`), the user turn
  `'<|start_header_id|>user<|end_header_id|>\\n\\n' + content | trim + '<|eot_id|>'` and the generation prompt
  `'<|start_header_id|>assistant<|end_header_id|>\\n\\n'`. Tokenizer: Llama 3's `tokenizer.model` as the PyPI package
  llama-models 0.3.0 ships it, with its split pattern and special tokens (llama_models/llama3/tokenizer.py). The
  client's count already holds the BOS.
- DeepSeek-R1: its template's `{{bos_token}}`, `'<｜User｜>' + content` and generation prompt
  `'<｜Assistant｜><think>\\n'`; tokenizer: DeepSeek-V3's `tokenizer.json` as the PyPI package litellm ships it
  (R1 keeps V3's). The client's count already holds the BOS (its tokenizer adds one).
- gpt-oss, three renderers, all the harmony format (encoding `HARMONY_GPT_OSS`, o200k_base plus harmony's special
  tokens; `o200k_base.tiktoken` as litellm ships it, sha256 446a9538...):
  - vLLM 0.10.2 and 0.11.0 (`_make_request_with_harmony` in vllm/entrypoints/openai/serving_chat.py, read in both
    sdists): `get_system_message()` (SystemContent.new(), today's date, the `commentary` channel dropped without
    custom tools), an empty `get_developer_message()`, the user message, rendered for the assistant's completion;
  - TensorRT-LLM's trtllm-serve (tensorrt_llm/serve/harmony_adapter.py `harmony_system_message` and
    `harmony_developer_message`): the same, its channels `analysis, commentary, final`;
  - SGLang 0.5.x, which renders gpt-oss through the Hugging Face Jinja template (serving_chat.py
    `_apply_jinja_template`, read in the 0.5.4.post2 wheel): the template's system message as its copy at
    EchoCog/gpt-oss-20b f81fef1d writes it (which revision of the template GPUStack's servers held is unstated).

Nothing here is fitted. Needs, in its own venv: openai-harmony, tiktoken, tokenizers; the three files named above.

    venv/bin/pip install openai-harmony tiktoken tokenizers
    pip download --no-deps litellm dashscope llama-models==0.3.0   # unzip: litellm/litellm_core_utils/tokenizers/,
                                                 # dashscope/resources/, llama_models/llama3/tokenizer.model
    mkdir enc && cp .../tokenizers/fb374d419588a4632f3f557e76b4b70aebbca790 enc/o200k_base.tiktoken
    TIKTOKEN_ENCODINGS_BASE=enc venv/bin/python calibrate/chat_template_tokens.py \
        --qwen .../dashscope/resources/qwen.tiktoken --deepseek .../tokenizers/deepseek_tokenizer.json \
        --llama3 .../llama_models/llama3/tokenizer.model
"""

from __future__ import annotations

import argparse
import base64

# Messages of different shapes: the template's tokens must not depend on the message (a merge across the
# message's edges would show as a different count).
MESSAGES = ("Hello", "What is 2 + 2?", "  leading spaces and a trailing newline\n",
            "Write a poem about the sea.\n\nMake it rhyme, 12 lines.", "数学题：1+1等于几？")
DATE = "2025-10-15"  # any date of the same width: the server's today's
GPT_OSS_IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."


def split(rendered: list[int], message: list[int]) -> tuple[int, int]:
    """(tokens before, tokens after) the message's own tokens in a rendering; refuses a rendering that does not
    hold them whole."""
    n = len(message)
    for start in range(len(rendered) - n + 1):
        if rendered[start:start + n] == message:
            return start, len(rendered) - start - n
    raise SystemExit(f"the message's tokens are not whole in the rendering: {message} in {rendered}")


def _ranks(path: str) -> dict[bytes, int]:
    ranks = {}
    with open(path, "rb") as f:
        for line in f:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


QWEN_DEFAULT_SYSTEM = ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                       "assistant.<|im_end|>\n")


def qwen(path: str, system: str = "") -> list[tuple[int, int]]:
    import tiktoken
    pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
    enc = tiktoken.Encoding("qwen", pat_str=pattern, mergeable_ranks=_ranks(path),
                            special_tokens={"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645})
    out = []
    for text in MESSAGES:
        rendered = f"{system}<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
        out.append(split(enc.encode(rendered, allowed_special="all"), enc.encode(text)))
    return out


def llama3(path: str) -> list[tuple[int, int]]:
    import tiktoken
    pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
    ranks = _ranks(path)
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
             "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
             "<|eot_id|>"]
    enc = tiktoken.Encoding("llama3", pat_str=pattern, mergeable_ranks=ranks,
                            special_tokens={name: len(ranks) + i for i, name in enumerate(names)})
    out = []
    for text in MESSAGES:
        rendered = ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December "
                    "2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
                    f"{text.strip()}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
        lead, trail = split(enc.encode(rendered, allowed_special="all"), enc.encode(text.strip()))
        out.append((lead - 1, trail))  # the client counted the BOS already
    return out


def deepseek_r1(path: str) -> list[tuple[int, int]]:
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(path)
    bos = "<｜begin▁of▁sentence｜>"
    out = []
    for text in MESSAGES:
        rendered = tok.encode(f"{bos}<｜User｜>{text}<｜Assistant｜><think>\n", add_special_tokens=False).ids
        client = tok.encode(bos + text, add_special_tokens=False).ids  # the client's count: BOS + the message
        lead, trail = split(rendered, client[1:])
        out.append((lead - 1, trail))  # the client counted the BOS already
    return out


def gpt_oss(renderer: str) -> list[tuple[int, int]]:
    from openai_harmony import (ChannelConfig, Conversation, DeveloperContent, HarmonyEncodingName, Message,
                                ReasoningEffort, Role, SystemContent, load_harmony_encoding)
    enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    out = []
    for text in MESSAGES:
        if renderer == "jinja":
            rendered = enc.encode(
                f"<|start|>system<|message|>{GPT_OSS_IDENTITY}\nKnowledge cutoff: 2024-06\nCurrent date: {DATE}\n\n"
                "Reasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for "
                "every message.\nCalls to these tools must go to the commentary channel: 'functions'.<|end|>"
                f"<|start|>user<|message|>{text}<|end|><|start|>assistant", allowed_special="all")
        else:
            system = SystemContent.new().with_conversation_start_date(DATE)
            if renderer == "vllm":  # get_system_message: no custom tools, so no commentary channel
                channels = [c for c in system.channel_config.valid_channels if c != "commentary"]
                system = system.with_channel_config(ChannelConfig.require_channels(channels))
            else:  # trtllm
                system = (SystemContent.new().with_model_identity(GPT_OSS_IDENTITY)
                          .with_reasoning_effort(ReasoningEffort.MEDIUM).with_knowledge_cutoff("2024-06")
                          .with_conversation_start_date(DATE)
                          .with_required_channels(["analysis", "commentary", "final"]))
            messages = [Message.from_role_and_content(Role.SYSTEM, system),
                        Message.from_role_and_content(Role.DEVELOPER, DeveloperContent.new()),
                        Message.from_role_and_content(Role.USER, text)]
            rendered = enc.render_conversation_for_completion(Conversation.from_messages(messages), Role.ASSISTANT)
        out.append(split(rendered, enc.encode(text, allowed_special=set())))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--qwen", required=True, help="qwen.tiktoken")
    parser.add_argument("--deepseek", required=True, help="DeepSeek-V3's tokenizer.json")
    parser.add_argument("--llama3", required=True, help="Llama 3's tokenizer.model")
    args = parser.parse_args()
    rows = [("qwen3", "jinja", qwen(args.qwen)), ("qwen2.5", "jinja", qwen(args.qwen, QWEN_DEFAULT_SYSTEM)),
            ("llama 3.1", "jinja", llama3(args.llama3)), ("deepseek_v3 (R1)", "jinja", deepseek_r1(args.deepseek))]
    rows += [("gpt_oss", renderer, gpt_oss(renderer)) for renderer in ("vllm", "trtllm", "jinja")]
    print("| model | renderer | lead | trail | the same for every message |")
    print("| --- | --- | ---: | ---: | --- |")
    for model, renderer, counts in rows:
        lead, trail = counts[0]
        print(f"| {model} | {renderer} | {lead} | {trail} | {'yes' if len(set(counts)) == 1 else counts} |")


if __name__ == "__main__":
    main()
