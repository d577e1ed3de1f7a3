import { TypedDataEncoder } from "ethers";
const cases = [];
// 1: arrays of structs, fixed-size arrays, nested arrays, bytes vs bytesN.
cases.push({
  name: "arrays",
  domain: { name: "Arrays", version: "2", chainId: 1337, verifyingContract: "0x5FbDB2315678afecb367f032d93F642f64180aa3", salt: "0x" + "11".repeat(32) },
  types: {
    Person: [ { name: "name", type: "string" }, { name: "wallets", type: "address[]" } ],
    Group: [
      { name: "members", type: "Person[]" },
      { name: "pair", type: "Person[2]" },
      { name: "grid", type: "uint8[2][]" },
      { name: "tags", type: "bytes4[3]" },
      { name: "blobs", type: "bytes[]" },
      { name: "notes", type: "string[]" },
      { name: "flags", type: "bool[]" },
      { name: "id", type: "bytes32" },
      { name: "one", type: "bytes1" },
      { name: "raw", type: "bytes" }
    ]
  },
  message: {
    members: [
      { name: "Alice", wallets: ["0xCD2a3d9F938E13CD947Ec05AbC7FE734Df8DD826", "0xDeaDbeefdEAdbeefdEadbEEFdeadbeEFdEaDbeeF"] },
      { name: "", wallets: [] }
    ],
    pair: [ { name: "Bob", wallets: [] }, { name: "Carol", wallets: ["0xbBbBBBBbbBBBbbbBbbBbbbbBBbBbbbbBbBbbBBbB"] } ],
    grid: [[1, 2], [255, 0], [7, 7]],
    tags: ["0x01020304", "0xffffffff", "0x00000000"],
    blobs: ["0x", "0xdeadbeef", "0x" + "ab".repeat(100)],
    notes: ["hello", "", "ünïcödé"],
    flags: [true, false, true],
    id: "0x" + "42".repeat(32),
    one: "0x7f",
    raw: "0x000102"
  },
  primary: "Group"
});
// 2: ints and uints in every form.
cases.push({
  name: "numbers",
  domain: { name: "Numbers", chainId: "0x539" },
  types: {
    Numbers: [
      { name: "a", type: "int8" }, { name: "b", type: "int8" }, { name: "c", type: "int256" },
      { name: "d", type: "int256" }, { name: "e", type: "uint256" }, { name: "f", type: "uint256" },
      { name: "g", type: "uint8" }, { name: "h", type: "int64" }, { name: "i", type: "uint256" },
      { name: "j", type: "int256" }, { name: "k", type: "uint160" }, { name: "l", type: "int16" }
    ]
  },
  message: {
    a: -1, b: "-128", c: "-57896044618658097711785492504343953926634992332820282019728792003956564819968",
    d: "57896044618658097711785492504343953926634992332820282019728792003956564819967",
    e: "0xffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    f: "1000000000000000000000", g: "0xff", h: "-0x10", i: 0, j: "-1",
    k: "0x00000000000000000000000000000000000000ff", l: 32767
  },
  primary: "Numbers"
});
// 3: only a verifyingContract domain, nested structs three deep with arrays.
cases.push({
  name: "nested",
  domain: { verifyingContract: "0x0000000000000000000000000000000000000001" },
  types: {
    Order: [ { name: "maker", type: "Party" }, { name: "legs", type: "Leg[]" }, { name: "expiry", type: "uint64" } ],
    Party: [ { name: "who", type: "address" }, { name: "sig", type: "bytes" } ],
    Leg: [ { name: "asset", type: "Asset" }, { name: "amount", type: "int128" }, { name: "ok", type: "bool" } ],
    Asset: [ { name: "token", type: "address" }, { name: "id", type: "uint256" } ]
  },
  message: {
    maker: { who: "0x0000000000000000000000000000000000000002", sig: "0x" },
    legs: [
      { asset: { token: "0x0000000000000000000000000000000000000003", id: 5 }, amount: "-1000", ok: true },
      { asset: { token: "0x0000000000000000000000000000000000000004", id: "0x6" }, amount: 1000, ok: false }
    ],
    expiry: "18446744073709551615"
  },
  primary: "Order"
});
const out = [];
for (const c of cases) {
  const enc = TypedDataEncoder.from(c.types);
  const payload = TypedDataEncoder.getPayload(c.domain, c.types, c.message);
  out.push(({
    name: c.name,
    encodeType: enc.encodeType(c.primary),
    domain: TypedDataEncoder.hashDomain(c.domain),
    struct: enc.hash(c.message),
    digest: TypedDataEncoder.hash(c.domain, c.types, c.message),
    typed: { types: c.types, primaryType: c.primary, domain: c.domain, message: c.message },
    payload,
  }));
}
console.log(JSON.stringify(out, null, 1));
