#!/bin/bash
# Starts moat the way hive starts a client.
#
# Files hive mounts (all but genesis.json optional):
#   /genesis.json   the chain's genesis; its `config` is rebuilt from HIVE_* (mapper.jq)
#   /chain.rlp      blocks to import before starting
#   /blocks/        more blocks, one file each, imported in numeric order
#   /keys/          clique keys (moat has no clique: ignored)
#
# Environment:
#   HIVE_CHAIN_ID, HIVE_FORK_*, HIVE_MERGE_BLOCK_ID, HIVE_TERMINAL_TOTAL_DIFFICULTY,
#   HIVE_*_TIMESTAMP, HIVE_*_BLOB_*, HIVE_DEPOSIT_CONTRACT_ADDRESS   the chain (mapper.jq)
#   HIVE_BOOTNODE        enode URL(s) to connect to
#   HIVE_NETWORK_ID      network id of the eth handshake (default 1337, as geth's script)
#   HIVE_NODETYPE        "", full: full sync; archive: full sync (moat keeps state for the
#                        last 128 blocks only); snap: refused (not built)
#   HIVE_LOGLEVEL        0-5, geth's verbosity
#   HIVE_TARGET_GAS_LIMIT, HIVE_MINER_EXTRA   block building
#   HIVE_MINER, HIVE_CLIQUE_*, HIVE_GRAPHQL_ENABLED, HIVE_LES_SERVER   not supported: ignored
#
# For trying the script outside a container:
#   MOAT_HIVE_ROOT   directory holding the files above (default: /)
#   MOAT_BIN         the moat binary (default: /usr/local/bin/moat)
#   MOAT_DATADIR     the database (default: /moat-hive-datadir)
#   MOAT_HIVE_PORTS  "http ws authrpc p2p" (default: "8545 8546 8551 30303")
#   MOAT_HIVE_ADDR   the address to listen on (default: 0.0.0.0)
#   MOAT_HIVE_DRY_RUN=1   print the genesis and the command, start nothing

set -e

root=${MOAT_HIVE_ROOT:-}
moat=${MOAT_BIN:-/usr/local/bin/moat}
datadir=${MOAT_DATADIR:-/moat-hive-datadir}
addr=${MOAT_HIVE_ADDR:-0.0.0.0}
read -r http_port ws_port auth_port p2p_port <<< "${MOAT_HIVE_PORTS:-8545 8546 8551 30303}"
here=$(dirname "$0")
mapper="$root/mapper.jq"
[ -f "$mapper" ] || mapper="$here/mapper.jq"

FLAGS=()

if [ -n "$HIVE_LOGLEVEL" ]; then
    FLAGS+=(--verbosity "$HIVE_LOGLEVEL")
fi

case "$HIVE_NODETYPE" in
    "" | full) ;;
    archive)
        echo "moat keeps the state of the last 128 blocks only: running a full node" ;;
    snap)
        echo "HIVE_NODETYPE=snap: moat has no snap sync"
        exit 1 ;;
    *)
        echo "Unsupported HIVE_NODETYPE = $HIVE_NODETYPE"
        exit 1 ;;
esac

for unsupported in HIVE_MINER HIVE_CLIQUE_PERIOD HIVE_CLIQUE_PRIVATEKEY HIVE_GRAPHQL_ENABLED HIVE_LES_SERVER; do
    if [ -n "${!unsupported}" ]; then
        echo "$unsupported is not supported by moat: ignored"
    fi
done

# The chain: hive's genesis with its config rebuilt from the environment.
genesis="$datadir-genesis.json"
mkdir -p "$(dirname "$genesis")"
jq -f "$mapper" "$root/genesis.json" > "$genesis"
if [ "${HIVE_LOGLEVEL:-3}" -lt 4 ]; then
    echo "Genesis (prefunded accounts left out; --sim.loglevel 4 shows them):"
    jq 'del(.alloc)' "$genesis"
else
    echo "Genesis:"
    cat "$genesis"
fi

FLAGS+=(--network "$genesis" --datadir "$datadir")

if [ -n "$HIVE_NETWORK_ID" ]; then
    FLAGS+=(--networkid "$HIVE_NETWORK_ID")
else
    FLAGS+=(--networkid 1337)
fi
if [ -n "$HIVE_BOOTNODE" ]; then
    FLAGS+=(--bootnodes "$HIVE_BOOTNODE")
fi
if [ -n "$HIVE_TARGET_GAS_LIMIT" ]; then
    FLAGS+=(--miner.gaslimit "$HIVE_TARGET_GAS_LIMIT")
fi
if [ -n "$HIVE_MINER_EXTRA" ]; then
    FLAGS+=(--miner.extradata "$HIVE_MINER_EXTRA")
fi

apis=admin,debug,eth,net,txpool,web3,testing
FLAGS+=(--http --http.addr "$addr" --http.port "$http_port" --http.api "$apis" --http.vhosts '*')
FLAGS+=(--ws --ws.addr "$addr" --ws.port "$ws_port" --ws.api "$apis" --ws.origins '*')
# The engine API always: hive's secret, as its simulators sign with it.
jwt="$datadir-jwtsecret"
echo "0x7365637265747365637265747365637265747365637265747365637265747365" > "$jwt"
FLAGS+=(--authrpc.addr "$addr" --authrpc.port "$auth_port" --authrpc.jwtsecret "$jwt" --authrpc.vhosts '*')
FLAGS+=(--port "$p2p_port")

# Announce the container's address to peers (devp2p tests read it from the enode).
if [ -z "$MOAT_HIVE_ROOT" ] && command -v ip > /dev/null; then
    ip=$(ip addr show eth0 2> /dev/null | grep 'inet ' | awk '{print $2}' | cut -d/ -f1)
    if [ -n "$ip" ]; then
        FLAGS+=(--nat "extip:$ip")
    fi
fi

if [ "$MOAT_HIVE_DRY_RUN" = "1" ]; then
    echo "moat ${FLAGS[*]}"
    exit 0
fi

echo "Writing the genesis..."
"$moat" init --network "$genesis" --datadir "$datadir"

# Some imports are meant to fail (hive's consensus tests): the node starts on what it has.
set +e
if [ -f "$root/chain.rlp" ]; then
    echo "Importing chain.rlp..."
    "$moat" import --network "$genesis" --datadir "$datadir" "$root/chain.rlp"
else
    echo "No chain.rlp."
fi
if [ -d "$root/blocks" ]; then
    echo "Importing blocks/..."
    # One at a time, so a bad block stops only itself (and its descendants).
    while read -r block; do
        "$moat" import --network "$genesis" --datadir "$datadir" "$root/blocks/$block"
    done < <(find "$root/blocks" -maxdepth 1 -type f -printf '%f\n' | sort -n)
fi
set -e

echo "Running moat ${FLAGS[*]}"
exec "$moat" "${FLAGS[@]}"
