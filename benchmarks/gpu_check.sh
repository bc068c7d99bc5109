#!/usr/bin/env bash
# The GPU check (issue 43) as one prepared command for a short lease of a one-GPU machine.
#
#   bash benchmarks/gpu_check.sh [STEP ...]      # default: every step, in this order
#
# Steps: env, tests, sweep, crossover, pin, calibrate, train_speed, train. Each runs under its own
# time limit (seconds, below), prints "### STEP rc=N" when it ends, and writes its whole output to
# $OUT/STEP.log (OUT defaults to out/gpu-check). A step that fails or runs out of time does not stop
# the next one. Python packages missing on the machine (highspy, cmeel-metis) are installed from
# wheels in .whl/ when that folder exists (a machine with no network installs from there).
set -u
OUT=${OUT:-out/gpu-check}
mkdir -p "$OUT"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

step() {
    local name=$1 limit=$2
    shift 2
    echo "### $name (limit ${limit} s, at ${SECONDS} s)"
    timeout -k 5 "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    tail -n 40 "$OUT/$name.log"
    echo "### $name rc=$rc (at ${SECONDS} s)"
}

run_env() {
    step env 30 bash -c 'nvidia-smi -L; python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"'
}
run_tests() {
    step tests 240 python3 -m pytest -m gpu -v -p no:cacheprovider --durations=0 \
        tests/test_features.py tests/test_calibrate.py tests/test_train.py tests/test_pyg_bridge.py
}
run_sweep() {  # row widths 4 B to 4 KB, and the paper's unaligned 2,052-2,076 B
    step sweep 100 python3 benchmarks/feature_gather.py --run sweep --table-gb 2 --gather-mb 64 --repeats 5 \
        --sizes 4,16,64,256,1024,2048,2052,2056,2060,2064,2068,2072,2076,4096
}
run_crossover() { step crossover 45 python3 benchmarks/feature_gather.py --run crossover --repeats 9; }
run_pin() { step pin 90 python3 benchmarks/feature_gather.py --run pin --pin-gb 10 --scratch /tmp/feature-gather; }
run_calibrate() {
    step calibrate 60 python3 -m commgraph topo calibrate --workers 1 --device cuda --out "$OUT/calibrated.yaml" --force
    python3 -m commgraph topo show --topology hgx-h100 | grep -E "gpu0 - pcie0|pcie0 - cpu0"
}
run_train_speed() { step train_speed 150 python3 benchmarks/train_speed.py --device cuda --rounds 2 --skip-accuracy; }
run_train() { step train 150 python3 benchmarks/feature_gather.py --run train --scratch /tmp/feature-gather; }

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(env tests sweep crossover pin calibrate train_speed train)
for s in "${steps[@]}"; do
    "run_$s"
done
