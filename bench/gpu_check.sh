#!/usr/bin/env bash
# The GPU check (issues 28 and 45), for a lent GPU machine (Python 3.12, torch, torchvision and
# nvidia-ml-py there; lakecompute's own dependencies carried as wheels, made by bench/gpu_wheels.sh).
# From the repository root, in one call:
#
#     GPU_CHECK_TESTS=gpu-only OUT=$OUT bash bench/gpu_check.sh .whl      # carry .whl with the call
#
# 1. installs the wheels of bench/gpu-requirements.txt whose modules are missing there into the python that
#    runs the check (else into $SITE, on PYTHONPATH; no dependencies resolved: never touches torch, numpy or
#    Pillow), so that processes started without our PYTHONPATH (torchrun's children) import them too;
# 2. runs the GPU tests (tests/devices/test_gpu.py: each worker on its own GPU, a real CUDA OOM, batches in
#    page-locked memory, JPEGs decoded on the device against the CPU's decode, a damaged JPEG);
# 3. runs `python -m bench gpu`: a ResNet-50 column over 20,000 JPEGs beside hand-written loops, 1, 2 and 4
#    workers in fp32 and bf16, one worker with unpinned batches (the A/B of page-locked memory), the
#    GPU-bound configuration (bf16, batch 256) and device decoding (BENCH_GPU_* narrow it, see bench/gpu.py);
# 4. runs the rest of tests/devices (placement, CUDA state, overlap, torchrun ranks) unless
#    GPU_CHECK_TESTS=gpu-only.
# Each step has its own time limit (GPU_CHECK_TESTS_S, GPU_CHECK_BENCH_S, GPU_CHECK_DEVICES_S seconds), so a
# slow one leaves time for the next and the whole check ends inside one 10-minute call.
# Everything it prints is also written under $OUT (default /tmp/gpu-check), at most 7 files: install.txt
# (nvidia-smi and the installs), tests-gpu.txt, bench.txt, bench.json (the rows), gpu.json (the details),
# tests-devices.txt, summary.txt (each step's status and seconds).
#
# GPU_CHECK_DRY=1 runs the same plumbing on a machine without a GPU, touching no environment: the wheels are
# checked (one of each requirement, each for CPython 3.12 on x86-64) instead of installed, the GPU tests
# skip, and the bench runs its dry run (BENCH_GPU_DRY=1: 64 images on the CPU).
set -uo pipefail
WHEELS=${1:-${WHEELS:-.whl}}
OUT=${OUT:-/tmp/gpu-check}
SITE=${SITE:-/tmp/site}
PY=${PYTHON:-python3}
DRY=${GPU_CHECK_DRY:-}
mkdir -p "$OUT" "$SITE"
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
: > "$OUT/summary.txt"

step() {  # step NAME SECONDS LOG COMMAND...: run it under a time limit, log it, note its status
    local name=$1 limit=$2 log=$3 t0=$SECONDS rc
    shift 3
    timeout --kill-after=10 "$limit" "$@" > >(tee "$OUT/$log") 2>&1
    rc=$?
    echo "$name: exit $rc in $((SECONDS - t0)) s$([ $rc = 124 ] && echo " (stopped at its ${limit} s limit)")" \
        | tee -a "$OUT/summary.txt"
    [ $rc = 0 ] || status=1
}

{ nvidia-smi || echo "nvidia-smi: none here"; } > "$OUT/install.txt" 2>&1
"$PY" - "$WHEELS" "$SITE" "$DRY" <<'PY' 2>&1 | tee -a "$OUT/install.txt"
import importlib.util, pathlib, re, subprocess, sys
wheels, site, dry = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
norm = lambda name: re.sub(r"[-_.]+", "_", name).lower()
found = {}
for p in sorted(wheels.glob("*.whl")) if wheels.is_dir() else []:
    found.setdefault(norm(p.name.split("-")[0]), []).append(p)
twice = {k: [p.name for p in v] for k, v in found.items() if len(v) > 1}
if twice:
    sys.exit(f"more than one version of {twice}: keep one of each (pip would refuse the whole install)")
wanted, missing, every = [], [], []
for line in open("bench/gpu-requirements.txt"):
    if not line.strip() or line.startswith("#"):
        continue
    dist, module = line.split()
    every.append(norm(dist))
    if not dry and importlib.util.find_spec(module) is not None:
        continue
    (wanted if norm(dist) in found else missing).append(norm(dist))
if dry:  # check the set instead of installing it: every requirement, each for CPython 3.12 on x86-64
    def fits(name):  # name-version[-build]-python-abi-platform.whl, tags joined by "."
        python, _, platform = name[:-4].split("-")[-3:]
        return bool({"py3", "py312", "cp312"} & set(python.split("."))) and any(
            p == "any" or (p.startswith("manylinux") and p.endswith("x86_64")) for p in platform.split("."))
    foreign = [p.name for k in every if k in found for p in found[k] if not fits(p.name)]
    print(f"dry: {len(found)} wheels in {wheels}; not carried: {missing or 'none'}; not for cp312 x86-64: "
          f"{foreign or 'none'}")
    sys.exit(1 if missing or foreign else 0)
print("installing:", wanted or "nothing", "| not carried:", missing or "none")
if wanted:
    # Into this interpreter's own environment, so that every process it starts imports them, whatever
    # its environment (torchrun's children, tests that set PYTHONPATH); --target only where that fails.
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile"]
    files = [str(found[w][0]) for w in wanted]
    if subprocess.run([*pip, *files], check=False).returncode != 0:
        print("could not install into", sys.prefix, "- installing into", site, "(PYTHONPATH) instead")
        subprocess.run([*pip, "--target", site, *files], check=True)
PY
install=${PIPESTATUS[0]}
"$PY" -c "import torch, lakecompute; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'lakecompute', lakecompute.__file__)" \
    2>&1 | tee -a "$OUT/install.txt"
status=$install
echo "install: exit $install" | tee -a "$OUT/summary.txt"

PYTEST=("$PY" -m pytest -q -p no:cacheprovider -rs)
step "tests-gpu" "${GPU_CHECK_TESTS_S:-180}" tests-gpu.txt "${PYTEST[@]}" tests/devices/test_gpu.py
BENCH=("$PY" -m bench gpu --json "$OUT/bench.json")
if [ -n "$DRY" ]; then
    step "bench" "${GPU_CHECK_BENCH_S:-360}" bench.txt env BENCH_GPU_DRY=1 BENCH_GPU_JSON="$OUT/gpu.json" "${BENCH[@]}"
else
    step "bench" "${GPU_CHECK_BENCH_S:-360}" bench.txt env BENCH_GPU_JSON="$OUT/gpu.json" "${BENCH[@]}"
fi
if [ "${GPU_CHECK_TESTS:-all}" != "gpu-only" ]; then
    step "tests-devices" "${GPU_CHECK_DEVICES_S:-300}" tests-devices.txt \
        "${PYTEST[@]}" tests/devices --deselect tests/devices/test_gpu.py
fi
echo "gpu_check: done (status $status) in $SECONDS s; results in $OUT" | tee -a "$OUT/summary.txt"
exit $status
