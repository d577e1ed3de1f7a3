#!/bin/bash
# One seed of moat-pool-quality against a fresh moat, geth or reth node:
#   tooling/pool-quality/against.sh moat|geth|reth SEED [--blobs] [--senders N]
# Run from the repository root after `cargo build --release -p moat -p moat-pool-quality`
# (GETH=path/to/geth for geth, RETH=path/to/reth for reth). The node runs on the tool's genesis in a fresh datadir
# under $WORK (default /tmp/pool-quality), loopback only, discovery off; the tool sends the
# local part of the stream over RPC and the remote part over RLPx from its peers, then
# builds one payload. The datadir is removed afterwards; the tool's output stays there.
# Ports: HTTP_PORT, AUTH_PORT, P2P_PORT (defaults 18545, 18551, 30399); NODE_ARGS adds
# flags to the node's command line (e.g. NODE_ARGS="--txpool.letgo 0" for moat).
set -u
NODE=$1; SEED=$2; shift 2
MODE=plain; EXTRA=()
for a in "$@"; do [ "$a" = "--blobs" ] && MODE=blobs; EXTRA+=("$a"); done
TOOL=${TOOL:-./target/release/moat-pool-quality}
MOAT=${MOAT:-./target/release/moat}
GETH=${GETH:-geth}
RETH=${RETH:-reth}
WORK=${WORK:-/tmp/pool-quality}
D=$WORK/$NODE-$MODE-$SEED; rm -rf "$D"; mkdir -p "$D"
G=$WORK/genesis-$MODE.json
JWT=$WORK/jwt.hex; [ -f "$JWT" ] || openssl rand -hex 32 > "$JWT"
"$TOOL" "${EXTRA[@]}" --write-genesis "$G" >/dev/null || exit 1
HTTP=${HTTP_PORT:-18545}; AUTH=${AUTH_PORT:-18551}; P2P=${P2P_PORT:-30399}
read -r -a NODE_EXTRA <<< "${NODE_ARGS:-}"
if [ "$NODE" = geth ]; then
  "$GETH" --datadir "$D/db" init "$G" > "$D/init.log" 2>&1
  "$GETH" --datadir "$D/db" --http --http.addr 127.0.0.1 --http.port $HTTP --http.api eth,txpool,admin \
    --authrpc.addr 127.0.0.1 --authrpc.port $AUTH --authrpc.jwtsecret "$JWT" --port $P2P --nodiscover \
    --nat none --maxpeers 20 --ipcdisable --syncmode full "${NODE_EXTRA[@]}" > "$D/node.log" 2>&1 &
elif [ "$NODE" = reth ]; then
  "$RETH" init --datadir "$D/db" --chain "$G" > "$D/init.log" 2>&1
  "$RETH" node --datadir "$D/db" --chain "$G" --http --http.addr 127.0.0.1 --http.port $HTTP \
    --http.api eth,txpool,admin --authrpc.addr 127.0.0.1 --authrpc.port $AUTH \
    --authrpc.jwtsecret "$JWT" --port $P2P --addr 127.0.0.1 --disable-discovery --nat none \
    --max-outbound-peers 0 --max-inbound-peers 20 --ipcdisable "${NODE_EXTRA[@]}" > "$D/node.log" 2>&1 &
else
  "$MOAT" init --datadir "$D/db" --network "$G" > "$D/init.log" 2>&1
  "$MOAT" --datadir "$D/db" --network "$G" --http --http.addr 127.0.0.1 --http.port $HTTP \
    --http.api eth,txpool,admin --authrpc.addr 127.0.0.1 --authrpc.port $AUTH \
    --authrpc.jwtsecret "$JWT" --port $P2P --nodiscover --maxpeers 20 "${NODE_EXTRA[@]}" > "$D/node.log" 2>&1 &
fi
PID=$!
E=
for _ in $(seq 1 60); do
  E=$(curl -s -m 2 -H 'Content-Type: application/json' \
    -d '{"jsonrpc":"2.0","id":1,"method":"admin_nodeInfo","params":[]}' http://127.0.0.1:$HTTP |
    python3 -c 'import sys,json; print(json.load(sys.stdin)["result"]["enode"])' 2>/dev/null)
  [ -n "$E" ] && break; sleep 0.5
done
ENODE=$(echo "$E" | sed -E "s/@[^?]*/@127.0.0.1:$P2P/; s/\?.*//")
"$TOOL" "${EXTRA[@]}" --seeds "$SEED" --rpc 127.0.0.1:$HTTP --engine 127.0.0.1:$AUTH \
  --jwtsecret "$JWT" --enode "$ENODE" > "$D/out.txt" 2> "$D/err.txt"
RC=$?
kill $PID; wait $PID 2>/dev/null
rm -rf "$D/db"
cat "$D/out.txt"
exit $RC
