#!/usr/bin/env bash
# One command for an H100 (or any CUDA GPU), from the repository root:
#
#   OUT=/some/folder bash calibrate/gpu_run.sh
#
# Stages (each logged with its wall time, each under its own `timeout`; a failing stage does not stop
# the later ones):
#   env       nvidia-smi, python, torch, triton versions
#   selftest  every Triton kernel and fused op against float64 references at real shapes (`calibrate selftest`)
#   paged     flash-decoding paged attention vs dense SDPA on the decode grid, llama-3.1-8b shapes (`paged-bench`)
#   attention the flash / materialized prefill ratio, measured and simulated (benchmarks/bench_attention.py
#             --device cuda; issue 33), 512-16k tokens
#   steps     whole-step profiles (`calibrate steps`, one CUDA graph per step, dense KV):
#             llama-3.1-8b and qwen2.5-7b tp1 (unfused and fused), llama-3.1-70b tp4 and tp8 (fused)
#   ops       per-op profiles (`calibrate run`, CUDA-graph timer) of llama-3.1-8b and qwen2.5-7b tp1
#
# Results: $OUT/profiles.tgz (extract with `tar xzf`: profiles/<DEVDIR>/<model>/tp<N>/{steps/<engine>,ops}/ and
# profiles/<DEVDIR>/paged_vs_dense_<model>.csv), $OUT/gpu_run.log (everything printed), $OUT/summary.txt
# (one line per stage: exit status and seconds).
#
# Environment (all optional):
#   STAGES="env selftest paged attention steps ops"   the stages to run, in this order (e.g. STAGES="env selftest paged"
#                                            for a first smoke run of about 3 minutes)
#   STEP_RUNS="llama-3.1-8b:1:unfused,fused qwen2.5-7b:1:unfused,fused llama-3.1-70b:4:fused llama-3.1-70b:8:fused"
#                                            model:tp:engines[:fp8] for the steps stage (:fp8: W8A8 GEMMs,
#                                            `--weights fp8`, into steps/<engine>-fp8; engines: unfused, fused,
#                                            compiled; compiled adds ~75 s for an 8B model: one inductor compile
#                                            per grid shape, measured 50 s for the full grid on an H100)
#   OPS_RUNS="llama-3.1-8b:1 qwen2.5-7b:1"   model:tp for the ops stage
#   GRID=full      steps grid (quick: a tiny grid for a dry run)     OPS_GRID=full   per-op grid
#   KV=dense       steps decode KV layout (paged: the Triton kernel, into steps/<engine>-paged)  REPS=20  timed replays
#   DEVICE=cuda    (cpu: a dry run of this script on a machine without a GPU, with tiny models)
#   DEVDIR=h100-sxm  device folder name under profiles/
#   LAYERS=0       decoder layers per step (0: the model's own count; a dry run uses fewer)
#   SELFTEST_MODEL=llama-3.1-8b  PAGED_MODEL=llama-3.1-8b  PY=python3
#   ATTENTION_GPU=h100-sxm     the catalog GPU the attention stage also prices with (as a simulation does)
#   ATTENTION_RUNS="8:128:512,1024,2048,4096,8192,16384"   heads:head_dim:lengths for the attention stage, one CSV
#                              each (8 x 128, issue 33's shape: attention_flash_vs_materialized.csv; another:
#                              ..._h<heads>_d<head_dim>.csv)
#   DEADLINE_S=0               seconds the whole script may take (0: no limit): each stage's timeout is cut to
#                              what is left less 30 s for the archive, and a stage with under 45 s left is skipped
#                              (logged), so the results come back from a lease of fixed length
#   WHEELS=path    a folder of wheels to install first (no index) into a private folder on PYTHONPATH, for a
#                  machine whose python lacks a package the project needs (e.g. pydantic)
#
# Wall time measured on an H100 80GB HBM3 (torch 2.11+cu130, triton 3.6) on 2026-11-23, stage by stage:
# env 9 s, selftest 22 s, paged 24 s, steps 214 s (8B and 7B: 28-36 s per engine; 70B tp4 48 s, tp8 36 s),
# ops 160 s (82 + 78): about 7.3 minutes in all, under the 9-minute budget. The timeouts are 2-7x those times.
# On an H200 (torch 2.11.0+cu130, 2026-11-30): env 7 s, selftest 22 s, attention 13 s, steps: 8B fp8 fused 27 s and
# unfused 35 s, qwen2.5-7b unfused 31 s and fp8 fused 24 s, 70B tp4 unfused 63 s, tp8 unfused 48 s, tp2 fused 75 s,
# tp4 fp8 fused 41 s (each stage's Python start and imports included). On an H200 (12-04): attention 8x128 (six lengths)
# 15 s, 32x128 and 16x64 13 s each; steps 70B tp2 unfused 86 s, tp2 fp8 fused 54 s, tp4 fp8 unfused 59 s, tp8 fp8
# fused 28 s, qwen2.5-7b fp8 unfused 27 s, 8B compiled 71 s; later that day: 70B tp2 fp8 unfused 83 s, tp8 fp8 unfused
# 55 s, 8B fused with KV=paged 30 s, ops llama-3.1-8b 85 s and qwen2.5-7b 78 s.
set -u

OUT=${OUT:?set OUT to the folder that receives the results}
STAGES=${STAGES:-"env selftest paged attention steps ops"}
STEP_RUNS=${STEP_RUNS:-"llama-3.1-8b:1:unfused,fused qwen2.5-7b:1:unfused,fused llama-3.1-70b:4:fused llama-3.1-70b:8:fused"}
OPS_RUNS=${OPS_RUNS:-"llama-3.1-8b:1 qwen2.5-7b:1"}
GRID=${GRID:-full}
OPS_GRID=${OPS_GRID:-full}
KV=${KV:-dense}
REPS=${REPS:-20}
DEVICE=${DEVICE:-cuda}
DEVDIR=${DEVDIR:-h100-sxm}
LAYERS=${LAYERS:-0}
SELFTEST_MODEL=${SELFTEST_MODEL:-llama-3.1-8b}
PAGED_MODEL=${PAGED_MODEL:-llama-3.1-8b}
PY=${PY:-python3}
ATTENTION_GPU=${ATTENTION_GPU:-h100-sxm}
ATTENTION_RUNS=${ATTENTION_RUNS:-"8:128:512,1024,2048,4096,8192,16384"}
DEADLINE_S=${DEADLINE_S:-0}

# What this script writes in $OUT (and, for profiles/, archives and removes): refused if any is there already, so
# nothing it did not create is overwritten or deleted.
for name in profiles profiles.tgz gpu_run.log summary.txt; do
  if [ -e "$OUT/$name" ]; then
    echo "OUT: '$OUT' already holds $name; allowed: a folder without profiles, profiles.tgz, gpu_run.log, summary.txt" >&2
    exit 2
  fi
done
mkdir -p "$OUT/profiles/$DEVDIR"
LOG="$OUT/gpu_run.log"
SUMMARY="$OUT/summary.txt"
: >"$LOG"
: >"$SUMMARY"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
SCRIPT_START=$(date +%s)

log() { echo "$*" | tee -a "$LOG"; }

if [ -n "${WHEELS:-}" ]; then
  site="${TMPDIR:-/tmp}/servesim-site"
  if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$WHEELS"/*.whl \
      >>"$LOG" 2>&1; then
    export PYTHONPATH="$PYTHONPATH:$site"
    log "installed wheels from $WHEELS into $site"
  else
    log "pip install of $WHEELS failed (see above); going on without them"
  fi
fi

# run_stage NAME TIMEOUT_S COMMAND...: logged, timed, bounded; its exit status goes to the summary.
run_stage() {
  local name=$1 limit=$2
  shift 2
  local start rc
  start=$(date +%s)
  if [ "$DEADLINE_S" -gt 0 ]; then
    local left=$((DEADLINE_S - (start - SCRIPT_START) - 30))
    if [ "$left" -lt 45 ]; then
      log "=== [$name] skipped: ${left}s left before the deadline"
      echo "$name skipped (deadline)" >>"$SUMMARY"
      return
    fi
    [ "$left" -lt "$limit" ] && limit=$left
  fi
  log "=== [$name] start $(date -u +%H:%M:%S) (timeout ${limit}s): $*"
  timeout --kill-after=15 "$limit" "$@" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  local took=$(($(date +%s) - start))
  log "=== [$name] exit $rc after ${took}s$([ "$rc" = 124 ] && echo ' (timed out)')"
  echo "$name exit=$rc seconds=$took" >>"$SUMMARY"
}

model_dir() { # the folder name of a model: its catalog name, or an architecture file's name without .yaml/.yml/.json
  local m=${1##*/}
  case "$m" in *.yaml | *.yml | *.json) m=${m%.*} ;; esac
  echo "$m"
}

wants() { case " $STAGES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if wants env; then
  run_stage env 60 bash -c "nvidia-smi || echo 'nvidia-smi: not available'; $PY --version; \
    $PY -c 'import torch, triton; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"triton\", triton.__version__); \
print(\"device:\", torch.cuda.get_device_name(0) if torch.cuda.is_available() else \"no CUDA device\")'; \
    nproc; git log -1 --oneline 2>/dev/null || true"
fi

if wants selftest; then
  run_stage selftest 300 "$PY" -m calibrate selftest --device "$DEVICE" --model "$SELFTEST_MODEL" --dtype bf16
fi

if wants paged; then
  paged_grid=full
  [ "$GRID" = quick ] && paged_grid=quick
  run_stage paged 240 "$PY" -m calibrate paged-bench --device "$DEVICE" --model "$PAGED_MODEL" --dtype bf16 \
    --grid "$paged_grid" --out "$OUT/profiles/$DEVDIR/paged_vs_dense_$(model_dir "$PAGED_MODEL").csv"
fi

if wants attention; then
  attention_mode="--device cuda"
  [ "$DEVICE" = cpu ] && attention_mode="--gpu-dry-run"
  for run in $ATTENTION_RUNS; do
    IFS=: read -r heads head_dim lengths <<<"$run"
    [ "$DEVICE" = cpu ] && lengths="64,128"
    # the issue's shape keeps its file name; another shape's rows go beside it
    suffix=""
    [ "$heads:$head_dim" = "8:128" ] || suffix="_h${heads}_d${head_dim}"
    run_stage "attention ${heads}x${head_dim}" 240 "$PY" benchmarks/bench_attention.py $attention_mode \
      --gpu "$ATTENTION_GPU" --heads "$heads" --head-dim "$head_dim" \
      --csv "$OUT/profiles/$DEVDIR/attention_flash_vs_materialized$suffix.csv" ${lengths//,/ }
  done
fi

if wants steps; then
  # A paged run gets its own folder (fused-paged, as the shipped layout names it), never the dense one's
  engine_suffix=""
  [ "$KV" = paged ] && engine_suffix="-paged"
  for run in $STEP_RUNS; do
    IFS=: read -r model tp engines weights <<<"$run"
    for engine in ${engines//,/ }; do
      # The 70B shards take longer (80 layers, 8192-token prefills of ~0.5 s): a longer limit.
      limit=240
      case "$model" in *70b*) limit=420 ;; esac
      run_stage "steps $model tp$tp $engine${weights:+ $weights}" "$limit" "$PY" -m calibrate steps --device "$DEVICE" \
        --model "$model" --tp "$tp" --dtype bf16 ${weights:+--weights "$weights"} --engine "$engine" --kv "$KV" \
        --grid "$GRID" --reps "$REPS" --layers "$LAYERS" -q \
        --out "$OUT/profiles/$DEVDIR/$(model_dir "$model")/tp$tp/steps/$engine$engine_suffix${weights:+-$weights}"
    done
  done
fi

if wants ops; then
  for run in $OPS_RUNS; do
    IFS=: read -r model tp <<<"$run"
    run_stage "ops $model tp$tp" 240 "$PY" -m calibrate run --device "$DEVICE" --model "$model" --tp "$tp" \
      --dtype bf16 --grid "$OPS_GRID" -q --out "$OUT/profiles/$DEVDIR/$(model_dir "$model")/tp$tp/ops"
  done
fi

log "=== total $(($(date +%s) - SCRIPT_START))s"
cat "$SUMMARY" | tee -a "$LOG"
# At most a handful of files come back: one archive of every profile, the log, the summary.
if tar czf "$OUT/profiles.tgz" -C "$OUT" profiles; then
  rm -rf "$OUT/profiles"
  log "profiles archived in $OUT/profiles.tgz ($(du -h "$OUT/profiles.tgz" | cut -f1))"
else
  log "tar failed: the loose profiles stay in $OUT/profiles"
fi
