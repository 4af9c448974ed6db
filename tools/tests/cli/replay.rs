//! `vramtrace replay` on a known training run: the tables are titled by the moment replayed, and
//! an alert is never labelled with a shape that contradicts it.

use crate::support::*;

fn replay_text(path: &std::path::Path, args: &[&str]) -> String {
    let out = vramtrace()
        .arg("replay")
        .args(args)
        .arg(path)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8(out)
        .unwrap()
        .replace(&path.display().to_string(), "[TRACE]")
}

#[test]
fn a_mid_run_replay_is_titled_by_its_moment() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_six_step_training(dir.path(), "train.vtrace");
    let text = replay_text(&path, &["--at", "step 5", "--device-memory", "512MiB"]);
    insta::assert_snapshot!("replay_at_step", text);
    assert!(!text.contains("at the end"), "{text}");
    assert!(!text.contains("[flat]"), "{text}");

    let text = replay_text(&path, &["--at", "peak", "--device-memory", "512MiB"]);
    assert!(
        text.contains("\nLive at the peak (event 13) by call site (2 of 2)\n"),
        "{text}"
    );
    assert!(
        text.contains("\n  live           at the peak (event 13): 22.0 MiB device in 7 objects"),
        "{text}"
    );
    let text = replay_text(&path, &["--at", "event 4", "--device-memory", "512MiB"]);
    assert!(
        text.contains("\nLive after event 4 by call site (2 of 2)\n"),
        "{text}"
    );
}
