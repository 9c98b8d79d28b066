//! The progress bar on stderr (hidden when stderr is not a terminal or with
//! `--quiet`), fed by the simulator's [`Progress`] callback.

use std::io::IsTerminal;

use cairn_sim::Progress;
use indicatif::{ProgressBar, ProgressStyle};

/// An indicatif bar counting accesses.
pub struct Bar {
    bar: ProgressBar,
}

impl Bar {
    /// A bar for `total` accesses (a spinner when unknown), with `message`.
    pub fn new(total: Option<u64>, message: &str, quiet: bool) -> Self {
        let bar = if quiet || !std::io::stderr().is_terminal() {
            ProgressBar::hidden()
        } else if let Some(total) = total {
            let bar = ProgressBar::new(total);
            if let Ok(style) = ProgressStyle::with_template(
                "{msg:12} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} accesses (eta {eta})",
            ) {
                bar.set_style(style);
            }
            bar
        } else {
            let bar = ProgressBar::new_spinner();
            if let Ok(style) = ProgressStyle::with_template(
                "{msg:12} [{elapsed_precise}] {spinner} {human_pos} accesses",
            ) {
                bar.set_style(style);
            }
            bar
        };
        bar.set_message(message.to_owned());
        Self { bar }
    }

    /// Clears the bar from the terminal.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    /// Counts accesses outside a replay (prepass, MRC).
    pub fn inc(&self, accesses: u64) {
        self.bar.inc(accesses);
    }
}

impl Progress for Bar {
    fn advance(&self, accesses: u64, _bytes: u64) {
        self.bar.inc(accesses);
    }
}
