#!/bin/bash
# Prints the node's enode URL (hive copies this into its containers as /hive-bin/enode.sh).
set -e
port=${MOAT_HIVE_HTTP_PORT:-8545}
response=$(curl -s -X POST -H "Content-Type: application/json" \
    --data '{"jsonrpc":"2.0","method":"admin_nodeInfo","params":[],"id":1}' "127.0.0.1:$port")
echo "$response" | jq -r '.result.enode'
