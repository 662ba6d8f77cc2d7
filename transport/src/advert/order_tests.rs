//! The advertised path against plain MPI matching: two senders and one receiver post and send
//! at random, and messages and adverts are delivered in per-pair order at random moments. Every
//! message must take the receive a linear matcher gives it (earliest posted receive that
//! accepts it; a receive takes the earliest arrival it accepts), and every direct write must go
//! into that receive's buffer and stay inside it.

use std::collections::{HashMap, VecDeque};

use proptest::prelude::*;

use crate::api::{Access, CompletionKind, Rank, RecvBuffer, RemoteRegion, Source, Tag, TagMatch};
use crate::completion::{CompletionQueues, Owner};
use crate::msg::{kind, SlotHeader};
use crate::region::Region;
use crate::tagged::TaggedState;
use crate::tagmatch::PostedRecv;

const THRESH: usize = 64;
const CAP: usize = 256;
const RECEIVER: Rank = 1;

fn heap_region(len: usize) -> Region {
    let mut buf = vec![0u8; len].into_boxed_slice();
    let ptr = buf.as_mut_ptr();
    let remote = RemoteRegion { owner: RECEIVER, addr: ptr as u64, len: len as u64, key: 1 };
    // SAFETY: the boxed slice is the backing: it keeps ptr..ptr+len valid.
    unsafe { Region::new(ptr, len, Access::REMOTE_RW, remote, 0, Box::new(buf)) }
}

#[derive(Debug, Clone, Copy)]
enum Size {
    Eager,
    Fits,
    TooBig,
}

#[derive(Debug, Clone)]
enum Step {
    Post { source: Option<Rank>, tag: TagMatch, region: bool, small: bool },
    Send { from: Rank, tag: Tag, size: Size },
    ToReceiver(Rank),
    ToSender(Rank),
}

/// Random steps; `named`: how likely a receive names its source (and takes one tag, into a
/// region), the case adverts are for.
fn step(named: f64) -> impl Strategy<Value = Step> {
    let sender = prop::sample::select(vec![0u32, 2]);
    let mask = prop::sample::select(vec![Tag::MAX, Tag::MAX, 0, !1]);
    let size = prop::sample::select(vec![Size::Eager, Size::Fits, Size::Fits, Size::TooBig]);
    let post = (prop::option::weighted(named, sender.clone()), 0..3u64, mask, prop::bool::weighted(named))
        .prop_map(|(source, tag, mask, region)| {
            // Some region buffers too small to advertise.
            Step::Post { source, tag: TagMatch { tag, mask }, region, small: tag == 2 && mask == 0 }
        });
    prop_oneof![
        4 => post,
        4 => (sender.clone(), 0..3u64, size).prop_map(|(from, tag, size)| Step::Send { from, tag, size }),
        4 => sender.clone().prop_map(Step::ToReceiver),
        3 => sender.prop_map(Step::ToSender),
    ]
}

/// The plain matcher: (op, source, tag) posted, (message id, source, tag) unexpected.
#[derive(Default)]
struct Linear {
    posted: VecDeque<(u64, Source, TagMatch)>,
    unexpected: VecDeque<(u64, Rank, Tag)>,
}

impl Linear {
    fn arrive(&mut self, id: u64, source: Rank, tag: Tag) -> Option<u64> {
        match self.posted.iter().position(|(_, s, t)| s.matches(source) && t.matches(tag)) {
            Some(i) => self.posted.remove(i).map(|(op, _, _)| op),
            None => {
                self.unexpected.push_back((id, source, tag));
                None
            }
        }
    }
    fn post(&mut self, op: u64, source: Source, tag: TagMatch) -> Option<u64> {
        match self.unexpected.iter().position(|(_, s, t)| source.matches(*s) && tag.matches(*t)) {
            Some(i) => self.unexpected.remove(i).map(|(id, _, _)| id),
            None => {
                self.posted.push_back((op, source, tag));
                None
            }
        }
    }
}

/// One message on a wire: its id (for tagged messages), header and payload.
type Wire = VecDeque<(u64, SlotHeader, Vec<u8>)>;

struct World {
    states: [TaggedState; 3],
    cqs: [CompletionQueues; 3],
    wires: HashMap<(Rank, Rank), Wire>,
    model: Linear,
    /// Message id -> the receive its direct write went into.
    direct_into: HashMap<u64, u64>,
    /// Receive op -> its region, for eager deliveries into regions.
    regions: HashMap<u64, Region>,
    next_id: u64,
}

impl World {
    fn new() -> World {
        World {
            states: Default::default(),
            cqs: [CompletionQueues::new(), CompletionQueues::new(), CompletionQueues::new()],
            wires: HashMap::new(),
            model: Linear::default(),
            direct_into: HashMap::new(),
            regions: HashMap::new(),
            next_id: 1,
        }
    }

    fn push(&mut self, from: Rank, to: Rank, id: u64, header: SlotHeader, payload: Vec<u8>) {
        self.wires.entry((from, to)).or_default().push_back((id, header, payload));
    }

    fn flush_adverts(&mut self) {
        while let Some((dest, header)) = self.states[RECEIVER as usize].pop_advert() {
            self.push(RECEIVER, dest, 0, header, Vec::new());
        }
    }

    /// The receive that completed (the only completion queued), and the id an eager message
    /// delivered to it carried.
    fn completed(&mut self) -> Option<(u64, u64)> {
        let cq = self.cqs[RECEIVER as usize].of(Owner::APP);
        let c = cq.pop_front()?;
        assert!(cq.is_empty(), "one completion per arrival");
        let mut id = [0u8; 8];
        match c.kind {
            CompletionKind::Recv { data: Some(d), .. } => id.copy_from_slice(&d[..8]),
            _ => {
                if let Some(r) = self.regions.get(&c.op.0) {
                    r.read(0, &mut id).unwrap_or_default();
                }
            }
        }
        Some((c.op.0, u64::from_le_bytes(id)))
    }

    fn post(
        &mut self,
        source: Option<Rank>,
        tag: TagMatch,
        region: bool,
        small: bool,
    ) -> Result<(), TestCaseError> {
        let source = source.map_or(Source::Any, Source::Rank);
        let op = self.cqs[RECEIVER as usize].next_op(Owner::APP);
        let capacity = if small { THRESH } else { CAP };
        let buffer = if region {
            let r = heap_region(CAP);
            self.regions.insert(op.0, r.clone());
            RecvBuffer::Region { region: r, offset: 0, capacity }
        } else {
            RecvBuffer::Owned { capacity: CAP }
        };
        let want = self.model.post(op.0, source, tag);
        let recv = PostedRecv { op, source, tag, buffer };
        let fetch = self.states[RECEIVER as usize]
            .post(recv, |_| false, &mut self.cqs[RECEIVER as usize], THRESH)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let got = match fetch {
            Some(f) => Some(f.rts.cookie),
            None => self.completed().map(|(_, id)| id),
        };
        prop_assert_eq!(got, want, "receive {} took the wrong arrival", op.0);
        self.flush_adverts();
        Ok(())
    }

    fn send(&mut self, from: Rank, tag: Tag, size: Size) -> Result<(), TestCaseError> {
        let len = match size {
            Size::Eager => 8,
            Size::Fits => CAP / 2,
            Size::TooBig => 2 * CAP,
        };
        let id = self.next_id;
        self.next_id += 1;
        let st = &mut self.states[from as usize];
        if len <= THRESH {
            st.count_send(RECEIVER);
            self.push(from, RECEIVER, id, SlotHeader::eager(tag, len), id.to_le_bytes().to_vec());
            return Ok(());
        }
        let header = match st.direct_for(RECEIVER, tag, len) {
            Some(d) => {
                prop_assert!(d.offset + len as u64 <= d.remote.len, "a direct write past the buffer");
                self.direct_into.insert(id, d.recv);
                d.fin(tag, len)
            }
            None => {
                let remote = RemoteRegion { owner: from, addr: 0, len: len as u64, key: 0 };
                SlotHeader::rts(tag, len, id, &remote, 0)
            }
        };
        self.states[from as usize].count_send(RECEIVER);
        self.push(from, RECEIVER, id, header, Vec::new());
        Ok(())
    }

    fn deliver_to_receiver(&mut self, from: Rank) -> Result<(), TestCaseError> {
        let Some((id, header, payload)) = self.wires.get_mut(&(from, RECEIVER)).and_then(|w| w.pop_front())
        else {
            return Ok(());
        };
        let want = self.model.arrive(id, from, header.tag);
        let (st, cq) = (&mut self.states[RECEIVER as usize], &mut self.cqs[RECEIVER as usize]);
        let got = match header.kind {
            kind::EAGER => {
                st.on_eager(from, header.tag, &payload, cq);
                self.completed().map(|(op, _)| op)
            }
            kind::RTS => st.on_rts(from, header).map(|f| f.recv.op.0),
            _ => {
                let fetch =
                    st.on_control(from, header, cq).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert!(fetch.is_none());
                let got = self.completed().map(|(op, _)| op);
                prop_assert_eq!(got, self.direct_into.get(&id).copied(), "written into another receive");
                got
            }
        };
        prop_assert_eq!(got, want, "message {} took the wrong receive", id);
        self.flush_adverts();
        Ok(())
    }

    fn deliver_to_sender(&mut self, to: Rank) -> Result<(), TestCaseError> {
        let Some((_, header, _)) = self.wires.get_mut(&(RECEIVER, to)).and_then(|w| w.pop_front()) else {
            return Ok(());
        };
        let fetch = self.states[to as usize]
            .on_control(RECEIVER, header, &mut self.cqs[to as usize])
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(fetch.is_none());
        Ok(())
    }

    fn wires_empty(&self) -> bool {
        self.wires.values().all(|w| w.is_empty())
    }
}

fn check(steps: Vec<Step>) -> Result<(), TestCaseError> {
    let mut w = World::new();
    for step in steps {
        match step {
            Step::Post { source, tag, region, small } => w.post(source, tag, region, small)?,
            Step::Send { from, tag, size } => w.send(from, tag, size)?,
            Step::ToReceiver(from) => w.deliver_to_receiver(from)?,
            Step::ToSender(to) => w.deliver_to_sender(to)?,
        }
    }
    while !w.wires_empty() {
        for peer in [0, 2] {
            w.deliver_to_sender(peer)?;
            w.deliver_to_receiver(peer)?;
        }
    }
    let direct = w.states[RECEIVER as usize].rndv_stats().direct_recvs;
    prop_assert_eq!(direct, w.direct_into.len() as u64);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn advertised_path_matches_like_plain_matching(steps in prop::collection::vec(step(0.8), 0..200)) {
        check(steps)?;
    }

    /// Mostly receives that may be advertised, so most runs write directly (and break chains).
    #[test]
    fn mostly_advertised_receives_match_like_plain_matching(
        steps in prop::collection::vec(step(0.97), 0..200)
    ) {
        check(steps)?;
    }
}

/// The common case the random runs must not hide: receives posted first, one sender, every
/// message straight into its receive.
#[test]
fn preposted_receives_all_take_the_direct_path() {
    let mut w = World::new();
    let mut steps: Vec<Step> = (0..8)
        .map(|i| Step::Post { source: Some(0), tag: TagMatch::exact(i % 2), region: true, small: false })
        .collect();
    steps.extend((0..8).map(|_| Step::ToSender(0)));
    steps.extend((0..8).map(|i| Step::Send { from: 0, tag: i % 2, size: Size::Fits }));
    for step in steps {
        match step {
            Step::Post { source, tag, region, small } => w.post(source, tag, region, small).unwrap(),
            Step::Send { from, tag, size } => w.send(from, tag, size).unwrap(),
            Step::ToSender(to) => w.deliver_to_sender(to).unwrap(),
            Step::ToReceiver(from) => w.deliver_to_receiver(from).unwrap(),
        }
    }
    assert_eq!(w.direct_into.len(), 8, "every send found its advert");
    while !w.wires_empty() {
        w.deliver_to_receiver(0).unwrap();
    }
    assert_eq!(w.states[RECEIVER as usize].rndv_stats().direct_recvs, 8);
}

/// A receive whose buffer may be advertised is not taken back (its sender may be writing into
/// it); an owned one is, once.
#[test]
fn only_receives_no_advert_names_are_cancelled() {
    let (mut state, mut cq) = (TaggedState::default(), CompletionQueues::new());
    let mut post = |state: &mut TaggedState, buffer| {
        let op = cq.next_op(Owner::APP);
        let recv = PostedRecv { op, source: Source::Rank(0), tag: TagMatch::exact(4), buffer };
        assert!(state.post(recv, |_| false, &mut cq, THRESH).unwrap().is_none());
        op
    };
    let region = RecvBuffer::Region { region: heap_region(CAP), offset: 0, capacity: CAP };
    let advertised = post(&mut state, region);
    assert!(state.pop_advert().is_some(), "a region receive above the threshold is advertised");
    assert!(!state.cancel_recv(advertised), "a peer may be writing into it");
    let owned = post(&mut state, RecvBuffer::Owned { capacity: CAP });
    assert!(state.cancel_recv(owned));
    assert!(!state.cancel_recv(owned), "gone once");
}
