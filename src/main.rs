//! The `ackstore` command: run a workload, inspect a directory, verify its files.

fn main() {
    eprintln!("ackstore: the command-line tool is not yet available; see README.md");
    std::process::exit(2);
}
