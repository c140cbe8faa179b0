#!/usr/bin/env bash
# Everything measured on a GPU, in parts, each under its own time limit so one slow part cannot take the others'
# results with it. Issue 43's parts:
#   learner  benchmarks/learner_throughput.py --device cuda (SAC at 2 and 10 critics and from pixels, ours beside
#            sbx on the card's JAX and the compiled CUDA-graph LeanRL-style reference)
#   juggle   benchmarks/juggle_throughput.py on MJX at 4,096 and 32,768 quadrotors against the raw physics
#   train    a juggling training from scratch on the GPU (what `robot-rl juggle train --physics mjx` runs, called
#            through benchmarks/gpu_train.py: the GPU machine has no ROS, which the command line imports), its
#            policy saved for `robot-rl juggle eval` on a CPU afterwards
# Issue 45's part:
#   reward   benchmarks/reward_latency.py: the 2B VLM critics (VLAC's protocol on InternVL, Qwen3-VL) in bfloat16
#            at batches 1, 8 and 16 against the local progress model, and the reward node's asynchronous scoring
#            fed at 10 Hz (no graph run: no ROS there, which the part enforces here too)
# Every result lands in OUT_DIR as JSON (plus each part's log). The carried wheels (.gpu-wheels/, `make gpu-wheels`)
# are installed first into a scratch prefix, each only where the machine lacks the package (or holds another
# version of one in REPLACED).
#
#   bash benchmarks/gpu_run.sh OUT_DIR reward               # on the GPU machine (the device tool: OUT_DIR=$OUT)
#   bash benchmarks/gpu_run.sh OUT_DIR learner juggle train  # issue 43's parts (about 9 minutes)
#   bash benchmarks/gpu_run.sh OUT_DIR --dry-run            # here, on CPU, tiny sizes: every part's steps (CI)
# No part named: all of them, which on a GPU is refused: their limits add up past one device call.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:?usage: gpu_run.sh OUT_DIR [--dry-run] [PART...]}
shift
ALL_PARTS="learner juggle train reward"
DRY="" PARTS=""
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY=$arg ;;
    learner|juggle|train|reward) PARTS="$PARTS $arg" ;;
    *) echo "gpu_run.sh: unknown option or part $arg (--dry-run, or parts among: $ALL_PARTS)" >&2; exit 2 ;;
  esac
done
PARTS=${PARTS:-$ALL_PARTS}
# Each part's limit on the GPU, seconds; a device call may run 600 s, and the wheels and machine check take ~20.
declare -A LIMIT=([learner]=180 [juggle]=170 [train]=200 [reward]=480)
if [ -z "$DRY" ]; then
  total=0
  for part in $PARTS; do total=$(( total + LIMIT[$part] )); done
  if [ "$total" -gt 570 ]; then
    echo "gpu_run.sh: parts$(printf ' %s' $PARTS) may take $total s, more than one device call (600 s); name" \
      "fewer: learner juggle train (issue 43) or reward (issue 45)" >&2
    exit 2
  fi
fi
wants() { [[ " $PARTS " == *" $1 "* ]]; }
# The image's transformers (5.17) predates the model classes the reward backends load (setup.py's vlac extra), and
# the carried one checks for a newer regex: both go over the image's. Every other carried wheel is only for what
# the machine lacks.
REPLACED="transformers regex"
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
  # only what this machine lacks (and REPLACED's other versions): a carried numpy must not shadow the machine's own
  missing=$("$PY" - "$REPLACED" .gpu-wheels/*.whl <<'EOF'
import importlib.metadata as metadata, re, sys
replaced = sys.argv[1].split()
for wheel in sys.argv[2:]:
    name, version = wheel.rsplit("/", 1)[-1].split("-")[:2]
    name = re.sub(r"[-_.]+", "-", name).lower()
    try:
        there = metadata.version(name)
    except metadata.PackageNotFoundError:
        there = None
    if there is None or (name in replaced and there != version):
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

# The reward part as the GPU machine has it: no ROS (a None in sys.modules makes `import rclpy` fail), its 2B
# checkpoints built in a scratch folder (about 9 GB each in float32), its row written into OUT_DIR.
reward_part() {
  local limit=$1; shift
  run_part reward "$limit" "$PY" -c 'import runpy, sys; sys.modules["rclpy"] = None; sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")' benchmarks/reward_latency.py --actor-s 0 \
    --cache-dir "$(mktemp -d)/checkpoints" --results "$OUT_DIR/reward_latency.json" "$@"
}

if [ -n "$DRY" ]; then
  DEVICE=cpu
  # Side by side: nothing here is timed, and each part's compiles keep one core busy at most of the time.
  wants learner && run_part learner 240 "$PY" benchmarks/learner_throughput.py --device cpu --seconds 0.05 \
    --no-compile --no-ppo --out "$OUT_DIR/learner_throughput.json" &
  wants juggle && run_part juggle 240 "$PY" benchmarks/juggle_throughput.py --device cpu --physics mjx --num-envs 4 \
    --steps 2 --reference-envs 2 --reference-steps 2 --out "$OUT_DIR/juggle_throughput.json" &
  wants train && run_part train 300 "$PY" - cpu 4 1 0 "$OUT_DIR" < benchmarks/gpu_train.py &
  wants reward && reward_part 240 --device cpu --size tiny --batches 1 2 --calls 2 --warmup 1 --stream-s 1 &
  wait
else
  DEVICE=cuda
  wants learner && run_part learner "${LIMIT[learner]}" "$PY" benchmarks/learner_throughput.py --device cuda \
    --seconds 3 --no-ppo --out "$OUT_DIR/learner_throughput_cuda.json"
  # shellcheck disable=SC2086 - sizes as words; JUGGLE_SIZES="32768 131072" adds a size without a longer run
  wants juggle && run_part juggle "${LIMIT[juggle]}" "$PY" benchmarks/juggle_throughput.py --device cuda \
    --physics mjx --num-envs ${JUGGLE_SIZES:-4096 32768} --steps 50 --reference-envs 16 --reference-steps 50 \
    --out "$OUT_DIR/juggle_throughput_cuda.json"
  wants train && run_part train "${LIMIT[train]}" "$PY" - cuda 16384 10000 90 "$OUT_DIR" < benchmarks/gpu_train.py
  # issue 45's target is at batch 8 (p99 <= 100 ms for the 2B pair critic); 1 and 16 beside it. REWARD_ARGS
  # (words) override these for a shorter run, e.g. REWARD_ARGS="--backends vlac --stream-max-batch 8"
  # shellcheck disable=SC2086
  wants reward && reward_part "${LIMIT[reward]}" --device cuda --size 2b --batches 1 8 16 --calls 20 --warmup 3 \
    --stream-s 30 ${REWARD_ARGS:-}
fi
echo "gpu_run.sh ($DEVICE): $(( $(date +%s) - started )) s, parts: $(tr '\n' ' ' < "$OUT_DIR/parts.jsonl")"
# A part run in the background sets its own status, not this shell's: every part's exit is in parts.jsonl.
grep -q '"exit": [1-9]' "$OUT_DIR/parts.jsonl" && status=1
exit $status
