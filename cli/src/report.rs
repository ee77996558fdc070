//! Output helpers shared by the subcommands: writes to stdout and stderr that never panic, error
//! sentences, tables, byte sizes, process memory.
//!
//! Invariant: once a write to stdout has failed, nothing more is written to it, and
//! [`finish_output`] reports that failure (a closed pipe excepted) so the exit code says the
//! output is incomplete.

use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::sync::OnceLock;

pub use ackstore::check::text::{bytes, table};

/// The first failed write to stdout; set once, never cleared.
static STDOUT_FAILURE: OnceLock<io::Error> = OnceLock::new();

/// Writes to stdout (what the crate's `print!` and `println!` expand to). A failure is kept for
/// [`finish_output`] and every later write is skipped.
pub fn print_out(args: std::fmt::Arguments<'_>) {
    if STDOUT_FAILURE.get().is_some() {
        return;
    }
    if let Err(err) = io::stdout().lock().write_fmt(args) {
        let _ = STDOUT_FAILURE.set(err);
    }
}

/// Writes to stderr (what the crate's `eprint!` and `eprintln!` expand to); a failure is
/// ignored, as there is nowhere left to report it.
pub fn print_err(args: std::fmt::Arguments<'_>) {
    let _ = io::stderr().lock().write_fmt(args);
}

/// Flushes stdout and returns the first write that failed, if any. A closed pipe is not an error:
/// the reader chose to stop reading (`ackstore verify DIR | head -1`).
pub fn finish_output() -> io::Result<()> {
    if STDOUT_FAILURE.get().is_none()
        && let Err(err) = io::stdout().lock().flush()
    {
        let _ = STDOUT_FAILURE.set(err);
    }
    match STDOUT_FAILURE.get() {
        Some(err) if err.kind() != io::ErrorKind::BrokenPipe => {
            Err(io::Error::new(err.kind(), err.to_string()))
        }
        _ => Ok(()),
    }
}

/// The error and its chain of causes as one line of sentences. An error's message never repeats
/// its source (see `Error::Io`), so each cause is written once.
pub fn describe(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let _ = write!(out, ": {cause}");
        source = cause.source();
    }
    out
}

/// Peak resident set size of this process (Linux `VmHWM`), if the system reports it.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_pad_columns_to_the_widest_cell() {
        let t = table(&["a", "bb"], &[vec!["xxx".into(), "y".into()]]);
        assert_eq!(t, "a    bb\nxxx  y\n");
    }

    #[test]
    fn tables_print_cells_wider_than_a_format_width_whole() {
        let wide = "w".repeat(70_000);
        let t = table(
            &["name", "n"],
            &[vec![wide.clone(), "1".into()], vec!["x".into(), "2".into()]],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[1], format!("{wide}  1"));
        assert_eq!(lines[2], format!("x{}  2", " ".repeat(69_999)));
    }

    #[test]
    fn byte_counts_use_binary_units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 * 1024 * 1024), "3.0 MiB");
    }
}
