//! Progress of long work on stderr: a bar when the number of steps is known, a spinner
//! with the elapsed time otherwise. Shown only on a terminal, and never with `--json`.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often a spinner redraws.
const TICK: Duration = Duration::from_millis(120);

/// Whether progress may be drawn: stderr is a terminal and the output is not JSON.
pub fn shown(json: bool) -> bool {
    !json && std::io::stderr().is_terminal()
}

/// A bar of `len` steps with a message, hidden unless [`shown`].
pub fn bar(len: u64, json: bool) -> ProgressBar {
    let p = ProgressBar::new(len);
    if !shown(json) {
        p.set_draw_target(ProgressDrawTarget::hidden());
    }
    p.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    if shown(json) {
        // Steps can be long (a crash-test workload): the elapsed time keeps moving.
        p.enable_steady_tick(TICK);
    }
    p
}

/// A spinner showing `msg` and the elapsed time, hidden unless [`shown`].
pub fn spinner(msg: &str, json: bool) -> ProgressBar {
    if !shown(json) {
        return ProgressBar::hidden();
    }
    let p = ProgressBar::new_spinner();
    p.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    p.set_message(msg.to_string());
    p.enable_steady_tick(TICK);
    p
}
