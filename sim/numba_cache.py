"""Keep numba's on-disk caches of the compiled engine core in step with its sources.

numba caches a compiled function beside its module (`__pycache__/<module>.<function>-<line>.py311.nbi/.nbc`)
and, when loading it, checks only that module's own source file. A compiled function inlines or links the
functions it calls from other modules, so after one of those changes, the cache would still hand back the
old code: `sim.compiled.kernel.run` would keep pricing steps with a pricer that no longer exists. The core's
modules therefore share one stamp, a hash of all their sources; when it changes, their cache files are deleted
before anything is compiled or loaded. Every module of the core imports this one, which does it once a process.

Only the caches beside the sources are checked. Where numba puts them elsewhere (`NUMBA_CACHE_DIR`, or a
per-user directory when the package directory is read-only), delete that directory after changing the sources.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: no lock (processes starting together may both purge; each then recompiles)
    fcntl = None

ROOT = Path(__file__).resolve().parents[1]  # the directory that holds sim/
# Every module with numba functions: the compiled core's (the engine loop and the pricers it calls) and the passes
# outside its loop (the front-end's, the summary's gap scan) ...
NUMBA_MODULES = ("sim/cost/interpolation.py", "sim/cost/roofline_kernel.py", "sim/cost/measured_kernel.py",
                 "sim/cost/steps_kernel.py", "sim/cost/learned_kernel.py", "sim/cost/compiled_pricing.py",
                 "sim/cost/overhead.py", "sim/cost/draws.py", "sim/sched/rules.py", "sim/compiled/kernel.py",
                 "sim/frontend.py", "sim/kv/admission.py", "sim/kv/prefix_keys.py", "sim/kv/prefix_index.py",
                 "sim/compiled/prefix_cache.py", "sim/core/lockstep.py", "sim/core/router.py",
                 "sim/core/step_plan.py", "sim/gap_scan.py", "sim/slot_seconds.py")
# ... and every module whose constants they compile in (numba freezes a global's value into the code).
COMPILED_IN = ("sim/model/memory.py",)  # MXFP4_PARAM_BYTES (sim/cost/measured_kernel.py)
CORE_MODULES = NUMBA_MODULES + COMPILED_IN
STAMP = "sim/__pycache__/compiled-core-sources.sha256"


def sources_digest(root: Path = ROOT, modules: tuple[str, ...] = CORE_MODULES) -> str:
    """One hash of the modules' sources, in order (a missing module counts as empty)."""
    h = hashlib.sha256()
    for name in modules:
        path = root / name
        h.update(name.encode() + b"\0")
        h.update(path.read_bytes() if path.is_file() else b"")
    return h.hexdigest()


def purge_stale_caches(root: Path = ROOT, modules: tuple[str, ...] = CORE_MODULES, stamp: str = STAMP) -> bool:
    """Delete the modules' numba cache files if their sources changed since the stamp was written, then write it.
    True when caches were deleted (or there was no stamp yet). A directory that cannot be written is left alone.
    A lock serialises processes starting together (pytest-xdist), so one purges and the others find the stamp."""
    digest = sources_digest(root, modules)
    stamp_path = root / stamp
    try:
        stamp_path.parent.mkdir(parents=True, exist_ok=True)
        with open(stamp_path.with_suffix(".lock"), "w") as lock:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_EX)
            if stamp_path.is_file() and stamp_path.read_text() == digest:
                return False
            for name in modules:
                module = root / name
                for cached in (module.parent / "__pycache__").glob(f"{module.stem}.*.nb[ic]"):
                    cached.unlink(missing_ok=True)
            stamp_path.write_text(digest)
            return True
    except OSError:
        return False


purge_stale_caches()
