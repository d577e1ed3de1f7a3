//! The mainnet-like contracts of the generator's token mix, written in EVM assembly with a
//! small label-resolving assembler: an ERC-20 token and an NFT, each in genesis with its
//! holders' balances, so that blocks carry what mainnet blocks carry most — token
//! transfers and approvals (keccak-mapped slots read and written, `Transfer`/`Approval`
//! logs) and mints (a counter and an owner slot, a `Transfer` log with three topics).
//!
//! Storage layout (Solidity's): the token's `balanceOf[a]` at `keccak(a ‖ 0)`,
//! `allowance[owner][spender]` at `keccak(spender ‖ keccak(owner ‖ 1))`; the NFT's
//! counter at slot 0 and `ownerOf[id]` at `keccak(id ‖ 1)`.

use alloy_primitives::{Address, B256, U256, keccak256};

/// `transfer(address,uint256)`.
pub const TRANSFER: [u8; 4] = [0xa9, 0x05, 0x9c, 0xbb];
/// `approve(address,uint256)`.
pub const APPROVE: [u8; 4] = [0x09, 0x5e, 0xa7, 0xb3];
/// `mint()`.
pub const MINT: [u8; 4] = [0x12, 0x49, 0xc5, 0x8b];

/// `keccak("Transfer(address,address,uint256)")`.
fn transfer_topic() -> B256 {
    keccak256("Transfer(address,address,uint256)")
}

/// `keccak("Approval(address,address,uint256)")`.
fn approval_topic() -> B256 {
    keccak256("Approval(address,address,uint256)")
}

/// A label-resolving EVM assembler: jump targets as names, two-byte pushes.
#[derive(Default)]
struct Asm {
    code: Vec<u8>,
    labels: Vec<(&'static str, usize)>,
    fixups: Vec<(usize, &'static str)>,
}

// Opcodes used.
const STOP: u8 = 0x00;
const ADD: u8 = 0x01;
const MUL: u8 = 0x02;
const SUB: u8 = 0x03;
const DIV: u8 = 0x04;
const ISZERO: u8 = 0x15;
const GAS: u8 = 0x5a;
const CALL: u8 = 0xf1;
const LOG1: u8 = 0xa1;
const DUP4: u8 = 0x83;
const DUP5: u8 = 0x84;
const DUP6: u8 = 0x85;
const LT: u8 = 0x10;
const EQ: u8 = 0x14;
const SHR: u8 = 0x1c;
const SHA3: u8 = 0x20;
const CALLER: u8 = 0x33;
const CALLDATALOAD: u8 = 0x35;
const MSTORE: u8 = 0x52;
const SLOAD: u8 = 0x54;
const SSTORE: u8 = 0x55;
const JUMPI: u8 = 0x57;
const JUMPDEST: u8 = 0x5b;
const PUSH0: u8 = 0x5f;
const DUP1: u8 = 0x80;
const DUP2: u8 = 0x81;
const DUP3: u8 = 0x82;
const SWAP1: u8 = 0x90;
const LOG3: u8 = 0xa3;
const LOG4: u8 = 0xa4;
const RETURN: u8 = 0xf3;
const REVERT: u8 = 0xfd;

impl Asm {
    fn op(&mut self, op: u8) -> &mut Self {
        self.code.push(op);
        self
    }

    fn ops(&mut self, ops: &[u8]) -> &mut Self {
        self.code.extend_from_slice(ops);
        self
    }

    /// PUSHn of `bytes` (1 to 32 of them), or PUSH0 for none.
    fn push(&mut self, bytes: &[u8]) -> &mut Self {
        if bytes.is_empty() {
            return self.op(PUSH0);
        }
        assert!(bytes.len() <= 32, "a push holds at most 32 bytes");
        self.code.push(0x5f + bytes.len() as u8);
        self.code.extend_from_slice(bytes);
        self
    }

    fn push_u8(&mut self, v: u8) -> &mut Self {
        if v == 0 {
            self.op(PUSH0)
        } else {
            self.push(&[v])
        }
    }

    /// PUSH2 of `label`'s offset, resolved in [`Asm::finish`].
    fn push_label(&mut self, label: &'static str) -> &mut Self {
        self.code.push(0x61);
        self.fixups.push((self.code.len(), label));
        self.code.extend_from_slice(&[0, 0]);
        self
    }

    fn label(&mut self, label: &'static str) -> &mut Self {
        self.labels.push((label, self.code.len()));
        self.op(JUMPDEST)
    }

    /// Pops the key on top of the stack, pushes `keccak(key ‖ slot)`: the slot of
    /// `mapping[key]` for a mapping declared at `slot`.
    fn mapping_slot(&mut self, slot: u8) -> &mut Self {
        self.push_u8(0).op(MSTORE); // mem[0..32] = key
        self.push_u8(slot).push_u8(32).op(MSTORE); // mem[32..64] = slot
        self.push_u8(64).push_u8(0).op(SHA3)
    }

    /// Pops `key` (top) and `second` (below it), pushes `keccak(key ‖ second)`: the slot
    /// of `mapping[..][key]` when `second` is the outer mapping's slot.
    fn hash_pair(&mut self) -> &mut Self {
        self.push_u8(0).op(MSTORE); // key
        self.push_u8(32).op(MSTORE); // second
        self.push_u8(64).push_u8(0).op(SHA3)
    }

    fn finish(mut self) -> Vec<u8> {
        for (at, label) in &self.fixups {
            let target = self
                .labels
                .iter()
                .find(|(l, _)| l == label)
                .map(|(_, t)| *t)
                .unwrap_or_else(|| panic!("label {label} not defined"));
            self.code[*at..*at + 2].copy_from_slice(&(target as u16).to_be_bytes());
        }
        self.code
    }
}

/// The ERC-20 token's runtime: `transfer` and `approve`, each returning `true`; a
/// transfer past the sender's balance reverts, as does any other call.
pub fn token_runtime() -> Vec<u8> {
    let mut a = Asm::default();
    // selector = calldata[0..4]
    a.push_u8(0).op(CALLDATALOAD).push_u8(0xe0).op(SHR);
    a.op(DUP1)
        .push(&TRANSFER)
        .op(EQ)
        .push_label("transfer")
        .op(JUMPI);
    a.op(DUP1)
        .push(&APPROVE)
        .op(EQ)
        .push_label("approve")
        .op(JUMPI);
    a.label("revert").push_u8(0).push_u8(0).op(REVERT);

    // transfer(to, amount)
    a.label("transfer");
    a.op(CALLER).mapping_slot(0); // [sel, fromSlot]
    a.op(DUP1).op(SLOAD); // [sel, fromSlot, bal]
    a.push_u8(36).op(CALLDATALOAD); // [sel, fromSlot, bal, amount]
    a.op(DUP1).op(DUP3).op(LT); // bal < amount
    a.push_label("revert").op(JUMPI); // [sel, fromSlot, bal, amount]
    a.op(SWAP1).op(SUB); // [sel, fromSlot, bal - amount]  (SUB takes top minus the next)
    a.op(SWAP1).op(SSTORE); // balanceOf[from] = bal - amount
    a.push_u8(4).op(CALLDATALOAD).mapping_slot(0); // [sel, toSlot]
    a.op(DUP1).op(SLOAD); // [sel, toSlot, balTo]
    a.push_u8(36).op(CALLDATALOAD).op(ADD); // [sel, toSlot, balTo + amount]
    a.op(SWAP1).op(SSTORE); // balanceOf[to] += amount
    // log Transfer(from, to, amount): data = amount at mem[0..32]
    a.push_u8(36).op(CALLDATALOAD).push_u8(0).op(MSTORE);
    a.push_u8(4).op(CALLDATALOAD); // topic3 = to
    a.op(CALLER); // topic2 = from
    a.push(transfer_topic().as_slice()); // topic1
    a.push_u8(32).push_u8(0).op(LOG3);
    a.push_label("true").ops(&[0x56]); // JUMP

    // approve(spender, amount)
    a.label("approve");
    a.op(CALLER).mapping_slot(1); // [sel, keccak(owner ‖ 1)]
    a.push_u8(4).op(CALLDATALOAD).hash_pair(); // [sel, slot]
    a.push_u8(36).op(CALLDATALOAD).op(SWAP1).op(SSTORE);
    a.push_u8(36).op(CALLDATALOAD).push_u8(0).op(MSTORE);
    a.push_u8(4).op(CALLDATALOAD); // topic3 = spender
    a.op(CALLER); // topic2 = owner
    a.push(approval_topic().as_slice());
    a.push_u8(32).push_u8(0).op(LOG3);

    a.label("true");
    a.push_u8(1).push_u8(0).op(MSTORE);
    a.push_u8(32).push_u8(0).op(RETURN);
    a.op(STOP);
    a.finish()
}

/// The NFT's runtime: `mint()` takes the next id (slot 0 + 1), makes the caller its
/// owner and logs `Transfer(0, caller, id)`; any other call reverts.
pub fn nft_runtime() -> Vec<u8> {
    let mut a = Asm::default();
    a.push_u8(0).op(CALLDATALOAD).push_u8(0xe0).op(SHR);
    a.push(&MINT).op(EQ).push_label("mint").op(JUMPI);
    a.push_u8(0).push_u8(0).op(REVERT);
    a.label("mint");
    a.push_u8(0).op(SLOAD).push_u8(1).op(ADD); // [id]
    a.op(DUP1).push_u8(0).op(SSTORE); // counter = id
    a.op(CALLER).op(DUP2).mapping_slot(1).op(SSTORE); // ownerOf[id] = caller
    // LOG4(Transfer, 0, caller, id), no data
    a.op(CALLER).push_u8(0).push(transfer_topic().as_slice()); // [id, caller, 0, topic]
    a.push_u8(0).push_u8(0).op(LOG4);
    a.op(STOP);
    a.finish()
}

fn swap_topic() -> B256 {
    keccak256(b"Swap(uint256,uint256)")
}

/// A constant-product pool's runtime. Calldata: `amountIn` (word 0) and the direction
/// (word 1: 0 sells token 0, 1 sells token 1). Reads both reserves (slots 0 and 1),
/// pays `out = reserveOut · in / (reserveIn + in)`, writes both reserves and the swap
/// count (slot 2), logs `Swap`, returns `out`.
pub fn pool_runtime() -> Vec<u8> {
    let mut a = Asm::default();
    a.push_u8(0).op(CALLDATALOAD); // [in]
    a.push_u8(32).op(CALLDATALOAD); // [in, dir]
    a.op(DUP1).op(SLOAD); // [in, dir, rin]
    a.op(DUP2).push_u8(1).op(SUB); // [in, dir, rin, odir = 1 - dir]
    a.op(DUP1).op(SLOAD); // [in, dir, rin, odir, rout]
    a.op(DUP5).op(DUP4).op(ADD); // [.., rout, rin + in]
    a.op(DUP6).op(DUP3).op(MUL); // [.., rout, den, rout · in]
    a.op(DIV); // [in, dir, rin, odir, rout, out]
    a.op(DUP1).op(DUP3).op(SUB); // [.., out, rout - out]
    a.op(DUP4).op(SSTORE); // reserve[odir] = rout - out
    a.op(DUP6).op(DUP5).op(ADD); // [.., out, rin + in]
    a.op(DUP6).op(SSTORE); // reserve[dir] = rin + in
    a.push_u8(2)
        .op(SLOAD)
        .push_u8(1)
        .op(ADD)
        .push_u8(2)
        .op(SSTORE); // swaps += 1
    a.push_u8(0).op(MSTORE); // mem[0..32] = out
    a.push(swap_topic().as_slice())
        .push_u8(32)
        .push_u8(0)
        .op(LOG1);
    a.push_u8(32).push_u8(0).op(RETURN);
    a.finish()
}

/// The router's runtime. Calldata: pool A, pool B (addresses as words), `amountIn`, the
/// direction. Adds `amountIn` to the caller's volume (`volume[caller]`, a mapping at slot
/// 0), swaps it in pool A, then A's output in pool B, and returns B's output; reverts
/// if either call fails.
pub fn router_runtime() -> Vec<u8> {
    let mut a = Asm::default();
    a.op(CALLER).mapping_slot(0); // [slot]
    a.op(DUP1).op(SLOAD).push_u8(64).op(CALLDATALOAD).op(ADD); // [slot, volume + in]
    a.op(SWAP1).op(SSTORE);
    a.push_u8(64).op(CALLDATALOAD).push_u8(0).op(MSTORE); // mem[0..32] = in
    a.push_u8(96).op(CALLDATALOAD).push_u8(32).op(MSTORE); // mem[32..64] = dir
    for pool_word in [0u8, 32] {
        // CALL(gas, pool, 0, args 0..64, out 0..32): the output becomes the next input.
        a.push_u8(32).push_u8(0).push_u8(64).push_u8(0).push_u8(0);
        a.push_u8(pool_word).op(CALLDATALOAD).op(GAS).op(CALL);
        a.op(ISZERO).push_label("revert").op(JUMPI);
    }
    a.push_u8(32).push_u8(0).op(RETURN);
    a.label("revert").push_u8(0).push_u8(0).op(REVERT);
    a.finish()
}

/// Calldata of the router's two-pool swap.
pub fn swap_data(pool_a: &Address, pool_b: &Address, amount_in: U256, direction: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    for pool in [pool_a, pool_b] {
        out.extend_from_slice(&[0u8; 12]);
        out.extend_from_slice(pool.as_slice());
    }
    out.extend_from_slice(&amount_in.to_be_bytes::<32>());
    out.extend_from_slice(&U256::from(direction).to_be_bytes::<32>());
    out
}

/// The router's `volume[trader]` slot.
pub fn volume_slot(trader: &Address) -> B256 {
    balance_slot(trader)
}

/// The token's `balanceOf[holder]` slot.
pub fn balance_slot(holder: &Address) -> B256 {
    let mut buf = [0u8; 64];
    buf[12..32].copy_from_slice(holder.as_slice());
    keccak256(buf)
}

/// The token's `allowance[owner][spender]` slot.
pub fn allowance_slot(owner: &Address, spender: &Address) -> B256 {
    let mut inner = [0u8; 64];
    inner[12..32].copy_from_slice(owner.as_slice());
    inner[63] = 1;
    let mut outer = [0u8; 64];
    outer[12..32].copy_from_slice(spender.as_slice());
    outer[32..].copy_from_slice(keccak256(inner).as_slice());
    keccak256(outer)
}

/// The NFT's `ownerOf[id]` slot.
pub fn owner_slot(id: u64) -> B256 {
    let mut buf = [0u8; 64];
    buf[24..32].copy_from_slice(&id.to_be_bytes());
    buf[63] = 1;
    keccak256(buf)
}

/// Calldata of `transfer(to, amount)` or `approve(to, amount)`.
pub fn call_data(selector: [u8; 4], to: &Address, amount: U256) -> Vec<u8> {
    let mut out = selector.to_vec();
    out.extend_from_slice(&[0u8; 12]);
    out.extend_from_slice(to.as_slice());
    out.extend_from_slice(&amount.to_be_bytes::<32>());
    out
}
