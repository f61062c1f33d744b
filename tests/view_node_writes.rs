//! A `zarr.json` written through the mount is cached as its node's kind without being read
//! back; two writes of one document that overlap, whose answers come back in another order
//! than the store applied them, must still leave the mount showing what is stored.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use zarrfs::store::fault::{FaultPlan, FaultStore};
use zarrfs::store::memory::MemoryStore;
use zarrfs::store::Store;
use zarrfs::view::{View, ViewOptions};

fn view(store: Arc<dyn Store>) -> View {
    let options = ViewOptions {
        metadata_ttl: Duration::from_secs(600),
        ..ViewOptions::default()
    };
    View::new(store, &options)
}

/// Where `view` says the bytes of `path` are.
async fn described(view: &View, path: &str) -> Option<String> {
    let node = view.lookup(path).await.unwrap()?;
    view.describe(&node).await.unwrap()
}

#[tokio::test]
async fn overlapping_writes_of_a_node_document_leave_the_kind_stored() {
    let memory = Arc::new(MemoryStore::new());
    memory.insert("zarr.json", group_json("root"));
    let late_answers = Arc::new(FaultStore::new(
        memory.clone(),
        FaultPlan {
            seed: 3,
            max_latency: Duration::from_millis(20),
            max_reply_latency: Duration::from_millis(20),
            ..Default::default()
        },
    ));
    let mount = view(late_answers);
    // Two kinds of node that place what lies below them differently: below a group a sharded
    // array's inner chunks are files, below an array nothing is a node (its shards are files).
    let sharded = ArraySpec::new(&[8, 8], &[4, 4], &[2, 2]);
    let group = Bytes::from(group_json("g"));
    let array = Bytes::from(serde_json::to_vec(&plain_array_json()).unwrap());
    for round in 0..24 {
        let path = format!("n{round}/zarr.json");
        for (key, bytes) in sharded
            .build(&format!("n{round}/x/"), &sharded.full_chunks(1, 2, 6))
            .files
        {
            memory.insert(&key, bytes);
        }
        let at = mount.locate(&path).await.unwrap();
        let target = mount
            .write_target(&at, true)
            .await
            .unwrap()
            .expect("a document is written");
        let (a, b) = tokio::join!(
            mount.commit(&target, group.clone()),
            mount.commit(&target, array.clone())
        );
        a.unwrap();
        b.unwrap();
        let fresh = view(memory.clone());
        let chunk = format!("n{round}/x/c/0/0");
        assert_eq!(
            described(&mount, &chunk).await,
            described(&fresh, &chunk).await,
            "round {round}: the mount places files as the document the store kept says"
        );
    }
}
