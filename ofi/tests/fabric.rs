//! The provider driven through libfabric's own C API, as a consumer sees it: libfabric loads
//! `libreverb-fi.so` from `FI_PROVIDER_PATH`; every test runs real processes (this binary
//! again, in a role) that wire up by `fi_getname` / `fi_av_insert`.

use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use reverb_fi::abi::*;

const ROLE: &str = "REVERB_FI_TEST_ROLE";
const DIR: &str = "REVERB_FI_TEST_DIR";
/// What carries the provider's endpoints in a role (the tests run each over shm and tcp).
const CARRIER: &str = "REVERB_OFI_PROVIDER";
const ROUNDS: u64 = 100;

/// A directory holding `libreverb-fi.so`, linked to the cdylib cargo built with this test
/// (in `deps/`, beside the test binary; `cargo build` also copies it one level up). Made once
/// per process: the tests run as threads of one process.
fn provider_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary's path");
        let deps = exe.parent().expect("target/<profile>/deps");
        let built = [deps, deps.parent().unwrap_or(deps)]
            .iter()
            .map(|d| d.join("libreverb_fi.so"))
            .find(|p| p.exists())
            .expect("libreverb_fi.so built beside the test (cargo test -p reverb-ofi builds it)");
        let dir = deps.join(format!("ofi-test-prov-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the provider directory");
        let link = dir.join("libreverb-fi.so");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(built, &link).expect("link libreverb-fi.so");
        dir
    })
    .clone()
}

/// Runs this binary's test `name` as `role`, in `dir`, with endpoints `carrier` carries.
fn spawn(name: &str, role: &str, dir: &Path, prov: &Path, carrier: &str) -> Child {
    Command::new(std::env::current_exe().expect("the test binary"))
        .args([name, "--exact", "--nocapture"])
        .env(ROLE, role)
        .env(CARRIER, carrier)
        .env(DIR, dir)
        .env("FI_PROVIDER_PATH", prov)
        .env("FI_PROVIDER", "reverb")
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn a role")
}

fn wait_ok(mut child: Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("wait for a role") {
            assert!(status.success(), "{what} failed: {status}");
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what} did not finish in 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("reverb-fi-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// The objects of one endpoint, opened through libfabric.
struct Fab {
    domain: *mut fid_domain,
    ep: *mut fid_ep,
    av: *mut fid_av,
    cq: *mut fid_cq,
}

fn check(what: &str, rc: isize) {
    assert!(rc >= 0, "{what}: {rc}");
}

impl Fab {
    fn open() -> Fab {
        Fab::open_with(FI_TAGGED | FI_MSG | FI_DIRECTED_RECV, 0)
    }

    /// An endpoint asked for `caps`, accepting registration modes `mr_mode`.
    fn open_with(caps: u64, mr_mode: i32) -> Fab {
        // SAFETY: the libfabric calls as its man pages give them; every pointer is ours.
        unsafe {
            let hints = fi_dupinfo(std::ptr::null());
            (*hints).caps = caps;
            (*(*hints).domain_attr).mr_mode = mr_mode;
            (*(*hints).ep_attr).type_ = FI_EP_RDM;
            (*(*hints).domain_attr).data_progress = FI_PROGRESS_MANUAL;
            (*(*hints).domain_attr).threading = FI_THREAD_DOMAIN;
            (*(*hints).fabric_attr).prov_name = libc::strdup(c"reverb".as_ptr());
            let mut info = null_mut();
            let rc = fi_getinfo(fi_version(1, 17), std::ptr::null(), std::ptr::null(), 0, hints, &mut info);
            check("fi_getinfo", rc as isize);
            fi_freeinfo(hints);
            let mut fabric = null_mut();
            check("fi_fabric", fi_fabric((*info).fabric_attr, &mut fabric, null_mut()) as isize);
            let mut domain = null_mut();
            check(
                "fi_domain",
                ((*(*fabric).ops).domain.unwrap())(fabric, info, &mut domain, null_mut()) as isize,
            );
            let mut cq_attr: fi_cq_attr = std::mem::zeroed();
            cq_attr.format = FI_CQ_FORMAT_TAGGED;
            let mut cq = null_mut();
            check(
                "fi_cq_open",
                ((*(*domain).ops).cq_open.unwrap())(domain, &mut cq_attr, &mut cq, null_mut()) as isize,
            );
            let mut av_attr: fi_av_attr = std::mem::zeroed();
            av_attr.type_ = FI_AV_TABLE;
            let mut av = null_mut();
            check(
                "fi_av_open",
                ((*(*domain).ops).av_open.unwrap())(domain, &mut av_attr, &mut av, null_mut()) as isize,
            );
            let mut ep = null_mut();
            check(
                "fi_endpoint",
                ((*(*domain).ops).endpoint.unwrap())(domain, info, &mut ep, null_mut()) as isize,
            );
            let bind = (*(*ep).fid.ops).bind.unwrap();
            check("bind av", bind(&mut (*ep).fid, &mut (*av).fid, 0) as isize);
            check("bind cq", bind(&mut (*ep).fid, &mut (*cq).fid, FI_TRANSMIT | FI_RECV) as isize);
            check(
                "enable",
                ((*(*ep).fid.ops).control.unwrap())(&mut (*ep).fid, FI_ENABLE, null_mut()) as isize,
            );
            fi_freeinfo(info);
            Fab { domain, ep, av, cq }
        }
    }

    fn name(&self) -> Vec<u8> {
        let mut buf = vec![0u8; 64];
        let mut len = buf.len();
        // SAFETY: a live endpoint and a buffer of `len` bytes.
        let rc = unsafe {
            ((*(*self.ep).cm).getname.unwrap())(&mut (*self.ep).fid, buf.as_mut_ptr().cast(), &mut len)
        };
        check("fi_getname", rc as isize);
        buf.truncate(len);
        buf
    }

    fn insert(&self, name: &[u8]) -> fi_addr_t {
        let mut addr = 0;
        // SAFETY: a live AV and one address.
        let rc = unsafe {
            ((*(*self.av).ops).insert.unwrap())(self.av, name.as_ptr().cast(), 1, &mut addr, 0, null_mut())
        };
        assert_eq!(rc, 1, "fi_av_insert");
        addr
    }

    /// fi_tsend; the raw return code.
    fn tsend(&self, dest: fi_addr_t, tag: u64, data: &[u8]) -> isize {
        // SAFETY: a live endpoint; the buffer is copied before the call returns.
        unsafe {
            ((*(*self.ep).tagged).send.unwrap())(
                self.ep,
                data.as_ptr().cast(),
                data.len(),
                null_mut(),
                dest,
                tag,
                null_mut(),
            )
        }
    }

    /// fi_tsenddata: `data` travels as remote CQ data; `buf` must outlive the completion.
    fn tsenddata(&self, dest: fi_addr_t, tag: u64, buf: &[u8], data: u64) -> isize {
        // SAFETY: a live endpoint; the caller keeps `buf` until the send's completion.
        unsafe {
            ((*(*self.ep).tagged).senddata.unwrap())(
                self.ep,
                buf.as_ptr().cast(),
                buf.len(),
                null_mut(),
                data,
                dest,
                tag,
                null_mut(),
            )
        }
    }

    /// fi_trecv into `buf`, which must outlive the completion.
    fn trecv(&self, buf: &mut [u8], src: fi_addr_t, tag: u64, context: usize) -> isize {
        // SAFETY: a live endpoint; `buf` stays untouched until the completion is read.
        unsafe {
            ((*(*self.ep).tagged).recv.unwrap())(
                self.ep,
                buf.as_mut_ptr().cast(),
                buf.len(),
                null_mut(),
                src,
                tag,
                0,
                context as *mut c_void,
            )
        }
    }

    /// fi_cancel of the operation posted with `context`.
    fn cancel(&self, context: usize) -> isize {
        // SAFETY: a live endpoint.
        unsafe { ((*(*self.ep).ops).cancel.unwrap())(&mut (*self.ep).fid, context as *mut c_void) }
    }

    /// A counter opened on the endpoint's domain and bound to it with `flags`.
    fn counter(&self, flags: u64) -> Cntr {
        let mut attr = fi_cntr_attr {
            events: FI_CNTR_EVENTS_COMP,
            wait_obj: FI_WAIT_UNSPEC,
            wait_set: null_mut(),
            flags: 0,
        };
        let mut cntr = null_mut();
        // SAFETY: a live domain and endpoint; the counter outlives the test's use of it.
        unsafe {
            let rc =
                ((*(*self.domain).ops).cntr_open.unwrap())(self.domain, &mut attr, &mut cntr, null_mut());
            check("fi_cntr_open", rc as isize);
            let rc = ((*(*self.ep).fid.ops).bind.unwrap())(&mut (*self.ep).fid, &mut (*cntr).fid, flags);
            check("bind cntr", rc as isize);
            Cntr(cntr)
        }
    }

    /// fi_cq_sread until an entry (Ok) or an error entry (Err) comes, at most `timeout`.
    fn next(&self, timeout: Duration) -> Result<fi_cq_tagged_entry, fi_cq_err_entry> {
        let deadline = Instant::now() + timeout;
        loop {
            // SAFETY: a live CQ; room for one tagged entry.
            let mut entry: fi_cq_tagged_entry = unsafe { std::mem::zeroed() };
            let rc = unsafe {
                ((*(*self.cq).ops).sread.unwrap())(
                    self.cq,
                    (&mut entry as *mut fi_cq_tagged_entry).cast(),
                    1,
                    std::ptr::null(),
                    100,
                )
            };
            if rc == 1 {
                return Ok(entry);
            }
            if rc == -(FI_EAVAIL as isize) {
                // SAFETY: as above, for an error entry.
                let mut err: fi_cq_err_entry = unsafe { std::mem::zeroed() };
                let rc = unsafe { ((*(*self.cq).ops).readerr.unwrap())(self.cq, &mut err, 0) };
                assert_eq!(rc, 1, "fi_cq_readerr");
                return Err(err);
            }
            assert_eq!(rc, -(FI_EAGAIN as isize), "fi_cq_sread");
            assert!(Instant::now() < deadline, "no completion in {timeout:?}");
        }
    }

    /// Sends and waits for the send's completion.
    fn send_wait(&self, dest: fi_addr_t, tag: u64, data: &[u8]) {
        check("fi_tsend", self.tsend(dest, tag, data));
        let e = self.next(Duration::from_secs(30)).expect("a send completion");
        assert_ne!(e.flags & FI_SEND, 0, "expected the send's completion, got flags {:#x}", e.flags);
    }

    /// Receives one message of `tag` and returns it.
    fn recv_wait(&self, src: fi_addr_t, tag: u64) -> (Vec<u8>, fi_cq_tagged_entry) {
        let mut buf = vec![0u8; 256];
        check("fi_trecv", self.trecv(&mut buf, src, tag, 7));
        let e = self.next(Duration::from_secs(30)).expect("a receive completion");
        assert_ne!(e.flags & FI_RECV, 0, "flags {:#x}", e.flags);
        assert_eq!(e.tag, tag);
        buf.truncate(e.len);
        (buf, e)
    }
}

/// A counter opened by [`Fab::counter`].
struct Cntr(*mut fid_cntr);

impl Cntr {
    fn ops(&self) -> &fi_ops_cntr {
        // SAFETY: a live counter; its ops table is static.
        unsafe { &*(*self.0).ops }
    }
    fn read(&self) -> (u64, u64) {
        // SAFETY: a live counter.
        unsafe { (self.ops().read.unwrap()(self.0), self.ops().readerr.unwrap()(self.0)) }
    }
    fn wait(&self, threshold: u64, timeout_ms: i32) -> i32 {
        // SAFETY: a live counter.
        unsafe { self.ops().wait.unwrap()(self.0, threshold, timeout_ms) }
    }
}

fn wait_for_file(path: &Path) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(bytes) = std::fs::read(path) {
            if !bytes.is_empty() {
                return bytes;
            }
        }
        assert!(Instant::now() < deadline, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn publish(dir: &Path, file: &str, bytes: &[u8]) {
    let tmp = dir.join(format!("{file}.tmp"));
    std::fs::write(&tmp, bytes).expect("write a name");
    std::fs::rename(&tmp, dir.join(file)).expect("publish a name");
}

/// The server's side: learns the client from its first message (FI_ADDR_UNSPEC), then
/// answers every ping.
fn pingpong_server(dir: &Path) {
    let fab = Fab::open();
    publish(dir, "server", &fab.name());
    let (client_name, _) = fab.recv_wait(FI_ADDR_UNSPEC, 1);
    let client = fab.insert(&client_name);
    for i in 0..ROUNDS {
        let (ping, _) = fab.recv_wait(client, 2);
        assert_eq!(ping, i.to_le_bytes());
        fab.send_wait(client, 3, &(i * 2).to_le_bytes());
    }
}

fn pingpong_client(dir: &Path) {
    let fab = Fab::open();
    let server = fab.insert(&wait_for_file(&dir.join("server")));
    fab.send_wait(server, 1, &fab.name());
    for i in 0..ROUNDS {
        fab.send_wait(server, 2, &i.to_le_bytes());
        let (pong, _) = fab.recv_wait(server, 3);
        assert_eq!(pong, (i * 2).to_le_bytes());
    }
}

/// Two processes ping-pong tagged messages through libfabric's API.
#[test]
fn two_processes_ping_pong_tagged_messages() {
    pingpong("two_processes_ping_pong_tagged_messages", "shm");
}

/// The same between endpoints that tcp carries (loopback).
#[test]
fn two_processes_ping_pong_tagged_messages_over_tcp() {
    pingpong("two_processes_ping_pong_tagged_messages_over_tcp", "tcp");
}

fn pingpong(test: &str, carrier: &str) {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => return pingpong_server(Path::new(&std::env::var(DIR).unwrap_or_default())),
        Ok("client") => return pingpong_client(Path::new(&std::env::var(DIR).unwrap_or_default())),
        _ => {}
    }
    let (dir, prov) = (scratch(test), provider_dir());
    let server = spawn(test, "server", &dir, &prov, carrier);
    let client = spawn(test, "client", &dir, &prov, carrier);
    wait_ok(client, "the client");
    wait_ok(server, "the server");
}

fn unknown_peer() {
    let fab = Fab::open();
    // Bytes that are no address of the provider: the send is refused at once.
    let junk = fab.insert(&[0xffu8; 48]);
    assert_eq!(fab.tsend(junk, 1, b"x"), -(FI_EINVAL as isize));
    // A well-formed address of an endpoint that is gone: unreachable. A name is the carrier,
    // a length, then the transport's address.
    let mut name = fab.name();
    if std::env::var(CARRIER).as_deref() == Ok("tcp") {
        // Another key, and a port nobody listens on (tcp address: magic, incarnation, key, port).
        let closed = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr());
        let port = closed.expect("a free port").port();
        name[2 + 8..2 + 16].copy_from_slice(&7u64.to_le_bytes());
        name[2 + 16..2 + 18].copy_from_slice(&port.to_le_bytes());
    } else {
        // Its slot file and segment are not there (shm host address: slot, pid, ...).
        name[2 + 4..2 + 8].copy_from_slice(&u32::MAX.to_le_bytes()); // a pid that cannot exist
        name[2..2 + 4].copy_from_slice(&200u32.to_le_bytes());
    }
    let gone = fab.insert(&name);
    let rc = fab.tsend(gone, 1, b"x");
    assert!(
        rc == -(FI_EHOSTUNREACH as isize) || rc == -(FI_EIO as isize),
        "sending to a gone endpoint: {rc}"
    );
    // An fi_addr no AV entry names.
    assert_eq!(fab.tsend(99, 1, b"x"), -(FI_EINVAL as isize));
}

/// A send to an address no live endpoint has fails with an error code, not a hang.
#[test]
fn an_unknown_peer_address_is_a_clean_error() {
    unknown("an_unknown_peer_address_is_a_clean_error", "shm");
}

/// The same between endpoints that tcp carries.
#[test]
fn an_unknown_peer_address_is_a_clean_error_over_tcp() {
    unknown("an_unknown_peer_address_is_a_clean_error_over_tcp", "tcp");
}

fn unknown(test: &str, carrier: &str) {
    if std::env::var(ROLE).as_deref() == Ok("unknown") {
        return unknown_peer();
    }
    let (dir, prov) = (scratch(test), provider_dir());
    wait_ok(spawn(test, "unknown", &dir, &prov, carrier), "the role");
}

/// Waits for the victim's hello, then for the error of a receive directed at it.
fn dead_peer_survivor(dir: &Path) {
    let fab = Fab::open();
    publish(dir, "survivor", &fab.name());
    let (victim_name, _) = fab.recv_wait(FI_ADDR_UNSPEC, 1);
    let victim = fab.insert(&victim_name);
    publish(dir, "ready", b"1");
    let (mut buf, mut read) = (vec![0u8; 64], vec![0u8; 64]);
    check("fi_trecv", fab.trecv(&mut buf, victim, 2, 42));
    // An RMA read the victim never answers (it does not progress): it fails the same way.
    check("fi_read", fab.read(victim, &mut read, 0x1000, 7, 43));
    let mut failed = Vec::new();
    for _ in 0..2 {
        let err =
            fab.next(Duration::from_secs(30)).expect_err("pending operations fail once the peer is killed");
        assert_eq!(err.err, FI_EHOSTUNREACH, "err {}", err.err);
        failed.push((err.op_context as usize, err.flags & (FI_RECV | FI_RMA | FI_READ)));
    }
    failed.sort_unstable();
    assert_eq!(failed, [(42, FI_RECV), (43, FI_RMA | FI_READ)]);
}

fn dead_peer_victim(dir: &Path) {
    let fab = Fab::open();
    let survivor = fab.insert(&wait_for_file(&dir.join("survivor")));
    fab.send_wait(survivor, 1, &fab.name());
    // Killed by the test from here on.
    std::thread::sleep(Duration::from_secs(60));
}

/// A peer SIGKILLed under a pending receive directed at it and an RMA read of it:
/// fi_cq_readerr reports FI_EHOSTUNREACH for both within the peer timeout.
#[test]
fn a_killed_peer_fails_receives_directed_at_it() {
    killed_peer("a_killed_peer_fails_receives_directed_at_it", "shm");
}

/// The same between endpoints that tcp carries: the socket's end tells.
#[test]
fn a_killed_peer_fails_receives_directed_at_it_over_tcp() {
    killed_peer("a_killed_peer_fails_receives_directed_at_it_over_tcp", "tcp");
}

fn killed_peer(name: &str, carrier: &str) {
    match std::env::var(ROLE).as_deref() {
        Ok("survivor") => return dead_peer_survivor(Path::new(&std::env::var(DIR).unwrap_or_default())),
        Ok("victim") => return dead_peer_victim(Path::new(&std::env::var(DIR).unwrap_or_default())),
        _ => {}
    }
    let (dir, prov) = (scratch(name), provider_dir());
    let survivor = spawn(name, "survivor", &dir, &prov, carrier);
    let mut victim = spawn(name, "victim", &dir, &prov, carrier);
    wait_for_file(&dir.join("ready"));
    victim.kill().expect("SIGKILL the victim");
    let _ = victim.wait();
    wait_ok(survivor, "the survivor");
}

/// Two endpoints of one process: a receive cancelled before its message comes completes in
/// error (FI_ECANCELED, with its context) and the message goes to the next receive; the
/// counters bound to the receiver count both, and fi_cntr_wait keeps its bound.
fn cancel_and_count() {
    let (rx, tx) = (Fab::open(), Fab::open());
    let to_rx = tx.insert(&rx.name());
    let to_tx = rx.insert(&tx.name());
    let (sends, recvs) = (rx.counter(FI_SEND), rx.counter(FI_RECV));
    let (mut cancelled, mut next) = (vec![0u8; 64], vec![0u8; 64]);
    check("fi_trecv", rx.trecv(&mut cancelled, FI_ADDR_UNSPEC, 5, 11));
    check("fi_trecv", rx.trecv(&mut next, FI_ADDR_UNSPEC, 5, 12));
    assert_eq!(rx.cancel(11), 0, "fi_cancel");
    assert_eq!(rx.cancel(99), 0, "nothing posted with that context: nothing to do");
    let err = rx.next(Duration::from_secs(5)).expect_err("the cancelled receive's error entry");
    assert_eq!((err.err, err.op_context as usize), (FI_ECANCELED, 11));
    assert_ne!(err.flags & FI_RECV, 0);
    assert_eq!(recvs.read(), (0, 1), "a cancel counts as an error");
    tx.send_wait(to_rx, 5, b"hello");
    let got = rx.next(Duration::from_secs(30)).expect("the next receive takes the message");
    assert_eq!((got.op_context as usize, &next[..got.len]), (12, &b"hello"[..]));
    assert_eq!(recvs.read(), (1, 1));

    assert_eq!(recvs.wait(2, 50), -FI_ETIMEDOUT, "nothing more arrives");
    check("fi_trecv", rx.trecv(&mut next, FI_ADDR_UNSPEC, 6, 13));
    tx.send_wait(to_rx, 6, b"again");
    assert_eq!(recvs.wait(2, 30_000), 0, "the wait progresses the endpoint");
    check("fi_tsend", rx.tsend(to_tx, 7, b"back"));
    let (back, _) = tx.recv_wait(FI_ADDR_UNSPEC, 7);
    assert_eq!(back, b"back");
    assert_eq!(sends.wait(1, 30_000), 0);
    assert_eq!(sends.read(), (1, 0));

    // SAFETY: a live counter.
    unsafe {
        let ops = recvs.ops();
        assert_eq!(ops.set.unwrap()(recvs.0, 10), 0);
        assert_eq!(ops.add.unwrap()(recvs.0, 5), 0);
        assert_eq!(ops.seterr.unwrap()(recvs.0, 0), 0);
        assert_eq!(ops.adderr.unwrap()(recvs.0, 2), 0);
    }
    assert_eq!(recvs.read(), (15, 2));
}

/// Two endpoints of one process: large messages land in the receive's own buffer, and are
/// read where the sender lent them; CQ data still comes out of the payload's way, whether the
/// message fits the buffer with it or only without (or the buffer is empty); one too long is
/// cut off (FI_ETRUNC).
fn large_landings() {
    let (rx, tx) = (Fab::open(), Fab::open());
    let to_rx = tx.insert(&rx.name());
    let big: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 + i / 4096) as u8).collect();
    let cases: [(usize, Option<u64>, usize); 6] = [
        (0, Some(0x34), 0),
        (big.len(), None, big.len()),
        (big.len(), Some(0xabc), big.len()),
        (100_000, Some(0xdef), big.len()),
        (100, Some(0x12), 256),
        (20_000, None, 256),
    ];
    for (i, (len, data, room)) in cases.into_iter().enumerate() {
        let mut buf = vec![0u8; room];
        check("fi_trecv", rx.trecv(&mut buf, FI_ADDR_UNSPEC, 9, 20 + i));
        let payload = &big[i..i + len.min(big.len() - i)];
        match data {
            Some(d) => check("fi_tsenddata", tx.tsenddata(to_rx, 9, payload, d)),
            None => check("fi_tsend", tx.tsend(to_rx, 9, payload)),
        }
        let got = rx.next(Duration::from_secs(30));
        let sent = tx.next(Duration::from_secs(30)).expect("the send's completion");
        assert_ne!(sent.flags & FI_SEND, 0);
        if payload.len() > room {
            let err = got.expect_err("a message longer than the buffer");
            assert_eq!((err.err, err.olen), (FI_ETRUNC, payload.len() - room));
            continue;
        }
        let got = got.expect("a receive completion");
        assert_eq!((got.len, got.op_context as usize), (payload.len(), 20 + i), "case {i}");
        assert_eq!(&buf[..got.len], payload, "case {i}: the payload");
        match data {
            Some(d) => assert_eq!((got.data, got.flags & FI_REMOTE_CQ_DATA), (d, FI_REMOTE_CQ_DATA)),
            None => assert_eq!(got.flags & FI_REMOTE_CQ_DATA, 0),
        }
    }
}

#[test]
fn large_messages_land_in_the_receive_buffer() {
    large("large_messages_land_in_the_receive_buffer", "shm");
}

/// The same between endpoints that tcp carries (copied, not lent).
#[test]
fn large_messages_land_in_the_receive_buffer_over_tcp() {
    large("large_messages_land_in_the_receive_buffer_over_tcp", "tcp");
}

fn large(test: &str, carrier: &str) {
    if std::env::var(ROLE).as_deref() == Ok("large") {
        return large_landings();
    }
    let (dir, prov) = (scratch(test), provider_dir());
    wait_ok(spawn(test, "large", &dir, &prov, carrier), "the role");
}

#[test]
fn a_cancelled_receive_completes_in_error_and_counters_count() {
    cancelled("a_cancelled_receive_completes_in_error_and_counters_count", "shm");
}

/// The same between endpoints that tcp carries.
#[test]
fn a_cancelled_receive_completes_in_error_and_counters_count_over_tcp() {
    cancelled("a_cancelled_receive_completes_in_error_and_counters_count_over_tcp", "tcp");
}

fn cancelled(test: &str, carrier: &str) {
    if std::env::var(ROLE).as_deref() == Ok("cancel") {
        return cancel_and_count();
    }
    let (dir, prov) = (scratch(test), provider_dir());
    wait_ok(spawn(test, "cancel", &dir, &prov, carrier), "the role");
}

/// A registered region of the target's domain, over memory the test owns.
struct Mr(*mut fid_mr);

impl Fab {
    fn register(&self, buf: &mut [u8], access: u64) -> Mr {
        let mut mr = null_mut();
        // SAFETY: a live domain; `buf` outlives the region (the test closes it first or exits).
        let rc = unsafe {
            ((*(*self.domain).mr).reg.unwrap())(
                &mut (*self.domain).fid,
                buf.as_ptr().cast(),
                buf.len(),
                access,
                0,
                0,
                0,
                &mut mr,
                null_mut(),
            )
        };
        check("fi_mr_reg", rc as isize);
        Mr(mr)
    }

    fn rma(&self) -> &fi_ops_rma {
        // SAFETY: a live endpoint; its RMA table is static.
        unsafe { &*(*self.ep).rma }
    }

    /// fi_write (or fi_writedata with `data`) of `buf` to (`addr`, `key`) of `dest`.
    fn write(
        &self,
        dest: fi_addr_t,
        buf: &[u8],
        addr: u64,
        key: u64,
        data: Option<u64>,
        ctx: usize,
    ) -> isize {
        let (b, n, c) = (buf.as_ptr().cast(), buf.len(), ctx as *mut c_void);
        // SAFETY: a live endpoint; the bytes are copied before the call returns.
        unsafe {
            match data {
                Some(d) => self.rma().writedata.unwrap()(self.ep, b, n, null_mut(), d, dest, addr, key, c),
                None => self.rma().write.unwrap()(self.ep, b, n, null_mut(), dest, addr, key, c),
            }
        }
    }

    /// fi_read into `buf`, which must outlive the completion.
    fn read(&self, src: fi_addr_t, buf: &mut [u8], addr: u64, key: u64, ctx: usize) -> isize {
        // SAFETY: a live endpoint; `buf` stays untouched until the completion is read.
        unsafe {
            self.rma().read.unwrap()(
                self.ep,
                buf.as_mut_ptr().cast(),
                buf.len(),
                null_mut(),
                src,
                addr,
                key,
                ctx as *mut c_void,
            )
        }
    }
}

impl Mr {
    fn key(&self) -> u64 {
        // SAFETY: a live region (fi_mr_key reads the field).
        unsafe { (*self.0).key }
    }
    fn close(self) {
        // SAFETY: a live region, closed once.
        let rc = unsafe { ((*(*self.0).fid.ops).close.unwrap())(&mut (*self.0).fid) };
        check("fi_close(mr)", rc as isize);
    }
}

/// Waits for `origin`'s next completion while `target` progresses (reading its counter).
fn rma_done(origin: &Fab, target: &Cntr) -> Result<fi_cq_tagged_entry, fi_cq_err_entry> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        target.read();
        // SAFETY: a live CQ; room for one tagged entry.
        let mut entry: fi_cq_tagged_entry = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            ((*(*origin.cq).ops).read.unwrap())(origin.cq, (&mut entry as *mut fi_cq_tagged_entry).cast(), 1)
        };
        if rc == 1 {
            return Ok(entry);
        }
        if rc == -(FI_EAVAIL as isize) {
            // SAFETY: as above, for an error entry.
            let mut err: fi_cq_err_entry = unsafe { std::mem::zeroed() };
            let rc = unsafe { ((*(*origin.cq).ops).readerr.unwrap())(origin.cq, &mut err, 0) };
            assert_eq!(rc, 1, "fi_cq_readerr");
            return Err(err);
        }
        assert_eq!(rc, -(FI_EAGAIN as isize), "fi_cq_read");
        assert!(Instant::now() < deadline, "no RMA completion in 60 s");
    }
}

/// Two endpoints of one process with FI_RMA: writes, writedata, reads, at max_msg_size and
/// past it, and the target's refusals (wrong key, out of bounds, access denied, closed region).
fn rma_roundtrips() {
    const MAX: usize = 64 << 20;
    let caps = FI_MSG | FI_TAGGED | FI_RMA;
    let mr_mode = (1 << 4) | (1 << 6); // FI_MR_VIRT_ADDR | FI_MR_PROV_KEY
    let (origin, target) = (Fab::open_with(caps, mr_mode), Fab::open_with(caps, mr_mode));
    let peer = origin.insert(&target.name());
    let (writes, reads) = (origin.counter(FI_WRITE), origin.counter(FI_READ));
    let remote_writes = target.counter(FI_REMOTE_WRITE | FI_REMOTE_READ);
    let mut region = vec![0u8; MAX];
    let mr = target.register(&mut region, FI_REMOTE_WRITE | FI_REMOTE_READ);
    let (base, key) = (region.as_ptr() as u64, mr.key());

    check("fi_write", origin.write(peer, b"hello", base + 16, key, None, 21));
    let done = rma_done(&origin, &remote_writes).expect("the write completes");
    assert_eq!((done.op_context as usize, done.flags), (21, FI_RMA | FI_WRITE));
    assert_eq!(&region[16..21], b"hello");

    check("fi_writedata", origin.write(peer, b"data!", base, key, Some(0xabc), 22));
    assert_eq!(rma_done(&origin, &remote_writes).expect("writedata").op_context as usize, 22);
    let seen = target.next(Duration::from_secs(5)).expect("the target's CQ data");
    assert_eq!(seen.flags, FI_REMOTE_CQ_DATA | FI_RMA | FI_REMOTE_WRITE);
    assert_eq!((seen.data, &region[..5]), (0xabc, &b"data!"[..]));

    region[1000..1100].iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
    let mut got = vec![0u8; 100];
    check("fi_read", origin.read(peer, &mut got, base + 1000, key, 23));
    let done = rma_done(&origin, &remote_writes).expect("the read completes");
    assert_eq!((done.op_context as usize, done.flags), (23, FI_RMA | FI_READ));
    assert_eq!(got, region[1000..1100]);

    // The largest transfer both ways, then one byte more.
    let big: Vec<u8> = (0..MAX).map(|i| (i % 251) as u8).collect();
    check("fi_write max", origin.write(peer, &big, base, key, None, 24));
    rma_done(&origin, &remote_writes).expect("a max_msg_size write");
    assert!(region == big, "the max_msg_size write landed");
    let mut back = vec![0u8; MAX];
    check("fi_read max", origin.read(peer, &mut back, base, key, 25));
    rma_done(&origin, &remote_writes).expect("a max_msg_size read");
    assert!(back == big, "the max_msg_size read");
    // SAFETY: the provider refuses the length before it looks at the bytes.
    let huge = unsafe { std::slice::from_raw_parts(big.as_ptr(), MAX + 1) };
    assert_eq!(origin.write(peer, huge, base, key, None, 26), -(FI_EMSGSIZE as isize));
    assert_eq!(origin.read(peer, &mut vec![0u8; MAX + 1], base, key, 26), -(FI_EMSGSIZE as isize));

    let refused = |rc: isize, ctx: usize| {
        check("post", rc);
        let err = rma_done(&origin, &remote_writes).expect_err("the target refuses");
        assert_eq!(err.op_context as usize, ctx);
        err.err
    };
    assert_eq!(refused(origin.write(peer, b"x", base, key ^ 1, None, 31), 31), FI_EINVAL, "wrong key");
    let end = base + MAX as u64;
    assert_eq!(refused(origin.write(peer, b"four", end - 2, key, None, 32), 32), FI_EINVAL, "past the end");
    assert_eq!(refused(origin.read(peer, &mut got, base - 1, key, 33), 33), FI_EINVAL, "before the start");
    let mut ro = vec![7u8; 64];
    let read_only = target.register(&mut ro, FI_REMOTE_READ);
    let ro_addr = ro.as_ptr() as u64;
    assert_eq!(refused(origin.write(peer, b"x", ro_addr, read_only.key(), None, 34), 34), FI_EACCES);
    assert_eq!(ro, vec![7u8; 64], "a refused write changes nothing");
    // A large write's bytes travel apart from its request: refused, and with CQ data.
    let far = big.len() - 50_000;
    assert_eq!(refused(origin.write(peer, &big[..100_000], base + far as u64, key, None, 36), 36), FI_EINVAL);
    check("fi_writedata large", origin.write(peer, &big[1..100_001], base + 8, key, Some(0xdef), 37));
    assert_eq!(rma_done(&origin, &remote_writes).expect("a large writedata").op_context as usize, 37);
    let seen = target.next(Duration::from_secs(5)).expect("the large write's CQ data");
    assert_eq!((seen.data, seen.len), (0xdef, 100_000));
    assert!(region[8..100_008] == big[1..100_001], "the large writedata landed");
    mr.close();
    assert_eq!(refused(origin.read(peer, &mut got, base, key, 35), 35), FI_EINVAL, "a closed region");

    // fi_inject_write raises no completion; the counter counts it.
    let mut small = vec![0u8; 8];
    let rw = target.register(&mut small, FI_REMOTE_WRITE);
    let (small_addr, rw_key) = (small.as_ptr() as u64, rw.key());
    // SAFETY: a live endpoint; the bytes are copied before the call returns.
    let rc = unsafe {
        origin.rma().inject.unwrap()(origin.ep, b"inj".as_ptr().cast(), 3, peer, small_addr, rw_key)
    };
    check("fi_inject_write", rc);
    let deadline = Instant::now() + Duration::from_secs(30);
    while writes.read().0 < 5 {
        remote_writes.read();
        assert!(Instant::now() < deadline, "the inject is counted");
    }
    assert_eq!(&small[..3], b"inj");
    assert_eq!(writes.read(), (5, 4), "writes: 5 done; refused: key, bounds, access, large bounds");
    assert_eq!(reads.read(), (2, 2));
    // SAFETY: a live CQ; room for one tagged entry.
    let mut entry: fi_cq_tagged_entry = unsafe { std::mem::zeroed() };
    let into = (&mut entry as *mut fi_cq_tagged_entry).cast();
    // SAFETY: as above.
    let rc = unsafe { ((*(*origin.cq).ops).read.unwrap())(origin.cq, into, 1) };
    assert_eq!(rc, -(FI_EAGAIN as isize), "no completion for the inject");
    read_only.close();
    rw.close();
}

#[test]
fn rma_writes_reads_and_refusals() {
    rma_test("rma_writes_reads_and_refusals", "shm");
}

/// The same between endpoints that tcp carries.
#[test]
fn rma_writes_reads_and_refusals_over_tcp() {
    rma_test("rma_writes_reads_and_refusals_over_tcp", "tcp");
}

fn rma_test(test: &str, carrier: &str) {
    if std::env::var(ROLE).as_deref() == Ok("rma") {
        return rma_roundtrips();
    }
    let (dir, prov) = (scratch(test), provider_dir());
    wait_ok(spawn(test, "rma", &dir, &prov, carrier), "the role");
}
