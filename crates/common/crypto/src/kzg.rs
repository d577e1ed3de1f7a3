//! KZG commitments and proofs for blob transactions, over c-kzg.
//!
//! Two proof layouts exist on the wire:
//! - version 0 (EIP-4844): one proof per blob, checked with `verify_blob_kzg_proof_batch`;
//! - version 1 (EIP-7594, Osaka): 128 cell proofs per blob; the cells are recomputed from
//!   the blob and checked with `verify_cell_kzg_proof_batch`.
//!
//! The trusted setup is the mainnet one embedded in c-kzg, parsed on first use. Parsing
//! takes tens of milliseconds, so [`warm_up`] exists for callers that want it off the hot
//! path.

use alloy_primitives::B256;
use sha2::{Digest, Sha256};

pub use c_kzg::{BYTES_PER_BLOB, BYTES_PER_CELL, CELLS_PER_EXT_BLOB, FIELD_ELEMENTS_PER_BLOB};

/// A commitment or proof: a compressed G1 point.
pub type Bytes48 = [u8; 48];

/// The version byte of a blob versioned hash (EIP-4844).
pub const VERSIONED_HASH_VERSION_KZG: u8 = 0x01;

/// One blob: 4096 field elements of 32 bytes.
#[derive(Clone, PartialEq, Eq)]
#[repr(transparent)]
pub struct Blob(pub [u8; BYTES_PER_BLOB]);

impl Blob {
    /// An all-zero blob (a valid one).
    pub fn zeroed() -> Box<Blob> {
        // Built on the heap directly: 128 KiB does not belong on a task's stack.
        let v: Box<[u8]> = vec![0u8; BYTES_PER_BLOB].into_boxed_slice();
        let raw = Box::into_raw(v) as *mut Blob;
        // SAFETY: the allocation holds exactly BYTES_PER_BLOB bytes with alignment 1, which
        // is the layout of the `repr(transparent)` Blob.
        unsafe { Box::from_raw(raw) }
    }

    /// Copies a blob out of a byte slice of exactly [`BYTES_PER_BLOB`] bytes.
    pub fn from_slice(bytes: &[u8]) -> Option<Box<Blob>> {
        if bytes.len() != BYTES_PER_BLOB {
            return None;
        }
        let mut blob = Blob::zeroed();
        blob.0.copy_from_slice(bytes);
        Some(blob)
    }
}

impl std::fmt::Debug for Blob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Blob(0x{}…)",
            alloy_primitives::hex::encode(&self.0[..8])
        )
    }
}

/// Why a KZG check failed. Every variant is the sender's fault: an honest peer never
/// relays a bundle that fails here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KzgError {
    /// The inputs are well formed but a proof does not open its commitment.
    #[error("kzg proof verification failed")]
    InvalidProof,
    /// c-kzg refused an input (a blob field element not below the modulus, a commitment
    /// or proof that is not a valid G1 point); its error as text.
    #[error("malformed kzg input: {0}")]
    Malformed(String),
    /// The lists do not pair up (one proof per blob for version 0, 128 per blob for
    /// cell proofs); names the lists.
    #[error("kzg input lengths differ: {0}")]
    LengthMismatch(&'static str),
}

fn settings() -> &'static c_kzg::KzgSettings {
    c_kzg::ethereum_kzg_settings(0)
}

/// Loads the trusted setup now rather than on the first verification.
pub fn warm_up() {
    let _ = settings();
}

/// `sha256(commitment)` with its first byte replaced by the KZG version byte.
pub fn versioned_hash(commitment: &Bytes48) -> B256 {
    let mut hash: [u8; 32] = Sha256::digest(commitment).into();
    hash[0] = VERSIONED_HASH_VERSION_KZG;
    B256::from(hash)
}

fn as_ckzg_blobs(blobs: &[Blob]) -> &[c_kzg::Blob] {
    // SAFETY: c_kzg::Blob is `repr(C)` around `[u8; BYTES_PER_BLOB]` and Blob is
    // `repr(transparent)` around the same array, so the slices have identical layout.
    unsafe { std::slice::from_raw_parts(blobs.as_ptr().cast(), blobs.len()) }
}

fn as_ckzg_bytes48(points: &[Bytes48]) -> &[c_kzg::Bytes48] {
    // SAFETY: c_kzg::Bytes48 is `repr(C)` around `[u8; 48]`.
    unsafe { std::slice::from_raw_parts(points.as_ptr().cast(), points.len()) }
}

fn ckzg_error(e: c_kzg::Error) -> KzgError {
    KzgError::Malformed(format!("{e:?}"))
}

/// Verifies version-0 proofs (one per blob) in a single batch call.
pub fn verify_blob_proofs(
    blobs: &[Blob],
    commitments: &[Bytes48],
    proofs: &[Bytes48],
) -> Result<(), KzgError> {
    if blobs.len() != commitments.len() || blobs.len() != proofs.len() {
        return Err(KzgError::LengthMismatch("blobs, commitments and proofs"));
    }
    let ok = settings()
        .verify_blob_kzg_proof_batch(
            as_ckzg_blobs(blobs),
            as_ckzg_bytes48(commitments),
            as_ckzg_bytes48(proofs),
        )
        .map_err(ckzg_error)?;
    if ok {
        Ok(())
    } else {
        Err(KzgError::InvalidProof)
    }
}

/// Verifies version-1 cell proofs: `cell_proofs` holds [`CELLS_PER_EXT_BLOB`] proofs per
/// blob, blob by blob. The cells are recomputed from each blob (that is most of the cost).
pub fn verify_cell_proofs(
    blobs: &[Blob],
    commitments: &[Bytes48],
    cell_proofs: &[Bytes48],
) -> Result<(), KzgError> {
    if blobs.len() != commitments.len() || blobs.len() * CELLS_PER_EXT_BLOB != cell_proofs.len() {
        return Err(KzgError::LengthMismatch(
            "blobs, commitments and cell proofs",
        ));
    }
    let kzg = settings();
    let mut cells = Vec::with_capacity(cell_proofs.len());
    let mut indices = Vec::with_capacity(cell_proofs.len());
    let mut cell_commitments = Vec::with_capacity(cell_proofs.len());
    for (blob, commitment) in as_ckzg_blobs(blobs).iter().zip(commitments) {
        let blob_cells = kzg.compute_cells(blob).map_err(ckzg_error)?;
        cells.extend_from_slice(&blob_cells[..]);
        indices.extend(0..CELLS_PER_EXT_BLOB as u64);
        cell_commitments.extend(std::iter::repeat_n(*commitment, CELLS_PER_EXT_BLOB));
    }
    verify_cell_batch(&cell_commitments, &indices, &cells, cell_proofs)
}

/// One c-kzg cell-proof batch: cell `i` is cell `indices[i]` of the blob committed to by
/// `commitments[i]`, proven by `proofs[i]` (lengths checked by the callers).
fn verify_cell_batch(
    commitments: &[Bytes48],
    indices: &[u64],
    cells: &[c_kzg::Cell],
    proofs: &[Bytes48],
) -> Result<(), KzgError> {
    let ok = settings()
        .verify_cell_kzg_proof_batch(
            as_ckzg_bytes48(commitments),
            indices,
            cells,
            as_ckzg_bytes48(proofs),
        )
        .map_err(ckzg_error)?;
    if ok {
        Ok(())
    } else {
        Err(KzgError::InvalidProof)
    }
}

/// Verifies some cells of some blobs against their cell proofs (EIP-7594), in one batch
/// call: cell `i` is cell `indices[i]` (below [`CELLS_PER_EXT_BLOB`]) of the blob whose
/// commitment is `commitments[i]`, proven by `proofs[i]`. What a node that holds only
/// some cells of a blob (a sampler, EIP-8070) checks; no blob is needed.
pub fn verify_cells(
    commitments: &[Bytes48],
    indices: &[u64],
    cells: &[Cell],
    proofs: &[Bytes48],
) -> Result<(), KzgError> {
    let n = cells.len();
    if commitments.len() != n || indices.len() != n || proofs.len() != n {
        return Err(KzgError::LengthMismatch(
            "cells, indices, commitments and proofs",
        ));
    }
    if indices.iter().any(|i| *i >= CELLS_PER_EXT_BLOB as u64) {
        return Err(KzgError::Malformed("cell index out of range".into()));
    }
    if n == 0 {
        return Ok(());
    }
    let ckzg_cells: Vec<c_kzg::Cell> = cells.iter().map(|c| c_kzg::Cell::new(*c)).collect();
    verify_cell_batch(commitments, indices, &ckzg_cells, proofs)
}

/// One transaction's blobs, commitments and proofs, for verifying several at once.
#[derive(Debug, Clone, Copy)]
pub struct ProofSet<'a> {
    /// The transaction's blobs (EIP-4844, 131,072 bytes each).
    pub blobs: &'a [Blob],
    /// One 48-byte KZG commitment per blob, in blob order.
    pub commitments: &'a [Bytes48],
    /// One proof per blob (version 0), or [`CELLS_PER_EXT_BLOB`] cell proofs per blob,
    /// blob by blob (version 1, EIP-7594).
    pub proofs: &'a [Bytes48],
}

fn concat<'a, T: Clone + 'a>(parts: impl Iterator<Item = &'a [T]>) -> Vec<T> {
    let mut out = Vec::new();
    for p in parts {
        out.extend_from_slice(p);
    }
    out
}

/// Verifies the version-0 proofs of several transactions in one batch call: one pairing
/// check for all of them. A failure does not say which set is bad; callers fall back to
/// verifying each set alone.
pub fn verify_blob_proofs_many(sets: &[ProofSet<'_>]) -> Result<(), KzgError> {
    if let [one] = sets {
        return verify_blob_proofs(one.blobs, one.commitments, one.proofs);
    }
    for s in sets {
        if s.blobs.len() != s.commitments.len() || s.blobs.len() != s.proofs.len() {
            return Err(KzgError::LengthMismatch("blobs, commitments and proofs"));
        }
    }
    verify_blob_proofs(
        &concat(sets.iter().map(|s| s.blobs)),
        &concat(sets.iter().map(|s| s.commitments)),
        &concat(sets.iter().map(|s| s.proofs)),
    )
}

/// Verifies the version-1 cell proofs of several transactions in one batch call.
pub fn verify_cell_proofs_many(sets: &[ProofSet<'_>]) -> Result<(), KzgError> {
    if let [one] = sets {
        return verify_cell_proofs(one.blobs, one.commitments, one.proofs);
    }
    for s in sets {
        if s.blobs.len() != s.commitments.len()
            || s.blobs.len() * CELLS_PER_EXT_BLOB != s.proofs.len()
        {
            return Err(KzgError::LengthMismatch(
                "blobs, commitments and cell proofs",
            ));
        }
    }
    verify_cell_proofs(
        &concat(sets.iter().map(|s| s.blobs)),
        &concat(sets.iter().map(|s| s.commitments)),
        &concat(sets.iter().map(|s| s.proofs)),
    )
}

/// The commitment to a blob (tests and tools build bundles with it).
pub fn blob_to_commitment(blob: &Blob) -> Result<Bytes48, KzgError> {
    let blob = &as_ckzg_blobs(std::slice::from_ref(blob))[0];
    let c = settings()
        .blob_to_kzg_commitment(blob)
        .map_err(ckzg_error)?;
    Ok(c.to_bytes().into_inner())
}

/// The version-0 proof for a blob and its commitment.
pub fn compute_blob_proof(blob: &Blob, commitment: &Bytes48) -> Result<Bytes48, KzgError> {
    let blob = &as_ckzg_blobs(std::slice::from_ref(blob))[0];
    let c = c_kzg::Bytes48::new(*commitment);
    let p = settings()
        .compute_blob_kzg_proof(blob, &c)
        .map_err(ckzg_error)?;
    Ok(p.to_bytes().into_inner())
}

/// The [`CELLS_PER_EXT_BLOB`] version-1 cell proofs of a blob.
pub fn compute_cell_proofs(blob: &Blob) -> Result<Vec<Bytes48>, KzgError> {
    let blob = &as_ckzg_blobs(std::slice::from_ref(blob))[0];
    let (_, proofs) = settings()
        .compute_cells_and_kzg_proofs(blob)
        .map_err(ckzg_error)?;
    Ok(proofs.iter().map(|p| p.to_bytes().into_inner()).collect())
}

/// One cell of a blob's extension (EIP-7594): [`BYTES_PER_CELL`] bytes.
pub type Cell = [u8; BYTES_PER_CELL];

/// Cells of a blob that are the blob itself: cells `0..DATA_CELLS` concatenated are the
/// blob, the other half its erasure-code extension.
pub const DATA_CELLS: usize = CELLS_PER_EXT_BLOB / 2;

/// The [`CELLS_PER_EXT_BLOB`] cells of a blob's extension (no proofs): the first
/// [`DATA_CELLS`] are the blob's bytes, the rest are computed (an FFT, milliseconds).
pub fn compute_cells(blob: &Blob) -> Result<Vec<Cell>, KzgError> {
    let blob = &as_ckzg_blobs(std::slice::from_ref(blob))[0];
    let cells = settings().compute_cells(blob).map_err(ckzg_error)?;
    Ok(cells.iter().map(|c| c.to_bytes()).collect())
}

/// A blob that is valid but not all zeros: each field element is a small number derived
/// from `seed`, so its top byte stays zero and it lies below the field modulus.
pub fn sample_blob(seed: u64) -> Box<Blob> {
    let mut blob = Blob::zeroed();
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for fe in blob.0.chunks_exact_mut(32) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        fe[24..].copy_from_slice(&x.to_be_bytes());
    }
    blob
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v0_proofs_verify_and_tampering_fails() {
        let blobs = [*sample_blob(1), *sample_blob(2)];
        let commitments: Vec<_> = blobs
            .iter()
            .map(|b| blob_to_commitment(b).unwrap())
            .collect();
        let mut proofs: Vec<_> = blobs
            .iter()
            .zip(&commitments)
            .map(|(b, c)| compute_blob_proof(b, c).unwrap())
            .collect();
        verify_blob_proofs(&blobs, &commitments, &proofs).unwrap();
        proofs.swap(0, 1);
        assert_eq!(
            verify_blob_proofs(&blobs, &commitments, &proofs),
            Err(KzgError::InvalidProof)
        );
        assert!(matches!(
            verify_blob_proofs(&blobs, &commitments, &proofs[..1]),
            Err(KzgError::LengthMismatch(_))
        ));
    }

    #[test]
    fn v1_cell_proofs_verify_and_tampering_fails() {
        let blobs = [*sample_blob(3)];
        let commitments = [blob_to_commitment(&blobs[0]).unwrap()];
        let mut proofs = compute_cell_proofs(&blobs[0]).unwrap();
        assert_eq!(proofs.len(), CELLS_PER_EXT_BLOB);
        verify_cell_proofs(&blobs, &commitments, &proofs).unwrap();
        proofs.swap(3, 4);
        assert_eq!(
            verify_cell_proofs(&blobs, &commitments, &proofs),
            Err(KzgError::InvalidProof)
        );
    }

    #[test]
    fn a_blobs_first_64_cells_are_the_blob_itself() {
        let blob = sample_blob(7);
        let cells = compute_cells(&blob).unwrap();
        assert_eq!(cells.len(), CELLS_PER_EXT_BLOB);
        let data: Vec<u8> = cells[..DATA_CELLS].iter().flatten().copied().collect();
        assert_eq!(&data[..], &blob.0[..]);
    }

    #[test]
    fn out_of_field_blob_is_malformed() {
        let mut blob = sample_blob(4);
        blob.0[0] = 0xff; // first field element now exceeds the BLS modulus
        let c = [0u8; 48];
        assert!(matches!(
            verify_blob_proofs(std::slice::from_ref(&*blob), &[c], &[c]),
            Err(KzgError::Malformed(_))
        ));
    }

    #[test]
    fn many_sets_verify_together_and_a_bad_one_fails_the_batch() {
        let blobs: Vec<Blob> = (10..13).map(|i| *sample_blob(i)).collect();
        let commitments: Vec<_> = blobs
            .iter()
            .map(|b| blob_to_commitment(b).unwrap())
            .collect();
        let proofs: Vec<_> = blobs
            .iter()
            .zip(&commitments)
            .map(|(b, c)| compute_blob_proof(b, c).unwrap())
            .collect();
        let set = |i: usize| ProofSet {
            blobs: &blobs[i..i + 1],
            commitments: &commitments[i..i + 1],
            proofs: &proofs[i..i + 1],
        };
        verify_blob_proofs_many(&[set(0), set(1), set(2)]).unwrap();
        let bad = ProofSet {
            proofs: &proofs[0..1],
            ..set(1)
        };
        assert_eq!(
            verify_blob_proofs_many(&[set(0), bad]),
            Err(KzgError::InvalidProof)
        );
    }

    #[test]
    fn versioned_hash_has_version_byte() {
        let h = versioned_hash(&[0u8; 48]);
        assert_eq!(h[0], VERSIONED_HASH_VERSION_KZG);
    }
}
