//! The module's integration tests, built as one test program: each file beside this one is a
//! module of it, and `common/` and `cluster_harness/` are its harness (see `README.md`).
//!
//! One program rather than one per file, because each program compiled the harness and linked it,
//! the `redis` crate and their dependencies anew, twenty-nine times a build. And the test threads
//! take the next test of any file, where a program of its own left a thread idle while the last
//! long test of its file ran: on Redis 7.0 the files took 163 s one after the other, and 121 to
//! 125 s as one program, on the same machine. A file's tests are run alone by naming its module:
//! `cargo test -p pathlock --test integration waiting::`.

mod cluster_harness;
mod common;

mod acl;
mod atomic_migration;
mod citizen;
mod cloud_drive;
mod cluster;
mod command_docs;
mod commands;
mod defrag;
mod durability;
mod eviction;
mod exporter;
mod fence_payloads;
mod fences;
mod fuzz_live;
mod huge_owners;
mod inspect;
mod lifetime;
mod memory;
mod moves;
mod notes;
mod observability;
mod owners;
mod partition;
mod paths;
mod propagation;
mod readme;
mod replication;
mod stress;
mod waiting;

/// Cargo builds nothing from this folder but this program (`autotests = false`), so a test file
/// that no `mod` line above names would never run: each file of the folder must be one.
#[test]
fn every_file_of_the_folder_is_a_module_of_this_program() {
    let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let named: std::collections::BTreeSet<String> = include_str!("integration.rs")
        .lines()
        .filter_map(|line| line.strip_prefix("mod ")?.strip_suffix(';'))
        .map(str::to_owned)
        .collect();
    let files: Vec<String> = std::fs::read_dir(&folder)
        .expect("the tests folder")
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            Some(name.strip_suffix(".rs")?.to_owned())
        })
        .filter(|name| name != "integration")
        .collect();
    assert!(files.len() > 20, "only {} files in {folder:?}", files.len());
    let missing: Vec<&String> = files.iter().filter(|f| !named.contains(*f)).collect();
    assert!(
        missing.is_empty(),
        "test files no `mod` line of integration.rs names: {missing:?}"
    );
}
