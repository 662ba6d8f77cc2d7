//! The front end's end of an agent's standard input (`reverb agent --front-stdin`, given by
//! `reverb run --hosts`): it writes [`FRONT_HELLO`] first and keeps the pipe open while the
//! job runs. Its end (the front end cancelled the job, died, or its remote shell's connection
//! was cut) stops this host's ranks as SIGTERM would: a remote shell such as ssh does not
//! forward signals, so this is how a cancel reaches a remote host.
//!
//! Without the greeting (a remote shell that gives the command no input, `ssh -n`) the end
//! of the input means nothing.

use std::io::BufRead;

use crate::launcher::hostspec::FRONT_HELLO;

/// Watches standard input in a thread that ends with it.
pub(super) fn watch_stdin(host: String) {
    std::thread::spawn(move || {
        let mut lines = std::io::stdin().lock().lines();
        if !matches!(lines.next(), Some(Ok(line)) if line == FRONT_HELLO) {
            return;
        }
        // Anything else the front end writes is ignored: only the end counts.
        for line in lines {
            if line.is_err() {
                break;
            }
        }
        eprintln!("reverb agent: host {host}: the front end (reverb run) is gone; stopping its ranks");
        crate::launcher::signals::request_cancel();
    });
}
