//! The logging protocols end to end: 4 real processes on 2 simulated nodes over the shm
//! provider, random bursts to random peers with random delays, named and wildcard receives
//! mixed in a random order. Checks exactly-once delivery, per-channel FIFO order, determinants
//! for wildcard receives only and, for pessimistic-rb, that each buddy's copy of the log,
//! replayed in determinant order, reproduces its client's deliveries exactly. For
//! pessimistic-sb, each buddy's determinants plus every sender's send log reproduce the
//! client's deliveries, and re-sending from the send logs reaches the live receivers only as
//! dropped duplicates. A small send log pushes back (`LogFull`) without losing an ssn.
//!
//! Causal: the same traffic; every rank's determinants are collected from the other ranks
//! (buddy ring and detLogs) and equal its wildcard receptions; under `REVERB_LOG_UNIT=node`
//! only inter-node payloads are logged; a checkpoint's GC frees exactly the logs. A rank
//! restarted in place replays the logged delivery order exactly from collected determinants
//! and resent payloads, while the survivors drop its re-executed sends as duplicates (also a
//! whole node under the node unit, and for real: node 1 SIGKILLed and respawned by the
//! harness, then replayed). Pessimistic-rb the same way for real: the restarted node replays
//! the frames its buddies' rings hold and gets the messages in flight when it died from the
//! senders' logs, once each. Every job checks the communication matrix against the schedule.
//! Large messages (above the rendezvous threshold, more in flight than the endpoint's frame
//! pool holds) stream intact and in order under `none`, causal and pessimistic-rb.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use reverb_logger::logring::{RecordKind, ScanEnd};
use reverb_logger::sendlog::LoggedSend;
use reverb_logger::stats::ReceiveKind;
use reverb_logger::{Delivery, Determinant, Envelope, LogConfig, LogError, LogMode, LogUnit, LoggedEndpoint};
use reverb_transport::{Bootstrap, Rank, Source, Tag, TagMatch};

const RANKS: u32 = 4;
const RANKS_PER_NODE: u32 = 2;
const PHASES: u64 = 8;
/// The bound of one wait, times `REVERB_TEST_TIME_SCALE` (the rxe VM's suite sets it).
fn wait() -> Duration {
    common::scaled(Duration::from_secs(30))
}
const SEED_VAR: &str = "REVERB_TEST_SEED";

/// Receive classes: the schedule gives each message one, so receives never steal each
/// other's messages and the job cannot deadlock.
const NAMED: u64 = 0;
const ANY_SOURCE: u64 = 1;
const NAMED_MASKED: u64 = 2;

fn tag(phase: u64, class: u64, subtag: u64) -> Tag {
    (phase << 16) | (class << 8) | subtag
}

#[derive(Debug, Clone)]
struct Message {
    sender: Rank,
    dest: Rank,
    ssn: u64,
    class: u64,
    tag: Tag,
    payload: Vec<u8>,
}

fn mix(seed: u64) -> u64 {
    (seed ^ 0x2545_f491_4f6c_dd1d).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Every rank's sends in every phase, the same in every process (derived from the seed).
fn schedule(seed: u64) -> Vec<Vec<Vec<Message>>> {
    let mut ssn: HashMap<(Rank, Rank), u64> = HashMap::new();
    (0..PHASES)
        .map(|phase| {
            (0..RANKS)
                .map(|sender| {
                    let mut rng = StdRng::seed_from_u64(mix(seed) ^ (phase << 32) ^ u64::from(sender));
                    let count = rng.gen_range(10..40);
                    (0..count)
                        .map(|i| {
                            let dest = (sender + rng.gen_range(1..RANKS)) % RANKS;
                            let class = rng.gen_range(0..3);
                            let subtag = if class == ANY_SOURCE { 0 } else { rng.gen_range(0..3) };
                            let next = ssn.entry((sender, dest)).or_insert(0);
                            *next += 1;
                            let len = rng.gen_range(0..300);
                            let payload_seed = seed ^ (phase << 40) ^ (u64::from(sender) << 20) ^ i;
                            Message {
                                sender,
                                dest,
                                ssn: *next,
                                class,
                                tag: tag(phase, class, subtag),
                                payload: common::pattern(payload_seed, len),
                            }
                        })
                        .collect()
                })
                .collect()
        })
        .collect()
}

/// What the application asked for, and what it got.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reception {
    source: Source,
    tag: TagMatch,
    delivery: Delivery,
}

fn receive_op(m: &Message, phase: u64) -> (Source, TagMatch) {
    match m.class {
        NAMED => (Source::Rank(m.sender), TagMatch::exact(m.tag)),
        ANY_SOURCE => (Source::Any, TagMatch::exact(m.tag)),
        _ => (Source::Rank(m.sender), TagMatch { tag: tag(phase, NAMED_MASKED, 0), mask: !0xff }),
    }
}

fn run_traffic(endpoint: &mut LoggedEndpoint, plan: &[Vec<Vec<Message>>], seed: u64) -> Vec<Reception> {
    let me = endpoint.rank();
    let mut rng = StdRng::seed_from_u64(mix(seed).rotate_left(17) ^ u64::from(me));
    let mut receptions = Vec::new();
    for (phase, sends) in plan.iter().enumerate() {
        let phase = phase as u64;
        // Sends never wait on receives, and phase tags keep phases apart: no deadlock.
        let mine = &sends[me as usize];
        let mut next = 0;
        while next < mine.len() {
            let burst = rng.gen_range(1..7).min(mine.len() - next);
            for m in &mine[next..next + burst] {
                endpoint.send(m.dest, m.tag, &m.payload).expect("send");
            }
            next += burst;
            // Random gaps are part of the traffic under test: they vary the interleavings.
            std::thread::sleep(Duration::from_micros(rng.gen_range(0..300)));
        }
        let mut ops: Vec<(Source, TagMatch)> =
            sends.iter().flatten().filter(|m| m.dest == me).map(|m| receive_op(m, phase)).collect();
        ops.shuffle(&mut rng);
        for (source, tag) in ops {
            if rng.gen_bool(0.2) {
                std::thread::sleep(Duration::from_micros(rng.gen_range(0..200)));
            }
            let delivery = endpoint.recv(source, tag, wait()).expect("recv");
            receptions.push(Reception { source, tag, delivery });
        }
    }
    receptions
}

fn check_deliveries(me: Rank, plan: &[Vec<Vec<Message>>], receptions: &[Reception]) {
    if receptions.first().is_some_and(|r| r.delivery.ssn == 0) {
        return check_pass_through_deliveries(me, plan, receptions);
    }
    let mut expected: HashMap<(Rank, u64), &Message> =
        plan.iter().flatten().flatten().filter(|m| m.dest == me).map(|m| ((m.sender, m.ssn), m)).collect();
    assert_eq!(expected.len(), receptions.len(), "rank {me}: deliveries vs messages sent to it");
    let mut last_ssn: HashMap<(Rank, Tag), u64> = HashMap::new();
    for (i, r) in receptions.iter().enumerate() {
        let d = &r.delivery;
        let m = expected.remove(&(d.source, d.ssn)).unwrap_or_else(|| {
            panic!("rank {me}: ({}, ssn {}) delivered twice or never sent", d.source, d.ssn)
        });
        assert_eq!((d.tag, &d.payload), (m.tag, &m.payload), "rank {me}: content of {}#{}", d.source, d.ssn);
        assert!(r.source.matches(d.source) && r.tag.matches(d.tag), "rank {me}: {r:?} matched wrongly");
        // FIFO per (sender, tag) stream: a receive takes the oldest matching message.
        let last = last_ssn.entry((d.source, d.tag)).or_insert(0);
        assert!(d.ssn > *last, "rank {me}: {}#{} after #{last} on tag {:#x}", d.source, d.ssn, d.tag);
        *last = d.ssn;
        assert_eq!(d.rsn, i as u64 + 1);
        let wildcard = ReceiveKind::classify(r.source, r.tag) == ReceiveKind::Wildcard;
        let det = Determinant { sender: d.source, receiver: me, ssn: d.ssn, rsn: d.rsn };
        assert_eq!(d.determinant, wildcard.then_some(det), "rank {me}: determinant of reception {i}");
    }
}

/// Pass-through deliveries (logging off) carry no ssn: each (sender, tag) stream must deliver
/// exactly what was sent on it, in sending order, with nothing logged.
fn check_pass_through_deliveries(me: Rank, plan: &[Vec<Vec<Message>>], receptions: &[Reception]) {
    let mut streams: HashMap<(Rank, Tag), std::collections::VecDeque<&Message>> = HashMap::new();
    for m in plan.iter().flatten().flatten().filter(|m| m.dest == me) {
        streams.entry((m.sender, m.tag)).or_default().push_back(m);
    }
    let expected: usize = streams.values().map(|q| q.len()).sum();
    assert_eq!(expected, receptions.len(), "rank {me}: deliveries vs messages sent to it");
    for (i, r) in receptions.iter().enumerate() {
        let d = &r.delivery;
        let next = streams.get_mut(&(d.source, d.tag)).and_then(|q| q.pop_front());
        let m =
            next.unwrap_or_else(|| panic!("rank {me}: {}, tag {:#x} delivered too often", d.source, d.tag));
        assert!(
            d.payload == m.payload,
            "rank {me}: reception {i} is not {}#{} (out of order)",
            m.sender,
            m.ssn
        );
        assert!(r.source.matches(d.source) && r.tag.matches(d.tag), "rank {me}: {r:?} matched wrongly");
        assert_eq!((d.ssn, d.rsn, d.determinant), (0, i as u64 + 1, None), "rank {me}: reception {i}");
    }
}

fn check_stats(endpoint: &LoggedEndpoint, plan: &[Vec<Vec<Message>>], receptions: &[Reception]) {
    let me = endpoint.rank();
    let s = endpoint.stats();
    let wildcard =
        receptions.iter().filter(|r| ReceiveKind::classify(r.source, r.tag) == ReceiveKind::Wildcard).count()
            as u64;
    let sent = plan.iter().map(|p| p[me as usize].len() as u64).sum::<u64>();
    assert_eq!(s.messages_sent, sent);
    assert_eq!(s.messages_delivered, receptions.len() as u64);
    assert_eq!((s.wildcard_receives, s.determinants_generated), (wildcard, wildcard));
    assert_eq!(s.deterministic_receives, receptions.len() as u64 - wildcard);
    assert!(wildcard > 0 && wildcard < receptions.len() as u64, "the traffic must mix both kinds");
    assert_eq!((s.duplicates_dropped, s.stale_dropped), (0, 0));
}

// Reception list for the all-gather: per reception, the receive call and the delivery.
fn encode_receptions(receptions: &[Reception]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in receptions {
        let source = match r.source {
            Source::Any => u32::MAX,
            Source::Rank(s) => s,
        };
        let d = &r.delivery;
        for v in [u64::from(source), r.tag.tag, r.tag.mask, u64::from(d.source), d.tag, d.ssn, d.rsn] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.push(u8::from(d.determinant.is_some()));
        out.extend_from_slice(&(d.payload.len() as u64).to_le_bytes());
        out.extend_from_slice(&d.payload);
    }
    out
}

fn decode_receptions(receiver: Rank, mut bytes: &[u8]) -> Vec<Reception> {
    let mut take = |n: usize| {
        let (head, tail) = bytes.split_at(n);
        bytes = tail;
        (head.to_vec(), tail.is_empty())
    };
    let u64_of = |b: Vec<u8>| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    let mut out = Vec::new();
    loop {
        let mut u64s = [0u64; 7];
        for v in u64s.iter_mut() {
            *v = u64_of(take(8).0);
        }
        let [source, tag, mask, sender, dtag, ssn, rsn] = u64s;
        let has_det = take(1).0[0] == 1;
        let len = u64_of(take(8).0) as usize;
        let (payload, last) = take(len);
        let source = if source == u64::from(u32::MAX) { Source::Any } else { Source::Rank(source as Rank) };
        let sender = sender as Rank;
        let determinant = has_det.then_some(Determinant { sender, receiver, ssn, rsn });
        out.push(Reception {
            source,
            tag: TagMatch { tag, mask },
            delivery: Delivery { source: sender, tag: dtag, payload, ssn, rsn, determinant },
        });
        if last {
            return out;
        }
    }
}

/// A logged message, as read back from the buddy's ring.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Logged {
    sender: Rank,
    ssn: u64,
    tag: Tag,
    payload: Vec<u8>,
}

/// The buddy's check: its ring for `client` holds, in order, one payload record per delivery,
/// each followed by its determinant for wildcard receives; and replaying the log (named
/// receives take the oldest matching logged message, wildcard ones the message their
/// determinant names) reproduces the client's deliveries.
/// Which logged message reception `r` (number `rsn`) must replay: the one its determinant
/// names for a wildcard receive, else the oldest logged message of the named source whose tag
/// matches (FIFO channels make that deterministic).
fn replay_key<M>(
    r: &Reception,
    rsn: u64,
    determinants: &BTreeMap<u64, Determinant>,
    pool: &BTreeMap<(Rank, u64), M>,
    tag_of: impl Fn(&M) -> u64,
) -> (Rank, u64) {
    match ReceiveKind::classify(r.source, r.tag) {
        ReceiveKind::Wildcard => {
            let d = determinants.get(&rsn).expect("determinant for a wildcard receive");
            (d.sender, d.ssn)
        }
        ReceiveKind::Deterministic => {
            let Source::Rank(s) = r.source else { unreachable!("deterministic receives name a source") };
            *pool
                .range((s, 0)..=(s, u64::MAX))
                .find(|(_, m)| r.tag.matches(tag_of(m)))
                .expect("a logged message for a named receive")
                .0
        }
    }
}

fn check_hosted_log(endpoint: &LoggedEndpoint, client: Rank, receptions: &[Reception]) {
    let ring = endpoint.hosted_rings().iter().find(|h| h.client == client).expect("hosted ring");
    let scan = ring.scan().expect("scan hosted ring");
    assert_eq!(scan.end, ScanEnd::Clean);
    assert_eq!(scan.next_pos, scan.header.watermark, "client {client}: log not flushed");
    assert!(scan.records.iter().all(|r| !r.beyond_watermark));

    let mut logged: Vec<Logged> = Vec::new();
    let mut determinants: BTreeMap<u64, Determinant> = BTreeMap::new();
    let mut records = scan.records.iter().peekable();
    while let Some(rec) = records.next() {
        assert_eq!(rec.kind, RecordKind::Payload, "client {client}: record at {}", rec.pos);
        let (env, payload) = Envelope::decode(&rec.data).expect("logged frame");
        assert_eq!(env.receiver, client);
        logged.push(Logged { sender: env.sender, ssn: env.ssn, tag: env.tag, payload: payload.to_vec() });
        if records.peek().is_some_and(|r| r.kind == RecordKind::Determinants) {
            let rec = records.next().expect("peeked");
            for d in rec.determinants().expect("determinants") {
                assert_eq!((d.sender, d.receiver, d.ssn), (env.sender, client, env.ssn));
                assert!(determinants.insert(d.rsn, d).is_none(), "rsn {} logged twice", d.rsn);
            }
        }
    }
    // The log in order is the delivery sequence.
    let delivered: Vec<Logged> = receptions
        .iter()
        .map(|r| Logged {
            sender: r.delivery.source,
            ssn: r.delivery.ssn,
            tag: r.delivery.tag,
            payload: r.delivery.payload.clone(),
        })
        .collect();
    assert_eq!(logged, delivered, "client {client}: log differs from deliveries");
    let wildcard: BTreeMap<u64, Determinant> =
        receptions.iter().filter_map(|r| r.delivery.determinant).map(|d| (d.rsn, d)).collect();
    assert_eq!(determinants, wildcard, "client {client}: logged determinants");

    // Replay from an unordered pool of logged messages, driven by the receive calls alone.
    let mut pool: BTreeMap<(Rank, u64), Logged> =
        logged.into_iter().map(|l| ((l.sender, l.ssn), l)).collect();
    for (i, r) in receptions.iter().enumerate() {
        let rsn = i as u64 + 1;
        let key = replay_key(r, rsn, &determinants, &pool, |m| m.tag);
        let replayed = pool.remove(&key).expect("logged message replayed once");
        assert_eq!(
            (replayed.sender, replayed.ssn, &replayed.payload),
            (r.delivery.source, r.delivery.ssn, &r.delivery.payload),
            "client {client}: replay diverges at rsn {rsn}"
        );
    }
    assert!(pool.is_empty(), "client {client}: logged but never delivered");
}

/// Every message this rank's send log holds, for the all-gather:
/// `(dest u32 | ssn u64 | tag u64 | len u64 | payload)*`.
fn encode_send_log(endpoint: &LoggedEndpoint) -> Vec<u8> {
    let send_log = endpoint.send_log().expect("send log");
    let mut out = Vec::new();
    for dest in 0..endpoint.size() {
        for e in send_log.from_ssn(dest, 1).expect("untrimmed log") {
            out.extend_from_slice(&dest.to_le_bytes());
            for v in [e.ssn, e.tag, e.payload.len() as u64] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.extend_from_slice(&e.payload);
        }
    }
    out
}

/// The entries of one sender's log that go to `dest`, in log order.
fn decode_send_log(bytes: &[u8], dest: Rank) -> Vec<LoggedSend> {
    let mut at = 0;
    let mut take = |n: usize| {
        let head = bytes[at..at + n].to_vec();
        at += n;
        (head, at == bytes.len())
    };
    let u64_of = |b: Vec<u8>| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    let mut out = Vec::new();
    let mut done = bytes.is_empty();
    while !done {
        let to = u32::from_le_bytes(take(4).0.try_into().expect("4 bytes"));
        let (ssn, tag, len) = (u64_of(take(8).0), u64_of(take(8).0), u64_of(take(8).0));
        let (payload, last) = take(len as usize);
        done = last;
        if to == dest {
            out.push(LoggedSend { ssn, tag, payload, stub: None });
        }
    }
    out
}

/// Sender-based replay, as the buddy would drive it for a restarted `client`: the buddy's ring
/// holds only determinants (no payload went there), exactly the client's wildcard ones; the
/// payloads come from the senders' logs, taken in determinant order for wildcard receives and
/// in ssn order (oldest matching) for named ones. The result must be the client's deliveries.
fn check_sender_based_replay(
    endpoint: &LoggedEndpoint,
    client: Rank,
    receptions: &[Reception],
    send_logs: &[Vec<u8>],
) {
    let ring = endpoint.hosted_rings().iter().find(|h| h.client == client).expect("hosted ring");
    let scan = ring.scan().expect("scan hosted ring");
    assert_eq!(scan.end, ScanEnd::Clean);
    assert_eq!(scan.next_pos, scan.header.watermark, "client {client}: log not flushed");
    let mut determinants: BTreeMap<u64, Determinant> = BTreeMap::new();
    for rec in &scan.records {
        assert!(!rec.beyond_watermark);
        assert_eq!(rec.kind, RecordKind::Determinants, "client {client}: only determinants at the buddy");
        for d in rec.determinants().expect("determinants") {
            assert_eq!(d.receiver, client);
            assert!(determinants.insert(d.rsn, d).is_none(), "rsn {} logged twice", d.rsn);
        }
    }
    let wildcard: BTreeMap<u64, Determinant> =
        receptions.iter().filter_map(|r| r.delivery.determinant).map(|d| (d.rsn, d)).collect();
    assert_eq!(determinants, wildcard, "client {client}: logged determinants");

    // Every sender's log of messages to the client, in one pool keyed by (sender, ssn).
    let mut pool: BTreeMap<(Rank, u64), LoggedSend> = BTreeMap::new();
    for (sender, bytes) in send_logs.iter().enumerate() {
        let entries = decode_send_log(bytes, client);
        let ssns: Vec<u64> = entries.iter().map(|e| e.ssn).collect();
        assert_eq!(
            ssns,
            (1..=ssns.len() as u64).collect::<Vec<_>>(),
            "{sender} -> {client}: log not contiguous"
        );
        pool.extend(entries.into_iter().map(|e| ((sender as Rank, e.ssn), e)));
    }
    for (i, r) in receptions.iter().enumerate() {
        let rsn = i as u64 + 1;
        let key = replay_key(r, rsn, &determinants, &pool, |m| m.tag);
        let replayed = pool.remove(&key).expect("logged message replayed once");
        assert_eq!(
            (key.0, replayed.ssn, replayed.tag, &replayed.payload),
            (r.delivery.source, r.delivery.ssn, r.delivery.tag, &r.delivery.payload),
            "client {client}: replay diverges at rsn {rsn}"
        );
    }
    assert!(pool.is_empty(), "client {client}: sent and logged but never delivered");
}

/// Re-sends every logged message (the replay primitive) and waits until each live receiver
/// has dropped all of them as duplicates.
fn resend_everything(endpoint: &mut LoggedEndpoint, plan: &[Vec<Vec<Message>>]) {
    let me = endpoint.rank();
    for dest in (0..RANKS).filter(|&d| d != me) {
        let sent = plan.iter().flat_map(|p| &p[me as usize]).filter(|m| m.dest == dest).count();
        assert_eq!(endpoint.resend_from(dest, 1).expect("resend"), sent, "resend to {dest}");
        if sent > 1 {
            assert_eq!(endpoint.resend_from(dest, sent as u64).expect("resend tail"), 1);
        }
    }
    let to_me = plan.iter().flatten().flatten().filter(|m| m.dest == me).count();
    let to_me_tail = (0..RANKS)
        .filter(|&s| plan.iter().flat_map(|p| &p[s as usize]).filter(|m| m.dest == me).count() > 1)
        .count();
    let expected = (to_me + to_me_tail) as u64;
    let start = std::time::Instant::now();
    while endpoint.stats().duplicates_dropped < expected {
        assert!(start.elapsed() < wait(), "rank {me}: {:?} of {expected} duplicates", endpoint.stats());
        endpoint.progress().expect("progress");
    }
    assert_eq!(endpoint.stats().duplicates_dropped, expected);
    assert_eq!(endpoint.stats().messages_delivered, to_me as u64, "a resend was delivered again");
}

fn seed() -> u64 {
    std::env::var(SEED_VAR).ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_0004)
}

fn protocol_job(test: &str, mode: LogMode, unit: LogUnit) {
    let Some((job, mut boot, provider)) = common::child() else {
        let env = vec![
            ("REVERB_LOG".to_string(), mode.as_str().to_string()),
            ("REVERB_LOG_UNIT".to_string(), unit.as_str().to_string()),
            (SEED_VAR.to_string(), seed().to_string()),
        ];
        let job = common::Job { ranks_per_node: RANKS_PER_NODE, env, ..common::Job::new(RANKS) };
        for out in common::run_job_ok(test, &job) {
            print!(
                "{}",
                out.lines().filter(|l| l.starts_with("rank ")).collect::<Vec<_>>().join("\n") + "\n"
            );
        }
        return;
    };
    let seed = seed();
    println!("rank {} mode {mode} seed {seed:#x}", job.rank);
    let config = LogConfig { ring_capacity: 1 << 20, ..LogConfig::from_env().expect("log config") };
    assert_eq!((config.mode, config.unit), (mode, unit));
    let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config).expect("endpoint");
    let plan = schedule(seed);
    let receptions = run_traffic(&mut endpoint, &plan, seed);
    check_deliveries(job.rank, &plan, &receptions);
    check_stats(&endpoint, &plan, &receptions);
    check_comm_matrix(&endpoint, &mut boot, &plan);
    let s = endpoint.stats();
    println!(
        "rank {}: sent {}, delivered {} ({} wildcard), logged {} B payload, {} B determinants",
        job.rank,
        s.messages_sent,
        s.messages_delivered,
        s.wildcard_receives,
        s.payload_bytes_logged,
        s.determinant_bytes_logged
    );

    if mode == LogMode::PESSIMISTIC_RB {
        let buddy = endpoint.buddy().expect("buddy");
        assert_ne!(buddy / RANKS_PER_NODE, job.rank / RANKS_PER_NODE, "buddy on the same node");
        let s = endpoint.stats();
        assert_eq!(s.determinant_bytes_logged, s.determinants_generated * Determinant::WIRE_LEN as u64);
        assert!(s.payload_bytes_logged > 0);
        endpoint.flush_log().expect("flush log");
        endpoint.wait_sends(wait()).expect("sends out");
        let all = boot.allgather(&encode_receptions(&receptions)).expect("allgather");
        let clients: Vec<Rank> = endpoint.hosted_rings().iter().map(|h| h.client).collect();
        assert_eq!(clients.len(), 1, "pair map on 2 nodes: one client each");
        for client in clients {
            let theirs = decode_receptions(client, &all[client as usize]);
            check_hosted_log(&endpoint, client, &theirs);
        }
        boot.barrier().expect("every buddy checked");
        // The sender keeps each payload too (for messages in flight when a receiver dies),
        // not counted as logging; the checkpoint frees it.
        let kept = s.send_log_bytes;
        assert_eq!(kept, endpoint.send_log().expect("send log").used());
        let report = endpoint.checkpoint_taken(&mut boot).expect("checkpoint");
        assert!(report.ring_bytes_freed > 0);
        assert_eq!((report.send_log_bytes_freed, endpoint.stats().send_log_bytes), (kept, 0));
        check_rings_trimmed(&mut endpoint, &mut boot);
    } else if mode == LogMode::PESSIMISTIC_SB {
        let buddy = endpoint.buddy().expect("buddy");
        assert_ne!(buddy / RANKS_PER_NODE, job.rank / RANKS_PER_NODE, "buddy on the same node");
        let s = endpoint.stats();
        let mine: Vec<&Message> = plan.iter().flat_map(|p| &p[job.rank as usize]).collect();
        let payload_bytes = mine.iter().map(|m| m.payload.len() as u64).sum::<u64>();
        let charged = mine.iter().map(|m| LoggedSend::charged_bytes(m.payload.len())).sum::<u64>();
        assert_eq!(s.payload_bytes_logged, payload_bytes, "every payload in the sender's log");
        assert_eq!((s.send_log_bytes, endpoint.send_log().expect("send log").used()), (charged, charged));
        assert_eq!(s.determinants_logged, s.determinants_generated);
        assert_eq!(s.determinant_bytes_logged, s.determinants_generated * Determinant::WIRE_LEN as u64);
        endpoint.flush_log().expect("flush log");
        endpoint.wait_sends(wait()).expect("sends out");
        let all_receptions = boot.allgather(&encode_receptions(&receptions)).expect("allgather");
        let send_logs = boot.allgather(&encode_send_log(&endpoint)).expect("allgather send logs");
        let clients: Vec<Rank> = endpoint.hosted_rings().iter().map(|h| h.client).collect();
        assert_eq!(clients.len(), 1, "pair map on 2 nodes: one client each");
        for client in clients {
            let theirs = decode_receptions(client, &all_receptions[client as usize]);
            check_sender_based_replay(&endpoint, client, &theirs, &send_logs);
        }
        resend_everything(&mut endpoint, &plan);
        let report = endpoint.checkpoint_taken(&mut boot).expect("checkpoint");
        assert_eq!(report.send_log_bytes_freed, charged, "send log freed");
        assert_eq!(report.ring_bytes_freed > 0, s.determinants_generated > 0);
        assert_eq!(endpoint.stats().send_log_bytes, 0);
        check_rings_trimmed(&mut endpoint, &mut boot);
    } else if mode == LogMode::CAUSAL {
        check_causal(&mut endpoint, &mut boot, &plan, &receptions);
    } else {
        assert!(endpoint.buddy().is_none() && endpoint.hosted_rings().is_empty());
        let s = endpoint.stats();
        assert_eq!((s.payload_bytes_logged, s.determinant_bytes_logged), (0, 0));
    }
    endpoint.finish(&mut boot).expect("finish");
}

#[test]
fn random_traffic_without_logging() {
    protocol_job("random_traffic_without_logging", LogMode::NONE, LogUnit::Rank);
}

#[test]
fn random_traffic_pessimistic_receiver_based() {
    protocol_job("random_traffic_pessimistic_receiver_based", LogMode::PESSIMISTIC_RB, LogUnit::Rank);
}

#[test]
fn random_traffic_pessimistic_sender_based() {
    protocol_job("random_traffic_pessimistic_sender_based", LogMode::PESSIMISTIC_SB, LogUnit::Rank);
}

#[test]
fn random_traffic_causal_rank_unit() {
    protocol_job("random_traffic_causal_rank_unit", LogMode::CAUSAL, LogUnit::Rank);
}

#[test]
fn random_traffic_causal_node_unit() {
    protocol_job("random_traffic_causal_node_unit", LogMode::CAUSAL, LogUnit::Node);
}

fn on_same_node(a: Rank, b: Rank) -> bool {
    a / RANKS_PER_NODE == b / RANKS_PER_NODE
}

/// Application bytes and messages per pair equal the schedule's; rank 0's text parses where
/// clustering reads it; the library's own bytes are counted apart.
fn check_comm_matrix(endpoint: &LoggedEndpoint, boot: &mut dyn Bootstrap, plan: &[Vec<Vec<Message>>]) {
    let matrix = endpoint.gather_comm_matrix(boot).expect("gather comm matrix");
    assert_eq!(matrix.size(), RANKS as usize);
    let all: Vec<&Message> = plan.iter().flatten().flatten().collect();
    for src in 0..RANKS {
        for dest in 0..RANKS {
            let pair = all.iter().filter(|m| m.sender == src && m.dest == dest);
            let bytes = pair.clone().map(|m| m.payload.len() as u64).sum::<u64>();
            let cell = matrix.rows[src as usize].cells()[dest as usize];
            assert_eq!((cell.bytes, cell.messages), (bytes, pair.count() as u64), "{src} -> {dest}");
        }
    }
    // Envelopes are library bytes; pass-through (logging off) sends none.
    let framed = !endpoint.is_pass_through();
    assert!(
        matrix.library_bytes_per_rank().iter().all(|&b| (b > 0) == framed),
        "envelopes are library bytes"
    );
    // The text `ckpt::cluster::CommMatrix::parse` reads: `#` comments, then N rows of N counts.
    let rows: Vec<Vec<u64>> = matrix
        .to_text()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().map(|t| t.parse().expect("byte count")).collect())
        .collect();
    assert_eq!(rows.len(), RANKS as usize);
    for (src, row) in rows.iter().enumerate() {
        assert_eq!(row.len(), RANKS as usize);
        for (dest, &bytes) in row.iter().enumerate() {
            assert_eq!(Some(bytes), matrix.bytes(src as Rank, dest as Rank));
        }
    }
}

/// Causal logging after the traffic: payload logging per unit, determinants stable and
/// collectable from the other ranks, resends dropped as duplicates, and GC at a checkpoint.
fn check_causal(
    endpoint: &mut LoggedEndpoint,
    boot: &mut dyn Bootstrap,
    plan: &[Vec<Vec<Message>>],
    receptions: &[Reception],
) {
    let me = endpoint.rank();
    let unit = endpoint.unit();
    let mine: Vec<&Message> = plan.iter().flat_map(|p| &p[me as usize]).collect();
    let logged: Vec<&&Message> =
        mine.iter().filter(|m| unit == LogUnit::Rank || !on_same_node(me, m.dest)).collect();
    let s = endpoint.stats();
    assert_eq!(s.messages_payload_logged, logged.len() as u64);
    assert_eq!(s.messages_unlogged, (mine.len() - logged.len()) as u64);
    assert_eq!(s.payload_bytes_logged, logged.iter().map(|m| m.payload.len() as u64).sum::<u64>());
    let charged = logged.iter().map(|m| LoggedSend::charged_bytes(m.payload.len())).sum::<u64>();
    assert_eq!(s.send_log_bytes, charged);
    if unit == LogUnit::Node {
        assert!(s.messages_unlogged > 0 && s.messages_payload_logged > 0, "the traffic must mix both");
        let neighbour = me ^ 1;
        assert_eq!(endpoint.send_log().expect("send log").len(neighbour), 0, "intra-node payloads unlogged");
        assert!(matches!(endpoint.resend_from(neighbour, 1), Err(LogError::Unsupported(_))));
    }
    endpoint.flush_log().expect("flush log");
    let s = endpoint.stats();
    assert_eq!(endpoint.unstable_determinants(), 0);
    // A node's ranks forward each other's determinants (they fail together).
    let written = s.determinants_generated + s.determinants_forwarded;
    assert_eq!((s.determinants_logged, s.determinants_acknowledged), (written, written));
    assert!(s.determinants_forwarded <= s.determinants_stored);
    assert_eq!(s.det_log_bytes, s.determinants_stored * Determinant::WIRE_LEN as u64);
    println!(
        "rank {me}: causal {unit}: {} determinants, {} piggybacked ({:.3}/message), {} stored from peers, {} payloads logged, {} not",
        s.determinants_generated,
        s.determinants_piggybacked,
        s.piggybacked_per_message(),
        s.determinants_stored,
        s.messages_payload_logged,
        s.messages_unlogged
    );
    // Every rank's determinants, collected without it, are exactly its wildcard receptions.
    let all = boot.allgather(&encode_receptions(receptions)).expect("allgather");
    for failed in 0..RANKS {
        let expected: Vec<Determinant> = decode_receptions(failed, &all[failed as usize])
            .iter()
            .filter_map(|r| r.delivery.determinant)
            .collect();
        let collected = endpoint.gather_determinants(boot, &[failed]).expect("gather determinants");
        assert_eq!(collected, expected, "rank {failed}'s determinants as the others hold them");
    }
    for client in endpoint.hosted_rings().iter().map(|h| h.client).collect::<Vec<_>>() {
        let theirs = decode_receptions(client, &all[client as usize]);
        let held = endpoint.determinants_held_for(client).expect("held");
        let missing: Vec<Determinant> =
            theirs.iter().filter_map(|r| r.delivery.determinant).filter(|d| !held.contains(d)).collect();
        let scan =
            endpoint.hosted_rings().iter().find(|h| h.client == client).expect("ring").scan().expect("scan");
        assert!(
            missing.is_empty(),
            "the buddy's ring lacks {} determinants of {client} (holds {}): header {:?}, end {:?}, records {:?}",
            missing.len(),
            held.len(),
            scan.header,
            scan.end,
            scan.records.iter().map(|r| (r.pos, r.kind, r.data.len())).collect::<Vec<_>>()
        );
    }
    if unit == LogUnit::Rank {
        resend_everything(endpoint, plan);
    }
    // GC at a (stand-in) coordinated checkpoint: everything delivered, so everything goes.
    let before = endpoint.stats();
    let report = endpoint.checkpoint_taken(boot).expect("checkpoint");
    assert_eq!(report.send_log_bytes_freed, charged, "send log freed");
    assert_eq!(report.det_log_entries_freed, before.determinants_stored, "detLog freed");
    assert_eq!(report.unstable_dropped, 0, "all were stable");
    assert_eq!(report.ring_bytes_freed > 0, before.determinants_generated > 0);
    let s = endpoint.stats();
    assert_eq!((s.send_log_bytes, s.det_log_bytes), (0, 0));
    assert!(endpoint.send_log().expect("send log").is_empty());
    check_rings_trimmed(endpoint, boot);
}

/// After a checkpoint's GC every ring this rank hosts is empty, and a second checkpoint
/// finds nothing to free.
fn check_rings_trimmed(endpoint: &mut LoggedEndpoint, boot: &mut dyn Bootstrap) {
    boot.barrier().expect("every rank trimmed");
    for ring in endpoint.hosted_rings() {
        let scan = ring.scan().expect("scan");
        assert_eq!(scan.header.tail, scan.header.watermark, "client {}: ring trimmed", ring.client);
        assert!(scan.records.is_empty(), "client {}: records left after GC", ring.client);
    }
    let again = endpoint.checkpoint_taken(boot).expect("second checkpoint");
    assert_eq!(again, reverb_logger::GcReport::default(), "nothing left to free");
}

/// Failed ranks "restarted" in place (new incarnation, empty state) re-execute the same
/// program: with their determinants collected from the others and the payloads resent from
/// the survivors' send logs, each reproduces its logged delivery order exactly, while the
/// survivors drop the re-executed sends as duplicates. Under `REVERB_LOG_UNIT=node` the whole
/// node restarts and its intra-node messages, never logged, are regenerated by re-execution.
fn replay_job(test: &str, unit: LogUnit, victims: &[Rank]) {
    replay_job_with(test, unit, victims, None)
}

/// As [`replay_job`]; `teams` set: `REVERB_LOG_TEAMS` (the unit is then `team`).
fn replay_job_with(test: &str, unit: LogUnit, victims: &[Rank], teams: Option<&str>) {
    let Some((job, mut boot, provider)) = common::child() else {
        let mut env = vec![
            ("REVERB_LOG".to_string(), "causal".to_string()),
            (SEED_VAR.to_string(), seed().to_string()),
        ];
        match teams {
            Some(teams) => env.push(("REVERB_LOG_TEAMS".to_string(), teams.to_string())),
            None => env.push(("REVERB_LOG_UNIT".to_string(), unit.as_str().to_string())),
        }
        let job = common::Job { ranks_per_node: RANKS_PER_NODE, env, ..common::Job::new(RANKS) };
        common::run_job_ok(test, &job);
        return;
    };
    let seed = seed();
    let config = LogConfig { ring_capacity: 1 << 20, ..LogConfig::from_env().expect("log config") };
    assert_eq!(config.unit, unit);
    let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config).expect("endpoint");
    let plan = schedule(seed);
    let receptions = run_traffic(&mut endpoint, &plan, seed);
    check_deliveries(job.rank, &plan, &receptions);
    endpoint.flush_log().expect("flush");
    endpoint.wait_sends(wait()).expect("sends out");
    boot.barrier().expect("quiet");
    let dets = endpoint.gather_determinants(&mut boot, victims).expect("gather determinants");
    let count =
        |from: Rank, to: Rank| plan.iter().flat_map(|p| &p[from as usize]).filter(|m| m.dest == to).count();
    if victims.contains(&job.rank) {
        let mine: Vec<Determinant> = dets.iter().filter(|d| d.receiver == job.rank).copied().collect();
        let logged: Vec<Determinant> = receptions.iter().filter_map(|r| r.delivery.determinant).collect();
        assert_eq!(mine, logged, "rank {}: determinants collected from the survivors", job.rank);
        endpoint.restart_in_place(1).expect("restart");
        endpoint.begin_replay(&mine).expect("replay");
        assert!(endpoint.replaying());
        boot.barrier().expect("restarted");
        let replayed = run_traffic(&mut endpoint, &plan, seed);
        assert!(!endpoint.replaying());
        assert_eq!(replayed.len(), receptions.len());
        for (i, (again, first)) in replayed.iter().zip(&receptions).enumerate() {
            assert_eq!(again, first, "rank {}: replay diverges at reception {i}", job.rank);
        }
        let s = endpoint.stats();
        assert_eq!((s.duplicates_dropped, s.determinants_logged), (0, 0), "replay logs nothing again: {s:?}");
    } else {
        boot.barrier().expect("restarted");
        let delivered = endpoint.stats().messages_delivered;
        let mut expected = 0;
        for &v in victims {
            let resent = endpoint.resend_from(v, 1).expect("resend");
            assert_eq!(resent, count(job.rank, v));
            expected += count(v, job.rank) as u64;
        }
        let start = std::time::Instant::now();
        while endpoint.stats().duplicates_dropped < expected {
            assert!(start.elapsed() < wait(), "rank {}: {:?}", job.rank, endpoint.stats());
            endpoint.progress().expect("progress");
        }
        let s = endpoint.stats();
        assert_eq!(
            (s.duplicates_dropped, s.messages_delivered),
            (expected, delivered),
            "no duplicate delivered"
        );
    }
    endpoint.finish(&mut boot).expect("finish");
}

#[test]
fn causal_restart_replays_logged_order() {
    replay_job("causal_restart_replays_logged_order", LogUnit::Rank, &[1]);
}

#[test]
fn causal_node_restart_replays_logged_order() {
    replay_job("causal_node_restart_replays_logged_order", LogUnit::Node, &[0, 1]);
}

/// Team-based logging: a team across both nodes ({0, 3}; each member's buddy is outside it)
/// restarts as a unit. Its intra-team messages were never logged and are regenerated by
/// re-execution, the others are resent from the survivors' logs; the order is the logged one.
#[test]
fn causal_team_restart_replays_logged_order() {
    replay_job_with("causal_team_restart_replays_logged_order", LogUnit::Team, &[0, 3], Some("0+3,1+2"));
}

const TEAM_MESSAGES: u64 = 12;

/// Every rank sends `TEAM_MESSAGES` to every other rank under a team layout: exactly the
/// inter-team ones are payload-logged (at the sender for sb and causal, at the receiver for
/// rb), the intra-team ones are counted as unlogged.
fn team_counts_job(test: &str) {
    let Some((job, mut boot, provider)) = common::child() else {
        for mode in ["pessimistic-sb", "pessimistic-rb", "causal"] {
            for layout in ["0-1,2-3", "0+3,1+2", "0-3", "0,1,2,3"] {
                let env = vec![
                    ("REVERB_LOG".to_string(), mode.to_string()),
                    ("REVERB_LOG_TEAMS".to_string(), layout.to_string()),
                ];
                let job = common::Job { ranks_per_node: RANKS_PER_NODE, env, ..common::Job::new(RANKS) };
                for out in common::run_job_ok(test, &job) {
                    for line in out.lines().filter_map(|l| l.split_once("team rank").map(|(_, r)| r)) {
                        println!("team rank{line}");
                    }
                }
            }
        }
        return;
    };
    let config = LogConfig::from_env().expect("log config");
    assert_eq!(config.unit, LogUnit::Team);
    let teams = config.teams.clone().expect("teams");
    let mode = config.mode;
    let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config).expect("endpoint");
    let me = job.rank;
    for peer in (0..RANKS).filter(|&p| p != me) {
        for i in 0..TEAM_MESSAGES {
            endpoint.send(peer, 5, &[i as u8; 24]).expect("send");
        }
    }
    for peer in (0..RANKS).filter(|&p| p != me) {
        for i in 0..TEAM_MESSAGES {
            let d = endpoint.recv(Source::Rank(peer), TagMatch::exact(5), wait()).expect("recv");
            assert_eq!(d.payload, vec![i as u8; 24]);
        }
    }
    let mates = teams.members_with(me).len() as u64 - 1;
    let others = u64::from(RANKS) - 1 - mates;
    let s = endpoint.stats();
    assert_eq!(
        (s.messages_payload_logged, s.messages_unlogged),
        (TEAM_MESSAGES * others, TEAM_MESSAGES * mates),
        "rank {me} {mode}: logged vs unlogged with {mates} team mates"
    );
    for peer in 0..RANKS {
        assert_eq!(endpoint.logs_payload_with(peer), !teams.same_team(me, peer));
    }
    println!(
        "team rank {me} {mode} teams {:?}: {} logged, {} unlogged",
        std::env::var("REVERB_LOG_TEAMS").unwrap_or_default(),
        s.messages_payload_logged,
        s.messages_unlogged
    );
    endpoint.finish(&mut boot).expect("finish");
}

#[test]
fn team_layouts_log_only_inter_team_messages() {
    team_counts_job("team_layouts_log_only_inter_team_messages");
}

/// A full send log refuses the send (`LogFull`) without taking an ssn or dropping anything;
/// trimming after a (stand-in) checkpoint lets sending go on, with no gap in the channel.
#[test]
fn sender_log_full_is_back_pressure() {
    const PAYLOAD: usize = 64;
    const FITS: u64 = 5;
    let test = "sender_log_full_is_back_pressure";
    let Some((job, mut boot, provider)) = common::child() else {
        common::run_job_ok(test, &common::Job { ranks_per_node: 1, ..common::Job::new(2) });
        return;
    };
    let limit = FITS * LoggedSend::charged_bytes(PAYLOAD);
    let config =
        LogConfig { mode: LogMode::PESSIMISTIC_SB, send_log_limit: limit as usize, ..LogConfig::default() };
    let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config).expect("endpoint");
    if job.rank == 0 {
        for i in 0..FITS {
            endpoint.send(1, 3, &[i as u8; PAYLOAD]).expect("send within the limit");
        }
        match endpoint.send(1, 3, &[0xff; PAYLOAD]) {
            Err(LogError::LogFull { needed, used, limit: l }) => {
                assert_eq!((needed, used, l), (LoggedSend::charged_bytes(PAYLOAD), limit, limit));
            }
            other => panic!("expected LogFull, got {other:?}"),
        }
        let s = endpoint.stats();
        assert_eq!((s.back_pressure_events, s.messages_sent, s.send_log_bytes), (1, FITS, limit));
        assert_eq!(endpoint.last_ssn_sent(1), Some(FITS), "a refused send takes no ssn");
        assert_eq!(endpoint.send_log().expect("send log").len(1), FITS as usize, "nothing dropped");
        // Stand-in for the receiver's checkpoint covering the first two messages.
        assert_eq!(endpoint.trim_send_log(1, 2).expect("trim"), 2 * LoggedSend::charged_bytes(PAYLOAD));
        assert_eq!(endpoint.stats().send_log_bytes, limit - 2 * LoggedSend::charged_bytes(PAYLOAD));
        assert!(endpoint.resend_from(1, 1).is_err(), "trimmed messages cannot be resent");
        endpoint.send(1, 3, &[0xee; PAYLOAD]).expect("send after trim");
    } else {
        for ssn in 1..=FITS + 1 {
            let d = endpoint.recv(Source::Rank(0), TagMatch::exact(3), wait()).expect("recv");
            assert_eq!(d.ssn, ssn, "no gap in the channel");
            let byte = if ssn <= FITS { ssn as u8 - 1 } else { 0xee };
            assert_eq!(d.payload, vec![byte; PAYLOAD]);
        }
    }
    endpoint.finish(&mut boot).expect("finish");
}

/// Large messages next to small ones, all posted before the receiver takes any: the first
/// large frames go from the endpoint's registered frame pool (written in place, read by the
/// peer), the ones past the pool's bound through the provider's copying send. Every message
/// arrives intact and in ssn order, and a second round reuses the pool once the first
/// round's sends completed. Where the sender keeps payloads (causal, pessimistic-rb), its
/// log reads them back intact (large ones from their frame buffers) before a trim.
fn large_stream_job(test: &str, mode: LogMode, large: usize) {
    // Frames just above the rendezvous threshold, 100 kB and 1 MiB, between eager ones.
    const SIZES: [usize; 4] = [(1 << 20) + 3, 0, 8153, 100_000];
    let Some((job, mut boot, provider)) = common::child() else {
        common::run_job_ok(test, &common::Job { ranks_per_node: 1, ..common::Job::new(2) });
        return;
    };
    let config = LogConfig { mode, ring_capacity: 16 << 20, ..LogConfig::default() };
    let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config).expect("endpoint");
    let rounds = [large * SIZES.len(), 2 * SIZES.len()];
    let payload =
        |round: usize, i: usize| common::pattern(((round as u64) << 32) | i as u64, SIZES[i % SIZES.len()]);
    let mut ssn = 0;
    for (round, &count) in rounds.iter().enumerate() {
        if job.rank == 0 {
            for i in 0..count {
                endpoint.send(1, 9, &payload(round, i)).expect("send");
            }
            boot.barrier().expect("all posted");
            endpoint.recv(Source::Rank(1), TagMatch::exact(10), wait()).expect("round done");
            // Sender-kept payloads read back intact; the trim frees the frame buffers the
            // log held for round 2.
            if let Some(log) = endpoint.send_log() {
                let logged: Vec<_> = log.from_ssn(1, ssn + 1).expect("logged round").collect();
                assert_eq!(logged.len(), count, "round {round}: logged messages");
                for (i, e) in logged.iter().enumerate() {
                    assert_eq!(e.ssn, ssn + 1 + i as u64);
                    assert!(
                        e.payload == payload(round, i),
                        "round {round} message {i}: logged payload differs"
                    );
                }
                endpoint.trim_send_log(1, ssn + count as u64).expect("trim");
            }
            ssn += count as u64;
        } else {
            boot.barrier().expect("all posted");
            for i in 0..count {
                let d = endpoint.recv(Source::Rank(0), TagMatch::exact(9), wait()).expect("recv");
                ssn += 1;
                // Pass-through (logging off) numbers nothing: the payload shows the order.
                let want = if endpoint.is_pass_through() { 0 } else { ssn };
                assert_eq!(d.ssn, want, "round {round} message {i} out of order");
                assert!(d.payload == payload(round, i), "round {round} message {i}: payload differs");
            }
            endpoint.send(0, 10, &[]).expect("round done");
        }
    }
    if job.rank == 0 {
        assert_eq!(endpoint.stats().messages_sent, rounds.iter().sum::<usize>() as u64);
    }
    endpoint.finish(&mut boot).expect("finish");
}

#[test]
fn large_messages_stream_intact_without_logging() {
    // 80 MiB in flight: more than the frame pool registers.
    large_stream_job("large_messages_stream_intact_without_logging", LogMode::NONE, 80);
}

#[test]
fn large_messages_stream_intact_causal() {
    large_stream_job("large_messages_stream_intact_causal", LogMode::CAUSAL, 80);
}

#[test]
fn large_messages_stream_intact_pessimistic_receiver_based() {
    // Every frame is written into the buddy's ring before delivery: fewer, so they fit it.
    large_stream_job("large_messages_stream_intact_pessimistic_receiver_based", LogMode::PESSIMISTIC_RB, 8);
}

/// Pessimistic logging on a single node is refused: the log would die with its node.
#[test]
fn pessimistic_logging_needs_two_nodes() {
    let test = "pessimistic_logging_needs_two_nodes";
    let Some((_job, mut boot, provider)) = common::child() else {
        common::run_job_ok(test, &common::Job { ranks_per_node: 2, ..common::Job::new(2) });
        return;
    };
    let config = LogConfig { mode: LogMode::PESSIMISTIC_RB, ..LogConfig::default() };
    match LoggedEndpoint::new(provider, &mut boot, config) {
        Err(LogError::Unsupported(msg)) => assert!(msg.contains("two nodes"), "{msg}"),
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

/// Parent side of a node-kill test under `mode`: runs the job (the victims' node respawned
/// once) and checks that every rank passed and only the victims restarted.
fn run_node_kill_job(test: &str, mode: &str, victims: &[Rank]) {
    let env = vec![
        ("REVERB_LOG".to_string(), mode.to_string()),
        ("REVERB_LOG_UNIT".to_string(), "node".to_string()),
        (SEED_VAR.to_string(), seed().to_string()),
    ];
    let job = common::Job { ranks_per_node: RANKS_PER_NODE, env, respawn: 1, ..common::Job::new(RANKS) };
    let exits = common::run_job(test, &job);
    let failed: Vec<String> = exits
        .iter()
        .filter(|e| !(e.code == Some(0) && e.stdout.contains("1 passed")))
        .map(|e| format!("rank {} (incarnation {}):\n{}", e.rank, e.incarnation, e.output()))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    for e in exits {
        let restarted = victims.contains(&e.rank);
        assert_eq!(e.incarnation, u32::from(restarted), "rank {}:\n{}", e.rank, e.output());
    }
}

/// Survivor after a resend: waits (bounded) until the restarted ranks' re-executed sends,
/// `expected` of them, were all dropped as duplicates, and checks none was delivered again.
fn await_duplicates_dropped(me: Rank, endpoint: &mut LoggedEndpoint, expected: u64, delivered: u64) {
    let start = std::time::Instant::now();
    while endpoint.stats().duplicates_dropped < expected {
        assert!(start.elapsed() < wait(), "rank {me}: {:?}", endpoint.stats());
        endpoint.progress().expect("progress");
    }
    let s = endpoint.stats();
    assert_eq!((s.duplicates_dropped, s.messages_delivered), (expected, delivered), "no duplicate delivered");
}

/// The failure itself: the victims SIGKILL themselves (their node goes down); survivors see
/// them die, await their incarnation 1, join the rejoin collective, and check that the
/// determinants they gather for each victim are the ones its original deliveries produced.
fn fail_victims_and_rejoin(
    me: Rank,
    survivor: bool,
    victims: &[Rank],
    endpoint: &mut LoggedEndpoint,
    boot: &mut dyn Bootstrap,
    originals: &[Vec<u8>],
) {
    if !survivor {
        if me == victims[0] {
            // SIGKILL to ourselves, the node failure under test.
            let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        }
        std::thread::sleep(wait());
        panic!("rank {me} outlived its node");
    }
    let start = std::time::Instant::now();
    while victims.iter().any(|&v| endpoint.provider().peer_state(v) != reverb_transport::PeerState::Dead) {
        endpoint.provider().progress().expect("progress");
        endpoint.provider().block(Duration::from_millis(5)).expect("block");
        assert!(start.elapsed() < wait(), "the victims' death not seen");
    }
    for &v in victims {
        let inc = reverb_transport::recovery::await_rejoin(endpoint.provider(), boot, v, Some(0), wait())
            .expect("rejoin");
        assert_eq!(inc, 1);
    }
    endpoint.rejoin(boot, victims).expect("rejoin collective");
    let dets = endpoint.gather_determinants(boot, victims).expect("gather determinants");
    for &v in victims {
        let logged: Vec<Determinant> = decode_receptions(v, &originals[v as usize])
            .iter()
            .filter_map(|r| r.delivery.determinant)
            .collect();
        let held: Vec<Determinant> = dets.iter().filter(|d| d.receiver == v).copied().collect();
        assert_eq!(held, logged, "rank {v}'s determinants as the survivors hold them");
    }
}

/// The real thing under `REVERB_LOG_UNIT=node`: after the traffic, node 1 is SIGKILLed and
/// respawned (incarnation 1). The survivors reconnect, join the restarted ranks' collective
/// setup (`rejoin`), hand over the determinants they hold (buddy rings, detLogs) and resend
/// their logged payloads; the restarted ranks re-execute and reproduce their original
/// deliveries exactly (their intra-node messages regenerated, never logged), and the
/// survivors drop the re-executed sends as duplicates.
#[test]
fn causal_killed_node_replays_after_respawn() {
    const VICTIMS: [Rank; 2] = [2, 3];
    let test = "causal_killed_node_replays_after_respawn";
    let Some((job, mut boot, provider)) = common::child() else {
        run_node_kill_job(test, "causal", &VICTIMS);
        return;
    };
    let me = job.rank;
    let seed = seed();
    let plan = schedule(seed);
    let config = LogConfig { ring_capacity: 1 << 20, ..LogConfig::from_env().expect("log config") };
    let count =
        |from: Rank, to: Rank| plan.iter().flat_map(|p| &p[from as usize]).filter(|m| m.dest == to).count();
    let survivor = !VICTIMS.contains(&me);
    if job.incarnation == 0 {
        let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config).expect("endpoint");
        let receptions = run_traffic(&mut endpoint, &plan, seed);
        check_deliveries(me, &plan, &receptions);
        endpoint.flush_log().expect("flush");
        endpoint.wait_sends(wait()).expect("sends out");
        // Everyone keeps everyone's deliveries: the survivors judge the replay.
        let originals = boot.allgather(&encode_receptions(&receptions)).expect("allgather");
        boot.barrier().expect("quiet before the failure");
        fail_victims_and_rejoin(me, survivor, &VICTIMS, &mut endpoint, &mut boot, &originals);
        // Hand the originals over (the restarted ranks compare and report).
        let mut handover = Vec::new();
        for v in VICTIMS {
            let bytes = &originals[v as usize];
            handover.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            handover.extend_from_slice(bytes);
        }
        boot.allgather(&handover).expect("hand over");
        boot.barrier().expect("restarted ranks replaying");
        let delivered = endpoint.stats().messages_delivered;
        let mut expected = 0;
        for v in VICTIMS {
            assert_eq!(endpoint.resend_from(v, 1).expect("resend"), count(me, v));
            expected += count(v, me) as u64;
        }
        await_duplicates_dropped(me, &mut endpoint, expected, delivered);
        boot.barrier().expect("replay checked");
        endpoint.finish(&mut boot).expect("finish");
    } else {
        assert!(!survivor, "only node 1 restarts");
        let mut provider = provider;
        // The node mate restarted too: this provider may have found its dead incarnation.
        for mate in VICTIMS.into_iter().filter(|&v| v != me) {
            let inc =
                reverb_transport::recovery::await_rejoin(provider.as_mut(), &mut boot, mate, Some(0), wait())
                    .expect("mate rejoined");
            assert_eq!(inc, 1);
        }
        let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config).expect("endpoint after restart");
        let dets = endpoint.gather_determinants(&mut boot, &VICTIMS).expect("gather determinants");
        let handover = boot.allgather(&[]).expect("hand over");
        // Rank 0's contribution: the originals of every restarted rank, length-prefixed.
        let mut rest = &handover[0][..];
        let mut originals = Vec::new();
        while rest.len() >= 8 {
            let (len, tail) = rest.split_at(8);
            let len = u64::from_le_bytes(len.try_into().expect("8 bytes")) as usize;
            originals.push(tail[..len].to_vec());
            rest = &tail[len..];
        }
        let index = VICTIMS.iter().position(|&v| v == me).expect("victim");
        let first = decode_receptions(me, &originals[index]);
        let mine: Vec<Determinant> = dets.iter().filter(|d| d.receiver == me).copied().collect();
        endpoint.begin_replay(&mine).expect("replay");
        boot.barrier().expect("restarted ranks replaying");
        let replayed = run_traffic(&mut endpoint, &plan, seed);
        assert!(!endpoint.replaying());
        assert_eq!(replayed.len(), first.len());
        for (i, (again, orig)) in replayed.iter().zip(&first).enumerate() {
            assert_eq!(again, orig, "rank {me}: replay after the restart diverges at reception {i}");
        }
        boot.barrier().expect("replay checked");
        endpoint.finish(&mut boot).expect("finish");
    }
}

/// Receiver-based recovery for real (`REVERB_LOG=pessimistic-rb`, node unit): after the
/// traffic the survivors send a few more messages that node 1 never delivers (in flight: in
/// no ring), then node 1 is SIGKILLed and respawned. The restarted ranks take back the frames
/// their buddies' rings hold (`gather_frames`, `replay_frames`), the survivors resend only
/// what those lack (the in-flight messages, from their send logs), and the re-execution
/// reproduces the original deliveries exactly, then receives the in-flight messages once each.
#[test]
fn rb_killed_node_replays_ring_and_gets_in_flight_messages() {
    const VICTIMS: [Rank; 2] = [2, 3];
    const SURVIVORS: [Rank; 2] = [0, 1];
    const IN_FLIGHT: u64 = 5;
    const IN_FLIGHT_TAG: Tag = 0xdead_0000;
    let test = "rb_killed_node_replays_ring_and_gets_in_flight_messages";
    let Some((job, mut boot, provider)) = common::child() else {
        run_node_kill_job(test, "pessimistic-rb", &VICTIMS);
        return;
    };
    let me = job.rank;
    let seed = seed();
    let plan = schedule(seed);
    let config = LogConfig { ring_capacity: 1 << 20, ..LogConfig::from_env().expect("log config") };
    let count =
        |from: Rank, to: Rank| plan.iter().flat_map(|p| &p[from as usize]).filter(|m| m.dest == to).count();
    let in_flight_payload = |from: Rank, to: Rank, i: u64| {
        common::pattern(seed ^ (u64::from(from) << 12) ^ (u64::from(to) << 8) ^ i, 64)
    };
    let survivor = SURVIVORS.contains(&me);
    if job.incarnation == 0 {
        let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config).expect("endpoint");
        let receptions = run_traffic(&mut endpoint, &plan, seed);
        check_deliveries(me, &plan, &receptions);
        endpoint.flush_log().expect("flush");
        endpoint.wait_sends(wait()).expect("sends out");
        let originals = boot.allgather(&encode_receptions(&receptions)).expect("allgather");
        if survivor {
            for v in VICTIMS {
                for i in 0..IN_FLIGHT {
                    endpoint.send(v, IN_FLIGHT_TAG, &in_flight_payload(me, v, i)).expect("in-flight send");
                }
            }
            endpoint.wait_sends(wait()).expect("in-flight sends out");
        }
        boot.barrier().expect("quiet before the failure");
        fail_victims_and_rejoin(me, survivor, &VICTIMS, &mut endpoint, &mut boot, &originals);
        let frames = endpoint.gather_frames(&mut boot, &VICTIMS).expect("gather frames");
        assert!(frames.is_empty(), "a survivor gets no frames");
        let mut handover = Vec::new();
        for v in VICTIMS {
            let bytes = &originals[v as usize];
            handover.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            handover.extend_from_slice(bytes);
        }
        boot.allgather(&handover).expect("hand over");
        // Where each restarted rank's channel from this rank stands after the ring replay.
        let held = boot.allgather(&[]).expect("held watermarks");
        boot.barrier().expect("restarted ranks replaying");
        let delivered = endpoint.stats().messages_delivered;
        let mut expected = 0;
        for v in VICTIMS {
            let bytes = &held[v as usize];
            let at = 8 * me as usize;
            let through = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
            assert_eq!(through, count(me, v) as u64, "rank {v} holds every delivered message from the ring");
            assert_eq!(endpoint.resend_from(v, through + 1).expect("resend"), IN_FLIGHT as usize);
            expected += count(v, me) as u64;
        }
        await_duplicates_dropped(me, &mut endpoint, expected, delivered);
        boot.barrier().expect("replay checked");
        endpoint.finish(&mut boot).expect("finish");
    } else {
        assert!(!survivor, "only node 1 restarts");
        let mut provider = provider;
        for mate in VICTIMS.into_iter().filter(|&v| v != me) {
            let inc =
                reverb_transport::recovery::await_rejoin(provider.as_mut(), &mut boot, mate, Some(0), wait())
                    .expect("mate rejoined");
            assert_eq!(inc, 1);
        }
        let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config).expect("endpoint after restart");
        let dets = endpoint.gather_determinants(&mut boot, &VICTIMS).expect("gather determinants");
        let frames = endpoint.gather_frames(&mut boot, &VICTIMS).expect("gather frames");
        let from_survivors: usize = SURVIVORS.iter().map(|&s| count(s, me)).sum();
        assert_eq!(frames.len(), from_survivors, "the ring holds every inter-node delivery");
        assert_eq!(endpoint.replay_frames(frames, &VICTIMS).expect("replay frames"), from_survivors);
        let handover = boot.allgather(&[]).expect("hand over");
        let mut rest = &handover[0][..];
        let mut originals = Vec::new();
        while rest.len() >= 8 {
            let (len, tail) = rest.split_at(8);
            let len = u64::from_le_bytes(len.try_into().expect("8 bytes")) as usize;
            originals.push(tail[..len].to_vec());
            rest = &tail[len..];
        }
        let held: Vec<u8> = (0..RANKS).flat_map(|p| endpoint.held_through(p).to_le_bytes()).collect();
        boot.allgather(&held).expect("held watermarks");
        let index = VICTIMS.iter().position(|&v| v == me).expect("victim");
        let first = decode_receptions(me, &originals[index]);
        let mine: Vec<Determinant> = dets.iter().filter(|d| d.receiver == me).copied().collect();
        endpoint.begin_replay(&mine).expect("replay");
        boot.barrier().expect("restarted ranks replaying");
        let replayed = run_traffic(&mut endpoint, &plan, seed);
        assert!(!endpoint.replaying());
        assert_eq!(replayed.len(), first.len());
        for (i, (again, orig)) in replayed.iter().zip(&first).enumerate() {
            assert_eq!(again, orig, "rank {me}: replay after the restart diverges at reception {i}");
        }
        for s in SURVIVORS {
            for i in 0..IN_FLIGHT {
                let d = endpoint
                    .recv(Source::Rank(s), TagMatch::exact(IN_FLIGHT_TAG), wait())
                    .expect("in flight");
                assert_eq!((d.ssn, &d.payload), (count(s, me) as u64 + i + 1, &in_flight_payload(s, me, i)));
            }
        }
        let none = endpoint.recv(Source::Any, TagMatch::exact(IN_FLIGHT_TAG), Duration::from_millis(300));
        assert!(none.is_err(), "each in-flight message delivered once: {none:?}");
        boot.barrier().expect("replay checked");
        endpoint.finish(&mut boot).expect("finish");
    }
}
