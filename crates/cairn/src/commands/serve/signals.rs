//! `cairn serve`'s signal thread, one for the NBD server and for file
//! exports served alone.

use anyhow::{Context, Result};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};

/// Starts the signal thread. SIGINT, SIGTERM: `stop()`, which stops the
/// server gracefully and says whether a stop was asked for already. SIGHUP:
/// `hup()` (a reload). SIGUSR1, SIGUSR2: logged, nothing else (their default
/// action would kill the server, as SIGHUP's would). SIGPIPE stays ignored,
/// as Rust leaves it: a client that goes away is an EPIPE on its connection,
/// never the end of the server. Closing the returned handle ends the thread.
pub(super) fn spawn(
    stop: impl Fn() -> bool + Send + 'static,
    hup: impl Fn() + Send + 'static,
) -> Result<signal_hook::iterator::Handle> {
    let mut signals =
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2])
            .context("installing the signal handlers")?;
    let handle = signals.handle();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                let name = match signal {
                    SIGINT => "SIGINT",
                    SIGTERM => "SIGTERM",
                    SIGHUP => "SIGHUP",
                    SIGUSR1 => "SIGUSR1",
                    _ => "SIGUSR2",
                };
                match signal {
                    SIGINT | SIGTERM => {
                        // Stop first: nothing after this line may keep the
                        // server up.
                        if stop() {
                            tracing::info!("{name}: already stopping");
                        } else {
                            tracing::info!("{name}: finishing in-flight requests, then exiting");
                        }
                    }
                    SIGHUP => hup(),
                    _ => tracing::info!(
                        "{name}: ignored (cairn serve acts on SIGHUP, SIGINT and SIGTERM)"
                    ),
                }
            }
        })
        .context("starting the signal thread")?;
    Ok(handle)
}
