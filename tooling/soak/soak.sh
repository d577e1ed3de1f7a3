#!/bin/sh
# make soak: moat-soak against moat for MINUTES (default 30) and, when GETH names a
# go-ethereum binary, against geth at the same time (side by side on its own ports), so
# both share the machine's conditions. Each run's output and samples go to SOAK_DIR
# (default /tmp/soak): moat.txt and moat.csv, geth.txt and geth.csv. SOAK_FLAGS: more
# moat-soak flags for both (e.g. --rpc-rate 400); NODE_ARGS: more flags for both nodes
# (e.g. "--cache 128"). Exit status: moat's run's (0: every
# metric levels off, 2: one does not, 1: the run failed), or 1 when geth's run failed.
set -u
BIN=${BIN:-target/release}
MINUTES=${MINUTES:-30}
OUT=${SOAK_DIR:-/tmp/soak}
mkdir -p "$OUT"
GPID=""
if [ -n "${GETH:-}" ]; then
    "$BIN/moat-soak" --geth "$GETH" --minutes "$MINUTES" --csv "$OUT/geth.csv" \
        --node-args "${NODE_ARGS:-}" ${SOAK_FLAGS:-} > "$OUT/geth.txt" 2>&1 &
    GPID=$!
fi
"$BIN/moat-soak" --moat "$BIN/moat" --minutes "$MINUTES" --csv "$OUT/moat.csv" \
    --node-args "${NODE_ARGS:-}" ${SOAK_FLAGS:-} > "$OUT/moat.txt" 2>&1 &
MPID=$!
# Each tool stops its node when it is stopped.
trap 'kill $MPID $GPID 2>/dev/null' INT TERM
echo "soak: $MINUTES min; follow it with: tail -f $OUT/moat.txt${GPID:+ $OUT/geth.txt}"
MSTATUS=0
wait $MPID || MSTATUS=$?
GSTATUS=0
if [ -n "$GPID" ]; then
    wait $GPID || GSTATUS=$?
fi
for f in "$OUT/moat.txt" ${GPID:+"$OUT/geth.txt"}; do
    echo "== $f"
    # The header and the summary (the sample lines are in the file and the CSV).
    sed -n '/^node:/,/^pid:/p; /^node stopped/,$p; /^error/p' "$f"
done
[ "$MSTATUS" -ne 0 ] && exit "$MSTATUS"
[ "$GSTATUS" -eq 1 ] && exit 1
exit 0
