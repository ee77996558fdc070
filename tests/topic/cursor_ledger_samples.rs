//! The cursor-ledger writer writes the committed samples of topic directories with cursor
//! ledgers (`tests/data/cursor-ledger-*`) as they are described: with `ACKSTORE_WRITE_SAMPLES`
//! set, into `tests/data`; otherwise into a temporary directory, whose files are then the
//! committed sample's, by name.

use crate::support;

#[test]
fn the_writer_writes_every_cursor_ledger_sample_as_described() {
    let renew = std::env::var_os("ACKSTORE_WRITE_SAMPLES").is_some();
    let tmp = tempfile::tempdir().unwrap();
    let to = if renew {
        support::samples::data_dir()
    } else {
        tmp.path().to_path_buf()
    };
    support::cursor_ledger_writer::write_samples(&to);
    let names = |dir: std::path::PathBuf| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|f| f.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    for sample in support::samples::ledger_samples() {
        assert_eq!(
            names(to.join(&sample.name)),
            names(support::samples::data_dir().join(&sample.name)),
            "{}",
            sample.name
        );
    }
}
