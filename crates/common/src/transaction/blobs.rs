//! Blob sidecars (`BlobsBundle`) and the network ("pooled") form of transactions.
//!
//! A blob transaction's hash commits to its versioned hashes, not to the sidecar, so the
//! same hash can arrive with a good sidecar from one peer and a bad one from another. The
//! checks are split accordingly:
//! - [`PooledTransaction::validate_cheap`]: structure only (counts, lengths, version,
//!   versioned hash = sha256(commitment) with the version byte). Microseconds; the p2p layer
//!   runs it on every sidecar it receives and disconnects on a peer fault.
//! - [`PooledTransaction::validate`]: the above plus KZG proof verification (milliseconds),
//!   which the pool runs once per unique transaction after deduplication.
//!
//! Wire forms (after the `0x03` type byte):
//! - version 0: `rlp([tx_fields, blobs, commitments, proofs])`, one proof per blob;
//! - version 1 (EIP-7594): `rlp([tx_fields, 1, blobs, commitments, cell_proofs])`, 128
//!   cell proofs per blob.
//!
//! A **sampled** sidecar (EIP-8070's sparse blobpool) holds no blobs: only the cells of
//! its custody ([`SampledCells`]), each checked against its cell proof. Its network form
//! is the version-1 form with an empty blobs list (what eth/72 peers are served); such a
//! tx cannot go into a block this node builds, nor to a peer that wants whole blobs.

use super::{
    DecodeError, SignedTransaction, TxType, keccak_prefixed, network_envelope, wrap_network,
};
use crate::config::{BlobParams, ChainConfig, Fork};
use crate::rlp::{self, Fields, RlpError};
use alloy_primitives::B256;
use alloy_rlp::Encodable;
use moat_crypto::kzg::{self, BYTES_PER_BLOB, Blob, Bytes48, CELLS_PER_EXT_BLOB, KzgError};
use std::sync::Arc;

/// Max blobs one transaction may carry from Osaka on (EIP-7594).
pub const MAX_BLOBS_PER_TX_OSAKA: u64 = 6;

/// The proof layout of a sidecar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SidecarVersion {
    /// EIP-4844: one blob proof per blob.
    V0 = 0,
    /// EIP-7594: [`CELLS_PER_EXT_BLOB`] cell proofs per blob.
    V1 = 1,
}

impl SidecarVersion {
    /// Proofs the sidecar carries per blob: 1 (version 0) or 128 cell proofs (version 1).
    pub fn proofs_per_blob(self) -> usize {
        match self {
            SidecarVersion::V0 => 1,
            SidecarVersion::V1 => CELLS_PER_EXT_BLOB,
        }
    }
}

/// Which of a blob's 128 extension cells (EIP-7594) a message or a sampler is about: bit
/// `i` is cell `i`, least significant bit first in each byte (go-ethereum's
/// `CustodyBitmap`); 16 bytes on the wire and in the engine API.
pub type CellMask = [u8; 16];
/// Every cell: a node that holds whole blobs announces its blob txs with it.
pub const ALL_CELLS: CellMask = [0xff; 16];
/// Cells 0..64: the blob itself (its first half of the extension).
pub const DATA_CELLS: CellMask = [
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0,
];

/// The cell indices set in `mask`, ascending.
pub fn mask_indices(mask: &CellMask) -> Vec<usize> {
    (0..CELLS_PER_EXT_BLOB)
        .filter(|i| mask[i / 8] & (1 << (i % 8)) != 0)
        .collect()
}

/// How many cells `mask` names.
pub fn mask_count(mask: &CellMask) -> usize {
    mask.iter().map(|b| b.count_ones() as usize).sum()
}

/// Whether every cell of `inner` is in `outer`.
pub fn mask_covers(outer: &CellMask, inner: &CellMask) -> bool {
    outer.iter().zip(inner).all(|(o, i)| o & i == *i)
}

/// The mask of `indices` (each below 128; others are ignored).
pub fn mask_of(indices: impl IntoIterator<Item = usize>) -> CellMask {
    let mut mask = [0u8; 16];
    for i in indices.into_iter().filter(|i| *i < CELLS_PER_EXT_BLOB) {
        mask[i / 8] |= 1 << (i % 8);
    }
    mask
}

/// The cells a sampler holds of a blob tx (EIP-8070): those of its custody, of every
/// blob, blob by blob, ascending cell index within a blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampledCells {
    /// Which cells of each blob are held.
    pub custody: CellMask,
    /// `blobs × mask_count(custody)` cells.
    pub cells: Vec<kzg::Cell>,
}

/// The blobs, commitments and proofs that travel with a blob transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobsBundle {
    /// The proof layout: version 0 (EIP-4844) or 1 (EIP-7594 cell proofs).
    pub version: SidecarVersion,
    /// The blobs, in the order of the transaction's versioned hashes.
    pub blobs: Vec<Blob>,
    /// One 48-byte KZG commitment per blob; its versioned hash is in the transaction.
    pub commitments: Vec<Bytes48>,
    /// One proof per blob (version 0), or 128 cell proofs per blob, blob by blob
    /// (version 1).
    pub proofs: Vec<Bytes48>,
    /// A sampled sidecar's cells (`blobs` is then empty); `None` for a whole one.
    pub sampled: Option<SampledCells>,
}

/// What the active fork allows of sidecars.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobRules {
    /// The fork in force (it decides the sidecar version).
    pub fork: Fork,
    /// Max blobs in one block.
    pub max_blobs_per_block: u64,
    /// Max blobs in one transaction (the block max before Osaka, 6 from Osaka).
    pub max_blobs_per_tx: u64,
}

impl BlobRules {
    /// The rules in force at a block of `config`, or `None` before Cancun.
    pub fn at(config: &ChainConfig, block: u64, timestamp: u64) -> Option<Self> {
        let fork = config.fork_at(block, timestamp);
        let params = config.blob_params_at(timestamp)?;
        Some(Self::new(fork, params))
    }

    /// The rules of `fork` with its blob parameters (the per-tx cap of 6 from Osaka).
    pub fn new(fork: Fork, params: BlobParams) -> Self {
        let per_tx = if fork >= Fork::Osaka {
            params.max.min(MAX_BLOBS_PER_TX_OSAKA)
        } else {
            params.max
        };
        Self {
            fork,
            max_blobs_per_block: params.max,
            max_blobs_per_tx: per_tx,
        }
    }

    /// The rules of a fork on mainnet's schedule, for tools that are given a fork name and
    /// no chain. `None` before Cancun.
    pub fn for_fork(fork: Fork) -> Option<Self> {
        let mainnet = ChainConfig::mainnet();
        let params = match mainnet.activation(fork) {
            Some(crate::config::Activation::Timestamp(t)) => mainnet.blob_params_at(t)?,
            _ => return None,
        };
        Some(Self::new(fork, params))
    }

    /// The sidecar version the fork expects.
    pub fn sidecar_version(&self) -> SidecarVersion {
        if self.fork >= Fork::Osaka {
            SidecarVersion::V1
        } else {
            SidecarVersion::V0
        }
    }
}

/// Why a sidecar is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlobsBundleError {
    /// A blob transaction in network form came without its sidecar.
    #[error("blob transaction without sidecar")]
    MissingSidecar,
    /// The transaction names no blob.
    #[error("blob transaction without blobs")]
    NoBlobs,
    /// More blobs than a transaction may carry at the fork.
    #[error("too many blobs: {count} > {max}")]
    TooManyBlobs {
        /// Blobs the transaction carries.
        count: usize,
        /// Blobs a transaction may carry.
        max: u64,
    },
    /// The versioned hashes, blobs and commitments are not as many as each other.
    #[error(
        "sidecar counts disagree: {hashes} versioned hashes, {blobs} blobs, {commitments} commitments"
    )]
    CountMismatch {
        /// Versioned hashes in the transaction.
        hashes: usize,
        /// Blobs in the sidecar.
        blobs: usize,
        /// Commitments in the sidecar.
        commitments: usize,
    },
    /// The sidecar holds another number of proofs than its version needs.
    #[error("sidecar has {found} proofs, expected {expected}")]
    ProofCountMismatch {
        /// Blobs × proofs per blob of the version.
        expected: usize,
        /// Proofs in the sidecar.
        found: usize,
    },
    /// A versioned hash does not start with the KZG version byte 0x01.
    #[error("versioned hash {index} has version 0x{version:02x}, expected 0x01")]
    BadHashVersion {
        /// The hash's position in the transaction, from 0.
        index: usize,
        /// Its first byte.
        version: u8,
    },
    /// A versioned hash is not `0x01 || sha256(commitment)[1..]` of its commitment.
    #[error("versioned hash {index} does not match its commitment")]
    HashMismatch {
        /// The hash's position in the transaction, from 0.
        index: usize,
    },
    /// A sampled sidecar holds another number of cells than its custody names, names
    /// none, or is not of version 1.
    #[error("sampled sidecar has {found} cells, expected {expected}")]
    SampledCellCount {
        /// Blobs × cells of the custody.
        expected: usize,
        /// Cells held.
        found: usize,
    },
    /// The KZG proofs do not verify.
    #[error("invalid kzg proofs: {0}")]
    Kzg(#[from] KzgError),
    /// The sidecar's version is not the one the fork takes (version 0 before Osaka,
    /// version 1 from it).
    #[error("sidecar version {version:?} is not accepted at {fork}")]
    VersionNotAllowed {
        /// The sidecar's version.
        version: SidecarVersion,
        /// The fork in force.
        fork: Fork,
    },
}

impl BlobsBundleError {
    /// A fault no honest peer commits: the p2p layer disconnects on it. A version that does
    /// not fit the fork is not one (around a fork both versions are honest).
    pub fn is_peer_fault(&self) -> bool {
        !matches!(self, BlobsBundleError::VersionNotAllowed { .. })
    }
}

impl BlobsBundle {
    /// Builds a valid bundle over `blobs` (tests and tools), computing commitments and proofs.
    pub fn build(version: SidecarVersion, blobs: Vec<Blob>) -> Result<Self, KzgError> {
        let mut commitments = Vec::with_capacity(blobs.len());
        let mut proofs = Vec::with_capacity(blobs.len() * version.proofs_per_blob());
        for blob in &blobs {
            let c = kzg::blob_to_commitment(blob)?;
            match version {
                SidecarVersion::V0 => proofs.push(kzg::compute_blob_proof(blob, &c)?),
                SidecarVersion::V1 => proofs.extend(kzg::compute_cell_proofs(blob)?),
            }
            commitments.push(c);
        }
        Ok(Self {
            version,
            blobs,
            commitments,
            proofs,
            sampled: None,
        })
    }

    /// Whether this sidecar holds only some cells of its blobs ([`SampledCells`]).
    pub fn is_sampled(&self) -> bool {
        self.sampled.is_some()
    }

    /// The cells this sidecar can give of each blob: all for whole blobs, the custody
    /// for a sampled one.
    pub fn held_cells(&self) -> CellMask {
        match &self.sampled {
            None => ALL_CELLS,
            Some(s) => s.custody,
        }
    }

    /// The cells at `indices` (each below [`CELLS_PER_EXT_BLOB`]) of blob `blob`, in that
    /// order: cells below [`kzg::DATA_CELLS`] are the blob's own bytes, the others are
    /// computed (its extension, milliseconds, once per call). `None` for a blob it lacks or
    /// an index out of range.
    pub fn cells(&self, blob: usize, indices: &[usize]) -> Option<Vec<kzg::Cell>> {
        if let Some(s) = &self.sampled {
            // Held cells only: the custody's, blob by blob.
            let held = mask_indices(&s.custody);
            let base = blob.checked_mul(held.len())?;
            if blob >= self.commitments.len() {
                return None;
            }
            return indices
                .iter()
                .map(|i| s.cells.get(base + held.binary_search(i).ok()?).copied())
                .collect();
        }
        let blob = self.blobs.get(blob)?;
        if indices.iter().any(|i| *i >= CELLS_PER_EXT_BLOB) {
            return None;
        }
        let extension = if indices.iter().any(|i| *i >= kzg::DATA_CELLS) {
            Some(kzg::compute_cells(blob).ok()?)
        } else {
            None
        };
        let size = kzg::BYTES_PER_CELL;
        Some(
            indices
                .iter()
                .map(|&i| match &extension {
                    Some(all) => all[i],
                    None => {
                        let mut cell = [0u8; kzg::BYTES_PER_CELL];
                        cell.copy_from_slice(&blob.0[i * size..(i + 1) * size]);
                        cell
                    }
                })
                .collect(),
        )
    }

    /// The versioned hashes of the commitments (what the transaction must list).
    pub fn versioned_hashes(&self) -> Vec<B256> {
        self.commitments.iter().map(kzg::versioned_hash).collect()
    }

    /// Structural checks against the transaction's versioned hashes; no KZG, no blob hashing.
    pub fn validate_cheap(
        &self,
        hashes: &[B256],
        rules: &BlobRules,
    ) -> Result<(), BlobsBundleError> {
        let Some(sampled) = &self.sampled else {
            return self.validate_shape(hashes, rules, hashes.len());
        };
        self.validate_shape(hashes, rules, 0)?;
        let per_blob = mask_count(&sampled.custody);
        let expected = hashes.len() * per_blob;
        if per_blob == 0 || sampled.cells.len() != expected || self.version != SidecarVersion::V1 {
            return Err(BlobsBundleError::SampledCellCount {
                expected,
                found: sampled.cells.len(),
            });
        }
        Ok(())
    }

    /// [`Self::validate_cheap`] for a sidecar that came without its blobs (eth/72's
    /// `PooledTransactions`: the blobs travel as cells): no blobs, every other check.
    pub fn validate_without_blobs(
        &self,
        hashes: &[B256],
        rules: &BlobRules,
    ) -> Result<(), BlobsBundleError> {
        self.validate_shape(hashes, rules, 0)
    }

    /// The structural checks with `blobs` blobs expected in the sidecar.
    fn validate_shape(
        &self,
        hashes: &[B256],
        rules: &BlobRules,
        blobs: usize,
    ) -> Result<(), BlobsBundleError> {
        if hashes.is_empty() {
            return Err(BlobsBundleError::NoBlobs);
        }
        if hashes.len() as u64 > rules.max_blobs_per_tx {
            return Err(BlobsBundleError::TooManyBlobs {
                count: hashes.len(),
                max: rules.max_blobs_per_tx,
            });
        }
        if self.blobs.len() != blobs {
            return Err(BlobsBundleError::CountMismatch {
                hashes: hashes.len(),
                blobs: self.blobs.len(),
                commitments: self.commitments.len(),
            });
        }
        self.validate_commitments(hashes, rules)
    }

    /// The checks after the blob count: commitments and proofs counted, the
    /// versioned hashes matched, the version the fork's.
    fn validate_commitments(
        &self,
        hashes: &[B256],
        rules: &BlobRules,
    ) -> Result<(), BlobsBundleError> {
        if self.commitments.len() != hashes.len() {
            return Err(BlobsBundleError::CountMismatch {
                hashes: hashes.len(),
                blobs: self.blobs.len(),
                commitments: self.commitments.len(),
            });
        }
        let expected = hashes.len() * self.version.proofs_per_blob();
        if self.proofs.len() != expected {
            return Err(BlobsBundleError::ProofCountMismatch {
                expected,
                found: self.proofs.len(),
            });
        }
        for (index, (hash, commitment)) in hashes.iter().zip(&self.commitments).enumerate() {
            if hash[0] != kzg::VERSIONED_HASH_VERSION_KZG {
                return Err(BlobsBundleError::BadHashVersion {
                    index,
                    version: hash[0],
                });
            }
            if kzg::versioned_hash(commitment) != *hash {
                return Err(BlobsBundleError::HashMismatch { index });
            }
        }
        // Checked last: a bundle broken in structure is a peer fault whatever the fork.
        if self.version != rules.sidecar_version() {
            return Err(BlobsBundleError::VersionNotAllowed {
                version: self.version,
                fork: rules.fork,
            });
        }
        Ok(())
    }

    /// KZG proof verification alone (the caller ran [`Self::validate_cheap`]).
    pub fn verify_proofs(&self) -> Result<(), BlobsBundleError> {
        if let Some(s) = &self.sampled {
            return self.verify_sampled(s);
        }
        match self.version {
            SidecarVersion::V0 => {
                kzg::verify_blob_proofs(&self.blobs, &self.commitments, &self.proofs)?
            }
            SidecarVersion::V1 => {
                kzg::verify_cell_proofs(&self.blobs, &self.commitments, &self.proofs)?
            }
        }
        Ok(())
    }

    /// A sampled sidecar's cells against their cell proofs (one batch call).
    fn verify_sampled(&self, s: &SampledCells) -> Result<(), BlobsBundleError> {
        let held = mask_indices(&s.custody);
        if self.version != SidecarVersion::V1
            || s.cells.len() != held.len() * self.commitments.len()
            || self.proofs.len() != self.commitments.len() * CELLS_PER_EXT_BLOB
        {
            return Err(BlobsBundleError::SampledCellCount {
                expected: held.len() * self.commitments.len(),
                found: s.cells.len(),
            });
        }
        let n = s.cells.len();
        let (mut commitments, mut indices, mut proofs) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for (blob, commitment) in self.commitments.iter().enumerate() {
            for &i in &held {
                commitments.push(*commitment);
                indices.push(i as u64);
                proofs.push(self.proofs[blob * CELLS_PER_EXT_BLOB + i]);
            }
        }
        kzg::verify_cells(&commitments, &indices, &s.cells, &proofs)?;
        Ok(())
    }

    /// Verifies the proofs of several bundles of one version in a single batch call.
    /// A failed batch says only that some bundle is bad.
    pub fn verify_proofs_batch(bundles: &[&BlobsBundle]) -> Result<(), BlobsBundleError> {
        if bundles.iter().any(|b| b.is_sampled()) {
            // Sampled ones hold no blobs to batch with: each alone.
            return bundles.iter().try_for_each(|b| b.verify_proofs());
        }
        let sets: Vec<kzg::ProofSet<'_>> = bundles
            .iter()
            .map(|b| kzg::ProofSet {
                blobs: &b.blobs,
                commitments: &b.commitments,
                proofs: &b.proofs,
            })
            .collect();
        match bundles.first().map(|b| b.version) {
            None => return Ok(()),
            Some(v) if bundles.iter().any(|b| b.version != v) => {
                return Err(KzgError::LengthMismatch("bundles of different versions").into());
            }
            Some(SidecarVersion::V0) => kzg::verify_blob_proofs_many(&sets)?,
            Some(SidecarVersion::V1) => kzg::verify_cell_proofs_many(&sets)?,
        }
        Ok(())
    }

    fn payload_len(&self) -> usize {
        let blob_item = alloy_rlp::Header {
            list: false,
            payload_length: BYTES_PER_BLOB,
        }
        .length_with_payload();
        let point_item = 49; // 0xb0 + 48 bytes
        let version = match self.version {
            SidecarVersion::V0 => 0,
            SidecarVersion::V1 => 1,
        };
        version
            + rlp::list_length(blob_item * self.blobs.len())
            + rlp::list_length(point_item * self.commitments.len())
            + rlp::list_length(point_item * self.proofs.len())
    }

    fn encode_fields(&self, out: &mut Vec<u8>, with_blobs: bool) {
        if self.version == SidecarVersion::V1 {
            1u8.encode(out);
        }
        let blob_item = alloy_rlp::Header {
            list: false,
            payload_length: BYTES_PER_BLOB,
        }
        .length_with_payload();
        let blobs: &[Blob] = if with_blobs { &self.blobs } else { &[] };
        alloy_rlp::Header {
            list: true,
            payload_length: blob_item * blobs.len(),
        }
        .encode(out);
        for blob in blobs {
            blob.0.as_slice().encode(out);
        }
        for points in [&self.commitments, &self.proofs] {
            alloy_rlp::Header {
                list: true,
                payload_length: 49 * points.len(),
            }
            .encode(out);
            for p in points {
                p.as_slice().encode(out);
            }
        }
    }

    fn decode_fields(f: &mut Fields<'_>) -> Result<Self, DecodeError> {
        let version = if f.next_is_list() {
            SidecarVersion::V0
        } else {
            match f.u8("wrapperVersion")? {
                1 => SidecarVersion::V1,
                v => return Err(DecodeError::UnknownSidecarVersion(v)),
            }
        };
        let mut blob_list = f.list("blobs")?;
        let mut blobs = Vec::with_capacity(blob_list.remaining().len() / BYTES_PER_BLOB);
        while !blob_list.is_empty() {
            let b = blob_list.bytes("blob")?;
            if b.len() != BYTES_PER_BLOB {
                return Err(RlpError::BadLength {
                    field: "blob",
                    expected: BYTES_PER_BLOB,
                    found: b.len(),
                }
                .into());
            }
            blobs.push(*Blob::from_slice(b).expect("length checked above"));
        }
        let commitments = decode_points(f, "commitments")?;
        let proofs = decode_points(
            f,
            if version == SidecarVersion::V0 {
                "proofs"
            } else {
                "cellProofs"
            },
        )?;
        Ok(Self {
            version,
            blobs,
            commitments,
            proofs,
            sampled: None,
        })
    }
}

fn decode_points(f: &mut Fields<'_>, field: &'static str) -> Result<Vec<Bytes48>, RlpError> {
    let mut list = f.list(field)?;
    let mut out = Vec::with_capacity(list.remaining().len() / 49);
    while !list.is_empty() {
        out.push(list.fixed::<48>(field)?);
    }
    Ok(out)
}

/// A transaction as the pool and the network carry it: blob transactions with their
/// sidecar (or without one, when a peer sent the canonical form: a fault the pool reports).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PooledTransaction {
    tx: SignedTransaction,
    /// Shared: sidecars are large and the pool, the blob index and the network all hold them.
    sidecar: Option<Arc<BlobsBundle>>,
    size: usize,
}

impl PooledTransaction {
    /// Joins a transaction with its sidecar.
    pub fn new(tx: SignedTransaction, sidecar: Option<BlobsBundle>) -> Self {
        Self::new_shared(tx, sidecar.map(Arc::new))
    }

    /// Joins a transaction with a sidecar already shared elsewhere.
    pub fn new_shared(tx: SignedTransaction, sidecar: Option<Arc<BlobsBundle>>) -> Self {
        let mut pooled = Self {
            size: 0,
            tx,
            sidecar,
        };
        pooled.size = match &pooled.sidecar {
            None => pooled.tx.size(),
            Some(s) => {
                let inner = pooled.tx.size() - 1; // the canonical list without its type byte
                // A sampled sidecar's cells are held too: counted as bytes the tx takes.
                let cells = s
                    .sampled
                    .as_ref()
                    .map_or(0, |c| c.cells.len() * kzg::BYTES_PER_CELL);
                1 + rlp::list_length(inner + s.payload_len()) + cells
            }
        };
        pooled
    }

    /// The transaction in its canonical form (without the sidecar).
    pub fn tx(&self) -> &SignedTransaction {
        &self.tx
    }

    /// The sidecar of a blob transaction in network form; `None` for other types.
    pub fn sidecar(&self) -> Option<&BlobsBundle> {
        self.sidecar.as_deref()
    }

    /// The sidecar as a shared pointer, to keep it without copying the blobs.
    pub fn sidecar_shared(&self) -> Option<&Arc<BlobsBundle>> {
        self.sidecar.as_ref()
    }

    /// The transaction and its sidecar (copied out only if shared elsewhere).
    pub fn into_parts(self) -> (SignedTransaction, Option<BlobsBundle>) {
        (self.tx, self.sidecar.map(Arc::unwrap_or_clone))
    }

    /// The transaction hash (the sidecar is not part of it).
    pub fn hash(&self) -> B256 {
        self.tx.hash()
    }

    /// The transaction's EIP-2718 type.
    pub fn tx_type(&self) -> TxType {
        self.tx.tx_type()
    }

    /// Size of the network encoding, sidecar included: what eth/68 announcements state;
    /// for a sampled tx, that of its form without blobs plus the bytes of its cells.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The hash a network-form envelope would decode to, found without decoding it: the
    /// keccak of the bytes, or for a blob tx with sidecar, of `0x03 || tx fields`. Lets
    /// admission turn away duplicates and known failures before paying for decoding.
    /// `None` when the framing is already broken (decoding then reports why).
    pub fn hash_of_envelope(bytes: &[u8]) -> Option<B256> {
        if bytes.first() != Some(&(TxType::Eip4844 as u8)) {
            return (!bytes.is_empty()).then(|| alloy_primitives::keccak256(bytes));
        }
        let mut buf = &bytes[1..];
        let mut outer = rlp::list(&mut buf, "transaction").ok()?;
        if !outer.next_is_list() {
            return Some(alloy_primitives::keccak256(bytes));
        }
        let inner = outer.raw_item("transaction fields").ok()?;
        Some(keccak_prefixed(TxType::Eip4844 as u8, inner))
    }

    /// Decodes an envelope in network form (`eth_sendRawTransaction`, `PooledTransactions`).
    pub fn decode_2718(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.first() != Some(&(TxType::Eip4844 as u8)) {
            return Ok(Self::new(SignedTransaction::decode_2718(bytes)?, None));
        }
        let mut buf = &bytes[1..];
        let mut outer = rlp::list(&mut buf, "transaction")?;
        if !buf.is_empty() {
            return Err(DecodeError::TrailingBytes { extra: buf.len() });
        }
        if !outer.next_is_list() {
            // The canonical form: no sidecar.
            return Ok(Self::new(SignedTransaction::decode_2718(bytes)?, None));
        }
        let inner = outer.raw_item("transaction fields")?;
        let mut fields = rlp::list(&mut &inner[..], "transaction fields")?;
        let tx = super::decode_typed_fields(TxType::Eip4844, &mut fields)?;
        let signature = super::decode_typed_signature(&mut fields)?;
        fields.finish()?;
        let sidecar = BlobsBundle::decode_fields(&mut outer)?;
        outer.finish()?;
        let tx = SignedTransaction {
            tx,
            signature,
            hash: keccak_prefixed(TxType::Eip4844 as u8, inner),
            size: 1 + inner.len(),
        };
        Ok(Self {
            tx,
            sidecar: Some(Arc::new(sidecar)),
            size: bytes.len(),
        })
    }

    /// Decodes one element of a `PooledTransactions` list.
    pub fn decode_network(buf: &mut &[u8]) -> Result<Self, DecodeError> {
        Self::decode_2718(network_envelope(buf)?)
    }

    /// Appends the network-form envelope: `0x03 || rlp([tx fields, version?, blobs,
    /// commitments, proofs])` for a blob tx with sidecar, else the canonical envelope.
    pub fn encode_2718(&self, out: &mut Vec<u8>) {
        let Some(sidecar) = &self.sidecar else {
            self.tx.encode_2718(out);
            return;
        };
        self.encode_sidecar_form(sidecar, true, out);
    }

    fn encode_sidecar_form(&self, sidecar: &BlobsBundle, with_blobs: bool, out: &mut Vec<u8>) {
        let canonical = self.tx.encoded_2718();
        let inner = &canonical[1..];
        let mut payload = Vec::with_capacity(self.size);
        payload.extend_from_slice(inner);
        sidecar.encode_fields(&mut payload, with_blobs);
        out.push(TxType::Eip4844 as u8);
        rlp::encode_list_payload(&payload, out);
    }

    /// The network form with an empty blobs list (eth/72's `PooledTransactions`: the
    /// blobs travel as cells, `GetCells`); the network form itself for other txs.
    pub fn encoded_2718_without_blobs(&self) -> Vec<u8> {
        let Some(sidecar) = &self.sidecar else {
            return self.tx.encoded_2718();
        };
        let mut out = Vec::with_capacity(self.size);
        self.encode_sidecar_form(sidecar, false, &mut out);
        out
    }

    /// Size of [`Self::encoded_2718_without_blobs`]: what eth/72 announcements state.
    pub fn size_without_blobs(&self) -> usize {
        match &self.sidecar {
            None => self.size,
            Some(s) => {
                let blob_item = alloy_rlp::Header {
                    list: false,
                    payload_length: BYTES_PER_BLOB,
                }
                .length_with_payload();
                let all = rlp::list_length(blob_item * s.blobs.len());
                let none = rlp::list_length(0);
                let inner = self.tx.size() - 1 + s.payload_len() - all + none;
                1 + rlp::list_length(inner)
            }
        }
    }

    /// The same tx with its sidecar's blobs set to `blobs` (a body that came without them,
    /// its blobs rebuilt from cells). `None` for a tx without sidecar.
    pub fn with_blobs(&self, blobs: Vec<Blob>) -> Option<Self> {
        let s = self.sidecar.as_ref()?;
        Some(Self::new(
            self.tx.clone(),
            Some(BlobsBundle {
                version: s.version,
                blobs,
                commitments: s.commitments.clone(),
                proofs: s.proofs.clone(),
                sampled: None,
            }),
        ))
    }

    /// The same tx holding only `cells` of its blobs, those of `custody` blob by blob (a
    /// body that came without blobs, and the cells a sampler fetched). `None` for a tx
    /// without sidecar.
    pub fn with_sampled_cells(&self, custody: CellMask, cells: Vec<kzg::Cell>) -> Option<Self> {
        let s = self.sidecar.as_ref()?;
        Some(Self::new(
            self.tx.clone(),
            Some(BlobsBundle {
                version: s.version,
                blobs: Vec::new(),
                commitments: s.commitments.clone(),
                proofs: s.proofs.clone(),
                sampled: Some(SampledCells { custody, cells }),
            }),
        ))
    }

    /// Whether this is a blob tx whose blobs are held whole (a sampled one is not; other
    /// txs are): what block building, getBlobs and peers before eth/72 need.
    pub fn has_whole_blobs(&self) -> bool {
        self.sidecar.as_ref().is_none_or(|s| !s.is_sampled())
    }

    /// The network-form envelope ([`Self::encode_2718`]) in a new buffer.
    pub fn encoded_2718(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.size);
        self.encode_2718(&mut out);
        out
    }

    /// As an element of a `PooledTransactions` list: typed envelopes wrapped as strings.
    pub fn encode_network(&self, out: &mut Vec<u8>) {
        wrap_network(&self.encoded_2718(), self.tx_type(), out);
    }

    /// Structural sidecar checks (no KZG). Non-blob transactions pass.
    pub fn validate_cheap(&self, rules: &BlobRules) -> Result<(), BlobsBundleError> {
        if self.tx_type() != TxType::Eip4844 {
            return Ok(());
        }
        let sidecar = self
            .sidecar
            .as_ref()
            .ok_or(BlobsBundleError::MissingSidecar)?;
        sidecar.validate_cheap(self.tx.tx().blob_versioned_hashes(), rules)
    }

    /// [`Self::validate_cheap`] plus KZG proof verification.
    pub fn validate(&self, rules: &BlobRules) -> Result<(), BlobsBundleError> {
        self.validate_cheap(rules)?;
        match &self.sidecar {
            Some(s) => s.verify_proofs(),
            None => Ok(()),
        }
    }
}
