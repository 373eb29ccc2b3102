#!/bin/sh
# The outputs of a fixed list of q-view invocations on one .q directory,
# one file each, so that two q-view versions can be compared with diff -r:
#
#   bench/view_outputs.sh Q_VIEW QDIR OUTDIR
#   bench/view_outputs.sh /work/main/.venv/bin/q-view .q /tmp/view-before
#   bench/view_outputs.sh .venv/bin/q-view .q /tmp/view-after
#   diff -r /tmp/view-before /tmp/view-after
#
# Q_VIEW is the command (a path, or words such as "python -m ..."). For each
# invocation NAME, OUTDIR/NAME.out holds stdout and OUTDIR/NAME.err stderr
# and the exit status; OUTDIR/commands lists what was run. The symbol cache
# is not used (--no-cache): the outputs do not depend on what an earlier
# version cached, and QDIR is left as it was. The busiest set is the .info
# (any version) with the most q:samples; the other reports merge every set
# of QDIR (--flat --graph: a directory with no report option is an overview).
set -u
if [ $# -ne 3 ]; then
    echo "usage: $0 Q_VIEW QDIR OUTDIR" >&2
    exit 2
fi
qview=$1 qdir=$2 out=$3
if [ ! -d "$qdir" ]; then
    echo "$0: $qdir: not a directory" >&2
    exit 2
fi
mkdir -p "$out" || exit 1
: > "$out/commands"
# the same environment for both versions: no terminal, fixed width, zone, locale
export COLUMNS=160 TZ=UTC LC_ALL=C.UTF-8
unset Q_DIR

busiest=$(grep -H -o '(q:samples \. [0-9]*)' "$qdir"/*.info#* 2>/dev/null |
          sed 's/:(q:samples \. \([0-9]*\))$/ \1/' | sort -k2,2nr -k1,1 | head -n 1 |
          cut -d' ' -f1)
if [ -z "$busiest" ]; then
    echo "$0: $qdir: no set with samples" >&2
    exit 1
fi
echo "busiest set: $busiest" >> "$out/commands"

run() {  # NAME ARGS...: q-view ARGS into OUTDIR/NAME.{out,err}
    name=$1
    shift
    echo "$name: q-view --no-cache $*" >> "$out/commands"
    # shellcheck disable=SC2086  # Q_VIEW may be several words
    $qview --no-cache "$@" > "$out/$name.out" 2> "$out/$name.err"
    echo "exit status $?" >> "$out/$name.err"
}

run overview -d "$qdir"
run per-cpu --overview --per-cpu "$qdir"
run busiest "$busiest"
run busiest-flat --flat "$busiest"
run busiest-graph --graph "$busiest"
run by-object --flat --graph --by object "$qdir"
run by-address --flat --graph --by address "$qdir"
run json-stacks --format json --stacks "$qdir"
run collapsed --format collapsed "$qdir"
run dot --format dot "$qdir"
run no-kernel --flat --graph --no-kernel "$qdir"
run kernel-only --flat --graph --kernel-only "$qdir"
# always, Python frames or not: what it says without them is worth comparing too
run python --flat --graph --python "$qdir"
echo "wrote $(ls "$out" | grep -c '\.out$') outputs into $out"
