#!/usr/bin/env bash
# The whole fidelity study with default settings (`make fidelity` runs this after building the venvs):
#   1. under the CPU quiet protocol: calibrate the kernels (project .venv), record a calibration run
#      (trace rows 1000-1099) and three loads x REPEATS repeats (rows 0-99) against vLLM (.venv-fidelity);
#   2. fit vLLM's per-step overhead on the calibration run; compare every load with both profiles.
# Outputs under OUT (default out/fidelity). Threads: 1 everywhere.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/fidelity}
REPEATS=${REPEATS:-3}
PY=.venv/bin/python
PYF=.venv-fidelity/bin/python
mkdir -p "$OUT"

measure() {
    OMP_NUM_THREADS=1 $PY -m calibrate run --model calibrate/fidelity/model.yaml --dtype bf16 --device cpu \
        --threads 1 --block-size 32 --grid quick --out "$OUT/profile-kernels" -q
    $PYF -m calibrate.fidelity record --out "$OUT/vllm" --load calib=3.0 --first-row 1000 --repeats 1
    $PYF -m calibrate.fidelity record --out "$OUT/vllm" --repeats "$REPEATS"
}
export -f measure
export OUT REPEATS PY PYF
calibrate/fidelity/quiet.sh bash -c measure 2>&1 | grep -v -E "WARNING|Warning|warn\(|^\s*(if hasattr|wrapper =)|Loading safetensors|Writing model shards|^$"

$PY -m calibrate.fidelity fit-overhead "$OUT/vllm/calib" --profile "$OUT/profile-kernels" --out "$OUT/profile-engine"
for load in light medium high; do
    for profile in kernels engine; do
        echo "== $load, profile-$profile"
        $PY -m calibrate.fidelity compare "$OUT/vllm/$load" --profile "$OUT/profile-$profile" \
            --out "$OUT/compare-$profile/$load"
    done
done
