#!/bin/sh
# The whole device-side check of a package, in one command (copied into the package by package.py):
#   sh PACKAGE/device_check.sh [run_on_device.py options, e.g. --time-cap 20]
# Prints the machine (GPU, Python, numpy), checks and times the models (results.md / results.json) and, when the
# package holds kernels/, times them (timings.json). Results go to $OUT when set (the device tool's folder that
# comes back), else into the package. Exit status: run_on_device.py's (0 all outputs match, 1 one does not,
# 2 the package or the device is unusable), or time_kernels.py's when that alone fails. $PYTHON names the
# interpreter (default python3; it must be the version manifest.json's "python" names).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
DEST=${OUT:-$HERE}
mkdir -p "$DEST"
cd "$HERE" || exit 2
PY=${PYTHON:-python3}
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  "$PY" -c 'import sys, numpy; print("python", sys.version.split()[0], "numpy", numpy.__version__)'
} | tee "$DEST/machine.txt"
export TVM_USE_RUNTIME_LIB=1 PYTHONPATH="$HERE/runtime"
"$PY" run_on_device.py --out "$DEST/results" "$@"
rc=$?
if [ -f kernels/kernels.json ]; then
  "$PY" kernels/time_kernels.py --out "$DEST/timings.json"
  krc=$?
  [ $rc -eq 0 ] && rc=$krc
fi
exit $rc
