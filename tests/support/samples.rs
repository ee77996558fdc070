//! The committed sample directories under `tests/data/`, copied before a test opens them (an
//! open may repair a torn tail, and a sample must stay as it was committed).

use std::path::Path;

/// A copy of sample directory `name` in a temporary directory.
pub fn sample_dir(name: &str) -> tempfile::TempDir {
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    let dir = tempfile::tempdir().unwrap();
    for file in std::fs::read_dir(&from).unwrap() {
        let file = file.unwrap();
        std::fs::copy(file.path(), dir.path().join(file.file_name())).unwrap();
    }
    dir
}
