#!/bin/sh
# make attack-table: moat-attack-table against a moat dev node (gossip and RPC forms) and,
# when GETH names a go-ethereum binary, against geth's dev mode (RPC form: geth's dev mode
# has no p2p). Everything listens on 127.0.0.1 (attackers connect from 127.0.0.10-13); each
# node is stopped at the end. SECONDS_PER_PHASE (default 5) and SCENARIOS (comma-separated)
# pass through. Ports: 37391-37392 and 37591-37596 by default (P2P_PORT, HTTP_PORT,
# WS_PORT, AUTH_PORT, METRICS_PORT for moat; GETH_P2P_PORT, GETH_HTTP_PORT,
# GETH_AUTH_PORT for geth).
# MOAT_FLAGS: more flags for every moat node (e.g. --txpool.nolanes).
# PEER_SENDERS (default 32): the dev-mode honest peer's senders (funded first). blob-v1
# and cells (eth/72) run on a second moat dev node with Osaka active (--dev.osaka).
# With GETH, the gossip form also runs on both nodes over the ethtest chain, a fresh node
# per row, and blob-v1 and cells over devp2p on an Osaka genesis made from it (ETHTEST_ONLY=1:
# only those parts).
set -eu
BIN=${BIN:-target/release}
PHASE=${SECONDS_PER_PHASE:-5}
P2P_PORT=${P2P_PORT:-37391}
HTTP_PORT=${HTTP_PORT:-37591}
WS_PORT=${WS_PORT:-37592}
AUTH_PORT=${AUTH_PORT:-37593}
METRICS_PORT=${METRICS_PORT:-37594}
GETH_P2P_PORT=${GETH_P2P_PORT:-37392}
GETH_HTTP_PORT=${GETH_HTTP_PORT:-37595}
GETH_AUTH_PORT=${GETH_AUTH_PORT:-37596}
PEER_SENDERS=${PEER_SENDERS:-32}
SCEN=${SCENARIOS:-fresh-keys,cache-churn,repeat,blob-v0,rpc-flood,announce,invalidation,blob-v1,cells}
# Dev keys 2-3 fund the blob spammers (blob txs must pass the balance check to reach KZG),
# dev key 4 the invalidation storm's senders.
BLOBKEYS=0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a,0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6
STORMKEY=0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a
# Prague takes version-0 sidecars only, Osaka version-1 only: blob-v1 and cells (eth/72's
# bodies and cells, version 1 only) get their own node.
SCEN_MAIN=$(echo "$SCEN" | tr ',' '\n' | grep -v '^blob-v1$\|^cells$' | paste -sd, -)
SCEN_OSAKA=$(echo "$SCEN" | tr ',' '\n' | grep '^blob-v1$\|^cells$' | paste -sd, - || true)
# WORKDIR: where the nodes' datadirs go (default /tmp; /dev/shm takes the disk's fsync
# latency out of the honest RPC calls, which return once the tx is journaled).
DIR=$(mktemp -d "${WORKDIR:-/tmp}/moat-attack-table.XXXXXX")
PIDS=""
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    sleep 1
    rm -rf "$DIR"
}
trap cleanup EXIT INT TERM

rpc() { # rpc PORT METHOD PARAMS
    curl -s -m 2 -H 'Content-Type: application/json' \
        -d "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"$2\",\"params\":$3}" "http://127.0.0.1:$1"
}
wait_rpc() { # wait_rpc PORT
    i=0
    until rpc "$1" eth_chainId '[]' | grep -q result; do
        i=$((i + 1)); [ $i -gt 100 ] && { echo "node on :$1 did not start" >&2; exit 1; }
        sleep 0.2
    done
}

# moat: dev chain, the well-known dev keys 0 (honest peer) and 1 (honest RPC).
moat_table() { # moat_table LABEL SCENARIOS [extra moat flags]
    label=$1; scen=$2; shift 2
    "$BIN/moat" --dev --dev.period 2 --maxpeers 50 --nodiscover --p2p.addr 127.0.0.1 \
        --port $P2P_PORT --http.port $HTTP_PORT --ws.port $WS_PORT --authrpc.port $AUTH_PORT \
        --metrics.port $METRICS_PORT \
        --nodekeyhex 4b1d0000000000000000000000000000000000000000000000000000000000a7 \
        --http.api eth,net,web3,admin --metrics --datadir "$DIR/$label" ${MOAT_FLAGS:-} "$@" \
        > "$DIR/$label.log" 2>&1 &
    MOAT=$!
    PIDS="$PIDS $MOAT"
    wait_rpc $HTTP_PORT
    ENODE=$(rpc $HTTP_PORT admin_nodeInfo '[]' | sed -n 's/.*"enode":"\([^"]*\)".*/\1/p')
    [ -n "$ENODE" ] || { echo "no enode from admin_nodeInfo" >&2; exit 1; }
    "$BIN/moat-attack-table" --label "$label" --rpc 127.0.0.1:$HTTP_PORT --target "$ENODE" --pid "$MOAT" \
        --peer-key 0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80 \
        --rpc-key 0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d \
        --blob-keys "$BLOBKEYS" --storm-key "$STORMKEY" --metrics 127.0.0.1:$METRICS_PORT \
        --peer-senders "$PEER_SENDERS" --seconds "$PHASE" --scenarios "$scen" || true
    kill "$MOAT"; PIDS=""
    # The next node takes the same ports: wait until this one is gone.
    wait "$MOAT" 2>/dev/null || true
}
if [ -z "${ETHTEST_ONLY:-}" ]; then
[ -n "$SCEN_MAIN" ] && moat_table moat "$SCEN_MAIN"
[ -n "$SCEN_OSAKA" ] && moat_table moat-osaka "$SCEN_OSAKA" --dev.osaka
fi

if [ -n "${GETH:-}" ] && [ -z "${ETHTEST_ONLY:-}" ]; then
    # geth --dev funds its fixed developer key (cmd/utils DeveloperKey).
    "$GETH" --dev --dev.period 2 --datadir "$DIR/geth" --http --http.addr 127.0.0.1 \
        --http.port $GETH_HTTP_PORT --authrpc.port $GETH_AUTH_PORT --port $GETH_P2P_PORT \
        --nodiscover --maxpeers 0 \
        --datadir.minfreedisk 1 \
        > "$DIR/geth.log" 2>&1 &
    GPID=$!
    PIDS="$GPID"
    wait_rpc $GETH_HTTP_PORT
    DEVKEY=0xb71c71a67e1177ad4e901695e1b4b9ee17ae16c6668d313eac2f96dbcda3f291
    "$BIN/moat-attack-table" --label go-ethereum --rpc 127.0.0.1:$GETH_HTTP_PORT --pid "$GPID" \
        --peer-key $DEVKEY --rpc-key $DEVKEY --seconds "$PHASE" --scenarios "$SCEN" || true
    kill "$GPID"; PIDS=""
    # The gossip form's geth takes the same ports: wait until this one is gone.
    wait "$GPID" 2>/dev/null || true
fi

if [ -n "${GETH:-}" ]; then
    # The gossip form on both nodes: each imports the ethtest chain and is made synced by
    # a forkchoice update naming its head (geth takes peers' txs only once synced). No
    # consensus client, so no blocks: the invalidation storm and blob-v1 do not run here,
    # and the honest traffic is slower (50 and 20 tx/s). Its txs are never mined, so each
    # row gets a fresh node on a fresh copy of the imported datadir (an empty pool): the
    # honest senders' unmined txs of earlier rows would otherwise fill pending past half,
    # where a sender's run stops growing past its slots and the honest peer is refused.
    T=${ETHTEST:-../shared/testdata/ethtest}
    SCEN_GOSSIP=$(echo "$SCEN" | tr ',' '\n' | grep -v '^invalidation$\|^blob-v1$\|^cells$' | paste -sd, -)
    KEYS=$(sed -n 's/.*"key": *"\(0x[0-9a-f]*\)".*/\1/p' "$T/accounts.json" | head -4)
    K1=$(echo "$KEYS" | sed -n 1p); K2=$(echo "$KEYS" | sed -n 2p)
    K34=$(echo "$KEYS" | sed -n 3,4p | paste -sd, -)
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DIR/jwt.hex"
    gossip_table() { # gossip_table LABEL PID HTTP ENGINE SCENARIO GENESIS FCU-FILE
        wait_rpc "$3"
        ENODE=$(rpc "$3" admin_nodeInfo '[]' | sed -n 's/.*"enode":"\([^"]*\)".*/\1/p' | sed 's/?.*//')
        [ -n "$ENODE" ] || { echo "no enode from admin_nodeInfo" >&2; return; }
        "$BIN/moat-attack-table" --label "$1" --rpc "127.0.0.1:$3" --target "$ENODE" --pid "$2" \
            --network "$6" --fcu "$7" --engine "127.0.0.1:$4" --jwt-secret "$DIR/jwt.hex" \
            --peer-key "$K1" --rpc-key "$K2" --blob-keys "$K34" --metrics 127.0.0.1:$METRICS_PORT \
            --peer-rate 50 --rpc-rate 20 --seconds "$PHASE" --scenarios "$5" || true
        kill "$2"; PIDS=""
        # The next row's node takes the same ports: wait until this one is gone (killed
        # outright after 30 s).
        (sleep 30; kill -9 "$2" 2>/dev/null) & DOG=$!
        wait "$2" 2>/dev/null || true
        kill "$DOG" 2>/dev/null || true
    }
    ethtest_table() { # ethtest_table LABEL PID HTTP ENGINE SCENARIO
        gossip_table "$1" "$2" "$3" "$4" "$5" "$T/genesis.json" "$T/headfcu.json"
    }
    "$BIN/moat" import --network "$T/genesis.json" --datadir "$DIR/moat-ethtest-base" "$T/chain.rlp" \
        > "$DIR/moat-import.log" 2>&1
    for s in $(echo "$SCEN_GOSSIP" | tr ',' ' '); do
        rm -rf "$DIR/moat-ethtest"; cp -a "$DIR/moat-ethtest-base" "$DIR/moat-ethtest"
        "$BIN/moat" --network "$T/genesis.json" --datadir "$DIR/moat-ethtest" --maxpeers 50 \
            --nodiscover --p2p.addr 127.0.0.1 --port $P2P_PORT --http --http.port $HTTP_PORT \
            --http.api eth,net,web3,admin --ws.port $WS_PORT --authrpc.port $AUTH_PORT \
            --authrpc.jwtsecret "$DIR/jwt.hex" --metrics --metrics.port $METRICS_PORT \
            --nodekeyhex 4b1d0000000000000000000000000000000000000000000000000000000000a7 \
            ${MOAT_FLAGS:-} >> "$DIR/moat-ethtest.log" 2>&1 &
        MOAT=$!
        PIDS="$MOAT"
        ethtest_table "moat (ethtest chain)" "$MOAT" $HTTP_PORT $AUTH_PORT "$s"
    done
    # The blob rows over devp2p on both nodes (blob-v1, cells): a fresh Osaka genesis made
    # from the ethtest one (every fork at 0, the merge at genesis, the keys funded), no
    # blocks, a forkchoice update naming its genesis.
    SCEN_OSAKA_GOSSIP=$(echo "$SCEN" | tr ',' '\n' | grep '^blob-v1$\|^cells$' | paste -sd, - || true)
    if [ -n "$SCEN_OSAKA_GOSSIP" ]; then
        python3 - "$T/genesis.json" "$T/accounts.json" "$DIR/osaka-genesis.json" <<'PY'
import json, sys
g = json.load(open(sys.argv[1])); accounts = json.load(open(sys.argv[2]))
c = g["config"]
c.update(terminalTotalDifficulty=0, cancunTime=0, pragueTime=0, osakaTime=0)
c["blobSchedule"]["osaka"] = dict(c["blobSchedule"]["prague"])
g["difficulty"] = "0x0"
norm = lambda a: a.lower().removeprefix("0x")
held = {norm(a): a for a in g["alloc"]}
for address in list(accounts)[:4]:
    key = held.get(norm(address), address)
    g["alloc"].setdefault(key, {})["balance"] = "0xd3c21bcecceda1000000"
json.dump(g, open(sys.argv[3], "w"))
PY
        osaka_table() { # osaka_table LABEL PID HTTP ENGINE SCENARIO: synced at its genesis
            wait_rpc "$3"
            HASH=$(rpc "$3" eth_getBlockByNumber '["0x0",false]' | sed -n 's/.*"hash":"\(0x[0-9a-f]*\)".*/\1/p')
            printf '{"jsonrpc":"2.0","id":1,"method":"engine_forkchoiceUpdatedV3","params":[{"headBlockHash":"%s","safeBlockHash":"%s","finalizedBlockHash":"%s"},null]}' \
                "$HASH" "$HASH" "$HASH" > "$DIR/osaka-fcu.json"
            gossip_table "$1" "$2" "$3" "$4" "$5" "$DIR/osaka-genesis.json" "$DIR/osaka-fcu.json"
        }
        for s in $(echo "$SCEN_OSAKA_GOSSIP" | tr ',' ' '); do
            rm -rf "$DIR/moat-osaka-p2p"
            "$BIN/moat" init --network "$DIR/osaka-genesis.json" --datadir "$DIR/moat-osaka-p2p" > /dev/null 2>&1
            "$BIN/moat" --network "$DIR/osaka-genesis.json" --datadir "$DIR/moat-osaka-p2p" --maxpeers 50 \
                --nodiscover --p2p.addr 127.0.0.1 --port $P2P_PORT --http --http.port $HTTP_PORT \
                --http.api eth,net,web3,admin --ws.port $WS_PORT --authrpc.port $AUTH_PORT \
                --authrpc.jwtsecret "$DIR/jwt.hex" --metrics --metrics.port $METRICS_PORT \
                --nodekeyhex 4b1d0000000000000000000000000000000000000000000000000000000000a7 \
                ${MOAT_FLAGS:-} >> "$DIR/moat-osaka-p2p.log" 2>&1 &
            MOAT=$!
            PIDS="$MOAT"
            osaka_table "moat (Osaka, devp2p)" "$MOAT" $HTTP_PORT $AUTH_PORT "$s"
            rm -rf "$DIR/geth-osaka-p2p"
            "$GETH" init --datadir "$DIR/geth-osaka-p2p" "$DIR/osaka-genesis.json" > "$DIR/geth-osaka-init.log" 2>&1
            "$GETH" --datadir "$DIR/geth-osaka-p2p" --syncmode full --nodiscover --nat none \
                --netrestrict 127.0.0.0/8 --port $GETH_P2P_PORT --maxpeers 50 --http --http.addr 127.0.0.1 \
                --http.port $GETH_HTTP_PORT --http.api eth,net,web3,admin --authrpc.port $GETH_AUTH_PORT \
                --authrpc.jwtsecret "$DIR/jwt.hex" --datadir.minfreedisk 1 \
                >> "$DIR/geth-osaka-p2p.log" 2>&1 &
            GPID=$!
            PIDS="$GPID"
            osaka_table "go-ethereum (Osaka, devp2p)" "$GPID" $GETH_HTTP_PORT $GETH_AUTH_PORT "$s"
        done
    fi
    "$GETH" init --datadir "$DIR/geth-ethtest-base" "$T/genesis.json" > "$DIR/geth-init.log" 2>&1
    "$GETH" import --datadir "$DIR/geth-ethtest-base" "$T/chain.rlp" > "$DIR/geth-import.log" 2>&1
    for s in $(echo "$SCEN_GOSSIP" | tr ',' ' '); do
        rm -rf "$DIR/geth-ethtest"; cp -a "$DIR/geth-ethtest-base" "$DIR/geth-ethtest"
        "$GETH" --datadir "$DIR/geth-ethtest" --syncmode full --nodiscover --nat none \
            --netrestrict 127.0.0.0/8 --port $GETH_P2P_PORT --maxpeers 50 --http --http.addr 127.0.0.1 \
            --http.port $GETH_HTTP_PORT --http.api eth,net,web3,admin --authrpc.port $GETH_AUTH_PORT \
            --authrpc.jwtsecret "$DIR/jwt.hex" --datadir.minfreedisk 1 \
            >> "$DIR/geth-ethtest.log" 2>&1 &
        GPID=$!
        PIDS="$GPID"
        ethtest_table "go-ethereum (ethtest chain)" "$GPID" $GETH_HTTP_PORT $GETH_AUTH_PORT "$s"
    done
fi
