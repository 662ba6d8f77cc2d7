//! The sender's copies of logged payloads ([`SendLog`]), shared by the protocols that keep
//! them: `pessimistic-sb` and `causal` (the log itself) and `pessimistic-rb` (copies of the
//! messages in flight when a receiver dies).

use super::OutgoingMessage;
use crate::error::Result;
use crate::sendlog::SendLog;
use crate::stats::LogStats;

/// Refuses a message whose payload the full log could not take, before it takes an ssn.
#[inline]
pub(super) fn reserve(
    log: &SendLog,
    payload_len: usize,
    payload_logged: bool,
    stats: &LogStats,
) -> Result<()> {
    if !payload_logged {
        return Ok(());
    }
    log.reserve(payload_len).inspect_err(|_| LogStats::bump(&stats.back_pressure_events, 1))
}

/// Keeps the payload of `msg` in `log` (in the frame it is sent from when there is one: no
/// copy). Returns whether it was kept.
#[inline]
pub(super) fn keep(log: &mut SendLog, msg: &OutgoingMessage<'_>, stats: &LogStats) -> Result<bool> {
    if !msg.payload_logged {
        return Ok(false);
    }
    let before = log.used();
    match (&msg.framed, msg.stub) {
        (_, Some(key)) => log.record_stub(msg.dest, msg.ssn, msg.tag, key)?,
        (Some((region, offset)), None) => {
            log.record_framed(msg.dest, msg.ssn, msg.tag, region.clone(), *offset, msg.payload.len())?
        }
        (None, None) => log.record(msg.dest, msg.ssn, msg.tag, msg.payload)?,
    }
    LogStats::bump(&stats.send_log_bytes, log.used() - before);
    Ok(true)
}

/// `keep`, counted as the protocol's payload logging (sender-based and causal).
#[inline]
pub(super) fn log_payload(log: &mut SendLog, msg: &OutgoingMessage<'_>, stats: &LogStats) -> Result<()> {
    match (keep(log, msg, stats)?, msg.stub) {
        (false, _) => LogStats::bump(&stats.messages_unlogged, 1),
        (true, Some(_)) => LogStats::bump(&stats.multicast_stubs_logged, 1),
        (true, None) => {
            LogStats::bump(&stats.payload_bytes_logged, msg.payload.len() as u64);
            LogStats::bump(&stats.messages_payload_logged, 1);
        }
    }
    Ok(())
}

/// A fresh log with the same limit (a restart from the initial state).
pub(super) fn reset(log: &mut SendLog, size: u32) {
    *log = SendLog::new(size, log.limit());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::LogError;
    use std::sync::atomic::Ordering;

    fn msg(payload: &[u8], ssn: u64, payload_logged: bool) -> OutgoingMessage<'_> {
        OutgoingMessage { dest: 1, ssn, tag: 7, payload, framed: None, payload_logged, stub: None }
    }

    #[test]
    fn a_multicast_stub_keeps_no_payload() {
        let stats = LogStats::default();
        let mut log = SendLog::new(2, 1 << 20);
        let key = crate::multicast::McastKey { root: 0, seq: 4 };
        let stub = OutgoingMessage { stub: Some(key), ..msg(&[9; 5000], 1, true) };
        assert!(log_payload(&mut log, &stub, &stats).is_ok());
        assert_eq!(stats.payload_bytes_logged.load(Ordering::Relaxed), 0);
        assert_eq!(stats.multicast_stubs_logged.load(Ordering::Relaxed), 1);
        let entry = log.from_ssn(1, 1).unwrap().next().unwrap();
        assert_eq!((entry.stub, entry.payload.len()), (Some(key), 0));
        assert_eq!(log.used(), crate::sendlog::LoggedSend::charged_bytes(0));
        assert_eq!(
            log.record_multicast(key, &[9; 5000]).unwrap(),
            crate::sendlog::LoggedSend::charged_bytes(5000)
        );
        assert_eq!(log.record_multicast(key, &[9; 5000]).unwrap(), 0, "kept once");
        assert_eq!(log.multicast(&key).map(<[u8]>::len), Some(5000));
        log.trim(1, 1).unwrap();
        assert_eq!(log.trim_multicasts(), crate::sendlog::LoggedSend::charged_bytes(5000));
        assert_eq!(log.used(), 0);
    }

    #[test]
    fn logged_payloads_are_kept_and_counted() {
        let stats = LogStats::default();
        let mut log = SendLog::new(2, 1 << 20);
        assert!(log_payload(&mut log, &msg(b"abc", 1, true), &stats).is_ok());
        assert!(log_payload(&mut log, &msg(b"de", 2, false), &stats).is_ok());
        assert_eq!(stats.messages_payload_logged.load(Ordering::Relaxed), 1);
        assert_eq!(stats.payload_bytes_logged.load(Ordering::Relaxed), 3);
        assert_eq!(stats.messages_unlogged.load(Ordering::Relaxed), 1);
        assert_eq!(stats.send_log_bytes.load(Ordering::Relaxed), log.used());
        assert_eq!(log.len(1), 1, "only the logged payload is kept");
    }

    #[test]
    fn a_full_log_refuses_and_counts_back_pressure() {
        let stats = LogStats::default();
        let log = SendLog::new(2, 16);
        assert!(matches!(reserve(&log, 4096, true, &stats), Err(LogError::LogFull { .. })));
        assert!(reserve(&log, 4096, false, &stats).is_ok(), "an unlogged payload needs no room");
        assert_eq!(stats.back_pressure_events.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn reset_keeps_the_limit() {
        let stats = LogStats::default();
        let mut log = SendLog::new(2, 1 << 20);
        assert!(keep(&mut log, &msg(b"abc", 1, true), &stats).is_ok_and(|kept| kept));
        reset(&mut log, 2);
        assert_eq!((log.used(), log.limit()), (0, 1 << 20));
    }
}
