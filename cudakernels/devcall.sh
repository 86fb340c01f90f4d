#!/usr/bin/env bash
# devcall.sh OUTDIR SCRIPT [ARGS...] — runs `SCRIPT WORK ARGS...` on the
# GPU machine (every dev*.sh takes its output folder first) with WORK a
# fresh folder, then packs WORK into OUTDIR/NAME.tar.xz, NAME being
# SCRIPT's name without .sh, or TAG when set (two runs of one script in a
# call need two tags). Why: the device tool brings back at most 8 files
# from $OUT, and a call that ran devab.sh (2·ROUNDS files), devncu.sh (six)
# and devbench.sh (two) lost all but the first eight (2026-12-07). Nsight
# Compute reports (*.ncu-rep, tens of MB) are left out unless
# KEEP_REPORTS=1. SCRIPT's output goes to stdout as usual; its exit status
# is devcall's.
#
#   bash cudakernels/devcall.sh $OUT cudakernels/devab.sh
#   TAG=ncu-causal BENCH=… SAMPLE=… bash cudakernels/devcall.sh $OUT cudakernels/devncu.sh
set -uo pipefail
out="${1:?usage: devcall.sh OUTDIR SCRIPT [ARGS...]}"
script="${2:?usage: devcall.sh OUTDIR SCRIPT [ARGS...]}"
shift 2
name="${TAG:-$(basename "$script" .sh)}"
[[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || { echo "devcall: $name: the device tool brings back names of letters, digits, '.', '_' and '-' only" >&2; exit 2; }
work="$(mktemp -d)"
bash "$script" "$work" "$@"
status=$?
exclude=()
[[ "${KEEP_REPORTS:-0}" == 1 ]] || exclude=(--exclude='*.ncu-rep')
tar -C "$work" "${exclude[@]}" -cJf "$out/$name.tar.xz" .
echo "devcall: $script exit $status; $(tar -tJf "$out/$name.tar.xz" | grep -vc '/$') files in $out/$name.tar.xz ($(du -h "$out/$name.tar.xz" | cut -f 1))"
exit "$status"
