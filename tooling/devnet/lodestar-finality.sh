#!/usr/bin/env bash
# lodestar-finality.sh: moat's `safe` and `finalized` block tags checked against a real consensus
# client (Lodestar v1.22.0 in dev mode, 8 validators, 4-second slots, 8-slot epochs).
#
# What it does, all on 127.0.0.1 (moat runs with --nodiscover --maxpeers 0):
#  1. fresh temp dirs (mktemp -d) and a JWT secret; `moat init` with the kit's el-genesis.json;
#     starts moat; before any consensus client exists, checks that `safe`/`finalized` answer
#     "... block not found";
#  2. starts the Lodestar devnet (the kit's devnet.sh) against moat's engine API; sends a few
#     transfers signed with the prefunded key 0x…01 (ethers from the kit's node_modules) and checks
#     their receipts (status 0x1);
#  3. every ~2 s reads the CL's finality checkpoints (/eth/v1/beacon/states/head/finality_checkpoints)
#     and the execution block hashes of the finalized and current-justified checkpoint blocks
#     (/eth/v2/beacon/blocks/<root> -> execution_payload.block_hash; epoch 0 / genesis -> the EL
#     genesis hash, which is what Lodestar's fork choice names), and compares them with moat's
#     eth_getBlockByNumber("finalized"/"safe").hash. Lodestar sends the justified checkpoint's block
#     as safeBlockHash. A poll that mismatches counts as a mismatch only if the next poll
#     mismatches too (the two reads race with the CL's forkchoiceUpdated);
#  4. once the CL has finalized epoch EPOCHS: kill -9 moat, restart it on the same datadir (first a
#     probe on another engine port, so that no forkchoiceUpdated can reach it, to check that
#     `finalized` survived the crash; then with the same flags as before), lets the CL drive it
#     RESTART_EPOCHS more epochs and compares again;
#  5. prints a summary; exits 0 only if finality was reached, no mismatch persisted, the transfers
#     succeeded and the restart checks passed.
#
# Prerequisite: the Lodestar kit must be built first, once, as ../shared/devnet/lodestar/README.md
# (beside this repository) says: a git copy of ChainSafe/lodestar, then
# `LSDEVNET_GIT=<its git dir> ./build.sh`. The built tree is $LSDEVNET_DIR/ls (default
# ~/.cache/lodestar-devnet/ls).
#
# Usage:  tooling/devnet/lodestar-finality.sh [MOAT_BINARY]
#   MOAT_BINARY (or env MOAT)  default: target/release/moat of this repo
# Env:    EPOCHS (10)  RESTART_EPOCHS (2)  TIME_LIMIT (s; default EPOCHS*8*4*3+120)  TXS (3)
#         HTTP_PORT (28545)  AUTH_PORT (28551)  PROBE_AUTH_PORT (28561)  MOAT_P2P_PORT (29003)
#         REST_PORT (29596)  P2P_PORT (29001)  SLOT_SECONDS (4)
#         LODESTAR_KIT (default <repo>/../shared/devnet/lodestar)  LSDEVNET_DIR (see the kit)
#         LOG_DIR  if set, moat's and Lodestar's logs and the poll record are copied there on exit
# Example: EPOCHS=10 LOG_DIR=/tmp/lf-logs tooling/devnet/lodestar-finality.sh target/debug/moat
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
KIT="${LODESTAR_KIT:-$ROOT/../shared/devnet/lodestar}"
LS="${LSDEVNET_DIR:-$HOME/.cache/lodestar-devnet}/ls"
MOAT="${1:-${MOAT:-$ROOT/target/release/moat}}"
EPOCHS="${EPOCHS:-10}"
RESTART_EPOCHS="${RESTART_EPOCHS:-2}"
SLOT_SECONDS="${SLOT_SECONDS:-4}"
SLOTS_PER_EPOCH=8 # the kit's Lodestar runs the minimal preset
TIME_LIMIT="${TIME_LIMIT:-$((EPOCHS * SLOTS_PER_EPOCH * SLOT_SECONDS * 3 + 120))}"
RESTART_TIME_LIMIT="${RESTART_TIME_LIMIT:-$(((RESTART_EPOCHS + 2) * SLOTS_PER_EPOCH * SLOT_SECONDS * 3 + 120))}"
TXS="${TXS:-3}"
HTTP_PORT="${HTTP_PORT:-28545}"
AUTH_PORT="${AUTH_PORT:-28551}"
PROBE_AUTH_PORT="${PROBE_AUTH_PORT:-28561}"
MOAT_P2P_PORT="${MOAT_P2P_PORT:-29003}"
REST_PORT="${REST_PORT:-29596}"
P2P_PORT="${P2P_PORT:-29001}"
LOG_DIR="${LOG_DIR:-}"

die() { echo "lodestar-finality: $*" >&2; exit 2; }
say() { echo "== $(date +%T) $*"; }

# ---- prerequisites ----------------------------------------------------------------------------
[ -f "$KIT/devnet.sh" ] && [ -f "$KIT/el-genesis.json" ] ||
  die "Lodestar kit not found at $KIT (set LODESTAR_KIT); see ../shared/devnet/lodestar/README.md"
[ -f "$LS/packages/cli/lib/index.js" ] && [ -f "$LS/node_modules/ethers/package.json" ] ||
  die "the Lodestar kit is not built ($LS/packages/cli/lib/index.js missing). Build it first as $KIT/README.md says: a git copy of ChainSafe/lodestar, then LSDEVNET_GIT=<git dir> $KIT/build.sh"
[ -x "$MOAT" ] || die "moat binary '$MOAT' not found or not executable (give it as the first argument or MOAT=...)"
for tool in curl node python3 openssl ss; do
  command -v "$tool" >/dev/null || die "$tool is needed"
done
for p in "$HTTP_PORT" "$AUTH_PORT" "$PROBE_AUTH_PORT" "$MOAT_P2P_PORT" "$REST_PORT" "$P2P_PORT"; do
  [ -z "$(ss -ltnH "( sport = :$p )")" ] || die "port $p is in use on this machine; choose other ports (see the header)"
done

WORK="$(mktemp -d /tmp/lodestar-finality.XXXXXX)"
EL_DIR="$WORK/el" CL_DIR="$WORK/cl" JWT="$WORK/jwt.hex" STATE="$WORK/state.json"
mkdir -p "$EL_DIR" "$CL_DIR"
PIDS=()

stop_pid() { # stop_pid PID SIGNAL: signal one process we started, wait for it (bounded)
  local pid="$1" sig="${2:-TERM}" i
  kill -0 "$pid" 2>/dev/null || return 0
  kill "-$sig" "$pid" 2>/dev/null || true
  for i in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  local rc=$? pid
  trap - EXIT INT TERM
  for pid in "${PIDS[@]}"; do stop_pid "$pid" TERM; done
  if [ -n "$LOG_DIR" ]; then
    mkdir -p "$LOG_DIR" && cp -f "$WORK"/*.log "$WORK/state.json" "$LOG_DIR"/ 2>/dev/null || true
    echo "logs copied to $LOG_DIR"
  elif [ "$rc" -ne 0 ]; then
    for f in "$WORK"/*.log; do [ -f "$f" ] && { echo "---- last lines of $(basename "$f")"; tail -n 15 "$f"; }; done
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

openssl rand -hex 32 >"$JWT"
EL_RPC="http://127.0.0.1:$HTTP_PORT"
MOAT_FLAGS=(--network "$KIT/el-genesis.json" --datadir "$EL_DIR" --http --http.port "$HTTP_PORT"
  --authrpc.jwtsecret "$JWT" --nodiscover --maxpeers 0 --port "$MOAT_P2P_PORT" --p2p.addr 127.0.0.1)

start_moat() { # start_moat AUTHPORT LOGNAME: starts moat in the background, sets MOAT_PID
  "$MOAT" "${MOAT_FLAGS[@]}" --authrpc.port "$1" >>"$WORK/$2" 2>&1 &
  MOAT_PID=$!
  PIDS+=("$MOAT_PID")
  local i
  for i in $(seq 1 120); do
    curl -sf -m 2 -H 'Content-Type: application/json' \
      --data '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}' "$EL_RPC" >/dev/null && return 0
    kill -0 "$MOAT_PID" 2>/dev/null || die "moat exited at start; see $2: $(tail -n 5 "$WORK/$2")"
    sleep 0.5
  done
  die "moat's RPC did not answer within 60 s"
}

# ---- the poll loop (python3, standard library only) ---------------------------------------------
cat >"$WORK/monitor.py" <<'PY'
import json, os, sys, time, urllib.request, urllib.error

EL = os.environ["EL_RPC"]; CL = os.environ["CL_REST"]; STATE = os.environ["STATE"]
ZERO = "0x" + "00" * 32

def http(url, body=None, timeout=5):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())

class RpcError(Exception):
    pass

def rpc(method, params):
    r = http(EL, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    if "error" in r:
        raise RpcError("%s %s" % (r["error"].get("code"), r["error"].get("message")))
    return r["result"]

def el_tag(tag):
    """moat's answer for a tag: {"num", "hash"} or {"err"}."""
    try:
        b = rpc("eth_getBlockByNumber", [tag, False])
    except RpcError as e:
        return {"err": str(e)}
    except Exception as e:  # connection refused and the like
        return {"err": "transport: %s" % e}
    if b is None:
        return {"err": "null"}
    return {"num": int(b["number"], 16), "hash": b["hash"]}

def show(t):
    return str(t["num"]) if "num" in t else "ERR(%s)" % t["err"]

def load():
    with open(STATE) as f:
        return json.load(f)

def save(s):
    tmp = STATE + ".tmp"
    with open(tmp, "w") as f:
        json.dump(s, f, indent=1)
    os.replace(tmp, STATE)

payload_cache = {}
def exec_of(root, genesis_hash):
    """(execution block hash, number) of a beacon block root, as Lodestar's fork choice has it:
    the zero root (epoch-0 checkpoint) and the genesis block name the EL genesis."""
    if root == ZERO:
        return genesis_hash, 0
    if root not in payload_cache:
        msg = http(CL + "/eth/v2/beacon/blocks/" + root)["data"]["message"]
        p = msg["body"].get("execution_payload")
        if int(msg["slot"]) == 0 or p is None or p["block_hash"] == ZERO:
            payload_cache[root] = (genesis_hash, 0)
        else:
            payload_cache[root] = (p["block_hash"], int(p["block_number"]))
    return payload_cache[root]

def cl_view(genesis_hash):
    fc = http(CL + "/eth/v1/beacon/states/head/finality_checkpoints")["data"]
    slot = int(http(CL + "/eth/v1/beacon/headers/head")["data"]["header"]["message"]["slot"])
    fin, just = fc["finalized"], fc["current_justified"]
    fh, fn = exec_of(fin["root"], genesis_hash)
    jh, jn = exec_of(just["root"], genesis_hash)
    return {"slot": slot, "fin_epoch": int(fin["epoch"]), "fin_root": fin["root"], "fin_hash": fh,
            "fin_num": fn, "just_epoch": int(just["epoch"]), "just_hash": jh, "just_num": jn}

def fork_choice_store():
    try:
        d = http(CL + "/eth/v1/debug/fork_choice", timeout=10)
        return "fork-choice store: justified %s finalized %s" % (d["justified_checkpoint"], d["finalized_checkpoint"])
    except Exception as e:
        return "fork-choice store: unavailable (%s)" % e

def send_txs(s):
    sent = []
    for raw in s["raw_txs"]:
        try:
            sent.append(rpc("eth_sendRawTransaction", [raw]))
        except Exception as e:
            print("  transfer refused: %s" % e, flush=True)
            sent.append(None)
    s["tx_hashes"] = sent
    print("  sent %d transfers: %s" % (len(sent), ", ".join(str(h) for h in sent)), flush=True)

def check_receipts(s):
    for h in s.get("tx_hashes") or []:
        if h is None or h in s["receipts"]:
            continue
        try:
            r = rpc("eth_getTransactionReceipt", [h])
        except Exception:
            r = None
        if r:
            s["receipts"][h] = {"status": r["status"], "block": int(r["blockNumber"], 16)}
            print("  receipt %s: status %s in block %d" % (h[:12], r["status"], int(r["blockNumber"], 16)), flush=True)

def poll_loop(phase, target_epoch, limit, send=False, record=True):
    s = load()
    gh = s["genesis_hash"]
    deadline = time.time() + limit
    prev_bad = False
    ok_exit = False
    max_polls = int(limit / 2) + 30
    for _ in range(max_polls):
        if time.time() > deadline:
            break
        t0 = time.time()
        try:
            cl = cl_view(gh)
        except Exception as e:
            print("[%s] CL not answering yet (%s)" % (phase, e), flush=True)
            time.sleep(2)
            continue
        latest, safe, fin = el_tag("latest"), el_tag("safe"), el_tag("finalized")
        pre_fcu = cl["slot"] == 0 and "err" in fin
        fin_ok = fin.get("hash") == cl["fin_hash"]
        safe_ok = safe.get("hash") == cl["just_hash"]
        s["polls"] += 1
        s["phase_polls"][phase] = s["phase_polls"].get(phase, 0) + 1
        if pre_fcu:
            verdict = "pre-FCU"
            s["pre_fcu_polls"] += 1
            prev_bad = False
        elif fin_ok and safe_ok:
            verdict = "yes"
            s["matches"] += 1
            prev_bad = False
        else:
            what = ",".join(w for w, ok in (("finalized", fin_ok), ("safe", safe_ok)) if not ok)
            if prev_bad:
                verdict = "NO (%s) PERSISTENT" % what
                s["mismatches"] += 1
                s["mismatch_log"].append({"phase": phase, "cl": cl, "el": {"latest": latest, "safe": safe, "finalized": fin}})
                print("  " + fork_choice_store(), flush=True)
            else:
                verdict = "no (%s) transient" % what
                s["transient"] += 1
            prev_bad = True
        if "num" in fin and fin["num"] > 0 and s["first_el_finalized"] is None:
            s["first_el_finalized"] = {"phase": phase, "slot": cl["slot"], "cl_fin_epoch": cl["fin_epoch"], "el_fin": fin["num"]}
        if cl["fin_epoch"] > 0 and s["first_cl_fin_epoch"] is None:
            s["first_cl_fin_epoch"] = cl["fin_epoch"]
            s["first_cl_fin_slot"] = cl["slot"]
        if verdict == "yes" and cl["fin_epoch"] not in {c["epoch"] for c in s["checkpoints"]}:
            s["checkpoints"].append({"phase": phase, "epoch": cl["fin_epoch"], "slot": cl["slot"], "cl_el_num": cl["fin_num"],
                                     "el_fin": fin.get("num"), "cl_just_el_num": cl["just_num"], "el_safe": safe.get("num")})
        print("[%s] poll %3d slot %3d | CL fin ep %2d (el#%d) just ep %2d (el#%d) | EL latest %s safe %s fin %s | match %s"
              % (phase, s["polls"], cl["slot"], cl["fin_epoch"], cl["fin_num"], cl["just_epoch"], cl["just_num"],
                 show(latest), show(safe), show(fin), verdict), flush=True)
        s["last"] = {"phase": phase, "cl": cl, "el": {"latest": latest, "safe": safe, "finalized": fin}}
        if send and s.get("tx_hashes") is None and latest.get("num", 0) >= 1:
            send_txs(s)
        check_receipts(s)
        save(s)
        sent = [h for h in (s.get("tx_hashes") or []) if h]
        if cl["fin_epoch"] >= target_epoch and verdict == "yes" and (not send or (s.get("tx_hashes") is not None and len(s["receipts"]) == len(sent))):
            ok_exit = True
            break
        time.sleep(max(0.0, 2.0 - (time.time() - t0)))
    if record:
        s["reached"][phase] = ok_exit
    save(s)
    return ok_exit

def main():
    mode = sys.argv[1]
    if mode == "init":
        gh = rpc("eth_getBlockByNumber", ["0x0", False])["hash"]
        with open(sys.argv[2]) as f:
            raws = [l.strip() for l in f if l.strip()]
        save({"genesis_hash": gh, "raw_txs": raws, "tx_hashes": None, "receipts": {}, "polls": 0, "phase_polls": {},
              "matches": 0, "transient": 0, "mismatches": 0, "pre_fcu_polls": 0, "mismatch_log": [],
              "first_el_finalized": None, "first_cl_fin_epoch": None, "first_cl_fin_slot": None,
              "checkpoints": [], "reached": {}, "last": None, "pre_cl": None, "probe": None})
    elif mode == "pre":  # before any consensus client: no safe or finalized block yet
        s = load()
        tags = {t: el_tag(t) for t in ("latest", "safe", "finalized")}
        ok = ("not found" in tags["safe"].get("err", "") and "not found" in tags["finalized"].get("err", ""))
        s["pre_cl"] = {"tags": tags, "ok": ok}
        save(s)
        print("[pre] before the CL: latest %s safe %s finalized %s -> %s"
              % (show(tags["latest"]), show(tags["safe"]), show(tags["finalized"]), "ok" if ok else "UNEXPECTED"), flush=True)
        sys.exit(0 if ok else 1)
    elif mode == "main":
        sys.exit(0 if poll_loop("main", int(sys.argv[2]), float(sys.argv[3]), send=True) else 1)
    elif mode == "last":  # one more poll (the state just before the kill), not a phase of its own
        sys.exit(0 if poll_loop("main", 0, float(sys.argv[2]), record=False) else 1)
    elif mode == "probe":  # moat restarted after kill -9, unreachable by the CL
        s = load()
        tags = {t: el_tag(t) for t in ("latest", "safe", "finalized")}
        before = s["last"]["el"]
        fin = tags["finalized"]
        ok = "num" in fin and fin["num"] > 0
        canon = None
        if ok:
            try:
                canon = rpc("eth_getBlockByNumber", [hex(fin["num"]), False])["hash"] == fin["hash"]
            except Exception:
                canon = False
            ok = ok and canon and fin["num"] <= tags["latest"].get("num", -1)
        s["probe"] = {"tags": tags, "before_kill": before, "ok": ok,
                      "finalized_unchanged": fin.get("hash") == before["finalized"].get("hash")}
        save(s)
        print("[probe] before kill -9: latest %s safe %s finalized %s" % (show(before["latest"]), show(before["safe"]), show(before["finalized"])), flush=True)
        print("[probe] after restart (no FCU possible): latest %s safe %s finalized %s (canonical %s) -> %s"
              % (show(tags["latest"]), show(tags["safe"]), show(fin), canon, "ok" if ok else "FAILED"), flush=True)
        sys.exit(0 if ok else 1)
    elif mode == "after":
        s = load()
        target = s["last"]["cl"]["fin_epoch"] + int(sys.argv[2])
        s["restart_from_epoch"] = s["last"]["cl"]["fin_epoch"]
        s["restart_latest_before"] = s["last"]["el"]["latest"].get("num")
        save(s)
        ok = poll_loop("after", target, float(sys.argv[3]))
        s = load()
        adv = s["last"]["el"]["latest"].get("num", 0) > (s["restart_latest_before"] or 0)
        s["after_advanced"] = adv
        save(s)
        sys.exit(0 if ok and adv else 1)
    elif mode == "summary":
        s = load()
        last = s["last"] or {}
        rc = [r["status"] for r in s["receipts"].values()]
        tx_ok = len(rc) == len(s["raw_txs"]) and all(x == "0x1" for x in rc)
        print("================ summary ================")
        print("polls %d (main %d, after restart %d): matches %d, transient (one-poll) mismatches %d, persistent mismatches %d, pre-FCU polls %d"
              % (s["polls"], s["phase_polls"].get("main", 0), s["phase_polls"].get("after", 0), s["matches"], s["transient"], s["mismatches"], s["pre_fcu_polls"]))
        if s["pre_cl"]:
            t = s["pre_cl"]["tags"]
            print("before the CL: safe %s, finalized %s" % (show(t["safe"]), show(t["finalized"])))
        print("first CL finalized epoch seen: %s (at slot %s); first EL finalized > 0: %s" % (s["first_cl_fin_epoch"], s["first_cl_fin_slot"], s["first_el_finalized"]))
        print("finalized checkpoints (first matching poll each): epoch -> CL's EL block # / moat finalized #; justified EL # / moat safe #")
        for c in s["checkpoints"]:
            print("  [%s] slot %3d epoch %2d -> %s / %s ; %s / %s" % (c["phase"], c["slot"], c["epoch"], c["cl_el_num"], c["el_fin"], c["cl_just_el_num"], c["el_safe"]))
        if last:
            cl, el = last["cl"], last["el"]
            print("final: CL slot %d fin epoch %d (el#%d) just epoch %d (el#%d); EL latest %s safe %s finalized %s"
                  % (cl["slot"], cl["fin_epoch"], cl["fin_num"], cl["just_epoch"], cl["just_num"], show(el["latest"]), show(el["safe"]), show(el["finalized"])))
        print("transfers: %d sent, receipts %s -> %s" % (len(s["raw_txs"]), s["receipts"], "ok" if tx_ok else "FAILED"))
        if s["probe"]:
            p = s["probe"]
            print("restart: finalized before kill -9 %s, right after restart %s (same block: %s) -> %s"
                  % (show(p["before_kill"]["finalized"]), show(p["tags"]["finalized"]), p["finalized_unchanged"], "ok" if p["ok"] else "FAILED"))
        print("reached target: %s; EL advanced after restart: %s" % (s["reached"], s.get("after_advanced")))
        for m in s["mismatch_log"][:5]:
            print("persistent mismatch: %s" % json.dumps(m))
        good = (s["mismatches"] == 0 and s["reached"].get("main") and s["reached"].get("after") and tx_ok
                and s["pre_cl"] and s["pre_cl"]["ok"] and s["probe"] and s["probe"]["ok"] and s.get("after_advanced"))
        print("RESULT: %s" % ("PASS" if good else "FAIL"))
        sys.exit(0 if good else 1)

main()
PY

# signs TXS transfers from the prefunded key (0x…01) with ethers from the kit
cat >"$WORK/sign.cjs" <<'JS'
const { Wallet } = require(process.env.LS + "/node_modules/ethers");
const [n, baseFeeHex] = process.argv.slice(2);
const w = new Wallet("0x" + "00".repeat(31) + "01");
const base = BigInt(baseFeeHex);
(async () => {
  for (let i = 0; i < Number(n); i++) {
    console.log(await w.signTransaction({ type: 2, chainId: 1337, nonce: i, gasLimit: 21000n,
      to: "0x" + "00".repeat(19) + (0xa0 + i).toString(16), value: 1000000000000000n * BigInt(i + 1),
      maxPriorityFeePerGas: 2000000000n, maxFeePerGas: 2n * base + 2000000000n }));
  }
})();
JS

PY_ENV=(env EL_RPC="$EL_RPC" CL_REST="http://127.0.0.1:$REST_PORT" STATE="$STATE")
monitor() { "${PY_ENV[@]}" python3 "$WORK/monitor.py" "$@" | tee -a "$WORK/polls.log"; return "${PIPESTATUS[0]}"; }

# ---- 1. moat --------------------------------------------------------------------------------------
say "moat: $MOAT; work dir $WORK; EPOCHS=$EPOCHS, time limit ${TIME_LIMIT}s"
"$MOAT" init --network "$KIT/el-genesis.json" --datadir "$EL_DIR" >"$WORK/moat-init.log" 2>&1 ||
  die "moat init failed: $(tail -n 5 "$WORK/moat-init.log")"
start_moat "$AUTH_PORT" moat.log
say "moat up (pid $MOAT_PID), RPC $EL_RPC, engine 127.0.0.1:$AUTH_PORT"

BASEFEE=$(curl -s -H 'Content-Type: application/json' \
  --data '{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x0",false]}' "$EL_RPC" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["result"]["baseFeePerGas"])')
LS="$LS" node "$WORK/sign.cjs" "$TXS" "$BASEFEE" >"$WORK/raw-txs.txt" || die "signing the transfers failed"
monitor init "$WORK/raw-txs.txt"
monitor pre || true # recorded in the state; the summary judges it

# ---- 2. Lodestar --------------------------------------------------------------------------------
say "starting Lodestar (REST 127.0.0.1:$REST_PORT, P2P 127.0.0.1:$P2P_PORT)"
EL_RPC="$EL_RPC" REST_PORT="$REST_PORT" P2P_PORT="$P2P_PORT" DATADIR="$CL_DIR" SLOT_SECONDS="$SLOT_SECONDS" \
  LSDEVNET_DIR="$(dirname "$LS")" "$KIT/devnet.sh" "http://127.0.0.1:$AUTH_PORT" "$JWT" >"$WORK/lodestar.log" 2>&1 &
CL_PID=$!
PIDS+=("$CL_PID")

# ---- 3. poll until EPOCHS are finalized -------------------------------------------------------------
MAIN_OK=1
monitor main "$EPOCHS" "$TIME_LIMIT" || MAIN_OK=0
kill -0 "$MOAT_PID" 2>/dev/null || say "moat is not running any more! (see moat.log)"

# ---- 4. kill -9 and restart ---------------------------------------------------------------------------
if [ "$MAIN_OK" = 1 ]; then
  # kill right after a block landed, mid-slot (bounded wait for the head to move)
  h0=$(curl -s -H 'Content-Type: application/json' --data '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}' "$EL_RPC")
  for i in $(seq 1 40); do
    h1=$(curl -s -H 'Content-Type: application/json' --data '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}' "$EL_RPC")
    [ "$h1" != "$h0" ] && break
    sleep 0.25
  done
  sleep 1.5
  monitor last 1.5 || true # one more poll: the state just before the kill
  say "kill -9 moat (pid $MOAT_PID)"
  stop_pid "$MOAT_PID" KILL
  say "restarting moat on the same datadir with the engine API on $PROBE_AUTH_PORT (no CL can reach it)"
  start_moat "$PROBE_AUTH_PORT" moat-probe.log
  monitor probe || true
  stop_pid "$MOAT_PID" KILL
  say "restarting moat with the same flags as before"
  start_moat "$AUTH_PORT" moat-restarted.log
  monitor after "$RESTART_EPOCHS" "$RESTART_TIME_LIMIT" || true
fi

# ---- 5. summary -------------------------------------------------------------------------------------
for f in "$WORK"/moat*.log; do say "$(basename "$f"): $(grep -ciE 'error|panic' "$f" || true) lines with error/panic"; done
monitor summary
