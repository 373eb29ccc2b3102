#!/bin/sh
# make demo: build p-fan, collect it with q-syscollect, show it with q-view.
set -e
out=demo-out
mkdir -p "$out"
cc -O2 -fno-inline -o "$out/p-fan" tests/workloads/p-fan.c -lm
echo "== built $out/p-fan with plain cc -O2 (no special flags)"
rm -rf "$out/.q"
if [ "$(id -u)" = 0 ]; then
    echo "== q-syscollect -v -d $out/.q -- $out/p-fan 3   (system-wide while p-fan runs)"
    q-syscollect -v -d "$out/.q" -- "$out/p-fan" 3
else
    echo "== not root: q-syscollect -i (p-fan and its children only)"
    q-syscollect -v -i -d "$out/.q" -- "$out/p-fan" 3
fi
echo "== ls $out/.q"
ls "$out/.q"
info=$(ls "$out/.q" | grep '^p-fan-pid.*\.info#' | head -n 1)
if q-view --help >/dev/null 2>&1; then
    echo "== q-view $out/.q/${info%%#*}"
    q-view "$out/.q/${info%%#*}"
else
    echo "== $info"
    cat "$out/.q/$info"
fi
