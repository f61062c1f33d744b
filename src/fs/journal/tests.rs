use super::*;
use bytes::Bytes;

fn content(path: &str, data: &[u8]) -> (String, Kind) {
    (path.to_string(), Kind::Content(Bytes::copy_from_slice(data)))
}

fn removed(path: &str) -> (String, Kind) {
    (path.to_string(), Kind::Removed)
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    segment_files(dir).unwrap().into_iter().map(|(_, p)| p).collect()
}

fn replayed_files(replay: &Replay) -> Vec<(&str, &[u8])> {
    replay.files.iter().map(|(p, d)| (p.as_str(), &d[..])).collect()
}

#[test]
fn what_was_not_done_is_found_again_newest_content_first_removals_void() {
    let tmp = tempfile::tempdir().unwrap();
    let (journal, replay) = Journal::open(tmp.path(), "s3://b/x", 1 << 20).unwrap();
    assert_eq!(replay.records, 0);
    journal
        .append(vec![content("a/c/0", b"one"), content("a/c/1", b"two")])
        .unwrap();
    journal.append(vec![content("a/c/0", b"three")]).unwrap();
    journal
        .append(vec![content("a/c/2", b"gone"), removed("a/c/2")])
        .unwrap();
    let seqs = journal.append(vec![content("a/c/3", b"done")]).unwrap();
    journal.done(&seqs[..1]).unwrap();
    assert_eq!(journal.pending(), (3 + 5, 2), "a/c/0 (newest) and a/c/1");
    drop(journal); // a crash: nothing more is done

    let (journal, replay) = Journal::open(tmp.path(), "s3://b/x", 1 << 20).unwrap();
    // a/c/3 was done: its segment is still there (a/c/1 is not done), and its done record
    // keeps the replay from committing it again (another mount may have written it since).
    assert_eq!(
        replayed_files(&replay),
        vec![("a/c/1", &b"two"[..]), ("a/c/0", b"three")]
    );
    assert_eq!((replay.records, replay.torn_segments), (7, 0), "6 and a done list");
    journal.replayed().unwrap();
    assert!(segments(tmp.path()).is_empty());
    drop(journal);
    let (_, replay) = Journal::open(tmp.path(), "s3://b/x", 1 << 20).unwrap();
    assert!(replay.files.is_empty());
}

#[test]
fn segments_go_once_everything_in_them_and_before_them_is_done() {
    let tmp = tempfile::tempdir().unwrap();
    let (journal, _) = Journal::open_with(tmp.path(), "src", 1 << 20, 100).unwrap();
    journal.append(vec![content("a", &[1; 80])]).unwrap();
    let b = journal.append(vec![content("b", &[2; 80])]).unwrap()[0];
    assert_eq!(segments(tmp.path()).len(), 2, "one segment each");
    // Removing a voids its record: a's segment is done and the oldest, so it goes; b's
    // stays, and so does the removal's.
    let _ = journal.append(vec![removed("a")]).unwrap();
    assert_eq!(segments(tmp.path()).len(), 2);
    assert_eq!(journal.pending(), (80, 1), "a superseded by its removal");
    journal.done(&[b]).unwrap();
    // b's segment goes; the one being written (the removal's, and now the done list's) stays.
    assert_eq!(segments(tmp.path()).len(), 1, "{:?}", segments(tmp.path()));
    assert_eq!(journal.pending(), (0, 0));
    // Appending past its size starts a new segment, and the done one goes.
    let c = journal.append(vec![content("c", &[3; 80])]).unwrap();
    assert_eq!(segments(tmp.path()).len(), 1);
    journal.done(&c).unwrap();
    // Closed with nothing live, the journal leaves no segment (and no spare).
    drop(journal);
    assert!(segments(tmp.path()).is_empty());
    assert!(!tmp.path().join("spare.zj").exists());
}

#[test]
fn a_removal_outlives_the_record_it_voids() {
    let tmp = tempfile::tempdir().unwrap();
    let (journal, _) = Journal::open_with(tmp.path(), "src", 1 << 20, 100).unwrap();
    journal.append(vec![content("keep", &[1; 80])]).unwrap();
    journal.append(vec![content("x", &[2; 80])]).unwrap();
    journal.append(vec![removed("x")]).unwrap();
    // "keep" holds the first segment; x's is done but not the oldest, so it stays, and the
    // removal with it. A crash now must not bring x back.
    drop(journal);
    let (_, replay) = Journal::open_with(tmp.path(), "src", 1 << 20, 100).unwrap();
    assert_eq!(replayed_files(&replay), vec![("keep", &[1u8; 80][..])]);
}

#[test]
fn a_torn_record_is_dropped_and_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let (journal, _) = Journal::open(tmp.path(), "src", 1 << 20).unwrap();
    journal.append(vec![content("a", b"whole")]).unwrap();
    journal.append(vec![content("b", &[9; 1000])]).unwrap();
    drop(journal);
    let seg = &segments(tmp.path())[0];
    // Cut inside the last record (the segment is zeros after it).
    let written = std::fs::read(seg).unwrap().iter().rposition(|b| *b != 0).unwrap() + 1;
    let f = OpenOptions::new().write(true).open(seg).unwrap();
    f.set_len(written as u64 - 10).unwrap();
    let (journal, replay) = Journal::open(tmp.path(), "src", 1 << 20).unwrap();
    assert_eq!(replayed_files(&replay), vec![("a", &b"whole"[..])]);
    assert_eq!(replay.torn_segments, 1);
    assert!(replay.torn_bytes > 1000);
    // New records go after the torn one's seq, in a new segment.
    let seq = journal.append(vec![content("c", b"new")]).unwrap()[0];
    assert!(seq >= 2, "{seq}");
}

#[test]
fn one_mount_at_a_time_and_only_its_own_source() {
    let tmp = tempfile::tempdir().unwrap();
    let (journal, _) = Journal::open(tmp.path(), "s3://b/x", 1 << 20).unwrap();
    let err = Journal::open(tmp.path(), "s3://b/x", 1 << 20).unwrap_err();
    assert!(matches!(err, JournalError::InUse { .. }), "{err}");
    assert!(err.to_string().contains("another mount"));
    journal.append(vec![content("a", b"pending")]).unwrap();
    drop(journal);
    let err = Journal::open(tmp.path(), "s3://b/other", 1 << 20).unwrap_err();
    assert!(
        err.to_string().contains("holds uncommitted writes of s3://b/x"),
        "{err}"
    );
    // Nothing pending: any source may use it.
    let (journal, replay) = Journal::open(tmp.path(), "s3://b/x", 1 << 20).unwrap();
    assert_eq!(replay.files.len(), 1);
    journal.replayed().unwrap();
    drop(journal);
    Journal::open(tmp.path(), "s3://b/other", 1 << 20).unwrap();
}
