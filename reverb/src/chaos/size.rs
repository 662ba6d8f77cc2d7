//! A trial's message size: its class, drawn from (seed, trial) alone, and its bytes, relative
//! to the configured thresholds: `REVERB_RNDV_THRESH` (eager up to it, rendezvous above) and
//! `REVERB_LOG_MAX_MESSAGE` (the runtime's largest message; the apps send larger ones in
//! pieces). The apps' main messages are that many bytes (`reverb app --msg-bytes`).

use anyhow::{bail, Context, Result};
use reverb_logger::envelope::{HEADER_LEN, SHORT_HEADER_LEN};
use reverb_logger::LogConfig;
use reverb_transport::config::TransportConfig;

use super::plan::Rng;

/// Log ring bytes of a fragmented trial (`REVERB_LOG_RING_BYTES`).
const FRAGMENTED_RING_BYTES: usize = 32 << 20;

/// Size classes, in report order.
pub const SIZE_CLASSES: [&str; 4] = ["eager", "at-threshold", "rendezvous", "fragmented"];
/// The largest data the apps' main messages carry as the campaign runs them (a stencil halo
/// row of 64 values): every drawn size is at least this.
pub(super) const APP_DATA_MAX: usize = 512;
/// Fragmented trials lower the largest message to at most this many times the rendezvous
/// threshold: pieces of a few tens of KiB keep a trial quick (the 4 MiB default would make
/// every trial's logs hundreds of MiB).
const FRAG_LIMIT_FACTOR: usize = 4;
/// Kept apart from the plan's stream, so the class is known before the app's baseline.
const SIZE_STREAM: u64 = 0x5A5A_0000_0000_0001;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeClass {
    /// Well below the rendezvous threshold.
    Eager,
    /// At the threshold, one byte either side, and where the logger's envelope puts the
    /// message on the wire at or either side of it.
    AtThreshold,
    /// Above the threshold, below the largest message.
    Rendezvous,
    /// Above the largest message: two or three pieces.
    Fragmented,
    /// The app's own sizes (campaigns across hosts).
    Natural,
}

impl SizeClass {
    pub fn name(self) -> &'static str {
        match self {
            SizeClass::Eager => "eager",
            SizeClass::AtThreshold => "at-threshold",
            SizeClass::Rendezvous => "rendezvous",
            SizeClass::Fragmented => "fragmented",
            SizeClass::Natural => "natural",
        }
    }
}

/// The thresholds the sizes are drawn against, as configured for the campaign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    pub rndv: usize,
    pub max_message: usize,
}

impl Thresholds {
    /// From the campaign's environment (the registry's variables and defaults).
    pub fn from_env() -> Result<Thresholds> {
        let rndv = TransportConfig::from_env().context("REVERB_RNDV_THRESH")?.rndv_thresh;
        let max_message = LogConfig::from_env().context("REVERB_LOG_MAX_MESSAGE")?.max_message;
        let th = Thresholds { rndv, max_message };
        th.check()?;
        Ok(th)
    }

    /// The classes need room: eager sizes from the apps' data to a quarter of the
    /// threshold, rendezvous ones up to four times it within the largest message.
    pub fn check(&self) -> Result<()> {
        if self.rndv < 4 * APP_DATA_MAX {
            bail!(
                "REVERB_RNDV_THRESH={} below {}: no room for eager sizes above the apps' data",
                self.rndv,
                4 * APP_DATA_MAX
            );
        }
        if self.max_message < 2 * self.rndv + HEADER_LEN + 1 {
            bail!(
                "REVERB_LOG_MAX_MESSAGE={} below twice REVERB_RNDV_THRESH={}: no room for rendezvous sizes",
                self.max_message,
                self.rndv
            );
        }
        Ok(())
    }

    /// The largest message of fragmented trials (`REVERB_LOG_MAX_MESSAGE` they set).
    pub fn frag_limit(&self) -> usize {
        self.max_message.min(FRAG_LIMIT_FACTOR * self.rndv)
    }

    /// The at-threshold sizes: the threshold and one byte either side, for the payload and
    /// for the payload behind a short (24-byte) or full (40-byte) envelope.
    pub fn at_threshold_sizes(&self) -> Vec<usize> {
        let t = self.rndv;
        [0, SHORT_HEADER_LEN, HEADER_LEN].iter().flat_map(|h| [t - h - 1, t - h, t - h + 1]).collect()
    }

    /// The fragmented sizes: one byte past one, two and three pieces' worth.
    pub fn fragmented_sizes(&self) -> Vec<usize> {
        let l = self.frag_limit();
        vec![l + 1, 2 * l - 1, 2 * l, 2 * l + 1, 3 * l - 1, 3 * l]
    }
}

/// A trial's message size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsgSize {
    pub class: SizeClass,
    /// `--msg-bytes` of the app (0: its own sizes).
    pub bytes: usize,
    /// `REVERB_LOG_MAX_MESSAGE` the trial sets (fragmented trials).
    pub max_message: Option<usize>,
}

impl MsgSize {
    pub(super) const NATURAL: MsgSize = MsgSize { class: SizeClass::Natural, bytes: 0, max_message: None };

    /// The app's arguments for this size.
    pub(super) fn app_args(&self) -> Vec<String> {
        match self.bytes {
            0 => Vec::new(),
            n => vec!["--msg-bytes".into(), n.to_string()],
        }
    }

    /// The environment the trial's job needs for this size.
    /// A fragmented size's limit, and log rings for its volume: up to three pieces a
    /// message, copies under partial redundancy receiving from copies too, outgrow the
    /// default 8 MiB within the apps' checkpoint interval (a clear "log ring full" error).
    pub(super) fn env(&self) -> Vec<(String, String)> {
        let Some(m) = self.max_message else { return Vec::new() };
        vec![
            ("REVERB_LOG_MAX_MESSAGE".to_string(), m.to_string()),
            ("REVERB_LOG_RING_BYTES".to_string(), FRAGMENTED_RING_BYTES.to_string()),
        ]
    }

    /// What changes the app's send counts: a fragmented size (and its limit); every other
    /// size is one message per message, like the app's own.
    pub(super) fn counts_key(&self) -> Option<(usize, usize)> {
        self.max_message.map(|m| (self.bytes, m))
    }

    pub fn describe(&self) -> String {
        match (self.bytes, self.max_message) {
            (0, _) => self.class.name().to_string(),
            (b, None) => format!("{} {b} B", self.class.name()),
            (b, Some(m)) => format!("{} {b} B in pieces of {m}", self.class.name()),
        }
    }
}

/// Trial `trial`'s size: eager 2, at-threshold 3, rendezvous 3, fragmented 2 in 10.
pub fn pick_size(seed: u64, trial: u64, th: &Thresholds) -> MsgSize {
    let mut rng = Rng::new(seed ^ SIZE_STREAM, trial);
    let pick = |rng: &mut Rng, sizes: Vec<usize>| sizes[rng.below(sizes.len() as u64) as usize];
    let (class, bytes) = match rng.below(10) {
        0 | 1 => (SizeClass::Eager, rng.between(APP_DATA_MAX as u64, (th.rndv / 4) as u64) as usize),
        2..=4 => (SizeClass::AtThreshold, pick(&mut rng, th.at_threshold_sizes())),
        5..=7 => {
            let hi = (4 * th.rndv).min(th.max_message);
            (SizeClass::Rendezvous, rng.between((th.rndv + HEADER_LEN + 1) as u64, hi as u64) as usize)
        }
        _ => (SizeClass::Fragmented, pick(&mut rng, th.fragmented_sizes())),
    };
    let max_message = (class == SizeClass::Fragmented).then(|| th.frag_limit());
    MsgSize { class, bytes, max_message }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULTS: Thresholds = Thresholds { rndv: 8192, max_message: 4 << 20 };

    #[test]
    fn every_class_is_drawn_and_a_size_depends_only_on_seed_and_trial() {
        for seed in [1, 7, 42] {
            let sizes: Vec<MsgSize> = (0..60).map(|t| pick_size(seed, t, &DEFAULTS)).collect();
            for class in SIZE_CLASSES {
                assert!(sizes.iter().any(|s| s.class.name() == class), "seed {seed}: no {class}");
            }
            let again: Vec<MsgSize> = (0..60).map(|t| pick_size(seed, t, &DEFAULTS)).collect();
            assert_eq!(sizes, again);
        }
    }

    #[test]
    fn sizes_fall_in_their_class() {
        let th = Thresholds { rndv: 16384, max_message: 1 << 20 };
        let at = th.at_threshold_sizes();
        for t in 0..400 {
            let s = pick_size(3, t, &th);
            match s.class {
                SizeClass::Eager => assert!((APP_DATA_MAX..=th.rndv / 4).contains(&s.bytes), "{s:?}"),
                SizeClass::AtThreshold => assert!(at.contains(&s.bytes), "{s:?}"),
                SizeClass::Rendezvous => assert!(s.bytes > th.rndv + HEADER_LEN && s.bytes <= 4 * th.rndv),
                SizeClass::Fragmented => {
                    assert_eq!(s.max_message, Some(4 * th.rndv));
                    assert!(s.bytes > 4 * th.rndv && s.bytes <= 12 * th.rndv, "{s:?}");
                }
                SizeClass::Natural => panic!("a natural size on one host"),
            }
            assert_eq!(s.max_message.is_some(), s.class == SizeClass::Fragmented);
        }
    }

    #[test]
    fn at_threshold_sizes_are_exact() {
        let got = DEFAULTS.at_threshold_sizes();
        let want = [8191, 8192, 8193, 8167, 8168, 8169, 8151, 8152, 8153];
        assert_eq!(got, want, "the threshold and one byte either side, bare and behind envelopes");
        assert_eq!(DEFAULTS.frag_limit(), 32768);
        assert_eq!(DEFAULTS.fragmented_sizes(), [32769, 65535, 65536, 65537, 98303, 98304]);
        // A largest message below four thresholds is the fragmenting size itself.
        assert_eq!(Thresholds { rndv: 8192, max_message: 20000 }.frag_limit(), 20000);
    }

    #[test]
    fn thresholds_without_room_are_refused() {
        assert!(DEFAULTS.check().is_ok());
        assert!(Thresholds { rndv: 1024, max_message: 4 << 20 }.check().is_err());
        assert!(Thresholds { rndv: 8192, max_message: 16384 }.check().is_err());
    }
}
