//! `ackstore-broker`: a reference Pulsar broker on ackstore (see `broker/README.md`).
//!
//! It speaks the subset of the Pulsar binary protocol the official clients need to produce,
//! consume, acknowledge (individually, cumulatively, by batch index), redeliver, seek and read,
//! and keeps every topic and cursor in one ackstore [`Store`]. It is a worked integration and a
//! test bed, not a production broker.
//!
//! Process contract (what the tests rely on):
//! - once listening it prints `listening on ADDR` on standard output;
//! - SIGUSR1 commits every cursor's acks now (`Store::flush_all`) and then prints
//!   `flushed N cursors`: every ack the broker applied before the signal is durable;
//! - SIGTERM or SIGINT closes the store cleanly (`Store::close`), prints `closed` and exits 0;
//! - after SIGKILL a restart on the same directory recovers every entry a receipt was sent
//!   for and every ack applied before the last flush tick (at most `--flush-interval-ms` old).

#![deny(missing_docs)]

mod broker;
mod connection;
mod frame;
mod ids;
mod keyshared;
mod producer;
mod subscription;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ackstore::{Store, StoreConfig};
use clap::Parser;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};

use crate::broker::Broker;

/// A reference Pulsar broker whose topics and cursors live in an ackstore store.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// The store directory (created if missing).
    #[arg(long)]
    data_dir: PathBuf,
    /// The address to listen on (port 0 picks a free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:6650")]
    listen: String,
    /// How often the store's flusher pool commits acknowledgements (1 to 1000 ms).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=1000))]
    flush_interval_ms: u64,
    /// Keep durable subscriptions' cursors in memory only (a measurement baseline: acks are
    /// lost on restart).
    #[arg(long)]
    cursors_in_memory: bool,
}

/// Log records to standard error, at the level `ACKSTORE_BROKER_LOG` names (`warn` unless
/// set).
struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            eprintln!("{} {}: {}", record.level(), record.target(), record.args());
        }
    }

    fn flush(&self) {}
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let level = std::env::var("ACKSTORE_BROKER_LOG")
        .ok()
        .and_then(|l| l.parse().ok())
        .unwrap_or(log::LevelFilter::Warn);
    if log::set_logger(&StderrLog).is_ok() {
        log::set_max_level(level);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ackstore-broker: cannot start the runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ackstore-broker: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let mut config = StoreConfig::default();
    config.ledger.cursor.flush_interval = Some(Duration::from_millis(args.flush_interval_ms));
    // Every frame the codec accepts fits one entry (its 4-byte length, the metadata, the
    // payload): a client fills the announced 5 MiB with payload and metadata together, and a
    // chunk's metadata comes on top of its 5 MiB; an entry the store refused would be sent again
    // by the client after each `SEND_ERROR`, forever.
    config.ledger.log.max_entry_size = frame::MAX_FRAME as u32;
    let store = Store::open(&args.data_dir, config)
        .map_err(|e| format!("cannot open the store in {}: {e}", args.data_dir.display()))?;
    let listener = TcpListener::bind(&args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let broker = Arc::new(Broker::new(
        store,
        format!("pulsar://{addr}"),
        args.cursors_in_memory,
    ));
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let mut usr1 = signal(SignalKind::user_defined1()).map_err(|e| e.to_string())?;
    say(&format!("listening on {addr}"));
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(connection::serve(broker.clone(), stream));
                }
                Err(e) => log::warn!("accept failed: {e}"),
            },
            _ = usr1.recv() => {
                let b = broker.clone();
                let flushed = tokio::task::spawn_blocking(move || b.store.flush_all())
                    .await
                    .map_err(|e| e.to_string())?;
                match flushed {
                    Ok(f) => say(&format!("flushed {} cursors", f.cursors)),
                    Err(e) => say(&format!("flush failed: {e}")),
                }
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    broker.stop();
    let b = broker.clone();
    tokio::task::spawn_blocking(move || b.store.close())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("close failed: {e}"))?;
    say("closed");
    Ok(())
}
