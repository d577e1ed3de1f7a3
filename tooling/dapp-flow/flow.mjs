// A dapp developer's flow against `moat --dev`, with ethers v6 and solcjs as a project
// would use them. Every step checks what the library hands back; the first failure ends
// the run with exit code 1. MOAT_HTTP and MOAT_WS name the node's endpoints (loopback).
//
//   node flow.mjs            (after `npm ci`; the node test tests/dapp_flow.rs
//                             starts the node and runs this)

import { ethers } from "ethers";
import solc from "solc";

const HTTP = process.env.MOAT_HTTP ?? "http://127.0.0.1:8545";
const WS = process.env.MOAT_WS;
// The first two well-known dev keys (the node prints them at start).
const KEY0 = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
const KEY1 = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";

let passed = 0;
function check(what, ok, detail = "") {
  if (!ok) {
    console.error(`FAIL ${what} ${detail}`);
    process.exit(1);
  }
  passed += 1;
  console.log(`ok   ${what}`);
}

/** Resolves with `promise`'s value, or rejects after `ms` naming `what`. */
function within(ms, what, promise) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

const SOURCE = `
// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

contract Counter {
    event Bumped(address indexed by, uint256 value);

    uint256 public value;

    function bump(uint256 by) external {
        require(by > 0, "zero bump");
        value += by;
        emit Bumped(msg.sender, value);
    }
}
`;

function compile() {
  const input = {
    language: "Solidity",
    sources: { "Counter.sol": { content: SOURCE } },
    settings: {
      evmVersion: "prague",
      outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } },
    },
  };
  const out = JSON.parse(solc.compile(JSON.stringify(input)));
  const errors = (out.errors ?? []).filter((e) => e.severity === "error");
  check("solcjs compiles the contract", errors.length === 0, JSON.stringify(errors));
  const c = out.contracts["Counter.sol"].Counter;
  return { abi: c.abi, bytecode: "0x" + c.evm.bytecode.object };
}

async function main() {
  // No request cache: a read right after a transaction is mined must see it.
  const provider = new ethers.JsonRpcProvider(HTTP, undefined, {
    pollingInterval: 250,
    staticNetwork: true,
    cacheTimeout: -1,
  });
  const network = await provider.getNetwork();
  check("chain id is the dev chain's", network.chainId === 1337n, `${network.chainId}`);

  // 1. A transfer whose nonce, gas limit, fees and chain id ethers fills in, signed by
  //    the library and sent raw.
  const wallet = new ethers.Wallet(KEY0, provider);
  const other = new ethers.Wallet(KEY1, provider);
  const before = await provider.getBalance(other.address);
  const sent = await wallet.sendTransaction({
    to: other.address,
    value: ethers.parseEther("1.5"),
  });
  check("the library filled a type-2 transaction", sent.type === 2 && sent.gasLimit === 21000n,
    `type ${sent.type} gas ${sent.gasLimit}`);
  const receipt = await within(30000, "transfer receipt", sent.wait());
  check("the transfer is mined", receipt.status === 1);
  const after = await provider.getBalance(other.address);
  check("the recipient got 1.5 ether", after - before === ethers.parseEther("1.5"));

  // 2. A transfer with an access list: the node's estimate counts it (21000 + 2400).
  const withList = await wallet.sendTransaction({
    to: other.address,
    value: 1n,
    accessList: [{ address: other.address, storageKeys: [] }],
  });
  check("the access-list transfer's gas estimate counts the list", withList.gasLimit === 23400n,
    `${withList.gasLimit}`);
  const listReceipt = await within(30000, "access-list receipt", withList.wait());
  check("the access-list transfer is mined", listReceipt.status === 1 && listReceipt.gasUsed === 23400n);

  // 3. eth_accounts and eth_sendTransaction: the node signs for its dev accounts.
  const accounts = await provider.listAccounts();
  check("eth_accounts lists the dev accounts", accounts.length >= 2 &&
    accounts[0].address === wallet.address);
  const nodeSigner = await provider.getSigner(1);
  const byNode = await nodeSigner.sendTransaction({ to: wallet.address, value: 7n });
  const byNodeReceipt = await within(30000, "node-signed receipt", byNode.wait());
  check("a transaction the node signs is mined", byNodeReceipt.status === 1 &&
    byNodeReceipt.from === other.address);
  // One with an access list: the node puts the list in the transaction it signs.
  const slot = ethers.zeroPadValue("0x01", 32);
  const listedByNode = await nodeSigner.sendTransaction({
    to: wallet.address,
    value: 1n,
    accessList: [{ address: wallet.address, storageKeys: [slot] }],
  });
  const listedReceipt = await within(30000, "node-signed access-list receipt", listedByNode.wait());
  const listedTx = await provider.getTransaction(listedByNode.hash);
  check("eth_sendTransaction keeps the access list", listedReceipt.status === 1 &&
    listedTx.type === 2 && listedTx.accessList.length === 1 &&
    listedTx.accessList[0].storageKeys[0] === slot && listedReceipt.gasUsed === 25300n,
    `${listedTx.type} ${JSON.stringify(listedTx.accessList)} ${listedReceipt.gasUsed}`);

  // 4. Signatures by the node verify in the library: EIP-191 and EIP-712.
  const message = "hello moat";
  const sig = await nodeSigner.signMessage(message);
  check("eth_sign's signature recovers the account",
    ethers.verifyMessage(message, sig) === other.address);
  const domain = { name: "Ether Mail", version: "1", chainId: 1337, verifyingContract: wallet.address };
  const types = {
    Person: [{ name: "name", type: "string" }, { name: "wallets", type: "address[]" }],
    Mail: [{ name: "from", type: "Person" }, { name: "to", type: "Person[]" },
      { name: "contents", type: "string" }, { name: "nonce", type: "uint256" }],
  };
  const mail = {
    from: { name: "Cow", wallets: [wallet.address] },
    to: [{ name: "Bob", wallets: [other.address, wallet.address] }],
    contents: "Hello, Bob!",
    nonce: 42n,
  };
  const typedSig = await nodeSigner.signTypedData(domain, types, mail);
  check("eth_signTypedData_v4's signature is the library's own",
    typedSig === await other.signTypedData(domain, types, mail));
  check("eth_signTypedData_v4's signature recovers the account",
    ethers.verifyTypedData(domain, types, mail, typedSig) === other.address);

  // 5. Compile and deploy a contract with an event.
  const { abi, bytecode } = compile();
  const factory = new ethers.ContractFactory(abi, bytecode, wallet);
  const counter = await within(30000, "deployment", factory.deploy().then((c) => c.waitForDeployment()));
  const address = await counter.getAddress();
  check("the contract is deployed", (await provider.getCode(address)).length > 2);

  // A filter installed before the event (eth_newFilter), and contract.on over HTTP
  // (ethers polls its own filter with eth_getFilterChanges).
  const topic = counter.interface.getEvent("Bumped").topicHash;
  const filterId = await provider.send("eth_newFilter", [{ address, topics: [topic] }]);
  const seenOverHttp = new Promise((resolve) => {
    counter.once("Bumped", (by, value) => resolve({ by, value }));
  });
  let seenOverWs = null;
  let wsProvider = null;
  if (WS) {
    wsProvider = new ethers.WebSocketProvider(WS);
    const wsCounter = counter.connect(wsProvider);
    seenOverWs = new Promise((resolve) => {
      wsCounter.once("Bumped", (by, value) => resolve({ by, value }));
    });
    // Let eth_subscribe("logs") be in place before the event.
    await new Promise((r) => setTimeout(r, 1000));
  }
  await new Promise((r) => setTimeout(r, 500));

  const bump = await counter.bump(5);
  const bumpReceipt = await within(30000, "bump receipt", bump.wait());
  check("bump(5) is mined with its event", bumpReceipt.status === 1 && bumpReceipt.logs.length === 1);

  // 6. The event by logs: queryFilter (eth_getLogs) and a raw eth_getLogs.
  const events = await counter.queryFilter(counter.filters.Bumped(wallet.address), 0, "latest");
  check("queryFilter finds the event with its arguments", events.length === 1 &&
    events[0].args.by === wallet.address && events[0].args.value === 5n);
  const logs = await provider.getLogs({ address, topics: [topic], fromBlock: 0 });
  check("getLogs finds the event", logs.length === 1 &&
    logs[0].transactionHash === bump.hash);

  // 7. The event by filter: eth_getFilterChanges returns it once.
  const changes = await provider.send("eth_getFilterChanges", [filterId]);
  check("eth_getFilterChanges returns the event", changes.length === 1 &&
    changes[0].transactionHash === bump.hash, JSON.stringify(changes));
  const again = await provider.send("eth_getFilterChanges", [filterId]);
  check("a second eth_getFilterChanges has nothing new", again.length === 0);
  check("eth_uninstallFilter removes it", await provider.send("eth_uninstallFilter", [filterId]) === true);

  const http = await within(15000, "contract.on over HTTP", seenOverHttp);
  check("contract.on over HTTP sees the event", http.by === wallet.address && http.value === 5n);
  if (seenOverWs) {
    const ws = await within(15000, "contract.on over WebSocket", seenOverWs);
    check("contract.on over WebSocket (eth_subscribe logs) sees the event",
      ws.by === wallet.address && ws.value === 5n);
  }
  check("the contract's state is read back", (await counter.value()) === 5n);

  // 8. A revert whose reason reaches the library's error.
  try {
    await counter.bump(0);
    check("bump(0) reverts", false);
  } catch (e) {
    check("bump(0) fails with CALL_EXCEPTION", e.code === "CALL_EXCEPTION", e.code);
    check("the revert reason reaches error.reason", e.reason === "zero bump", `${e.reason}`);
  }
  try {
    await counter.bump.staticCall(0);
    check("staticCall bump(0) reverts", false);
  } catch (e) {
    check("eth_call's revert reason reaches error.reason", e.reason === "zero bump", `${e.reason}`);
  }

  // 9. An unfunded wallet: the library recognises the node's words as INSUFFICIENT_FUNDS.
  const poor = ethers.Wallet.createRandom(provider);
  try {
    await provider.estimateGas({ from: poor.address, to: other.address, value: 1n });
    check("estimateGas from an unfunded wallet fails", false);
  } catch (e) {
    check("estimateGas from an unfunded wallet raises INSUFFICIENT_FUNDS",
      e.code === "INSUFFICIENT_FUNDS", `${e.code}: ${e.shortMessage ?? e.message}`);
  }
  try {
    await poor.sendTransaction({ to: other.address, value: 1n });
    check("a send from an unfunded wallet fails", false);
  } catch (e) {
    check("a send from an unfunded wallet raises INSUFFICIENT_FUNDS",
      e.code === "INSUFFICIENT_FUNDS", `${e.code}: ${e.shortMessage ?? e.message}`);
  }

  // An impersonated address sends through the node without a key.
  const whale = "0x00000000000000000000000000000000000000cc";
  await provider.send("anvil_setBalance", [whale, ethers.toQuantity(ethers.parseEther("2"))]);
  await provider.send("anvil_impersonateAccount", [whale]);
  const whaleSigner = new ethers.JsonRpcSigner(provider, whale);
  const fromWhale = await whaleSigner.sendTransaction({ to: other.address, value: 3n });
  const whaleReceipt = await within(30000, "impersonated receipt", fromWhale.wait());
  check("an impersonated sender's transaction is mined as sent from it",
    whaleReceipt.status === 1 && whaleReceipt.from.toLowerCase() === whale);
  await provider.send("anvil_stopImpersonatingAccount", [whale]);

  // The clock: the next block is an hour later.
  const latestTime = async () => (await provider.getBlock("latest")).timestamp;
  // Dev blocks sealed in quick succession run ahead of the wall clock (each is a second
  // after its parent); the shift applies to the wall clock.
  const now = Math.floor(Date.now() / 1000);
  const earlier = await latestTime();
  await provider.send("evm_increaseTime", [3600]);
  await provider.send("evm_mine", []);
  const later = await latestTime();
  check("evm_increaseTime moves the next block an hour on",
    later >= now + 3600 && later > earlier, `${now} ${earlier} ${later}`);

  // 9. The dev methods as test suites call them through the provider. (Last: after a
  // revert the head's number is below what ethers' block poller has seen, so it reports
  // no new block until the chain passes that number again, with anvil as with moat.)
  const snap = await provider.send("evm_snapshot", []);
  const balanceAtSnapshot = await provider.getBalance(other.address);
  await provider.send("anvil_setBalance", [other.address, "0x2a"]);
  check("anvil_setBalance sets the balance", (await provider.getBalance(other.address)) === 42n);
  await (await counter.bump(1)).wait();
  check("the state moved on", (await counter.value()) === 6n);
  check("evm_revert goes back", (await provider.send("evm_revert", [snap])) === true);
  const balanceAfterRevert = await provider.getBalance(other.address);
  check("the balance is the snapshot's again", balanceAfterRevert === balanceAtSnapshot,
    `${balanceAtSnapshot} ${balanceAfterRevert}`);
  check("the contract's state is back", (await counter.value()) === 5n);

  if (wsProvider) {
    await wsProvider.destroy();
  }
  provider.destroy();
  console.log(`${passed} passed, 0 failed`);
}

within(240000, "the whole flow", main()).then(
  () => process.exit(0),
  (e) => {
    console.error("FAIL", e);
    process.exit(1);
  },
);
