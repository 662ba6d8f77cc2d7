//! The remote log ring: a region a logger buddy registers (REMOTE_WRITE), filled by the writer
//! with one-sided puts through the `Provider` trait only.
//!
//! Region layout (little-endian):
//! ```text
//! 0:   header slot 0 (64 B)   magic | version | capacity | seq | tail | watermark | checksum
//! 64:  header slot 1 (64 B)   written alternately, so a torn header write leaves the other
//! 128: data (capacity B)      records at logical positions; physical offset = pos % capacity
//! ```
//! A record is `pos u64 | len u32 | kind u16 | 0 u16 | checksum u32 | 0 u32 | data`, padded to
//! 8 bytes. It never straddles the end of the data area: when it does not fit, the rest of the
//! lap is skipped (with a `Wrap` marker when at least a record header fits there). The position
//! in each record tells the laps apart, so stale bytes of an earlier lap never pass as records.
//!
//! Positions only grow. `watermark` is the writer's durable position: every put below it has
//! completed. It is published to the buddy in the header after those completions, so a reader
//! after a crash trusts `[tail, watermark)` (a bad record there is corruption) and salvages what
//! follows while records still check out (a bad one there is a torn write).
//! Space is reused only once the buddy's header shows the trimmed tail, so a reader never
//! starts from a tail whose bytes were overwritten.

use std::collections::VecDeque;
use std::time::Duration;

use reverb_transport::spinwait::SpinWait;
use reverb_transport::{Access, OpId, Owner, Provider, Region, RemoteRegion, Rma, Signal, TransportError};

use crate::determinant::Determinant;
use crate::error::{LogError, Result};
use reverb_transport::codec::{Fixed, Reader, Writer};

use crate::wire::checksum;

const RING_MAGIC: u64 = 0x474e_4952_5645_5652; // "RVEVRING"
/// 2: word-wise checksum (`wire::checksum`) instead of byte-wise FNV-1a.
const RING_VERSION: u32 = 2;
pub const HEADER_SLOT_LEN: usize = 64;
pub const DATA_OFFSET: usize = 2 * HEADER_SLOT_LEN;
pub const RECORD_HEADER_LEN: u64 = 24;
const HEADER_FIELDS_LEN: usize = 48; // bytes covered by the header checksum

/// What a record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// A batch of determinants, `Determinant::WIRE_LEN` bytes each.
    Determinants,
    /// A message payload (receiver-based logging), prefixed by its encoded envelope.
    Payload,
    /// Skip to the next lap.
    Wrap,
}

impl RecordKind {
    fn code(self) -> u16 {
        match self {
            RecordKind::Determinants => 1,
            RecordKind::Payload => 2,
            RecordKind::Wrap => 0xffff,
        }
    }

    fn from_code(code: u16) -> Option<Self> {
        match code {
            1 => Some(RecordKind::Determinants),
            2 => Some(RecordKind::Payload),
            0xffff => Some(RecordKind::Wrap),
            _ => None,
        }
    }
}

fn align8(n: u64) -> u64 {
    n.div_ceil(8) * 8
}

/// Bytes a record with `len` data bytes occupies in the ring.
pub fn record_size(len: usize) -> u64 {
    align8(RECORD_HEADER_LEN + len as u64)
}

/// Where a record of `size` bytes goes when the head is at `head`: how many bytes to skip first,
/// and whether a `Wrap` marker fits in the skipped space.
fn placement(capacity: u64, head: u64, size: u64) -> (u64, bool) {
    let contiguous = capacity - head % capacity;
    if size <= contiguous {
        (0, false)
    } else {
        (contiguous, contiguous >= RECORD_HEADER_LEN)
    }
}

fn record_checksum(header: &[u8], data: &[u8]) -> u32 {
    // Covers pos, len and kind (the first 16 header bytes) and the data.
    checksum(&[&header[..16], data])
}

/// The bytes of one record at position `pos` (header, data, zero padding).
pub fn encode_record(pos: u64, kind: RecordKind, data: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(record_size(data.len()) as usize);
    out.extend_from_slice(&record_header(pos, kind, data)?);
    out.extend_from_slice(data);
    out.resize(record_size(data.len()) as usize, 0);
    Ok(out)
}

/// The header of the record of `data` at position `pos`: the record is this, the data and
/// zero padding to 8 bytes.
fn record_header(pos: u64, kind: RecordKind, data: &[u8]) -> Result<[u8; RECORD_HEADER_LEN as usize]> {
    let len = u32::try_from(data.len())
        .map_err(|_| LogError::InvalidArgument(format!("record of {} bytes", data.len())))?;
    let mut fields = Fixed::<16>::new();
    Writer::new(&mut fields).u64(pos).u32(len).u16(kind.code()).zeros(2);
    let fields = fields.into_array();
    let mut out = Fixed::<{ RECORD_HEADER_LEN as usize }>::new();
    Writer::new(&mut out).raw(&fields).u32(record_checksum(&fields, data)).zeros(4);
    Ok(out.into_array())
}

/// The durable state the header publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingHeader {
    pub capacity: u64,
    pub seq: u64,
    pub tail: u64,
    pub watermark: u64,
}

impl RingHeader {
    pub fn to_bytes(&self) -> [u8; HEADER_SLOT_LEN] {
        let mut fields = Fixed::<HEADER_FIELDS_LEN>::new();
        Writer::new(&mut fields)
            .u64(RING_MAGIC)
            .u32(RING_VERSION)
            .zeros(4)
            .u64(self.capacity)
            .u64(self.seq)
            .u64(self.tail)
            .u64(self.watermark);
        let fields = fields.into_array();
        let mut out = Fixed::<HEADER_SLOT_LEN>::new();
        Writer::new(&mut out).raw(&fields).u32(checksum(&[&fields]));
        out.into_array()
    }

    /// Parses one header slot; `None` if it is not a valid, complete header.
    fn from_slot(slot: &[u8]) -> Option<RingHeader> {
        let mut r = Reader::new(slot, "log ring header");
        let magic = r.u64("magic").ok()?;
        let version = r.u32("version").ok()?;
        r.skip(4, "reserved").ok()?;
        let header = RingHeader {
            capacity: r.u64("capacity").ok()?,
            seq: r.u64("seq").ok()?,
            tail: r.u64("tail").ok()?,
            watermark: r.u64("watermark").ok()?,
        };
        let crc = r.u32("checksum").ok()?;
        let valid = magic == RING_MAGIC
            && version == RING_VERSION
            && crc == checksum(&[slot.get(..HEADER_FIELDS_LEN)?]);
        valid.then_some(header)
    }

    /// Byte offset of the slot this header goes to.
    pub fn slot_offset(&self) -> usize {
        (self.seq % 2) as usize * HEADER_SLOT_LEN
    }
}

/// Region size for a ring of `capacity` data bytes (a multiple of 8).
pub fn region_len(capacity: usize) -> usize {
    DATA_OFFSET + capacity
}

/// Buddy side: registers a ring of `capacity` data bytes and writes an empty header.
pub fn create_ring(provider: &mut dyn Provider, capacity: usize) -> Result<Region> {
    if capacity == 0 || !capacity.is_multiple_of(8) {
        return Err(LogError::InvalidArgument(format!(
            "ring capacity {capacity} must be a positive multiple of 8"
        )));
    }
    let region = provider.alloc_region(region_len(capacity), Access::REMOTE_WRITE)?;
    // Fault every page in now, so first-touch faults do not land on pessimistic deliveries.
    region.fault_in()?;
    let empty = RingHeader { capacity: capacity as u64, seq: 0, tail: 0, watermark: 0 };
    region.write(0, &empty.to_bytes())?;
    region.write(HEADER_SLOT_LEN, &[0u8; HEADER_SLOT_LEN])?;
    Ok(region)
}

#[derive(Debug)]
struct PendingPut {
    op: OpId,
    /// The head after this put: the watermark once it and all earlier puts completed.
    end: u64,
    done: bool,
}

/// Writer side: owns head/tail and the durable watermark; writes through a local mirror of
/// the ring, so each record is put from the same offset it will occupy remotely.
#[derive(Debug)]
pub struct LogRingWriter {
    /// The provider owner its puts complete to: the writer's queue holds nothing else.
    owner: Owner,
    remote: RemoteRegion,
    mirror: Region,
    capacity: u64,
    head: u64,
    tail: u64,
    durable: u64,
    recorded: RingHeader,
    pending: VecDeque<PendingPut>,
    header_in_flight: Option<(OpId, RingHeader)>,
    next_seq: u64,
    failed: Option<TransportError>,
    /// Reused encoding buffer of determinant records (no allocation per write).
    det_scratch: Vec<u8>,
}

impl LogRingWriter {
    /// Starts writing an empty ring (as `create_ring` left it) at the buddy's `remote` region.
    /// Opens a provider owner for its puts: hand the writer back with
    /// [`LogRingWriter::close`] when dropping it with puts still in flight.
    pub fn new(provider: &mut dyn Provider, remote: RemoteRegion) -> Result<Self> {
        let capacity = remote.len.checked_sub(DATA_OFFSET as u64).filter(|c| *c > 0 && c % 8 == 0);
        let Some(capacity) = capacity else {
            return Err(LogError::InvalidArgument(format!(
                "remote ring of {} bytes has no valid data area",
                remote.len
            )));
        };
        let mirror = provider.alloc_region(remote.len as usize, Access::LOCAL)?;
        mirror.fault_in()?;
        let owner = provider.open_owner()?;
        Ok(LogRingWriter {
            owner,
            remote,
            mirror,
            capacity,
            head: 0,
            tail: 0,
            durable: 0,
            recorded: RingHeader { capacity, seq: 0, tail: 0, watermark: 0 },
            pending: VecDeque::new(),
            header_in_flight: None,
            next_seq: 1,
            failed: None,
            det_scratch: Vec::new(),
        })
    }

    /// Drops the writer and closes its owner: completions of its puts still in flight (a
    /// buddy that died, a ring replaced) are discarded by the provider.
    pub fn close(self, provider: &mut dyn Provider) {
        provider.close_owner(self.owner);
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Next position to write.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Oldest live position (after `trim`).
    pub fn tail(&self) -> u64 {
        self.tail
    }

    /// Every record ending at or below this is in the buddy's memory.
    pub fn durable_watermark(&self) -> u64 {
        self.durable
    }

    /// What the buddy's header currently says.
    pub fn recorded_header(&self) -> RingHeader {
        self.recorded
    }

    /// Bytes available to new records (space is reclaimed once the buddy's header shows it).
    pub fn free(&self) -> u64 {
        self.capacity - (self.head - self.recorded.tail)
    }

    /// Ring bytes that appending records of these data lengths, in order, would take from the
    /// free space (wrap skips included): lets a caller check room for a group of records first.
    pub fn bytes_needed(&self, lens: &[usize]) -> u64 {
        let mut head = self.head;
        for &len in lens {
            let size = record_size(len);
            let (skip, _) = placement(self.capacity, head, size);
            head += skip + size;
        }
        head - self.head
    }

    fn check_failed(&self) -> Result<()> {
        match &self.failed {
            Some(e) => Err(LogError::WriteFailed(e.clone())),
            None => Ok(()),
        }
    }

    fn put_mirror(&mut self, provider: &mut dyn Provider, offset: usize, len: usize) -> Result<OpId> {
        let rma = Rma {
            local: &self.mirror,
            local_offset: offset,
            remote: &self.remote,
            remote_offset: offset as u64,
            len,
        };
        Ok(provider.put_for(self.owner, rma, Signal::Yes)?)
    }

    /// Writes one record; returns its ticket: the position the durable watermark must reach
    /// for the record to be safe. `RingFull` is back-pressure: poll, trim, or checkpoint.
    pub fn append(&mut self, provider: &mut dyn Provider, kind: RecordKind, data: &[u8]) -> Result<u64> {
        self.check_failed()?;
        if kind == RecordKind::Wrap {
            return Err(LogError::InvalidArgument("wrap markers are written by the ring itself".into()));
        }
        let size = record_size(data.len());
        if size > self.capacity {
            return Err(LogError::RecordTooLarge { len: size, capacity: self.capacity });
        }
        let (skip, marker) = placement(self.capacity, self.head, size);
        let needed = skip + size;
        if needed > self.free() {
            return Err(LogError::RingFull { needed, free: self.free() });
        }
        if skip > 0 {
            if marker {
                let wrap = encode_record(self.head, RecordKind::Wrap, &[])?;
                let offset = DATA_OFFSET + (self.head % self.capacity) as usize;
                self.mirror.write(offset, &wrap)?;
                let op = self.put_mirror(provider, offset, wrap.len())?;
                self.pending.push_back(PendingPut { op, end: self.head + skip, done: false });
            }
            self.head += skip;
        }
        // Straight into the mirror: a staging copy of a large record (a MiB frame under
        // receiver-based logging) was one more MiB buffer per delivery to fault in.
        let header = record_header(self.head, kind, data)?;
        let offset = DATA_OFFSET + (self.head % self.capacity) as usize;
        self.mirror.write(offset, &header)?;
        self.mirror.write(offset + header.len(), data)?;
        let padding = size as usize - header.len() - data.len();
        if padding > 0 {
            self.mirror.fill(offset + header.len() + data.len(), padding, 0)?;
        }
        let op = self.put_mirror(provider, offset, size as usize)?;
        self.head += size;
        self.pending.push_back(PendingPut { op, end: self.head, done: false });
        Ok(self.head)
    }

    /// Writes a batch of determinants as one record.
    pub fn append_determinants(&mut self, provider: &mut dyn Provider, dets: &[Determinant]) -> Result<u64> {
        let mut data = std::mem::take(&mut self.det_scratch);
        data.clear();
        data.resize(dets.len() * Determinant::WIRE_LEN, 0);
        for (d, out) in dets.iter().zip(data.chunks_exact_mut(Determinant::WIRE_LEN)) {
            out.copy_from_slice(d.wire().as_flattened());
        }
        let ticket = self.append(provider, RecordKind::Determinants, &data);
        self.det_scratch = data;
        ticket
    }

    /// Frees everything before `pos` (a ticket at or below the watermark), e.g. after a
    /// checkpoint. The space is reused once the buddy's header shows the new tail.
    pub fn trim(&mut self, provider: &mut dyn Provider, pos: u64) -> Result<()> {
        if pos < self.tail || pos > self.durable {
            return Err(LogError::InvalidArgument(format!(
                "trim to {pos} outside [tail {}, watermark {}]",
                self.tail, self.durable
            )));
        }
        self.tail = pos;
        self.post_header(provider)
    }

    /// Posts a header update if the buddy's copy is behind and none is in flight.
    fn post_header(&mut self, provider: &mut dyn Provider) -> Result<()> {
        if self.header_in_flight.is_some()
            || (self.durable == self.recorded.watermark && self.tail == self.recorded.tail)
        {
            return Ok(());
        }
        let header = RingHeader {
            capacity: self.capacity,
            seq: self.next_seq,
            tail: self.tail,
            watermark: self.durable,
        };
        self.next_seq += 1;
        // One header put in flight at a time, alternating slots: the mirror slot is never
        // rewritten while a put may still read it, and a torn write spares the other slot.
        let offset = header.slot_offset();
        self.mirror.write(offset, &header.to_bytes())?;
        let op = self.put_mirror(provider, offset, HEADER_SLOT_LEN)?;
        self.header_in_flight = Some((op, header));
        Ok(())
    }

    /// Takes this ring's completions (its owner's queue), advances the watermark and keeps the
    /// buddy's header current. Returns the watermark.
    pub fn poll(&mut self, provider: &mut dyn Provider) -> Result<u64> {
        self.check_failed()?;
        provider.progress()?;
        let (pending, header_in_flight) = (&mut self.pending, &mut self.header_in_flight);
        let mut failed: Option<TransportError> = None;
        let mut recorded: Option<RingHeader> = None;
        for c in provider.completions_of(self.owner).drain(..) {
            let put = pending.iter_mut().find(|p| p.op == c.op);
            let header = header_in_flight.filter(|(h, _)| *h == c.op);
            match (c.status, put) {
                (Err(e), _) => {
                    failed.get_or_insert(*e);
                }
                (Ok(_), Some(p)) => p.done = true,
                (Ok(_), None) if header.is_some() => {
                    recorded = header.map(|(_, h)| h);
                    *header_in_flight = None;
                }
                (Ok(_), None) => {}
            }
        }
        if let Some(e) = failed {
            self.failed = Some(e.clone());
            return Err(LogError::WriteFailed(e));
        }
        if let Some(header) = recorded {
            self.recorded = header;
        }
        while self.pending.front().is_some_and(|p| p.done) {
            if let Some(p) = self.pending.pop_front() {
                self.durable = p.end;
            }
        }
        self.post_header(provider)?;
        Ok(self.durable)
    }

    /// Waits until `done(self)` holds, polling; bounded by `timeout`.
    fn wait_for(
        &mut self,
        provider: &mut dyn Provider,
        timeout: Duration,
        done: impl Fn(&Self) -> bool,
    ) -> Result<()> {
        let mut wait = SpinWait::new(provider.config(), timeout);
        loop {
            self.poll(provider)?;
            if done(self) {
                return Ok(());
            }
            wait.busy()?;
            provider.wait_with(self.owner, &mut wait, &mut |cq| !cq.is_empty())?;
        }
    }

    /// Pessimistic delivery: waits until the record with this ticket is durable.
    pub fn wait_durable(
        &mut self,
        provider: &mut dyn Provider,
        ticket: u64,
        timeout: Duration,
    ) -> Result<()> {
        if ticket > self.head {
            return Err(LogError::InvalidArgument(format!("ticket {ticket} beyond head {}", self.head)));
        }
        self.wait_for(provider, timeout, |w| w.durable >= ticket)
    }

    /// Waits until every record is durable and the buddy's header says so.
    pub fn flush(&mut self, provider: &mut dyn Provider, timeout: Duration) -> Result<()> {
        self.wait_for(provider, timeout, |w| {
            w.durable == w.head && w.recorded.watermark == w.head && w.recorded.tail == w.tail
        })
    }
}

/// One record found by `scan`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub pos: u64,
    /// Position after the record (its ticket).
    pub end: u64,
    pub kind: RecordKind,
    pub data: Vec<u8>,
    /// Found after the published watermark: complete by checksum, durability not confirmed.
    pub beyond_watermark: bool,
}

impl LogRecord {
    /// The determinants of a `Determinants` record.
    pub fn determinants(&self) -> Result<Vec<Determinant>> {
        if self.kind != RecordKind::Determinants || !self.data.len().is_multiple_of(Determinant::WIRE_LEN) {
            return Err(LogError::malformed(
                "determinant record",
                format!("{:?} of {} bytes", self.kind, self.data.len()),
            ));
        }
        self.data.chunks_exact(Determinant::WIRE_LEN).map(Determinant::from_bytes).collect()
    }
}

/// How the scan past the watermark ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanEnd {
    /// No further record was written.
    Clean,
    /// A record was started at `pos` but is incomplete or damaged (a torn write).
    Torn { pos: u64 },
}

/// The reader's view of a ring image.
#[derive(Debug, Clone)]
pub struct RingScan {
    pub header: RingHeader,
    pub records: Vec<LogRecord>,
    pub end: ScanEnd,
    /// Where the writer would continue.
    pub next_pos: u64,
}

#[derive(Debug)]
enum Slot {
    Skip(u64),
    Record(LogRecord),
    Absent,
    Damaged(String),
}

fn read_slot(data: &[u8], capacity: u64, pos: u64) -> Slot {
    let offset = pos % capacity;
    let contiguous = capacity - offset;
    if contiguous < RECORD_HEADER_LEN {
        return Slot::Skip(pos + contiguous);
    }
    let offset = offset as usize;
    let Some(header) = data.get(offset..offset + RECORD_HEADER_LEN as usize) else {
        return Slot::Damaged("record header outside the image".into());
    };
    let mut r = Reader::new(header, "log record");
    let (Ok(found_pos), Ok(len), Ok(code), Ok(()), Ok(crc)) =
        (r.u64("pos"), r.u32("len"), r.u16("kind"), r.skip(2, "reserved"), r.u32("checksum"))
    else {
        return Slot::Damaged("short record header".into());
    };
    if found_pos != pos {
        return Slot::Absent;
    }
    let Some(kind) = RecordKind::from_code(code) else {
        return Slot::Damaged(format!("unknown record kind {code:#x}"));
    };
    let size = record_size(len as usize);
    if size > contiguous || (kind == RecordKind::Wrap && len != 0) {
        return Slot::Damaged(format!("record length {len} overruns the lap"));
    }
    let start = offset + RECORD_HEADER_LEN as usize;
    let Some(body) = data.get(start..start + len as usize) else {
        return Slot::Damaged("record data outside the image".into());
    };
    if record_checksum(header, body) != crc {
        return Slot::Damaged("checksum mismatch".into());
    }
    match kind {
        RecordKind::Wrap => Slot::Skip(pos + contiguous),
        _ => Slot::Record(LogRecord {
            pos,
            end: pos + size,
            kind,
            data: body.to_vec(),
            beyond_watermark: false,
        }),
    }
}

/// Parses a ring image (the whole registered region, header included).
pub fn scan(image: &[u8]) -> Result<RingScan> {
    const WHAT: &str = "log ring image";
    let data =
        image.get(DATA_OFFSET..).ok_or_else(|| LogError::malformed(WHAT, "shorter than its header"))?;
    let capacity = data.len() as u64;
    let header = [0, HEADER_SLOT_LEN]
        .iter()
        .filter_map(|&o| image.get(o..o + HEADER_SLOT_LEN).and_then(RingHeader::from_slot))
        .filter(|h| h.capacity == capacity)
        .max_by_key(|h| h.seq)
        .ok_or_else(|| LogError::malformed(WHAT, "no valid header slot"))?;
    let consistent = header.tail <= header.watermark
        && header.watermark - header.tail <= capacity
        && header.tail % 8 == 0
        && header.watermark % 8 == 0
        && capacity.is_multiple_of(8)
        && capacity > 0;
    if !consistent {
        return Err(LogError::malformed(WHAT, format!("inconsistent header {header:?}")));
    }
    let mut records = Vec::new();
    let mut pos = header.tail;
    while pos < header.watermark {
        match read_slot(data, capacity, pos) {
            Slot::Skip(next) => pos = next,
            Slot::Record(r) if r.end <= header.watermark => {
                pos = r.end;
                records.push(r);
            }
            Slot::Record(_) => {
                return Err(LogError::Corrupt { pos, detail: "record crosses the watermark".into() })
            }
            Slot::Absent => {
                return Err(LogError::Corrupt { pos, detail: "record missing below the watermark".into() })
            }
            Slot::Damaged(detail) => return Err(LogError::Corrupt { pos, detail }),
        }
    }
    if pos != header.watermark {
        return Err(LogError::Corrupt {
            pos,
            detail: format!("records end past watermark {}", header.watermark),
        });
    }
    // Salvage complete records the writer put but had not yet published as durable.
    let mut end = ScanEnd::Clean;
    while pos - header.tail < capacity {
        match read_slot(data, capacity, pos) {
            Slot::Skip(next) => pos = next,
            Slot::Record(mut r) if r.end - header.tail <= capacity => {
                r.beyond_watermark = true;
                pos = r.end;
                records.push(r);
            }
            Slot::Record(_) | Slot::Absent => break,
            Slot::Damaged(_) => {
                end = ScanEnd::Torn { pos };
                break;
            }
        }
    }
    Ok(RingScan { header, records, end, next_pos: pos.min(header.tail + capacity) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds images with the writer's placement rules, without a provider.
    struct Image {
        bytes: Vec<u8>,
        capacity: u64,
        head: u64,
        tail: u64,
        seq: u64,
    }

    impl Image {
        fn new(capacity: usize) -> Self {
            let mut img = Image {
                bytes: vec![0; region_len(capacity)],
                capacity: capacity as u64,
                head: 0,
                tail: 0,
                seq: 0,
            };
            img.publish(0);
            img
        }

        fn append(&mut self, kind: RecordKind, data: &[u8]) -> u64 {
            let size = record_size(data.len());
            let (skip, marker) = placement(self.capacity, self.head, size);
            assert!(skip + size <= self.capacity - (self.head - self.tail), "test image overflow");
            if marker {
                let wrap = encode_record(self.head, RecordKind::Wrap, &[]).unwrap();
                self.put(self.head, &wrap);
            }
            self.head += skip;
            let rec = encode_record(self.head, kind, data).unwrap();
            self.put(self.head, &rec);
            self.head += size;
            self.head
        }

        fn put(&mut self, pos: u64, bytes: &[u8]) {
            let off = DATA_OFFSET + (pos % self.capacity) as usize;
            self.bytes[off..off + bytes.len()].copy_from_slice(bytes);
        }

        fn publish(&mut self, watermark: u64) {
            let h = RingHeader { capacity: self.capacity, seq: self.seq, tail: self.tail, watermark };
            self.seq += 1;
            let off = h.slot_offset();
            self.bytes[off..off + HEADER_SLOT_LEN].copy_from_slice(&h.to_bytes());
        }
    }

    fn payload(i: u64) -> Vec<u8> {
        (0..(i * 7 % 50)).map(|b| (b as u8) ^ (i as u8)).collect()
    }

    #[test]
    fn wrapping_records_read_back() {
        let mut img = Image::new(512);
        let mut next_expected = 0u64;
        for i in 0..200u64 {
            if img.capacity - (img.head - img.tail) < 200 {
                img.publish(img.head);
                let scan = scan(&img.bytes).unwrap();
                assert_eq!(scan.end, ScanEnd::Clean);
                for r in &scan.records {
                    assert_eq!(r.data, payload(next_expected));
                    assert!(!r.beyond_watermark);
                    next_expected += 1;
                }
                img.tail = img.head;
                img.publish(img.head);
            }
            img.append(RecordKind::Payload, &payload(i));
        }
        assert!(img.head > 4 * img.capacity, "the test must wrap several times");
        // Unpublished records are salvaged beyond the watermark.
        let scan = scan(&img.bytes).unwrap();
        assert!(scan.records.iter().all(|r| r.beyond_watermark));
        assert_eq!(scan.records.len() as u64, 200 - next_expected);
        assert_eq!(scan.next_pos, img.head);
    }

    #[test]
    fn corruption_below_watermark_is_an_error() {
        let mut img = Image::new(1024);
        for i in 0..10 {
            img.append(RecordKind::Payload, &payload(i + 3));
        }
        img.publish(img.head);
        assert_eq!(scan(&img.bytes).unwrap().records.len(), 10);
        for flip in [DATA_OFFSET + 30, DATA_OFFSET + 2, DATA_OFFSET + 8] {
            let mut bad = img.bytes.clone();
            bad[flip] ^= 0x40;
            assert!(matches!(scan(&bad), Err(LogError::Corrupt { .. })), "flip at {flip}");
        }
    }

    #[test]
    fn torn_record_beyond_watermark_is_detected() {
        let mut img = Image::new(1024);
        img.append(RecordKind::Payload, b"durable");
        img.publish(img.head);
        let pos = img.head;
        let rec = encode_record(pos, RecordKind::Payload, &[7u8; 100]).unwrap();
        // Every proper prefix of a record over zeroed memory is a torn write.
        for cut in 8..rec.len() {
            let mut torn = img.bytes.clone();
            let off = DATA_OFFSET + pos as usize;
            torn[off..off + cut].copy_from_slice(&rec[..cut]);
            let s = scan(&torn).unwrap();
            if cut < RECORD_HEADER_LEN as usize + 100 {
                assert_eq!(s.records.len(), 1, "cut {cut}");
                assert!(matches!(s.end, ScanEnd::Torn { pos: p } if p == pos), "cut {cut}: {:?}", s.end);
            } else {
                // Only zero padding is missing: the record is complete.
                assert_eq!(s.records.len(), 2, "cut {cut}");
            }
        }
    }

    #[test]
    fn truncated_or_headerless_images_are_rejected() {
        let mut img = Image::new(256);
        img.append(RecordKind::Determinants, &[1u8; 48]);
        img.publish(img.head);
        for cut in [0, 10, DATA_OFFSET - 1, DATA_OFFSET, DATA_OFFSET + 100] {
            assert!(scan(&img.bytes[..cut]).is_err(), "cut {cut}");
        }
        let mut both_bad = img.bytes.clone();
        both_bad[5] ^= 1;
        both_bad[HEADER_SLOT_LEN + 5] ^= 1;
        assert!(scan(&both_bad).is_err());
        // A torn newest header falls back to the other slot.
        let mut one_bad = img.bytes.clone();
        let newest = RingHeader { capacity: 256, seq: img.seq - 1, tail: 0, watermark: 0 }.slot_offset();
        one_bad[newest + 40] ^= 1;
        let s = scan(&one_bad).unwrap();
        assert_eq!(s.header.watermark, 0);
        assert!(s.records.iter().all(|r| r.beyond_watermark));
    }

    #[test]
    fn determinant_records_parse() {
        let dets: Vec<Determinant> =
            (1..=5).map(|i| Determinant { sender: i as u32, receiver: 0, ssn: i, rsn: 10 + i }).collect();
        let bytes: Vec<u8> = dets.iter().flat_map(|d| d.to_bytes()).collect();
        let rec = LogRecord {
            pos: 0,
            end: 0,
            kind: RecordKind::Determinants,
            data: bytes,
            beyond_watermark: false,
        };
        assert_eq!(rec.determinants().unwrap(), dets);
        let odd = LogRecord { data: vec![0; 25], ..rec };
        assert!(odd.determinants().is_err());
    }

    /// Version 2 bytes, written out by hand around the checksums: old and new rings must agree.
    #[test]
    fn pinned_record_and_header_bytes() {
        let rec = encode_record(8, RecordKind::Payload, b"abc").unwrap();
        let fields = [8, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0];
        let mut want = fields.to_vec();
        want.extend_from_slice(&checksum(&[&fields, b"abc"]).to_le_bytes());
        want.extend_from_slice(&[0, 0, 0, 0, b'a', b'b', b'c', 0, 0, 0, 0, 0]);
        assert_eq!(rec, want);

        let h = RingHeader { capacity: 0x100, seq: 3, tail: 8, watermark: 16 };
        let mut want = b"RVEVRING\x02\x00\x00\x00\x00\x00\x00\x00".to_vec();
        for v in [0x100u64, 3, 8, 16] {
            want.extend_from_slice(&v.to_le_bytes());
        }
        let crc = checksum(&[&want]);
        want.extend_from_slice(&crc.to_le_bytes());
        want.resize(HEADER_SLOT_LEN, 0);
        assert_eq!(h.to_bytes().to_vec(), want);
        assert_eq!(RingHeader::from_slot(&want), Some(h));
    }

    #[test]
    fn records_and_headers_round_trip() {
        use proptest::prelude::*;
        proptest!(|(pos in 0u64..1 << 40, data in prop::collection::vec(any::<u8>(), 0..64), det: bool,
                    seq: u64, tail: u64, watermark: u64)| {
            let capacity = 1024u64;
            let pos = pos / 8 * 8;
            let kind = if det { RecordKind::Determinants } else { RecordKind::Payload };
            let rec = encode_record(pos, kind, &data).unwrap();
            let mut ring = vec![0u8; capacity as usize];
            let off = (pos % capacity) as usize;
            if off + rec.len() <= ring.len() {
                ring[off..off + rec.len()].copy_from_slice(&rec);
                match read_slot(&ring, capacity, pos) {
                    Slot::Record(r) => {
                        prop_assert_eq!(r.kind, kind);
                        prop_assert_eq!(r.data, data);
                        prop_assert_eq!(r.end, pos + rec.len() as u64);
                    }
                    other => prop_assert!(false, "{:?}", other),
                }
            }
            let h = RingHeader { capacity, seq, tail, watermark };
            prop_assert_eq!(RingHeader::from_slot(&h.to_bytes()), Some(h));
        });
    }

    #[test]
    fn random_slots_never_panic() {
        use proptest::prelude::*;
        proptest!(|(bytes in prop::collection::vec(any::<u8>(), 0..256), pos in 0u64..512)| {
            let _ = RingHeader::from_slot(&bytes);
            let capacity = (bytes.len() as u64 / 8 * 8).max(8);
            let _ = read_slot(&bytes, capacity, pos);
        });
    }

    #[test]
    fn random_images_never_panic() {
        use proptest::prelude::*;
        proptest!(|(mut bytes in prop::collection::vec(any::<u8>(), 0..1024), seq in 0u64..4, wm in 0u64..900)| {
            if bytes.len() > DATA_OFFSET + 8 {
                let cap = ((bytes.len() - DATA_OFFSET) / 8 * 8) as u64;
                bytes.truncate(DATA_OFFSET + cap as usize);
                let h = RingHeader { capacity: cap, seq, tail: 0, watermark: (wm / 8 * 8).min(cap) };
                let off = h.slot_offset();
                bytes[off..off + HEADER_SLOT_LEN].copy_from_slice(&h.to_bytes());
            }
            let _ = scan(&bytes);
        });
    }
}
