//! The sharding layer under injected faults (store/fault.rs), without a mount: readers of every
//! inner chunk while the store fails some requests, truncates some bodies, and replaces shards
//! with other valid versions between an index read and a chunk read. Every read that succeeds
//! must return one committed version of that chunk exactly — never a mix, a torn or a
//! truncated one; failures are allowed (they become EIO above). Prints what was injected.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use zarrfs::store::fault::{FaultPlan, FaultStore};
use zarrfs::store::Store;

#[test]
fn reads_under_faults_return_one_committed_version_or_fail() {
    let rt = runtime();
    rt.block_on(async {
        let spec = ArraySpec::new(&[16, 16], &[8, 8], &[2, 2]);
        // Two versions of every chunk, each stored as whole valid shards.
        let versions: Vec<Chunks> = (0..2).map(|v| spec.full_chunks(10 + v, 3, 40)).collect();
        let builds: Vec<_> = versions.iter().map(|c| spec.build("a/", c)).collect();
        let memory = memory_store(&builds[0].files);
        let faults = Arc::new(FaultStore::new(
            memory,
            FaultPlan {
                seed: 7,
                error_percent: 10,
                truncate_percent: 10,
                max_latency: Duration::from_micros(200),
                replace_percent: 10,
            },
        ));
        for key in builds[0].files.keys().filter(|k| !k.ends_with("zarr.json")) {
            let values = builds.iter().map(|b| Bytes::from(b.files[key].clone())).collect();
            faults.may_replace(key, values);
        }
        let doc = builds[0].files["a/zarr.json"].clone();
        // Indexes trusted for no time: every read looks at the shard's version again.
        let options = zarrfs::shard::ShardOptions {
            revalidate_after: Duration::ZERO,
            ..Default::default()
        };
        let array = Arc::new(open_array(faults.clone() as Arc<dyn Store>, "a/", &doc, options));
        let expected: BTreeMap<_, _> = versions[0]
            .keys()
            .filter(|c| spec.in_grid(c))
            .cloned()
            .map(|c| (c, ()))
            .collect();
        let (mut ok, mut failed) = (0u64, 0u64);
        // Eight readers at a time, four rounds over every chunk.
        let coords: Vec<_> = expected.keys().cloned().collect();
        for round in 0..4 {
            for batch in coords.chunks(8) {
                let tasks: Vec<_> = batch
                    .iter()
                    .cloned()
                    .map(|c| {
                        let array = array.clone();
                        tokio::spawn(async move {
                            let read = array.read_chunk(&c, 0, u64::MAX).await;
                            (c, read.map(|r| r.map(|(_, b)| b)))
                        })
                    })
                    .collect();
                for task in tasks {
                    let (coords, read) = task.await.unwrap();
                    match read {
                        Ok(Some(bytes)) => {
                            let one_of = versions
                                .iter()
                                .any(|v| v.get(&coords).map(|b| &b[..]) == Some(&bytes[..]));
                            assert!(
                                one_of,
                                "round {round}, chunk {coords:?}: {} bytes no committed version holds",
                                bytes.len()
                            );
                            ok += 1;
                        }
                        Ok(None) => panic!("chunk {coords:?} vanished: every version holds it"),
                        Err(e) => {
                            if failed == 0 {
                                println!("first failure: {e}");
                            }
                            failed += 1
                        }
                    }
                }
            }
        }
        let c = &faults.counts;
        println!(
            "reads ok {ok}, failed {failed}; injected: errors {}, truncated bodies {}, shard replacements {}",
            c.errors.load(Relaxed),
            c.truncated.load(Relaxed),
            c.replaced.load(Relaxed)
        );
        assert!(ok > failed, "most reads succeed: {ok} ok, {failed} failed");
        assert!(c.errors.load(Relaxed) > 0 && c.truncated.load(Relaxed) > 0 && c.replaced.load(Relaxed) > 0);
    });
}
