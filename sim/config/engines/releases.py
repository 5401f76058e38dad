"""The releases each engine preset accepts (`ENGINE_RELEASES`): every version PyPI's index listed on 2026-12-07 from
the preset's oldest to its newest minor version, pre- and post-releases included (`pip index versions --pre vllm`,
`sglang`, `tensorrt-llm`, `lmdeploy`), and LMDeploy's v0.1.0a0 and v0.1.0a1, git tags that were never uploaded
(the releases its TurboMind 0.1.0a scheduler was read in).

A version is checked by its release numbers (`unreleased_version`): 0.9.7 is no vLLM release, and is refused. Its
pre-releases and its final release are accepted where any release of those numbers is listed, since engines tag
release candidates and finals in git and in containers that the index does not always carry (TensorRT-LLM's
1.3.0rc16-rc21, which AIConfigurator models, and its 0.17.0, of which the index has only 0.17.0.post1). A
post-release is accepted only as listed. A version newer than every listed one, within the newest minor version,
is accepted as published since the list was read, and modelled by the rules of the releases before it.
"""

from __future__ import annotations

import bisect
import re

from sim.config.engines.base import dotted_version, parse_version, version_suffix

RELEASES_READ = "PyPI's index on 2026-12-07"

ENGINE_RELEASES: dict[str, tuple[str, ...]] = {
    "vllm": (
        "0.6.0", "0.6.1", "0.6.1.post1", "0.6.1.post2", "0.6.2", "0.6.3", "0.6.3.post1", "0.6.4", "0.6.4.post1",
        "0.6.5", "0.6.6", "0.6.6.post1", "0.7.0", "0.7.1", "0.7.2", "0.7.3", "0.8.0", "0.8.1", "0.8.2", "0.8.3",
        "0.8.4", "0.8.5", "0.8.5.post1", "0.9.0", "0.9.0.1", "0.9.1", "0.9.2", "0.10.0", "0.10.1", "0.10.1.1", "0.10.2",
        "0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.13.0", "0.14.0", "0.14.1", "0.15.0", "0.15.1", "0.16.0", "0.17.0",
        "0.17.1", "0.18.0", "0.18.1", "0.19.0", "0.19.1", "0.20.0", "0.20.1", "0.20.2", "0.21.0", "0.22.0", "0.22.1",
        "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0",
        "0.32.0", "0.33.0", "0.34.0"),
    "sglang": (
        "0.3.0", "0.3.1", "0.3.1.post1", "0.3.1.post2", "0.3.1.post3", "0.3.2", "0.3.3", "0.3.3.post1", "0.3.4",
        "0.3.4.post1", "0.3.4.post2", "0.3.5", "0.3.5.post1", "0.3.5.post2", "0.3.6", "0.3.6.post1", "0.3.6.post2",
        "0.3.6.post3", "0.4.0", "0.4.0.post1", "0.4.0.post2", "0.4.1", "0.4.1.post1", "0.4.1.post2", "0.4.1.post3",
        "0.4.1.post4", "0.4.1.post5", "0.4.1.post6", "0.4.1.post7", "0.4.2", "0.4.2.post1", "0.4.2.post2",
        "0.4.2.post3", "0.4.2.post4", "0.4.3", "0.4.3.post1", "0.4.3.post2", "0.4.3.post3", "0.4.3.post4", "0.4.4",
        "0.4.4.post1", "0.4.4.post2", "0.4.4.post3", "0.4.4.post4", "0.4.5", "0.4.5.post1", "0.4.5.post2",
        "0.4.5.post3", "0.4.6", "0.4.6.post1", "0.4.6.post2", "0.4.6.post3", "0.4.6.post4", "0.4.6.post5", "0.4.7",
        "0.4.7.post1", "0.4.8", "0.4.8.post1", "0.4.9", "0.4.9.post1", "0.4.9.post2", "0.4.9.post3", "0.4.9.post4",
        "0.4.9.post5", "0.4.9.post6", "0.4.10", "0.4.10.post1", "0.4.10.post2", "0.5.0rc0", "0.5.0rc1", "0.5.0rc2",
        "0.5.1", "0.5.1.post1", "0.5.1.post2", "0.5.1.post3", "0.5.2rc0", "0.5.2rc1", "0.5.2rc2", "0.5.2", "0.5.3rc0",
        "0.5.3rc2", "0.5.3", "0.5.3.post1", "0.5.3.post2", "0.5.3.post3", "0.5.4", "0.5.4.post1", "0.5.4.post2",
        "0.5.4.post3", "0.5.5", "0.5.5.post1", "0.5.5.post2", "0.5.5.post3", "0.5.6", "0.5.6.post1", "0.5.6.post2",
        "0.5.7", "0.5.8", "0.5.8.post1", "0.5.9", "0.5.10rc0", "0.5.10", "0.5.10.post1", "0.5.11", "0.5.12",
        "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18",
        "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"),
    "trtllm": (
        "0.14.0.dev2024091000", "0.14.0.dev2024091700", "0.14.0.dev2024092400", "0.14.0.dev2024092401",
        "0.14.0.dev2024100100", "0.14.0.dev2024100800", "0.14.0", "0.15.0.dev2024101500", "0.15.0.dev2024102200",
        "0.15.0.dev2024102900", "0.15.0.dev2024110500", "0.15.0.dev2024111200", "0.15.0", "0.16.0.dev2024111900",
        "0.16.0.dev2024112600", "0.16.0.dev2024120300", "0.16.0.dev2024121000", "0.16.0", "0.17.0.dev2024121700",
        "0.17.0.post1", "0.18.0.dev2025020400", "0.18.0.dev2025021100", "0.18.0.dev2025021101", "0.18.0.dev2025021800",
        "0.18.0.dev2025022500", "0.18.0.dev2025030400", "0.18.0.dev2025031100", "0.18.0", "0.18.1", "0.18.2",
        "0.19.0.dev2025031800", "0.19.0.dev2025032500", "0.19.0.dev2025040100", "0.19.0.dev2025040800", "0.19.0rc0",
        "0.19.0", "0.20.0rc0", "0.20.0rc1", "0.20.0rc2", "0.20.0rc3", "0.20.0", "0.21.0rc0", "0.21.0rc1", "0.21.0rc2",
        "0.21.0", "1.0.0rc0", "1.0.0rc1", "1.0.0rc2", "1.0.0rc3", "1.0.0rc4", "1.0.0rc5", "1.0.0rc6", "1.0.0",
        "1.1.0rc0", "1.1.0rc1", "1.1.0rc2", "1.1.0rc3", "1.1.0rc4", "1.1.0rc5", "1.1.0", "1.2.0rc0", "1.2.0rc1",
        "1.2.0rc2", "1.2.0rc2.post2", "1.2.0rc3", "1.2.0rc4", "1.2.0rc5", "1.2.0rc6", "1.2.0rc6.post1",
        "1.2.0rc6.post2", "1.2.0rc6.post3", "1.2.0rc7", "1.2.0rc8", "1.2.0", "1.2.1", "1.3.0rc0", "1.3.0rc1",
        "1.3.0rc2", "1.3.0rc3", "1.3.0rc4", "1.3.0rc5", "1.3.0rc5.post1", "1.3.0rc5.post2", "1.3.0rc6", "1.3.0rc7",
        "1.3.0rc8", "1.3.0rc9", "1.3.0rc10", "1.3.0rc11", "1.3.0rc12", "1.3.0rc12.post1", "1.3.0rc13", "1.3.0rc14",
        "1.3.0rc15", "1.3.0rc22", "1.3.0rc22.post1", "1.3.0rc23", "1.3.0rc23.post1", "1.3.0rc24", "1.3.0rc25",
        "1.3.0rc26", "1.3.0rc27", "1.3.0rc28", "1.3.0rc29"),
    "lmdeploy": (
        "0.1.0a0", "0.1.0a1", "0.1.0", "0.2.0", "0.2.1", "0.2.2", "0.2.3", "0.2.4", "0.2.5", "0.2.6", "0.3.0", "0.4.0",
        "0.4.1", "0.4.2", "0.5.0", "0.5.1", "0.5.2", "0.5.2.post1", "0.5.3", "0.6.0a0", "0.6.0", "0.6.1", "0.6.2",
        "0.6.2.post1", "0.6.3", "0.6.4", "0.6.5", "0.7.0", "0.7.0.post1", "0.7.0.post2", "0.7.0.post3", "0.7.1",
        "0.7.2", "0.7.2.post1", "0.7.3", "0.8.0", "0.9.0", "0.9.1", "0.9.2", "0.9.2.post1", "0.10.0", "0.10.1",
        "0.10.2", "0.11.0", "0.11.1", "0.12.0", "0.12.1", "0.12.2", "0.12.3", "0.13.0", "0.14.0", "0.15.0", "0.16.0"),
}

_SUFFIX_ORDER = {"dev": 0, "a": 1, "b": 2, "rc": 3}


def release_order(version_text: str) -> tuple:
    """A version's place among releases, as PEP 440 orders them: its numbers, then dev, alpha, beta and release
    candidates before the final release, post-releases after it (0.5.3rc0 < 0.5.3 < 0.5.3.post1)."""
    numbers = parse_version(version_text) or ()
    pre = re.search(r"(dev|rc|a|b)(\d*)", version_text.split("post")[0][len(dotted_version(numbers)):])
    stage = (_SUFFIX_ORDER[pre.group(1)], int(pre.group(2) or 0)) if pre else (4, 0)
    return numbers + (0,) * (4 - len(numbers)), stage, version_suffix(version_text)[1]


def unreleased_version(engine: str, version_text: str) -> tuple[str, ...] | None:
    """The listed releases either side of a version that is none of `engine`'s releases (the allowed words of its
    error), or None where it is one (module docstring), or is newer than every listed release."""
    releases = ENGINE_RELEASES[engine]
    order = [release_order(release) for release in releases]
    place = release_order(version_text)
    is_post = version_suffix(version_text)[1] >= 0
    if place in order or place > order[-1] or (not is_post and place[0] in {numbers for numbers, *_ in order}):
        return None
    named = [(rank, release) for rank, release in zip(order, releases) if "dev" not in release]  # (not nightlies)
    at = bisect.bisect_left([rank for rank, _ in named], place)
    return tuple(release for _, release in named[max(at - 1, 0):at + 1])


def newest_release_before(engine: str, version_text: str) -> str | None:
    """The newest listed release of `engine` where `version_text` is newer than every one of them, else None."""
    newest = ENGINE_RELEASES[engine][-1]
    return newest if release_order(version_text) > release_order(newest) else None
