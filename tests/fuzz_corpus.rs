//! Every file of every fuzz corpus (`fuzz/corpus/<target>/`, seeded by
//! `scripts/dev/fuzz_corpus.py` from the real-client fixtures, and holding every crash the fuzzers
//! found) fed to its target's function on the stable toolchain: no panic, and the round trips
//! the targets check hold. The fuzzers themselves (`fuzz/`, `scripts/dev/fuzz.sh`) are not built
//! here.

use std::path::Path;

#[test]
fn every_corpus_file_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz").join("corpus");
    for (name, target) in zarrfs::fuzzing::TARGETS {
        let dir = root.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
            .map(|entry| entry.expect("corpus entry").path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "corpus {name} is empty");
        for file in files {
            let data = std::fs::read(&file).expect("corpus file");
            let outcome = std::panic::catch_unwind(|| target(&data));
            assert!(outcome.is_ok(), "{name}: {} fails", file.display());
        }
    }
}
