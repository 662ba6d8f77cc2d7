//! What a checkpoint holds and how it is laid out in memory, with its integrity checks.
//!
//! The application names the bytes to save in a [`ProtectSet`] (FTI's `Protect(id, ptr, len)`,
//! borrowed for the duration of one checkpoint, so nothing aliases the data later); a restore
//! hands back a [`RestoredImage`] to copy from by id.
//!
//! Image layout (little-endian), the same in a local slot, a buddy slot and a parity block:
//! ```text
//! 0:        header (64 B, own CRC32C): magic | version | kind | rank | epoch | payload_len |
//!           chunk_len | chunk_count | table_crc | entries
//! 64:       chunk table: one CRC32C per payload chunk, padded to 64 B
//! 64 + T:   payload: per entry `id u32 | 0 u32 | len u64 | bytes`, padded to 8 B
//! ```
//! A chunk's CRC is seeded with (rank, epoch, chunk index), so bytes of another rank, another
//! epoch or another position never pass: a torn copy (some chunks of the new epoch missing)
//! fails like a corrupted one. The header is written last; it is the commit ("epoch word").

use reverb_transport::codec::{CodecError, Fixed, Reader, Writer};

use crate::error::CkptError;

const MAGIC: u64 = 0x3130_5450_4b43_5652; // "RVCKPT01"
/// Layout version of the header and payload; a new layout gets a new number.
pub const FORMAT_VERSION: u16 = 1;
pub const HEADER_LEN: usize = 64;
const HEADER_CRC_OFFSET: usize = 60;
const ENTRY_HEADER_LEN: usize = 16;
/// Default payload chunk covered by one CRC (and moved by one put). 256 KiB keeps a chunk in
/// L2 from its local copy through its CRC to its buddy put: `reverb bench ckpt` on shm moved
/// 1.3-1.5x more buddy GB/s at 4 MiB than with 1 MiB chunks (docs/benchmarks-ft.md, Checkpoints).
pub const DEFAULT_CHUNK_LEN: usize = 256 << 10;

/// What an image holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum ImageKind {
    /// A rank's protected data.
    Data = 1,
    /// One parity block of a Reed-Solomon group.
    Parity = 2,
}

/// A checkpoint epoch: 1 for the first checkpoint, then increasing. 0 is never committed.
pub type Epoch = u64;

/// The parsed, checked header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageHeader {
    pub kind: ImageKind,
    pub rank: u32,
    pub epoch: Epoch,
    pub payload_len: u64,
    pub chunk_len: u32,
    pub chunk_count: u32,
    pub table_crc: u32,
    pub entries: u32,
}

impl ImageHeader {
    /// Bytes of the chunk table, padded.
    pub fn table_len(&self) -> usize {
        table_len(self.chunk_count as usize)
    }

    /// Total bytes of the image this header describes.
    pub fn image_len(&self) -> usize {
        HEADER_LEN + self.table_len() + self.payload_len as usize
    }

    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut fields = Fixed::<HEADER_CRC_OFFSET>::new();
        Writer::new(&mut fields)
            .u64(MAGIC)
            .u16(FORMAT_VERSION)
            .u16(self.kind as u16)
            .u32(self.rank)
            .u64(self.epoch)
            .u64(self.payload_len)
            .u32(self.chunk_len)
            .u32(self.chunk_count)
            .u32(self.table_crc)
            .u32(self.entries);
        let fields = fields.into_array();
        let mut out = Fixed::<HEADER_LEN>::new();
        Writer::new(&mut out).raw(&fields).u32(crc32c::crc32c(&fields));
        out.into_array()
    }

    /// Parses and checks a header; `what` names the copy in errors.
    pub fn parse(bytes: &[u8], what: &str) -> Result<ImageHeader, CkptError> {
        let corrupt = |detail: String| CkptError::HeaderCorrupt { what: what.to_string(), detail };
        let Some((h, _)) = bytes.split_first_chunk::<HEADER_LEN>() else {
            return Err(CkptError::Truncated { what: what.to_string(), have: bytes.len(), need: HEADER_LEN });
        };
        if h.iter().all(|&b| b == 0) {
            return Err(corrupt("empty (never written)".into()));
        }
        let raw = RawHeader::read(h).map_err(|e| corrupt(e.to_string()))?;
        if raw.magic != MAGIC {
            return Err(corrupt(format!("bad magic {:#018x}", raw.magic)));
        }
        let computed = crc32c::crc32c(&h[..HEADER_CRC_OFFSET]);
        if raw.crc != computed {
            return Err(corrupt(format!("header CRC32C {:#010x}, computed {computed:#010x}", raw.crc)));
        }
        if raw.version != FORMAT_VERSION {
            return Err(corrupt(format!(
                "format version {}, this build reads {FORMAT_VERSION}",
                raw.version
            )));
        }
        let kind = match raw.kind {
            1 => ImageKind::Data,
            2 => ImageKind::Parity,
            other => return Err(corrupt(format!("unknown image kind {other}"))),
        };
        let header = ImageHeader { kind, ..raw.header };
        if header.chunk_len == 0 {
            return Err(corrupt("chunk length 0".into()));
        }
        let expected_chunks = header.payload_len.div_ceil(u64::from(header.chunk_len));
        if u64::from(header.chunk_count) != expected_chunks {
            return Err(corrupt(format!(
                "{} chunks for {} payload bytes in chunks of {}",
                header.chunk_count, header.payload_len, header.chunk_len
            )));
        }
        if header.payload_len > (1 << 40) {
            return Err(corrupt(format!("payload length {} is implausible", header.payload_len)));
        }
        Ok(header)
    }
}

/// The header's fields as stored, before any check.
struct RawHeader {
    magic: u64,
    version: u16,
    kind: u16,
    /// Every field but `kind`, which is checked apart.
    header: ImageHeader,
    crc: u32,
}

impl RawHeader {
    fn read(h: &[u8; HEADER_LEN]) -> Result<RawHeader, CodecError> {
        let mut r = Reader::new(h, "checkpoint image header");
        Ok(RawHeader {
            magic: r.u64("magic")?,
            version: r.u16("version")?,
            kind: r.u16("kind")?,
            header: ImageHeader {
                kind: ImageKind::Data,
                rank: r.u32("rank")?,
                epoch: r.u64("epoch")?,
                payload_len: r.u64("payload_len")?,
                chunk_len: r.u32("chunk_len")?,
                chunk_count: r.u32("chunk_count")?,
                table_crc: r.u32("table_crc")?,
                entries: r.u32("entries")?,
            },
            crc: {
                r.skip(HEADER_CRC_OFFSET - 48, "reserved")?;
                r.u32("crc")?
            },
        })
    }
}

fn table_len(chunks: usize) -> usize {
    (chunks * 4).div_ceil(HEADER_LEN) * HEADER_LEN
}

fn chunk_crc(rank: u32, epoch: Epoch, index: u32, data: &[u8]) -> u32 {
    let mut seed = Fixed::<16>::new();
    Writer::new(&mut seed).u32(rank).u64(epoch).u32(index);
    crc32c::crc32c_append(crc32c::crc32c(&seed.into_array()), data)
}

fn padded8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// The memory an application protects for the next checkpoint: ids and borrowed bytes.
#[derive(Debug, Default, Clone)]
pub struct ProtectSet<'a> {
    entries: Vec<(u32, &'a [u8])>,
}

impl<'a> ProtectSet<'a> {
    pub fn new() -> Self {
        ProtectSet { entries: Vec::new() }
    }

    /// Protects `data` under `id` (FTI's `Protect`). Ids are unique within a set.
    pub fn protect(
        &mut self,
        id: u32,
        data: &'a (impl AsRef<[u8]> + ?Sized),
    ) -> Result<&mut Self, CkptError> {
        if self.entries.iter().any(|&(existing, _)| existing == id) {
            return Err(CkptError::ProtectedId { id, detail: "protected twice" });
        }
        self.entries.push((id, data.as_ref()));
        Ok(self)
    }

    pub fn entries(&self) -> &[(u32, &'a [u8])] {
        &self.entries
    }

    /// Payload bytes these entries serialize to.
    pub fn payload_len(&self) -> usize {
        self.entries.iter().map(|(_, d)| ENTRY_HEADER_LEN + padded8(d.len())).sum()
    }

    /// Image bytes with the given chunk length.
    pub fn image_len(&self, chunk_len: usize) -> usize {
        image_len(self.payload_len(), chunk_len)
    }
}

/// Image bytes for `payload_len` payload bytes in chunks of `chunk_len`.
pub fn image_len(payload_len: usize, chunk_len: usize) -> usize {
    HEADER_LEN + table_len(payload_len.div_ceil(chunk_len.max(1))) + payload_len
}

/// Where a streaming serialization writes: bytes of the image by offset, and a notice after each
/// payload chunk is complete and checksummed (so it can be shipped while still in cache).
pub trait ImageSink {
    /// `len` writable bytes at image offset `offset`; the borrow ends before the next call.
    fn bytes_mut(&mut self, offset: usize, len: usize) -> Result<&mut [u8], CkptError>;
    /// Payload chunk `[offset, offset + len)` of the image is final.
    fn chunk_done(&mut self, offset: usize, len: usize) -> Result<(), CkptError>;
}

impl ImageSink for [u8] {
    fn bytes_mut(&mut self, offset: usize, len: usize) -> Result<&mut [u8], CkptError> {
        let have = <[u8]>::len(self);
        offset
            .checked_add(len)
            .and_then(|end| self.get_mut(offset..end))
            .ok_or(CkptError::TooLarge { len: offset.saturating_add(len), capacity: have })
    }

    fn chunk_done(&mut self, _offset: usize, _len: usize) -> Result<(), CkptError> {
        Ok(())
    }
}

/// Serializes `set` into `out` (at least `set.image_len(chunk_len)` bytes), header last.
/// Returns the header (already written at `out[..64]`).
pub fn write_image(
    out: &mut [u8],
    kind: ImageKind,
    rank: u32,
    epoch: Epoch,
    chunk_len: usize,
    set: &ProtectSet<'_>,
) -> Result<ImageHeader, CkptError> {
    let total = set.image_len(chunk_len.max(1));
    if out.len() < total {
        return Err(CkptError::TooLarge { len: total, capacity: out.len() });
    }
    write_image_to(out, kind, rank, epoch, chunk_len, set)
}

/// Streaming form of [`write_image`]: copies the payload chunk by chunk, checksums each chunk
/// right after copying it and reports it to the sink; then writes the chunk table and, last,
/// the header. The caller has checked that the sink holds `set.image_len(chunk_len)` bytes.
pub fn write_image_to(
    sink: &mut (impl ImageSink + ?Sized),
    kind: ImageKind,
    rank: u32,
    epoch: Epoch,
    chunk_len: usize,
    set: &ProtectSet<'_>,
) -> Result<ImageHeader, CkptError> {
    let chunk_len32 = u32::try_from(chunk_len)
        .ok()
        .filter(|&c| c > 0)
        .ok_or_else(|| CkptError::InvalidArgument(format!("chunk length {chunk_len}")))?;
    let payload_len = set.payload_len();
    let chunks = payload_len.div_ceil(chunk_len);
    let chunk_count = u32::try_from(chunks)
        .map_err(|_| CkptError::InvalidArgument(format!("{chunks} chunks of {chunk_len} bytes")))?;
    let payload_at = HEADER_LEN + table_len(chunks);
    let mut crcs: Vec<u32> = Vec::with_capacity(chunks);
    let mut stream =
        PayloadStream { sink, payload_at, payload_len, chunk_len, rank, epoch, written: 0, crcs: &mut crcs };
    for &(id, data) in set.entries() {
        let mut entry_header = Fixed::<ENTRY_HEADER_LEN>::new();
        Writer::new(&mut entry_header).u32(id).zeros(4).u64(data.len() as u64);
        stream.write(&entry_header.into_array())?;
        stream.write(data)?;
        stream.zeros(padded8(data.len()) - data.len())?;
    }
    stream.finish()?;
    let table = sink.bytes_mut(HEADER_LEN, payload_at - HEADER_LEN)?;
    table.fill(0);
    for (slot, crc) in table.chunks_exact_mut(4).zip(&crcs) {
        slot.copy_from_slice(&crc.to_le_bytes());
    }
    let header = ImageHeader {
        kind,
        rank,
        epoch,
        payload_len: payload_len as u64,
        chunk_len: chunk_len32,
        chunk_count,
        table_crc: crc32c::crc32c(table),
        entries: u32::try_from(set.entries().len())
            .map_err(|_| CkptError::InvalidArgument("too many protected entries".into()))?,
    };
    sink.bytes_mut(0, HEADER_LEN)?.copy_from_slice(&header.to_bytes());
    Ok(header)
}

/// The payload as a byte stream cut into checksummed chunks.
struct PayloadStream<'s, S: ImageSink + ?Sized> {
    sink: &'s mut S,
    payload_at: usize,
    payload_len: usize,
    chunk_len: usize,
    rank: u32,
    epoch: Epoch,
    written: usize,
    crcs: &'s mut Vec<u32>,
}

impl<S: ImageSink + ?Sized> PayloadStream<'_, S> {
    fn write(&mut self, mut data: &[u8]) -> Result<(), CkptError> {
        while !data.is_empty() {
            let room = self.chunk_len - self.written % self.chunk_len;
            let n = room.min(data.len());
            self.sink.bytes_mut(self.payload_at + self.written, n)?.copy_from_slice(&data[..n]);
            self.advance(n)?;
            data = &data[n..];
        }
        Ok(())
    }

    fn zeros(&mut self, mut len: usize) -> Result<(), CkptError> {
        while len > 0 {
            let n = (self.chunk_len - self.written % self.chunk_len).min(len);
            self.sink.bytes_mut(self.payload_at + self.written, n)?.fill(0);
            self.advance(n)?;
            len -= n;
        }
        Ok(())
    }

    fn advance(&mut self, n: usize) -> Result<(), CkptError> {
        self.written += n;
        if self.written.is_multiple_of(self.chunk_len) {
            self.close_chunk(self.chunk_len)?;
        }
        Ok(())
    }

    fn close_chunk(&mut self, len: usize) -> Result<(), CkptError> {
        let index = self.crcs.len();
        let offset = self.payload_at + index * self.chunk_len;
        let crc = chunk_crc(self.rank, self.epoch, index as u32, self.sink.bytes_mut(offset, len)?);
        self.crcs.push(crc);
        self.sink.chunk_done(offset, len)
    }

    fn finish(&mut self) -> Result<(), CkptError> {
        debug_assert_eq!(self.written, self.payload_len);
        let tail = self.written % self.chunk_len;
        if tail != 0 {
            self.close_chunk(tail)?;
        }
        Ok(())
    }
}

/// A checked image: every chunk passed its CRC. Entries are copied out by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredImage {
    pub header: ImageHeader,
    entries: Vec<(u32, Vec<u8>)>,
}

impl RestoredImage {
    /// The bytes protected under `id`, if any.
    pub fn entry(&self, id: u32) -> Option<&[u8]> {
        self.entries.iter().find(|(i, _)| *i == id).map(|(_, d)| d.as_slice())
    }

    /// Copies entry `id` back into `target`, which must have the protected length.
    pub fn restore_into(&self, id: u32, target: &mut [u8]) -> Result<(), CkptError> {
        let data = self.entry(id).ok_or(CkptError::ProtectedId { id, detail: "not in the checkpoint" })?;
        if data.len() != target.len() {
            return Err(CkptError::ProtectedId { id, detail: "length differs from the checkpointed one" });
        }
        target.copy_from_slice(data);
        Ok(())
    }

    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries.iter().map(|(i, _)| *i)
    }

    pub fn into_entries(self) -> Vec<(u32, Vec<u8>)> {
        self.entries
    }
}

/// Checks a whole image (header, chunk table, every chunk, entry framing) and copies it out.
/// `expect` is the (kind, rank, epoch) the caller asked for; anything else is an error.
pub fn validate_image(
    bytes: &[u8],
    what: &str,
    expect: (ImageKind, u32, Epoch),
) -> Result<RestoredImage, CkptError> {
    let header = ImageHeader::parse(bytes, what)?;
    let (kind, rank, epoch) = expect;
    if header.rank != rank || header.epoch != epoch || header.kind != kind {
        return Err(CkptError::WrongEpoch {
            what: what.to_string(),
            rank,
            epoch,
            found_rank: header.rank,
            found_epoch: header.epoch,
        });
    }
    let need = header.image_len();
    if bytes.len() < need {
        return Err(CkptError::Truncated { what: what.to_string(), have: bytes.len(), need });
    }
    let payload_at = HEADER_LEN + header.table_len();
    let table = &bytes[HEADER_LEN..payload_at];
    if crc32c::crc32c(table) != header.table_crc {
        return Err(CkptError::HeaderCorrupt { what: what.to_string(), detail: "chunk table CRC32C".into() });
    }
    let payload = &bytes[payload_at..need];
    let chunk_len = header.chunk_len as usize;
    let chunks = header.chunk_count as usize;
    let mut stored_crcs = Reader::new(table, "chunk table");
    for index in 0..chunks {
        let data = &payload[index * chunk_len..((index + 1) * chunk_len).min(payload.len())];
        let stored = stored_crcs.u32("chunk CRC32C").map_err(|e| corrupt_table(what, e))?;
        if stored != chunk_crc(header.rank, header.epoch, index as u32, data) {
            return Err(CkptError::ChunkCorrupt { what: what.to_string(), chunk: index, chunks });
        }
    }
    let framing = |detail: String| CkptError::HeaderCorrupt { what: what.to_string(), detail };
    let mut entries = Vec::with_capacity(header.entries.min(1 << 16) as usize);
    let mut r = Reader::new(payload, "checkpoint payload");
    for n in 0..header.entries {
        let (Ok(id), Ok(()), Ok(len)) = (r.u32("id"), r.skip(4, "reserved"), r.u64("length")) else {
            return Err(framing(format!("entry {n} header past the payload end")));
        };
        let len = usize::try_from(len).map_err(|_| framing(format!("entry {n} length")))?;
        let Ok(data) = r.take(len, "data") else {
            return Err(framing(format!("entry {n} (id {id}, {len} bytes) past the payload end")));
        };
        entries.push((id, data.to_vec()));
        r.skip(padded8(len) - len, "padding")
            .map_err(|_| framing(format!("entry {n} padding past the payload end")))?;
    }
    if r.remaining() != 0 {
        return Err(framing(format!("{} payload bytes after the last entry", r.remaining())));
    }
    Ok(RestoredImage { header, entries })
}

/// A chunk table shorter than its chunk count (the header's table length rules it out).
fn corrupt_table(what: &str, e: CodecError) -> CkptError {
    CkptError::HeaderCorrupt { what: what.to_string(), detail: e.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(chunk_len: usize) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let a: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let b = b"state".to_vec();
        let mut set = ProtectSet::new();
        set.protect(1, &a).unwrap().protect(9, &b).unwrap();
        let mut out = vec![0u8; set.image_len(chunk_len)];
        write_image(&mut out, ImageKind::Data, 3, 7, chunk_len, &set).unwrap();
        (out, a, b)
    }

    /// Format version 1 bytes, written out by hand around the CRC: old and new must agree.
    #[test]
    fn pinned_header_bytes() {
        let header = ImageHeader {
            kind: ImageKind::Parity,
            rank: 3,
            epoch: 7,
            payload_len: 0x1_0000_0010,
            chunk_len: 0x10,
            chunk_count: 0x1000_0001,
            table_crc: 0xdead_beef,
            entries: 2,
        };
        let mut want = b"RVCKPT01".to_vec();
        want.extend_from_slice(&[1, 0, 2, 0, 3, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&[0x10, 0, 0, 0, 1, 0, 0, 0, 0x10, 0, 0, 0, 1, 0, 0, 0x10]);
        want.extend_from_slice(&[0xef, 0xbe, 0xad, 0xde, 2, 0, 0, 0]);
        want.resize(HEADER_CRC_OFFSET, 0);
        let crc = crc32c::crc32c(&want);
        want.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(header.to_bytes().to_vec(), want);
        assert_eq!(ImageHeader::parse(&want, "pinned").unwrap(), header);
        // An entry is `id u32 | 0 u32 | len u64 | bytes`, padded to 8.
        let (img, _, _) = sample(4096);
        let payload_at = HEADER_LEN + ImageHeader::parse(&img, "sample").unwrap().table_len();
        assert_eq!(img[payload_at..payload_at + 16], [1, 0, 0, 0, 0, 0, 0, 0, 0x10, 0x27, 0, 0, 0, 0, 0, 0]);
    }

    mod fuzz {
        use super::super::*;
        use proptest::prelude::*;

        fn entries() -> impl Strategy<Value = Vec<(u32, Vec<u8>)>> {
            prop::collection::btree_map(any::<u32>(), prop::collection::vec(any::<u8>(), 0..300), 0..5)
                .prop_map(|m| m.into_iter().collect())
        }

        proptest! {
            #[test]
            fn arbitrary_bytes_never_panic(mut bytes in prop::collection::vec(any::<u8>(), 0..600), fix_crc: bool) {
                if fix_crc && bytes.len() >= HEADER_LEN {
                    // Get past the magic and the header CRC so the field checks are exercised.
                    bytes[..8].copy_from_slice(&MAGIC.to_le_bytes());
                    let crc = crc32c::crc32c(&bytes[..HEADER_CRC_OFFSET]);
                    bytes[HEADER_CRC_OFFSET..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
                }
                if let Ok(h) = ImageHeader::parse(&bytes, "fuzz") {
                    let _ = validate_image(&bytes, "fuzz", (h.kind, h.rank, h.epoch));
                }
            }

            #[test]
            fn round_trips_what_the_encoder_wrote(
                entries in entries(), rank: u32, epoch: u64, chunk_len in 1usize..512, parity: bool,
            ) {
                let kind = if parity { ImageKind::Parity } else { ImageKind::Data };
                let mut set = ProtectSet::new();
                for (id, data) in &entries {
                    set.protect(*id, data).unwrap();
                }
                let mut img = vec![0u8; set.image_len(chunk_len)];
                let header = write_image(&mut img, kind, rank, epoch, chunk_len, &set).unwrap();
                prop_assert_eq!(ImageHeader::parse(&img, "fuzz").unwrap(), header);
                let restored = validate_image(&img, "fuzz", (kind, rank, epoch)).unwrap();
                for (id, data) in &entries {
                    prop_assert_eq!(restored.entry(*id), Some(data.as_slice()));
                }
            }
        }
    }

    #[test]
    fn round_trip() {
        let (img, a, b) = sample(4096);
        let restored = validate_image(&img, "test", (ImageKind::Data, 3, 7)).unwrap();
        assert_eq!(restored.entry(1), Some(a.as_slice()));
        assert_eq!(restored.entry(9), Some(b.as_slice()));
        let mut target = vec![0u8; 5];
        restored.restore_into(9, &mut target).unwrap();
        assert_eq!(target, b);
        assert!(matches!(restored.restore_into(9, &mut [0u8; 4]), Err(CkptError::ProtectedId { id: 9, .. })));
        assert!(restored.entry(2).is_none());
    }

    #[test]
    fn duplicate_ids_are_refused() {
        let data = [1u8; 4];
        let mut set = ProtectSet::new();
        set.protect(1, &data).unwrap();
        assert!(matches!(set.protect(1, &data), Err(CkptError::ProtectedId { id: 1, .. })));
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let (img, _, _) = sample(1024);
        for at in (0..img.len()).step_by(37) {
            let mut bad = img.clone();
            bad[at] ^= 0x40;
            let result = validate_image(&bad, "flip", (ImageKind::Data, 3, 7));
            assert!(result.is_err(), "flip at {at} of {} passed", img.len());
        }
    }

    #[test]
    fn truncation_and_wrong_epoch_are_detected() {
        let (img, _, _) = sample(1024);
        for len in [0, 10, HEADER_LEN, img.len() / 2, img.len() - 1] {
            let result = validate_image(&img[..len], "cut", (ImageKind::Data, 3, 7));
            assert!(matches!(result, Err(CkptError::Truncated { .. })), "cut at {len}: {result:?}");
        }
        assert!(matches!(
            validate_image(&img, "e", (ImageKind::Data, 3, 8)),
            Err(CkptError::WrongEpoch { found_epoch: 7, .. })
        ));
        assert!(matches!(
            validate_image(&img, "r", (ImageKind::Data, 4, 7)),
            Err(CkptError::WrongEpoch { .. })
        ));
        assert!(matches!(
            validate_image(&[0u8; 256], "zero", (ImageKind::Data, 3, 7)),
            Err(CkptError::HeaderCorrupt { .. })
        ));
    }

    #[test]
    fn torn_copy_of_two_epochs_is_detected() {
        // New header and first chunk over the previous epoch's remaining chunks.
        let a: Vec<u8> = vec![1; 5000];
        let b: Vec<u8> = vec![2; 5000];
        let (mut old, mut new) = (ProtectSet::new(), ProtectSet::new());
        old.protect(1, &a).unwrap();
        new.protect(1, &b).unwrap();
        let mut old_img = vec![0u8; old.image_len(1024)];
        let mut new_img = vec![0u8; new.image_len(1024)];
        write_image(&mut old_img, ImageKind::Data, 0, 1, 1024, &old).unwrap();
        write_image(&mut new_img, ImageKind::Data, 0, 2, 1024, &new).unwrap();
        let mut torn = old_img.clone();
        torn[..HEADER_LEN + 64 + 1024].copy_from_slice(&new_img[..HEADER_LEN + 64 + 1024]);
        assert!(matches!(
            validate_image(&torn, "torn", (ImageKind::Data, 0, 2)),
            Err(CkptError::ChunkCorrupt { chunk: 1, .. })
        ));
    }
}
