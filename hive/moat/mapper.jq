# Builds moat's genesis from hive's: the `config` object is replaced by one made from
# the HIVE_* environment (as hive's other clients do), the rest (alloc, header fields) is
# kept. Absent variables leave their keys out.
#
# jq 1.6 reads numbers as doubles: values above 2^53 lose precision. Chain ids and fork
# numbers hive uses stay below it; an absent terminal total difficulty is left out
# (no merge) rather than written as a huge number.

def drop_empty:
  walk(
    if type == "object" then
      with_entries(select(.value != null and .value != "" and .value != {}))
    else . end
  );

def num: if . == null or . == "" then null else tonumber end;
def flag: if . == null or . == "" then null else . == "1" end;

# One fork's blob parameters, with the defaults of its EIP when hive gives none.
def blobs($name; $target; $max; $fraction):
  {
    "target": (env["HIVE_\($name)_BLOB_TARGET"] | num // $target),
    "max": (env["HIVE_\($name)_BLOB_MAX"] | num // $max),
    "baseFeeUpdateFraction": (env["HIVE_\($name)_BLOB_BASE_FEE_UPDATE_FRACTION"] | num // $fraction)
  };

. + {
  "config": ({
    "ethash": {},
    "chainId": (env.HIVE_CHAIN_ID | num),
    "homesteadBlock": (env.HIVE_FORK_HOMESTEAD | num),
    "daoForkBlock": (env.HIVE_FORK_DAO_BLOCK | num),
    "daoForkSupport": (env.HIVE_FORK_DAO_VOTE | flag),
    "eip150Block": (env.HIVE_FORK_TANGERINE | num),
    "eip155Block": (env.HIVE_FORK_SPURIOUS | num),
    "eip158Block": (env.HIVE_FORK_SPURIOUS | num),
    "byzantiumBlock": (env.HIVE_FORK_BYZANTIUM | num),
    "constantinopleBlock": (env.HIVE_FORK_CONSTANTINOPLE | num),
    "petersburgBlock": (env.HIVE_FORK_PETERSBURG | num),
    "istanbulBlock": (env.HIVE_FORK_ISTANBUL | num),
    "muirGlacierBlock": (env.HIVE_FORK_MUIR_GLACIER | num),
    "berlinBlock": (env.HIVE_FORK_BERLIN | num),
    "londonBlock": (env.HIVE_FORK_LONDON | num),
    "arrowGlacierBlock": (env.HIVE_FORK_ARROW_GLACIER | num),
    "grayGlacierBlock": (env.HIVE_FORK_GRAY_GLACIER | num),
    "mergeNetsplitBlock": (env.HIVE_MERGE_BLOCK_ID | num),
    "terminalTotalDifficulty": (env.HIVE_TERMINAL_TOTAL_DIFFICULTY | num),
    "shanghaiTime": (env.HIVE_SHANGHAI_TIMESTAMP | num),
    "cancunTime": (env.HIVE_CANCUN_TIMESTAMP | num),
    "pragueTime": (env.HIVE_PRAGUE_TIMESTAMP | num),
    "osakaTime": (env.HIVE_OSAKA_TIMESTAMP | num),
    "bpo1Time": (env.HIVE_BPO1_TIMESTAMP | num),
    "bpo2Time": (env.HIVE_BPO2_TIMESTAMP | num),
    "bpo3Time": (env.HIVE_BPO3_TIMESTAMP | num),
    "bpo4Time": (env.HIVE_BPO4_TIMESTAMP | num),
    "bpo5Time": (env.HIVE_BPO5_TIMESTAMP | num),
    "blobSchedule": {
      "cancun": blobs("CANCUN"; 3; 6; 3338477),
      "prague": blobs("PRAGUE"; 6; 9; 5007716),
      "osaka": blobs("OSAKA"; 6; 9; 5007716),
      "bpo1": blobs("BPO1"; 10; 15; 8346193),
      "bpo2": blobs("BPO2"; 14; 21; 11684671),
      "bpo3": blobs("BPO3"; 9; 14; 8832827),
      "bpo4": blobs("BPO4"; 9; 14; 8832827),
      "bpo5": blobs("BPO5"; 9; 14; 8832827)
    },
    # hive's, else the genesis' own, else mainnet's.
    "depositContractAddress": (env.HIVE_DEPOSIT_CONTRACT_ADDRESS // .config.depositContractAddress // "0x00000000219ab540356cBB839Cbe05303d7705Fa")
  } | drop_empty | .ethash = {})
}
