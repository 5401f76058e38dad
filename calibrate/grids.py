"""The shapes each op family is measured at. `quick` is for CPUs and CI; `full` for a GPU
(dense at small token counts, up to 16k tokens). Lengths are capped at the model's max_context."""

from __future__ import annotations

from dataclasses import asdict, dataclass

GRIDS = ("quick", "full")


@dataclass(frozen=True)
class Grid:
    name: str
    num_tokens: tuple[int, ...]  # linear layers and elementwise ops
    prefill_chunks: tuple[int, ...]
    prefill_contexts: tuple[int, ...]  # tokens already in the KV before the chunk
    decode_batches: tuple[int, ...]
    decode_contexts: tuple[int, ...]
    sample_rows: tuple[int, ...]
    overhead_seqs: tuple[int, ...]
    seconds_per_point: float  # timing budget of one point (warm-up excluded)

    def as_dict(self) -> dict:
        return asdict(self)


def _doubling(lo: int, hi: int) -> tuple[int, ...]:
    out, n = [], lo
    while n <= hi:
        out.append(n)
        n *= 2
    return tuple(out)


def _dense_then_geometric(hi: int) -> tuple[int, ...]:
    """1..16 every step, then ×1.5 / ×2 alternately (24, 32, 48, 64, ...)."""
    out = list(range(1, 17))
    n = 16
    while True:
        for nxt in (n * 3 // 2, n * 2):
            if nxt > hi:
                return tuple(out)
            out.append(nxt)
        n *= 2


def make_grid(name: str, max_context: int) -> Grid:
    if name == "quick":
        grid = Grid("quick", num_tokens=_doubling(1, 2048), prefill_chunks=_doubling(16, 2048),
                    prefill_contexts=(0, 256, 512, 1024, 2048), decode_batches=_doubling(1, 256),
                    decode_contexts=(16, 64, 256, 1024, 2048), sample_rows=_doubling(1, 256),
                    overhead_seqs=(1, 16, 256), seconds_per_point=0.03)
    elif name == "full":
        grid = Grid("full", num_tokens=_dense_then_geometric(16384), prefill_chunks=_doubling(16, 16384),
                    prefill_contexts=(0, 512, 1024, 2048, 4096, 8192, 16384), decode_batches=_doubling(1, 512),
                    decode_contexts=(16, 64, 256, 1024, 2048, 4096, 8192, 16384),
                    sample_rows=_doubling(1, 1024), overhead_seqs=(1, 16, 64, 256, 512), seconds_per_point=0.2)
    else:
        raise ValueError(name)
    cap = lambda xs: tuple(x for x in xs if x <= max_context) or (min(xs),)  # noqa: E731
    return Grid(grid.name, grid.num_tokens, cap(grid.prefill_chunks), cap(grid.prefill_contexts),
                grid.decode_batches, cap(grid.decode_contexts), grid.sample_rows, grid.overhead_seqs,
                grid.seconds_per_point)
