#!/usr/bin/env bash
# Downloads the wheels bench/gpu_check.sh installs on a lent GPU machine, which reaches no package registry:
# lakecompute's own dependencies and the test tools of bench/gpu-requirements.txt, at the versions installed
# in the python that runs this script (the light lane's), built for that machine (CPython 3.12, x86-64
# manylinux). Run it here, on a machine that reaches PyPI, from the repository root:
#
#     /work/main/.venv/bin/python -m pip --version >/dev/null && PYTHON=/work/main/.venv/bin/python bash bench/gpu_wheels.sh [DIR]
#
# DIR defaults to .whl (ignored by git: carry it with the device call). One version of each; no dependencies
# resolved (the list names them all). Ends non-zero, naming them, if a wheel could not be had.
set -euo pipefail
DIR=${1:-.whl}
PY=${PYTHON:-python3}
mkdir -p "$DIR"
"$PY" - "$DIR" <<'PY'
import importlib.metadata, pathlib, subprocess, sys
out = pathlib.Path(sys.argv[1])
pins, missing = [], []
for line in open("bench/gpu-requirements.txt"):
    if not line.strip() or line.startswith("#"):
        continue
    dist = line.split()[0]
    try:
        pins.append(f"{dist}=={importlib.metadata.version(dist)}")
    except importlib.metadata.PackageNotFoundError:
        missing.append(dist)
if missing:
    sys.exit(f"not installed here, so no version to pin: {missing}")
platforms = [f"--platform={p}" for p in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                                         "manylinux2014_x86_64", "manylinux1_x86_64")]
cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
       "--python-version", "3.12", "--implementation", "cp", *platforms, "-d", str(out), *pins]
subprocess.run(cmd, check=True)
wheels = sorted(p.name for p in out.glob("*.whl"))
print(f"{len(wheels)} wheels in {out}, {sum(p.stat().st_size for p in out.glob('*.whl')) / 2**20:.1f} MiB:")
print("\n".join(f"  {w}" for w in wheels))
PY
