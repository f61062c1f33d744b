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
                ..Default::default()
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

/// Writers of disjoint chunks while the store fails a third of requests and adds latency: a
/// write acknowledged (Ok) is never lost. At the end each chunk holds its last acknowledged
/// value or a value written after it (a write whose acknowledgement was lost may still have
/// landed), read without faults.
#[test]
fn acknowledged_writes_survive_faults() {
    let rt = runtime();
    rt.block_on(async {
        let spec = ArraySpec::new(&[16, 16], &[8, 8], &[2, 2]);
        let initial = spec.full_chunks(3, 3, 20);
        let build = spec.build("a/", &initial);
        let memory = memory_store(&build.files);
        let faults = Arc::new(FaultStore::new(
            memory.clone(),
            FaultPlan {
                seed: 11,
                error_percent: 30,
                max_latency: Duration::from_micros(300),
                ..Default::default()
            },
        ));
        let doc = build.files["a/zarr.json"].clone();
        let array = Arc::new(open_array(faults.clone() as Arc<dyn Store>, "a/", &doc, sticky()));
        let coords: Vec<_> = initial.keys().filter(|c| spec.in_grid(c)).cloned().collect();
        let writers: Vec<_> = coords
            .chunks(coords.len().div_ceil(4))
            .map(|mine| {
                let (array, mine) = (array.clone(), mine.to_vec());
                tokio::spawn(async move {
                    // Per chunk: every value tried, and how many of them were acknowledged.
                    let mut log: BTreeMap<Vec<u64>, (Vec<Vec<u8>>, usize)> = BTreeMap::new();
                    for n in 0..6u64 {
                        for c in &mine {
                            let value = chunk_bytes(c, 8 + n as usize, 100 + n);
                            let entry = log.entry(c.clone()).or_default();
                            entry.0.push(value.clone());
                            if array.write_chunk(c, Some(Bytes::from(value))).await.is_ok() {
                                entry.1 = entry.0.len();
                            }
                        }
                    }
                    log
                })
            })
            .collect();
        let mut logs = BTreeMap::new();
        for w in writers {
            logs.extend(w.await.unwrap());
        }
        let clean = open_array(memory as Arc<dyn Store>, "a/", &doc, sticky());
        let (mut acked, mut tried) = (0, 0);
        for (c, (values, last_ack)) in &logs {
            tried += values.len();
            acked += last_ack;
            let stored = clean.read_chunk(c, 0, u64::MAX).await.unwrap().map(|(_, b)| b.to_vec());
            let stored = stored.expect("every chunk is present");
            let allowed = if *last_ack == 0 {
                &values[..]
            } else {
                &values[last_ack - 1..]
            };
            let was_initial = *last_ack == 0 && initial.get(c) == Some(&stored);
            assert!(
                was_initial || allowed.contains(&stored),
                "chunk {c:?}: an acknowledged write was lost ({} values tried, last acknowledged #{last_ack})",
                values.len()
            );
        }
        println!(
            "writes tried {tried}; injected errors {}",
            faults.counts.errors.load(Relaxed)
        );
        assert!(faults.counts.errors.load(Relaxed) > 20 && acked > 0);
    });
}
