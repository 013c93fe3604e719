#!/usr/bin/env bash
# GPU smoke test of gnnpipe, for whenever a CUDA machine is at hand (< 5 minutes once the venv
# exists): the default pipeline with train.device=cuda in a scratch copy, then the GraphSAGE
# epoch bench (bench/train_epoch.py, fit rows) on cuda and on the CPU, printing the figures.
#
#   bash bench/gpu_smoke.sh                      # from anywhere; the repo is this script's parent
#
# Without a GPU (no nvidia-smi and no /dev/nvidia0) it prints one line and exits 0.
# Environment (all optional):
#   GPU_SMOKE_VENV      venv with a CUDA build of torch (default: <repo>/.venv-cuda). Made when
#                       absent with `make setup VENV=... TORCH_SPEC=... TORCH_PIP_ARGS=...`
#                       (time not counted in the 5 minutes; needs the network). PyPI's Linux
#                       x86_64 torch wheels are CUDA builds, so TORCH_PIP_ARGS may stay empty;
#                       for a given CUDA, e.g. TORCH_PIP_ARGS="--index-url
#                       https://download.pytorch.org/whl/cu128".
#   TORCH_SPEC          default torch==2.13.0 (the Makefile's)
#   GPU_SMOKE_SETUP=0   never build the venv: stop with one line if it has no CUDA torch
#   GPU_SMOKE_BUDGET_S  wall-clock budget of the smoke itself (default 290 s)
#   GPU_SMOKE_BENCH     extra bench/train_epoch.py arguments (default: 100k nodes, 8192 seeds)
#   GPU_SMOKE_KEEP=1    keep the scratch folder (printed) instead of deleting it
#   GPU_SMOKE_DEVICE=cpu  run the whole flow with train.device=cpu (checks this script on a CPU box)
set -uo pipefail

DEVICE="${GPU_SMOKE_DEVICE:-cuda}"
DEVICE_NODE="${GPU_SMOKE_DEVICE_NODE:-/dev/nvidia0}"
if [ "$DEVICE" = cuda ] && ! command -v nvidia-smi >/dev/null 2>&1 && [ ! -e "$DEVICE_NODE" ]; then
    echo "gpu_smoke: no CUDA GPU on this machine (no nvidia-smi, no $DEVICE_NODE); skipped"
    exit 0
fi

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${GPU_SMOKE_VENV:-$ROOT/.venv-cuda}"
PY="$VENV/bin/python"
say() { echo "gpu_smoke: $*"; }
has_cuda_torch() {
    [ "$DEVICE" = cpu ] && [ -x "$PY" ] && return 0
    "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null
}

if ! has_cuda_torch && [ "${GPU_SMOKE_SETUP:-1}" = 1 ] && [ ! -x "$PY" ]; then
    say "building $VENV with ${TORCH_SPEC:-torch==2.13.0} ${TORCH_PIP_ARGS:-} (not part of the budget)"
    timeout -k 10 "${GPU_SMOKE_SETUP_TIMEOUT:-1800}" make -C "$ROOT" setup VENV="$VENV" \
        TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}" TORCH_PIP_ARGS="${TORCH_PIP_ARGS:-}" \
        || { say "make setup VENV=$VENV failed"; exit 1; }
fi
if ! has_cuda_torch; then
    say "$PY has no torch that sees a CUDA device ($("$PY" -c 'import torch; print(torch.__version__)' 2>&1 | tail -1)); install a CUDA build into it, e.g. $PY -m pip install --force-reinstall ${TORCH_PIP_ARGS:+$TORCH_PIP_ARGS }${TORCH_SPEC:-torch==2.13.0}"
    exit 1
fi

BUDGET="${GPU_SMOKE_BUDGET_S:-290}"
DEADLINE=$((SECONDS + BUDGET))
left() { echo $((DEADLINE - SECONDS)); }
cap() { local want=$1 have; have=$(left); echo $((want < have ? want : have)); }
export PATH="$VENV/bin:$PATH" PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" GNNPIPE_PROGRESS=0

[ "$DEVICE" = cuda ] && "$PY" - <<'EOF'
import torch
p = torch.cuda.get_device_properties(0)
print(f"gpu_smoke: torch {torch.__version__} (CUDA {torch.version.cuda}), {torch.cuda.device_count()} "
      f"device(s), cuda:0 = {p.name}, {p.total_memory / 2**30:.0f} GiB")
EOF

SCRATCH="$(mktemp -d /tmp/gnnpipe-gpu-smoke.XXXXXX)"
if [ "${GPU_SMOKE_KEEP:-0}" = 1 ]; then say "scratch folder kept: $SCRATCH"
else trap 'rm -rf "$SCRATCH"' EXIT; fi

# 1. the default pipeline, train stage on cuda, in a committed scratch copy (as tests/e2e/test_pipeline.py)
REPO="$SCRATCH/repo"
mkdir -p "$REPO"
for name in dvc.yaml params.yaml stages gnnpipe .dvc/config .dvcignore data/raw data/pairs; do
    [ -e "$ROOT/$name" ] || continue
    mkdir -p "$REPO/$(dirname "$name")"
    cp -r "$ROOT/$name" "$REPO/$name"
done
find "$REPO" -name __pycache__ -prune -exec rm -rf {} +
(cd "$REPO" && echo "__pycache__/" > .gitignore && git init -q && git add -A \
    && git -c user.name=smoke -c user.email=smoke@localhost commit -qm scratch) \
    || { say "could not make the scratch repo in $REPO"; exit 1; }
T=$(cap 190)
say "default pipeline with -S train.device=$DEVICE (at most ${T}s) ..."
started=$SECONDS
if (cd "$REPO" && timeout -k 10 "$T" dvc exp run -S "train.device=$DEVICE" > "$SCRATCH/pipeline.log" 2>&1); then
    say "pipeline done in $((SECONDS - started))s"
    (cd "$REPO" && "$PY" - <<'EOF'
import json, pathlib
def read(path):
    p = pathlib.Path(path)
    return json.loads(p.read_text()) if p.exists() else {}
train, perf, ev = read("metrics/train.json"), read("metrics/perf/train.json"), read("metrics/eval.json")
print(f"gpu_smoke: train on {perf.get('device', '?')}: {train.get('epochs_run')} epochs in "
      f"{perf.get('seconds')} s, best val acc {train.get('best_val_acc')}")
flat = {k: v for k, v in ev.items() if isinstance(v, (int, float))}
print("gpu_smoke: evaluate: " + ", ".join(f"{k} {v:.4f}" for k, v in sorted(flat.items())[:8]))
EOF
    )
else
    say "pipeline failed or ran past ${T}s (exit $?); its last lines:"
    tail -n 15 "$SCRATCH/pipeline.log"
fi

# 2. the epoch bench, fit rows, cuda then cpu (same graph, cached)
read -r -a BENCH <<< "${GPU_SMOKE_BENCH:---scale 0.1 --seeds 8192 --epochs 2 --rows fit,fit_csr}"
for device in "$DEVICE" cpu; do
    [ "$device" = cpu ] && [ "$DEVICE" = cpu ] && [ -e "$SCRATCH/epoch_cpu.json" ] && break
    T=$(cap 45)
    if [ "$T" -lt 10 ]; then say "no time left for the $device epoch bench"; continue; fi
    say "epoch bench on $device (at most ${T}s) ..."
    if timeout -k 5 "$T" "$PY" "$ROOT/bench/train_epoch.py" --device "$device" \
            --threads "$(nproc)" --cache "$SCRATCH/bench-cache" --json "$SCRATCH/epoch_$device.json" \
            "${BENCH[@]}" > "$SCRATCH/epoch_$device.log" 2>&1; then
        grep -E "best epoch" "$SCRATCH/epoch_$device.log" | sed "s/^/gpu_smoke: [$device] /"
    else
        say "epoch bench on $device failed or ran past ${T}s; its last lines:"
        tail -n 10 "$SCRATCH/epoch_$device.log"
    fi
done
"$PY" - "$SCRATCH" <<'EOF'
import json, pathlib, sys
runs = {d: pathlib.Path(sys.argv[1]) / f"epoch_{d}.json" for d in ("cuda", "cpu")}
if all(p.exists() for p in runs.values()):
    res = {d: json.loads(p.read_text())["sampled"]["results"] for d, p in runs.items()}
    for row in res["cuda"]:
        if row in res["cpu"]:
            cpu, cuda = (res[d][row]["mean_epoch_seconds"] for d in ("cpu", "cuda"))
            print(f"gpu_smoke: {row.strip()}: cpu / cuda mean epoch time {cpu / cuda:.2f}x")
EOF
say "done in $((BUDGET - $(left)))s of ${BUDGET}s"
