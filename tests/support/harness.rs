//! The test harness's names for this binary's tests, and the command that re-runs this binary
//! as a child process running one test (`--exact NAME`).

/// The name the harness gives the test function `name` of the module at `module_path` (the
/// caller's `module_path!()`): the module path without the crate's name, then the function.
pub fn test_path(module_path: &str, name: &str) -> String {
    match module_path.split_once("::") {
        Some((_, module)) => format!("{module}::{name}"),
        None => name.to_owned(),
    }
}

/// This test binary (`exe`) as a child running only the test `test` (its name by
/// [`test_path`]) with the harness's output flag `output`.
fn child(exe: &std::path::Path, test: &str, output: &str) -> std::process::Command {
    let mut child = std::process::Command::new(exe);
    child.args([test, "--exact", output, "--test-threads=1"]);
    child
}

/// [`child`] with the test's output shown (`--nocapture`): the caller adds its environment
/// and where its output goes.
pub fn child_showing(exe: &std::path::Path, test: &str) -> std::process::Command {
    child(exe, test, "--nocapture")
}

/// [`child_showing`] with its standard output discarded: the caller adds its environment and
/// its standard error.
pub fn child_running(exe: &std::path::Path, test: &str) -> std::process::Command {
    let mut child = child_showing(exe, test);
    child.stdout(std::process::Stdio::null());
    child
}

/// [`child`] with the harness's output cut to its summary (`--quiet`), the test's output
/// captured: the caller adds its environment and how it waits.
pub fn child_quiet(exe: &std::path::Path, test: &str) -> std::process::Command {
    child(exe, test, "--quiet")
}

/// A property test's configuration with `cases` cases, whose failing seeds are kept beside its
/// source file (`model.rs` keeps `model.proptest-regressions`) and run again first on every run.
/// proptest's default keeps them under the nearest directory holding a `main.rs`, which in a
/// test crate of several modules would be one folder shared by all of them.
pub fn proptest_config(cases: u32) -> proptest::test_runner::Config {
    use proptest::test_runner::{Config, FileFailurePersistence};
    Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..Config::default()
    }
}

/// [`proptest_config`] with proptest's default number of cases.
pub fn proptest_default_config() -> proptest::test_runner::Config {
    proptest_config(proptest::test_runner::Config::default().cases)
}
