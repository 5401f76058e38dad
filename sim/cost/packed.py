"""The arrays a cost model's compiled arithmetic reads, kept beside the model's own numbers.

A cost model whose price is written in numba (`roofline_kernel`, `steps_kernel`, `measured_kernel`) packs its
numbers into arrays once, on its first price, and both engines price with that one pack; its memos (terms by
token count) fill as it prices, for every later run. The pack holds the numbers as they were when it was built,
so setting any public attribute of the model drops it, and the next price builds it again (sim/run.py sets a
pipeline stage's `step_overhead_s` and `include_lm_head` after building the stage).
"""

from __future__ import annotations


class PackedCostModel:
    _packed: tuple | None = None

    def _build_pack(self) -> tuple:
        raise NotImplementedError

    def _pack(self) -> tuple:
        packed = self._packed
        if packed is None:
            packed = self._packed = self._build_pack()
        return packed

    def __setattr__(self, name: str, value) -> None:
        # (Not through self.__dict__: reading it turns the instance's attributes into a dict of their own, which
        # CPython reads more slowly than the values it keeps inline.)
        object.__setattr__(self, name, value)
        if name[0] != "_":
            object.__setattr__(self, "_packed", None)
