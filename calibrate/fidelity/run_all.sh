#!/usr/bin/env bash
# The fidelity study matrix (`make fidelity` runs it after building the venvs), one report at the end:
#   MODELS (architecture files) x WORKLOADS (ServeSim workload specs: Azure conversation timestamps,
#   gamma arrivals with CV 4) x LOADS x REPEATS repeats, each compared with three cost models:
#     kernels   - the per-op kernel profile (`calibrate run`, in the vLLM venv when it has vLLM, so paged
#                 decode and prefill attention are timed through vLLM's own CPU attention)
#     engine    - the same kernels + vLLM's per-step overhead fitted on a calibration run (`fit-overhead`)
#     steps     - a step model fitted to the calibration run's recorded steps (`fit-steps`, K-fold CV)
# Measurements run under the CPU quiet protocol; the calibration run (CALIB_WORKLOAD from its request 1000,
# designed to cover the cells' batch sizes and contexts: workloads/calibration.yaml) is never compared. It is
# recorded in CALIB_ROUNDS repeats, one before each repeat round of the cells, and fitted once on all of them.
# Settings: OUT REPEATS MODELS WORKLOADS LOADS CALIB_WORKLOAD CALIB_RATE CALIB_REQUESTS CALIB_ROUNDS NUM_REQUESTS KV_TOKENS
#           THREADS DTYPE (bfloat16|float32; default by the CPU flags).
# Usage: calibrate/fidelity/run_all.sh [--dry-run]   (--dry-run: parse every option, build every schedule,
#        print the commands; no engine, no timing). Settings from the environment (defaults below).
set -euo pipefail
cd "$(dirname "$0")/../.."
DRY=0
for arg in "$@"; do
    case "$arg" in
        --dry-run) DRY=1 ;;
        *) echo "error: run_all.sh: argument '$arg' is not allowed; allowed: --dry-run" >&2; exit 2 ;;
    esac
done
OUT=${OUT:-out/fidelity}
REPEATS=${REPEATS:-3}
MODELS=${MODELS:-"calibrate/fidelity/model.yaml calibrate/fidelity/model-wide.yaml"}
WORKLOADS=${WORKLOADS:-"calibrate/fidelity/workloads/azure-conv.yaml calibrate/fidelity/workloads/gamma-cv4.yaml"}
# Loads picked for the AMX machine (saturation ~5 req/s); choose this machine's by its saturation.
LOADS=${LOADS:-"light=1.5 medium=3.0 high=5.0"}
CALIB_RATE=${CALIB_RATE:-3.0}  # the calibration run's rate (req/s); near saturation, so steps of every size
NUM_REQUESTS=${NUM_REQUESTS:-100}  # per run
CALIB_WORKLOAD=${CALIB_WORKLOAD:-calibrate/fidelity/workloads/calibration.yaml}
CALIB_REQUESTS=${CALIB_REQUESTS:-100}  # the calibration run's requests (its steps are what fit-steps fits)
CALIB_ROUNDS=${CALIB_ROUNDS:-$REPEATS}  # calibration repeats, one before each of the first CALIB_ROUNDS repeat rounds
if ! [[ "$REPEATS" =~ ^[1-9][0-9]*$ ]]; then
    echo "error: run_all.sh: REPEATS '$REPEATS' is not allowed; allowed: an integer from 1 up" >&2; exit 2
fi
if ! [[ "$CALIB_ROUNDS" =~ ^[1-9][0-9]*$ ]] || [ "$CALIB_ROUNDS" -gt "$REPEATS" ]; then
    echo "error: run_all.sh: CALIB_ROUNDS '$CALIB_ROUNDS' is not allowed; allowed: an integer from 1 to REPEATS ($REPEATS)" >&2
    exit 2
fi
KV_TOKENS=${KV_TOKENS:-8192}
THREADS=${THREADS:-1}
# Served dtype: bf16 where the CPU has AVX512-BF16 or AMX (fast bf16 GEMMs), else float32 (torch's bf16
# GEMM falls back to a slow path on AVX2, ~10x slower than MKL's sgemm). The kernel profile follows it.
if [ -z "${DTYPE:-}" ]; then
    if grep -q -w -E 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null; then DTYPE=bfloat16; else DTYPE=float32; fi
fi
case "$DTYPE" in
    bfloat16) PROFILE_DTYPE=bf16 ;;
    float32) PROFILE_DTYPE=fp32 ;;
    *) echo "error: run_all.sh: DTYPE '$DTYPE' is not allowed; allowed: bfloat16, float32" >&2; exit 2 ;;
esac
echo "run_all.sh: DTYPE=$DTYPE (kernel profile --dtype $PROFILE_DTYPE)" >&2
COST_MODELS="kernels engine steps"
PY=${PY:-.venv/bin/python}
PYF=${PYF:-.venv-fidelity/bin/python}
# The kernel profile: in the vLLM venv when it can import vLLM (its attention kernels), else the project venv.
PYK=$PY
if [ -x "$PYF" ] && "$PYF" -c "import vllm" 2>/dev/null; then PYK=$PYF; fi
load_args=(); for l in $LOADS; do load_args+=(--load "$l"); done
load_names=(); for l in $LOADS; do load_names+=("${l%%=*}"); done

run() {  # print, and run unless dry
    echo "+ $*" >&2
    if [ "$DRY" = 0 ]; then "$@"; fi
}

measure() {
    # Repeat rounds: each round records one calibration repeat (while r <= CALIB_ROUNDS), then one repeat of
    # every workload and load. This host's speed drifts by 10-20% over minutes (benchmarks/RESULTS.md, "How
    # much of the error is the host"); calibration repeats spread over the session see its average speed,
    # where one calibration run sees only the minutes it ran in.
    for model in $MODELS; do
        m=$(basename "$model" .yaml)
        run env OMP_NUM_THREADS="$THREADS" "$PYK" -m calibrate run --model "$model" --dtype "$PROFILE_DTYPE" --device cpu \
            --threads "$THREADS" --block-size 32 --grid quick --out "$OUT/$m/profile-kernels" -q
        for r in $(seq 1 "$REPEATS"); do
            if [ "$r" -le "$CALIB_ROUNDS" ]; then
                run "$PYF" -m calibrate.fidelity record --model "$model" --kv-tokens "$KV_TOKENS" --threads "$THREADS" \
                    --dtype "$DTYPE" --workload "$CALIB_WORKLOAD" --out "$OUT/$m/vllm" --load "calib=$CALIB_RATE" \
                    --first-row 1000 --repeats 1 --first-repeat "$r" --num-requests "$CALIB_REQUESTS"
            fi
            for w in $WORKLOADS; do
                run "$PYF" -m calibrate.fidelity record --model "$model" --kv-tokens "$KV_TOKENS" --threads "$THREADS" \
                    --dtype "$DTYPE" --workload "$w" --out "$OUT/$m/vllm/$(basename "$w" .yaml)" "${load_args[@]}" \
                    --repeats 1 --first-repeat "$r" --num-requests "$NUM_REQUESTS"
            done
        done
    done
}

if [ "$DRY" = 1 ]; then
    # Every record invocation's options and schedules, checked by the recorder itself (no engine).
    for model in $MODELS; do
        "$PY" -m calibrate.fidelity record --dry-run --model "$model" --kv-tokens "$KV_TOKENS" --threads "$THREADS" \
            --dtype "$DTYPE" --workload "$CALIB_WORKLOAD" --load "calib=$CALIB_RATE" --first-row 1000 --repeats 1 \
            --num-requests "$CALIB_REQUESTS"
        for w in $WORKLOADS; do
            "$PY" -m calibrate.fidelity record --dry-run --model "$model" --kv-tokens "$KV_TOKENS" \
                --threads "$THREADS" --dtype "$DTYPE" --workload "$w" "${load_args[@]}" --repeats "$REPEATS" \
                --num-requests "$NUM_REQUESTS"
        done
    done
    measure
else
    export -f measure run
    export OUT REPEATS MODELS WORKLOADS LOADS CALIB_WORKLOAD CALIB_RATE CALIB_REQUESTS CALIB_ROUNDS NUM_REQUESTS KV_TOKENS THREADS DTYPE PROFILE_DTYPE PY PYF PYK DRY
    export load_args_str="${load_args[*]}"
    mkdir -p "$OUT"
    calibrate/fidelity/quiet.sh bash -c 'set -euo pipefail; load_args=($load_args_str); measure' 2>&1 \
        | grep -v -E "WARNING|Warning|warn\(|^\s*(if hasattr|wrapper =)|Loading safetensors|Writing model shards|^$"
fi

for model in $MODELS; do
    m=$(basename "$model" .yaml)
    run "$PY" -m calibrate.fidelity fit-overhead "$OUT/$m/vllm/calib" --profile "$OUT/$m/profile-kernels" \
        --out "$OUT/$m/profile-engine"
    run "$PY" -m calibrate.fidelity fit-steps "$OUT/$m/vllm/calib" --out "$OUT/$m/profile-steps"
    for w in $WORKLOADS; do
        wn=$(basename "$w" .yaml)
        for load in "${load_names[@]}"; do
            for cm in $COST_MODELS; do
                run "$PY" -m calibrate.fidelity compare "$OUT/$m/vllm/$wn/$load" --model "$model" \
                    --profile "$OUT/$m/profile-$cm" --out "$OUT/$m/compare/$wn/$load/$cm"
            done
        done
    done
done
run "$PY" -m calibrate.fidelity study-report "$OUT" --out "$OUT/study.md"
