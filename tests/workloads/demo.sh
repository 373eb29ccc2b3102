#!/bin/sh
# make demo: build p-fan, collect it with q-syscollect, show it with q-view.
set -e
out=demo-out
mkdir -p "$out"
cc -O2 -fno-inline -o "$out/p-fan" tests/workloads/p-fan.c -lm
echo "built $out/p-fan"
if ! q-syscollect --version >/dev/null 2>&1; then
    echo "q-tools is installed in .venv; q-syscollect is not implemented yet, so the demo stops here."
    exit 0
fi
