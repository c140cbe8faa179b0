#!/usr/bin/env bash
# Everything issue 43 measures on a GPU, in one run of at most ~9 minutes, each part under its own time limit so
# one slow part cannot take the others' results with it:
#   1. the learner: benchmarks/learner_throughput.py --device cuda (SAC at 2 and 10 critics and from pixels, ours
#      beside sbx on the card's JAX and the compiled CUDA-graph LeanRL-style reference)
#   2. juggling: benchmarks/juggle_throughput.py on MJX at 4,096 and 32,768 quadrotors against the raw physics
#   3. a juggling training from scratch on the GPU (what `robot-rl juggle train --physics mjx` runs, called through
#      benchmarks/gpu_train.py: the GPU machine has no ROS, which the command line imports), its policy saved for
#      `robot-rl juggle eval` on a CPU afterwards
# Every result lands in OUT_DIR as JSON (plus each part's log). The carried wheels (.gpu-wheels/, `make gpu-wheels`)
# are installed first into a scratch prefix, each only where the machine lacks the package.
#
#   bash benchmarks/gpu_run.sh OUT_DIR            # on the GPU machine (the device tool: OUT_DIR=$OUT)
#   bash benchmarks/gpu_run.sh OUT_DIR --dry-run  # here, on CPU, tiny sizes: the same steps (CI runs it)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:?usage: gpu_run.sh OUT_DIR [--dry-run]}
DRY=${2:-}
if [ -n "$DRY" ] && [ "$DRY" != --dry-run ]; then echo "gpu_run.sh: unknown option $DRY (only --dry-run)" >&2; exit 2; fi
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
PY=${PYTHON:-python3}
[ -n "$DRY" ] && [ -x .venv/bin/python ] && PY=${PYTHON:-.venv/bin/python}
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_LOCALHOST_ONLY=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
started=$(date +%s)
status=0

# A part: NAME LIMIT_S COMMAND...; its output in OUT_DIR/NAME.log, its exit code and duration in parts.json.
run_part() {
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s) rc
  echo "== $name (limit ${limit} s): $*"
  timeout --kill-after=10 "$limit" "$@" > >(tee "$OUT_DIR/$name.log") 2>&1
  rc=$?
  echo "== $name: exit $rc after $(( $(date +%s) - t0 )) s"
  echo "{\"part\": \"$name\", \"exit\": $rc, \"seconds\": $(( $(date +%s) - t0 ))}" >> "$OUT_DIR/parts.jsonl"
  [ "$rc" = 0 ] || status=1
}

if [ -z "$DRY" ] && compgen -G ".gpu-wheels/*.whl" > /dev/null; then
  prefix=$(mktemp -d)/site
  # only what this machine lacks: a carried numpy or typing-extensions must not shadow the machine's own
  missing=$("$PY" - .gpu-wheels/*.whl <<'EOF'
import importlib.metadata as metadata, re, sys
for wheel in sys.argv[1:]:
    name = re.sub(r"[-_.]+", "-", wheel.rsplit("/", 1)[-1].split("-")[0]).lower()
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        print(wheel)
EOF
)
  if [ -n "$missing" ]; then
    # shellcheck disable=SC2086 - one wheel path per word
    if "$PY" -m pip --version > /dev/null 2>&1; then
      "$PY" -m pip install -q --no-index --no-deps --target "$prefix" $missing || status=1
    else  # no pip there: a wheel is a zip of what goes on sys.path
      "$PY" -c "import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]" \
        "$prefix" $missing || status=1
    fi
  fi
  export PYTHONPATH="$prefix:$PWD${PYTHONPATH:+:$PYTHONPATH}"
  echo "installed $(echo "$missing" | grep -c whl) carried wheels into $prefix"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  "$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', \
torch.cuda.is_available() and torch.cuda.get_device_name(0))"
  "$PY" -c "import jax, mujoco; from mujoco import mjx; print('jax', jax.__version__, jax.devices(), \
'mujoco', mujoco.__version__)" 2>&1 | tail -1
  git log -1 --format='commit %H' 2>/dev/null || true; } | tee "$OUT_DIR/machine.txt"

if [ -n "$DRY" ]; then
  DEVICE=cpu
  # Side by side: nothing here is timed, and each part's compiles keep one core busy at most of the time.
  run_part learner 240 "$PY" benchmarks/learner_throughput.py --device cpu --seconds 0.05 --no-compile --no-ppo \
    --out "$OUT_DIR/learner_throughput.json" &
  run_part juggle 240 "$PY" benchmarks/juggle_throughput.py --device cpu --physics mjx --num-envs 4 --steps 2 \
    --reference-envs 2 --reference-steps 2 --out "$OUT_DIR/juggle_throughput.json" &
  run_part train 300 "$PY" - cpu 4 1 0 "$OUT_DIR" < benchmarks/gpu_train.py &
  wait
else
  DEVICE=cuda
  run_part learner 180 "$PY" benchmarks/learner_throughput.py --device cuda --seconds 3 --no-ppo \
    --out "$OUT_DIR/learner_throughput_cuda.json"
  # shellcheck disable=SC2086 - sizes as words; JUGGLE_SIZES="32768 131072" adds a size without a longer run
  run_part juggle 170 "$PY" benchmarks/juggle_throughput.py --device cuda --physics mjx --num-envs ${JUGGLE_SIZES:-4096 32768} \
    --steps 50 --reference-envs 16 --reference-steps 50 --out "$OUT_DIR/juggle_throughput_cuda.json"
  run_part train 200 "$PY" - cuda 16384 10000 90 "$OUT_DIR" < benchmarks/gpu_train.py
fi
echo "gpu_run.sh ($DEVICE): $(( $(date +%s) - started )) s, parts: $(tr '\n' ' ' < "$OUT_DIR/parts.jsonl")"
# A part run in the background sets its own status, not this shell's: every part's exit is in parts.jsonl.
grep -q '"exit": [1-9]' "$OUT_DIR/parts.jsonl" && status=1
exit $status
