//! The library on its own: a one-rank job joined without the `reverb` launcher (rank 0 starts
//! the rendezvous itself) runs init, a message to itself, a checkpoint call and finalize, and
//! writes its report; a malformed setting is refused by name. Logging and checkpoints need two
//! nodes, so they are off here (the recovery suites, which launch `reverb run` jobs, are in
//! `reverb/tests/`). One test: the environment is process-wide.

use reverb_runtime::{Runtime, RuntimeConfig, RuntimeError};

/// A job of one rank on the shm provider, its report written to `dir`.
fn one_rank_job_env(dir: &std::path::Path) {
    for (k, _) in std::env::vars() {
        if k.starts_with("REVERB_")
            || k.starts_with("SLURM_")
            || k.starts_with("OMPI_")
            || k.starts_with("PMI_")
        {
            std::env::remove_var(k);
        }
    }
    let job = format!("one-rank-{}", std::process::id());
    // A port free a moment ago; rank 0 binds the rendezvous there.
    let port =
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
    let root = format!("127.0.0.1:{port}");
    for (k, v) in [
        ("REVERB_RANK", "0"),
        ("REVERB_SIZE", "1"),
        ("REVERB_ROOT", root.as_str()),
        ("REVERB_BOOT_TIMEOUT_S", "20"),
        ("REVERB_JOB_TOKEN", "one-rank-test"),
        ("REVERB_JOB_ID", job.as_str()),
        ("REVERB_PROVIDER", "shm"),
        ("REVERB_LOG", "none"),
        ("REVERB_CKPT", "off"),
    ] {
        std::env::set_var(k, v);
    }
    std::env::set_var("REVERB_RUNTIME_REPORT", dir);
}

#[test]
fn a_one_rank_job_runs_on_the_library_alone() {
    let dir = std::env::temp_dir().join(format!("reverb-runtime-one-rank-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("report dir");
    one_rank_job_env(&dir);

    let mut rt = Runtime::init().expect("init");
    assert_eq!((rt.rank(), rt.size(), rt.restarted()), (0, 1, false));
    let state = rt.restore_or_else(|| vec![7u8; 32]);
    rt.protect(reverb_runtime::FIRST_USER_ENTRY, b"extra").expect("protect");
    assert!(matches!(rt.protect(1, b"x"), Err(RuntimeError::InvalidArgument(_))));
    rt.send(0, 5, &state).expect("send to itself");
    let msg = rt.recv_from(0, 5).expect("receive from itself");
    assert_eq!((msg.source, msg.tag, msg.payload.into_vec()), (0, 5, state.clone()));
    assert_eq!(rt.checkpoint(&state).expect("checkpoint"), None, "REVERB_CKPT=off commits nothing");
    let report = rt.finalize().expect("finalize");
    assert_eq!((report.messages_sent, report.messages_delivered), (1, 1));
    assert!(dir.join("rank-0-inc-0.json").is_file(), "the report is written at finalize");

    std::env::set_var("REVERB_CKPT", "bogus");
    let err = RuntimeConfig::from_env().expect_err("a bad REVERB_CKPT is refused");
    assert!(err.to_string().contains("REVERB_CKPT"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
