//! Recovery logic of each logging protocol on the loopback provider (3 ranks as threads, one
//! per node, `LogUnit::Rank`), milliseconds per protocol: rank 1 takes messages from ranks 2
//! then 0, by wildcard and named receives, and answers rank 0; then it restarts in place. Its
//! determinants, gathered from the survivors, are exactly its wildcard deliveries; its logged
//! payloads come back (pessimistic-rb: the frames its buddy's ring holds; pessimistic-sb and
//! causal: resent from the senders' logs), deliberately in the opposite order (rank 0's
//! first), and the re-execution still delivers the original sequence. Its re-executed answer
//! reaches rank 0 as a dropped duplicate. The SIGKILL versions are in `protocol_procs.rs`.

use std::time::{Duration, Instant};

use reverb_logger::{Delivery, Determinant, LogConfig, LogMode, LogUnit, LoggedEndpoint, LoggedProbe};
use reverb_transport::loopback::InProcBootstrap;
use reverb_transport::{Bootstrap, Provider, ProviderKind, Rank, Source, Tag, TagMatch, TransportConfig};

const WAIT: Duration = Duration::from_secs(10);
const VICTIM: Rank = 1;
/// Messages each sender sends the victim.
const SENT: u64 = 3;
const ANSWER_TAG: Tag = 99;

/// Runs `body` on each rank of a `size`-rank loopback job, one thread each; a rank that
/// panicked fails the others' collectives within `WAIT`.
fn on_ranks(job: &str, size: u32, body: impl Fn(InProcBootstrap, Box<dyn Provider>) + Sync) {
    let config = TransportConfig { provider: ProviderKind::LOOPBACK, ..TransportConfig::default() };
    let body = &body;
    std::thread::scope(|scope| {
        let handles: Vec<_> = InProcBootstrap::with_timeout(job, size, WAIT)
            .into_iter()
            .map(|mut boot| {
                let config = config.clone();
                scope.spawn(move || {
                    let provider = reverb_transport::open(&config, &mut boot).expect("open loopback");
                    body(boot, provider)
                })
            })
            .collect();
        let panicked = handles.into_iter().filter_map(|h| h.join().err()).count();
        assert_eq!(panicked, 0, "{job}: a rank panicked");
    });
}

fn payload(sender: Rank, i: u64) -> Vec<u8> {
    format!("from {sender} message {i}").into_bytes()
}

/// The victim's program: rank 2's messages by wildcard receives, then rank 0's by one named
/// and two wildcard receives, then an answer to rank 0. Re-executed as is after the restart.
fn victim_program(endpoint: &mut LoggedEndpoint, boot: &mut dyn Bootstrap) -> Vec<Delivery> {
    let mut got = Vec::new();
    boot.barrier().expect("rank 2 sent");
    for _ in 0..SENT {
        got.push(endpoint.recv(Source::Any, TagMatch::any(), WAIT).expect("wildcard from 2"));
    }
    boot.barrier().expect("rank 0 sent");
    // Named source and tag: a deterministic receive, which logs no determinant.
    got.push(endpoint.recv(Source::Rank(0), TagMatch::exact(0), WAIT).expect("named from 0"));
    for _ in 1..SENT {
        got.push(endpoint.recv(Source::Any, TagMatch::any(), WAIT).expect("wildcard from 0"));
    }
    endpoint.send(0, ANSWER_TAG, b"answer").expect("answer");
    got
}

/// The senders' side of the first run: rank 2 sends, then rank 0; rank 0 takes the answer.
fn sender_program(endpoint: &mut LoggedEndpoint, boot: &mut dyn Bootstrap, me: Rank) {
    for phase_sender in [2, 0] {
        if me == phase_sender {
            for i in 0..SENT {
                endpoint.send(VICTIM, i, &payload(me, i)).expect("send");
            }
            endpoint.wait_sends(WAIT).expect("sends out");
        }
        boot.barrier().expect("phase");
    }
    if me == 0 {
        let answer = endpoint.recv(Source::Rank(VICTIM), TagMatch::exact(ANSWER_TAG), WAIT).expect("answer");
        assert_eq!(answer.payload, b"answer");
    }
}

fn check_first_run(got: &[Delivery]) {
    let order: Vec<(Rank, u64, &[u8])> =
        got.iter().map(|d| (d.source, d.ssn, d.payload.as_slice())).collect();
    let p = |s, i| payload(s, i);
    let (a, b, c, d, e, f) = (p(2, 0), p(2, 1), p(2, 2), p(0, 0), p(0, 1), p(0, 2));
    let expected: Vec<(Rank, u64, &[u8])> =
        vec![(2, 1, &a), (2, 2, &b), (2, 3, &c), (0, 1, &d), (0, 2, &e), (0, 3, &f)];
    assert_eq!(order, expected);
    let rsns: Vec<u64> = got.iter().map(|d| d.rsn).collect();
    assert_eq!(rsns, (1..=6).collect::<Vec<_>>());
    // Only the wildcard receives (all but the named 4th) carry a determinant.
    let with_det: Vec<u64> = got.iter().filter(|d| d.determinant.is_some()).map(|d| d.rsn).collect();
    assert_eq!(with_det, vec![1, 2, 3, 5, 6]);
}

/// The survivors hand the victim's payloads back in the order opposite to the first run.
fn resend_reversed(endpoint: &mut LoggedEndpoint, boot: &mut dyn Bootstrap, me: Rank, from_ring: bool) {
    for phase_sender in [0, 2] {
        if me == phase_sender {
            // pessimistic-rb: the ring gave the victim every delivered message; nothing is
            // missing. The others resend all of theirs.
            let (from, expected) = if from_ring { (SENT + 1, 0) } else { (1, SENT as usize) };
            assert_eq!(endpoint.resend_from(VICTIM, from).expect("resend"), expected, "rank {me}");
            endpoint.wait_sends(WAIT).expect("resent");
        }
        boot.barrier().expect("resend phase");
    }
}

/// Polls until rank 0 has dropped the victim's re-executed answer as a duplicate.
fn await_duplicate(endpoint: &mut LoggedEndpoint) {
    let start = Instant::now();
    while endpoint.stats().duplicates_dropped < 1 {
        assert!(start.elapsed() < WAIT, "re-executed answer not dropped: {:?}", endpoint.stats());
        endpoint.progress().expect("progress");
    }
    assert_eq!(endpoint.stats().duplicates_dropped, 1);
}

fn restart_and_replay(mode: LogMode) {
    let config = LogConfig { mode, unit: LogUnit::Rank, ring_capacity: 1 << 20, ..LogConfig::default() };
    let from_ring = mode == LogMode::PESSIMISTIC_RB;
    on_ranks(&format!("recovery-{mode}"), 3, |mut boot, provider| {
        let me = boot.job().rank;
        let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config.clone()).expect("endpoint");
        let first = if me == VICTIM {
            let got = victim_program(&mut endpoint, &mut boot);
            check_first_run(&got);
            got
        } else {
            sender_program(&mut endpoint, &mut boot, me);
            Vec::new()
        };
        endpoint.flush_log().expect("flush");
        endpoint.wait_sends(WAIT).expect("sends out");
        boot.barrier().expect("quiet");
        let dets = endpoint.gather_determinants(&mut boot, &[VICTIM]).expect("gather determinants");
        let frames = endpoint.gather_frames(&mut boot, &[VICTIM]).expect("gather frames");
        if me != VICTIM {
            assert!(frames.is_empty(), "{mode}: a survivor gets no frames");
            boot.barrier().expect("restarted");
            resend_reversed(&mut endpoint, &mut boot, me, from_ring);
            if me == 0 {
                await_duplicate(&mut endpoint);
            }
        } else {
            let logged: Vec<Determinant> = first.iter().filter_map(|d| d.determinant).collect();
            assert_eq!(dets, logged, "{mode}: determinants gathered from the survivors");
            endpoint.restart_in_place(1).expect("restart");
            if from_ring {
                assert_eq!(frames.len(), 2 * SENT as usize, "the ring holds every delivery");
                assert_eq!(endpoint.replay_frames(frames, &[]).expect("replay frames"), 2 * SENT as usize);
                assert_eq!((endpoint.held_through(0), endpoint.held_through(2)), (SENT, SENT));
            } else {
                assert!(frames.is_empty(), "{mode} logs no frames");
            }
            endpoint.begin_replay(&dets).expect("begin replay");
            assert!(endpoint.replaying());
            boot.barrier().expect("restarted");
            let again = victim_program(&mut endpoint, &mut boot);
            assert!(!endpoint.replaying());
            assert_eq!(again, first, "{mode}: the replay delivers the logged sequence");
        }
        endpoint.wait_sends(WAIT).expect("sends out");
        endpoint.finish(&mut boot).expect("finish");
    });
}

#[test]
fn pessimistic_receiver_based_replays_the_ring_in_logged_order() {
    restart_and_replay(LogMode::PESSIMISTIC_RB);
}

#[test]
fn pessimistic_sender_based_replays_resent_payloads_in_logged_order() {
    restart_and_replay(LogMode::PESSIMISTIC_SB);
}

#[test]
fn causal_replays_resent_payloads_in_logged_order() {
    restart_and_replay(LogMode::CAUSAL);
}

/// Order-logged named receives (a layer with receives outstanding together, MPI's nonblocking
/// ones): rank 1 takes rank 2's tag-0 message by a plain named receive (no determinant), then
/// rank 0's and rank 2's tag-1 one with the order logged (a determinant each). In the replay
/// the open first rsn takes none of the messages the log names for later, and a plain named
/// receive may take the message the log names for its rsn.
#[test]
fn order_logged_named_receives_replay_at_their_logged_rsn() {
    let config = LogConfig { mode: LogMode::CAUSAL, unit: LogUnit::Rank, ..LogConfig::default() };
    on_ranks("order-logged", 3, |mut boot, provider| {
        let me = boot.job().rank;
        let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config.clone()).expect("endpoint");
        let named = |e: &mut LoggedEndpoint, from: Rank, tag: Tag| {
            e.recv(Source::Rank(from), TagMatch::exact(tag), WAIT).expect("named receive")
        };
        let mut dets = Vec::new();
        if me == VICTIM {
            boot.barrier().expect("sent");
            let first = named(&mut endpoint, 2, 0);
            endpoint.set_order_logged(true);
            let (second, third) = (named(&mut endpoint, 0, 0), named(&mut endpoint, 2, 1));
            assert_eq!(first.determinant, None, "a plain named receive logs nothing");
            dets = [second.determinant, third.determinant].into_iter().flatten().collect();
            let logged: Vec<_> = dets.iter().map(|d| (d.sender, d.ssn, d.rsn)).collect();
            assert_eq!(logged, vec![(0, 1, 2), (2, 2, 3)]);
        } else {
            let tags: &[Tag] = if me == 2 { &[0, 1] } else { &[0] };
            for &tag in tags {
                endpoint.send(VICTIM, tag, &payload(me, tag)).expect("send");
            }
            endpoint.wait_sends(WAIT).expect("sends out");
            boot.barrier().expect("sent");
        }
        endpoint.flush_log().expect("flush");
        boot.barrier().expect("quiet");
        let gathered = endpoint.gather_determinants(&mut boot, &[VICTIM]).expect("gather determinants");
        if me == VICTIM {
            assert_eq!(gathered, dets);
            endpoint.restart_in_place(1).expect("restart");
            endpoint.begin_replay(&gathered).expect("begin replay");
        }
        boot.barrier().expect("restarted");
        // Rank 0 resends first: its message, named for rsn 2, comes first.
        for phase_sender in [0, 2] {
            if me == phase_sender {
                endpoint.resend_from(VICTIM, 1).expect("resend");
                endpoint.wait_sends(WAIT).expect("resent");
            }
            boot.barrier().expect("resent");
        }
        if me == VICTIM {
            assert_eq!(endpoint.replay_next(), None, "rsn 1 is open");
            // Rsn 1 was a plain receive's: taken with the order not logged (a logged one waits
            // at an open rsn). Every resent message is here (the senders' sends completed
            // before the barriers): rank 0's, first in this rank's queue, is named for rsn 2.
            endpoint.set_order_logged(false);
            let start = Instant::now();
            while endpoint.probe(Source::Any, TagMatch::any()).expect("probe").is_none() {
                assert!(start.elapsed() < WAIT, "the resent messages did not come");
            }
            let open = endpoint.probe(Source::Any, TagMatch::any()).expect("probe").expect("still there");
            assert_eq!((open.0, open.1), (2, 0), "the open rsn takes no message named for later");
            let again = endpoint.recv(Source::Any, TagMatch::any(), WAIT).expect("wildcard");
            assert_eq!((again.source, again.ssn, again.rsn), (2, 1, 1));
            assert_eq!(endpoint.replay_next(), Some((0, 1)));
            let second = named(&mut endpoint, 0, 0);
            assert_eq!((second.source, second.ssn, second.rsn), (0, 1, 2));
            endpoint.set_order_logged(true);
            let third = named(&mut endpoint, 2, 1);
            assert_eq!((third.source, third.ssn, third.rsn), (2, 2, 3));
            assert!(!endpoint.replaying());
        }
        endpoint.wait_sends(WAIT).expect("sends out");
        endpoint.finish(&mut boot).expect("finish");
    });
}

/// Call ticks (`tick`): each takes an rsn for no message, so a logged delivery's rsn says
/// after which call it came. In the replay a tick waits while the log names a delivery next,
/// and the deliveries keep their rsns.
#[test]
fn ticks_keep_each_delivery_after_its_call() {
    let config = LogConfig { mode: LogMode::CAUSAL, unit: LogUnit::Rank, ..LogConfig::default() };
    on_ranks("ticks", 3, |mut boot, provider| {
        let me = boot.job().rank;
        let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config.clone()).expect("endpoint");
        endpoint.set_order_logged(true);
        let mut first = Vec::new();
        if me == VICTIM {
            boot.barrier().expect("sent");
            for from in [0, 2] {
                assert!(endpoint.tick(), "a first run's tick always goes");
                let got = endpoint.recv(Source::Rank(from), TagMatch::exact(0), WAIT).expect("receive");
                first.extend(got.determinant);
            }
            let rsns: Vec<_> = first.iter().map(|d| (d.sender, d.rsn)).collect();
            assert_eq!((rsns, endpoint.ticks()), (vec![(0, 2), (2, 4)], 2));
        } else {
            endpoint.send(VICTIM, 0, &payload(me, 0)).expect("send");
            endpoint.wait_sends(WAIT).expect("sends out");
            boot.barrier().expect("sent");
        }
        endpoint.flush_log().expect("flush");
        boot.barrier().expect("quiet");
        let gathered = endpoint.gather_determinants(&mut boot, &[VICTIM]).expect("gather determinants");
        if me == VICTIM {
            assert_eq!(gathered, first);
            endpoint.restart_in_place(1).expect("restart");
            endpoint.begin_replay(&gathered).expect("begin replay");
        }
        boot.barrier().expect("restarted");
        if me != VICTIM {
            endpoint.resend_from(VICTIM, 1).expect("resend");
            endpoint.wait_sends(WAIT).expect("resent");
        } else {
            for (from, rsn) in [(0, 2), (2, 4)] {
                assert!(endpoint.tick(), "the call's own tick goes");
                assert!(!endpoint.tick(), "a tick waits while the log names a delivery next");
                let got = endpoint.recv(Source::Rank(from), TagMatch::exact(0), WAIT).expect("replayed");
                assert_eq!((got.source, got.rsn), (from, rsn));
            }
            assert!(endpoint.tick() && !endpoint.replaying());
            assert_eq!(endpoint.ticks(), 3);
        }
        boot.barrier().expect("done");
        endpoint.wait_sends(WAIT).expect("sends out");
        endpoint.finish(&mut boot).expect("finish");
    });
}

/// The victim's calls of `probes_replay`: a tick and a probe, a tick and probes until one
/// finds rank 2's message (`barrier` between them in the first run), a tick and a wildcard
/// receive. Returns the second probe's finding and the delivery.
fn probing_calls(
    endpoint: &mut LoggedEndpoint,
    barrier: &mut dyn FnMut(),
) -> (LoggedProbe, LoggedProbe, Delivery) {
    let probe = |e: &mut LoggedEndpoint| e.probe_logged(Source::Any, TagMatch::any()).expect("probe");
    assert!(endpoint.tick());
    let nothing = probe(endpoint);
    barrier();
    assert!(endpoint.tick());
    let start = Instant::now();
    let found = loop {
        match probe(endpoint) {
            found @ LoggedProbe::Found(..) => break found,
            _ => assert!(start.elapsed() < WAIT, "rank 2's message did not come"),
        }
    };
    assert!(endpoint.tick());
    let got = endpoint.recv(Source::Any, TagMatch::any(), WAIT).expect("wildcard");
    (nothing, found, got)
}

/// Probes' findings ("seen" determinants) under each protocol: rank 1 probes before rank 2
/// sent (nothing), then until it finds the message (a "seen" determinant at that call's
/// tick), then takes it by a wildcard receive in a call of its own. In the replay the message
/// is there before the first probe, which finds nothing all the same (the log has nothing at
/// its tick); the second finds it, and the receive takes it at its logged rsn.
fn probes_replay(mode: LogMode) {
    let config = LogConfig { mode, unit: LogUnit::Rank, ring_capacity: 1 << 20, ..LogConfig::default() };
    let from_ring = mode == LogMode::PESSIMISTIC_RB;
    on_ranks(&format!("seen-{mode}"), 3, |mut boot, provider| {
        let me = boot.job().rank;
        let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config.clone()).expect("endpoint");
        let len = payload(2, 0).len();
        let mut first = Vec::new();
        if me == VICTIM {
            let (nothing, found, got) = probing_calls(&mut endpoint, &mut || {
                boot.barrier().expect("probed");
                boot.barrier().expect("sent");
            });
            assert_eq!((nothing, found), (LoggedProbe::Nothing, LoggedProbe::Found(2, 0, len)));
            assert_eq!((got.source, got.ssn, got.rsn), (2, 1, 4));
            first = vec![Determinant::seen(2, VICTIM, 1, 2)];
            first.extend(got.determinant);
            // Carries the causal piggyback to rank 0.
            endpoint.send(0, ANSWER_TAG, b"answer").expect("answer");
        } else {
            boot.barrier().expect("probed");
            if me == 2 {
                endpoint.send(VICTIM, 0, &payload(me, 0)).expect("send");
                endpoint.wait_sends(WAIT).expect("sends out");
            }
            boot.barrier().expect("sent");
            if me == 0 {
                endpoint.recv(Source::Rank(VICTIM), TagMatch::exact(ANSWER_TAG), WAIT).expect("answer");
            }
        }
        endpoint.flush_log().expect("flush");
        endpoint.wait_sends(WAIT).expect("sends out");
        boot.barrier().expect("quiet");
        let dets = endpoint.gather_determinants(&mut boot, &[VICTIM]).expect("gather determinants");
        let frames = endpoint.gather_frames(&mut boot, &[VICTIM]).expect("gather frames");
        if me == VICTIM {
            assert_eq!(dets, first, "{mode}: the seen and the delivery determinant, gathered");
            endpoint.restart_in_place(1).expect("restart");
            if from_ring {
                assert_eq!(endpoint.replay_frames(frames, &[]).expect("replay frames"), 1);
            }
            endpoint.begin_replay(&dets).expect("begin replay");
        }
        boot.barrier().expect("restarted");
        if me == 2 && !from_ring {
            endpoint.resend_from(VICTIM, 1).expect("resend");
            endpoint.wait_sends(WAIT).expect("resent");
        }
        boot.barrier().expect("resent");
        if me == VICTIM {
            // The resent message is here before the first probe (`probe_logged` collects it).
            let (nothing, found, got) = probing_calls(&mut endpoint, &mut || {});
            assert_eq!((nothing, found), (LoggedProbe::Nothing, LoggedProbe::Found(2, 0, len)), "{mode}");
            assert_eq!((got.source, got.ssn, got.rsn), (2, 1, 4), "{mode}");
            assert!(!endpoint.replaying());
        }
        boot.barrier().expect("done");
        endpoint.wait_sends(WAIT).expect("sends out");
        endpoint.finish(&mut boot).expect("finish");
    });
}

#[test]
fn causal_probes_find_in_the_replay_what_they_found_first() {
    probes_replay(LogMode::CAUSAL);
}

#[test]
fn pessimistic_sender_based_probes_find_in_the_replay_what_they_found_first() {
    probes_replay(LogMode::PESSIMISTIC_SB);
}

#[test]
fn pessimistic_receiver_based_probes_find_in_the_replay_what_they_found_first() {
    probes_replay(LogMode::PESSIMISTIC_RB);
}

/// Probes' findings from a copy retired before the replay (partial redundancy): ranks 0 and
/// 2 act as two copies of one rank, sending the victim the same message under the same
/// number. The victim's probe finds rank 2's copy (a "seen" determinant naming it), its
/// wildcard receive takes it, and rank 0's copy comes later to a named receive. Then rank 2
/// is retired: its sender log is gone, so only rank 0 resends, and the replay's probe must
/// find rank 2's message in rank 0's copy (`stand_in`), as the replayed delivery does.
fn probes_replay_from_a_retired_copy(mode: LogMode) {
    let config = LogConfig { mode, unit: LogUnit::Rank, ring_capacity: 1 << 20, ..LogConfig::default() };
    on_ranks(&format!("seen-retired-{mode}"), 3, |mut boot, provider| {
        let me = boot.job().rank;
        let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config.clone()).expect("endpoint");
        // The copies' one message: the same bytes from either.
        let message = payload(2, 0);
        let mut first = Vec::new();
        if me == VICTIM {
            let (nothing, found, got) = probing_calls(&mut endpoint, &mut || {
                boot.barrier().expect("probed");
                boot.barrier().expect("rank 2 sent");
            });
            assert_eq!((nothing, found), (LoggedProbe::Nothing, LoggedProbe::Found(2, 0, message.len())));
            assert_eq!((got.source, got.ssn, got.rsn), (2, 1, 4));
            first = vec![Determinant::seen(2, VICTIM, 1, 2)];
            first.extend(got.determinant);
            boot.barrier().expect("taken");
            let copy = endpoint.recv(Source::Rank(0), TagMatch::exact(0), WAIT).expect("rank 0's copy");
            assert_eq!((copy.source, copy.ssn, copy.payload), (0, 1, message.clone()));
            endpoint.send(0, ANSWER_TAG, b"answer").expect("answer");
        } else {
            boot.barrier().expect("probed");
            if me == 2 {
                endpoint.send(VICTIM, 0, &message).expect("send");
                endpoint.wait_sends(WAIT).expect("sends out");
            }
            boot.barrier().expect("rank 2 sent");
            boot.barrier().expect("taken");
            if me == 0 {
                endpoint.send(VICTIM, 0, &message).expect("send the copy");
                endpoint.wait_sends(WAIT).expect("sends out");
                endpoint.recv(Source::Rank(VICTIM), TagMatch::exact(ANSWER_TAG), WAIT).expect("answer");
            }
        }
        endpoint.flush_log().expect("flush");
        endpoint.wait_sends(WAIT).expect("sends out");
        boot.barrier().expect("quiet");
        let dets = endpoint.gather_determinants(&mut boot, &[VICTIM]).expect("gather determinants");
        if me == VICTIM {
            assert_eq!(dets, first, "{mode}: the seen and the delivery determinant, gathered");
            endpoint.restart_in_place(1).expect("restart");
            endpoint.stand_in(2, vec![0]);
            endpoint.begin_replay(&dets).expect("begin replay");
        }
        boot.barrier().expect("restarted");
        // Rank 2 is retired: it resends nothing.
        if me == 0 {
            assert_eq!(endpoint.resend_from(VICTIM, 1).expect("resend"), 1);
            endpoint.wait_sends(WAIT).expect("resent");
        }
        boot.barrier().expect("resent");
        if me == VICTIM {
            let (nothing, found, got) = probing_calls(&mut endpoint, &mut || {});
            assert_eq!(
                (nothing, found),
                (LoggedProbe::Nothing, LoggedProbe::Found(2, 0, message.len())),
                "{mode}"
            );
            assert_eq!((got.source, got.ssn, got.rsn, &got.payload), (2, 1, 4, &message), "{mode}");
            assert!(!endpoint.replaying());
            let copy = endpoint.recv(Source::Rank(0), TagMatch::exact(0), WAIT).expect("rank 0's own copy");
            assert_eq!((copy.source, copy.ssn), (0, 1), "{mode}: rank 0's copy stays for its own receive");
        }
        boot.barrier().expect("done");
        endpoint.wait_sends(WAIT).expect("sends out");
        endpoint.finish(&mut boot).expect("finish");
    });
}

#[test]
fn causal_probes_find_a_retired_copys_message_in_its_mates_copy() {
    probes_replay_from_a_retired_copy(LogMode::CAUSAL);
}

#[test]
fn pessimistic_sender_based_probes_find_a_retired_copys_message_in_its_mates_copy() {
    probes_replay_from_a_retired_copy(LogMode::PESSIMISTIC_SB);
}
