#!/usr/bin/env bash
# The GPU check of issue 28, for a lent GPU machine (Python, torch, torchvision and nvidia-ml-py there;
# lakecompute's own dependencies carried as wheels). From the repository root:
#
#     bash bench/gpu_check.sh [WHEELS_DIR]        # default: $WHEELS, else shared/wheels
#
# 1. installs the wheels of bench/gpu-requirements.txt that are missing here into the python that runs
#    the check (else into /tmp/site, on PYTHONPATH; no dependencies resolved: never touches torch, numpy
#    or Pillow), so that processes started without our PYTHONPATH (torchrun's children) import them too;
# 2. runs the GPU tests (tests/devices/test_gpu.py: each worker on its own GPU, a real CUDA OOM);
# 3. runs `python -m bench gpu` (ResNet-50 column over 20,000 JPEGs vs a loop fed from memory);
# 4. runs the rest of tests/devices (placement, CUDA state, overlap, torchrun ranks), unless
#    GPU_CHECK_TESTS=gpu-only.
# Everything it prints is also written under $OUT (default /tmp/gpu-check): the bench's JSON in gpu.json.
set -uo pipefail
WHEELS=${1:-${WHEELS:-shared/wheels}}
OUT=${OUT:-/tmp/gpu-check}
SITE=${SITE:-/tmp/site}
PY=${PYTHON:-python3}
mkdir -p "$OUT" "$SITE"
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"

{ nvidia-smi || true; } > "$OUT/nvidia-smi.txt" 2>&1
"$PY" - "$WHEELS" "$SITE" <<'PY' 2>&1 | tee "$OUT/install.txt"
import importlib.util, pathlib, re, subprocess, sys
wheels, site = pathlib.Path(sys.argv[1]), sys.argv[2]
norm = lambda name: re.sub(r"[-_.]+", "_", name).lower()
found = {norm(p.name.split("-")[0]): p for p in sorted(wheels.glob("*.whl"))} if wheels.is_dir() else {}
wanted, missing = [], []
for line in open("bench/gpu-requirements.txt"):
    if not line.strip() or line.startswith("#"):
        continue
    dist, module = line.split()
    if importlib.util.find_spec(module) is not None:
        continue
    (wanted if norm(dist) in found else missing).append(norm(dist))
print("installing:", wanted or "nothing", "| not carried:", missing or "none")
if wanted:
    # Into this interpreter's own environment, so that every process it starts imports them, whatever
    # its environment (torchrun's children, tests that set PYTHONPATH); --target only where that fails.
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps"]
    files = [str(found[w]) for w in wanted]
    if subprocess.run([*pip, *files], check=False).returncode != 0:
        print("could not install into", sys.prefix, "- installing into", site, "(PYTHONPATH) instead")
        subprocess.run([*pip, "--target", site, *files], check=True)
PY
"$PY" -c "import torch, lakecompute; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'lakecompute ok')" 2>&1 | tee -a "$OUT/install.txt"

status=0
PYTEST=("$PY" -m pytest -q -p no:cacheprovider -rs)
"${PYTEST[@]}" tests/devices/test_gpu.py 2>&1 | tee "$OUT/tests-gpu.txt" || status=1
BENCH_GPU_JSON="$OUT/gpu.json" "$PY" -m bench gpu --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.txt" || status=1
if [ "${GPU_CHECK_TESTS:-all}" != "gpu-only" ]; then
    "${PYTEST[@]}" tests/devices --deselect tests/devices/test_gpu.py 2>&1 | tee "$OUT/tests-devices.txt" || status=1
fi
echo "gpu_check: done (status $status); results in $OUT"
exit $status
