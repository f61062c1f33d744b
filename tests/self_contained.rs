//! The binary needs no shared library beyond the C library's own: c-blosc, its compressors and
//! snappy's C++ standard library are linked in statically (`Cargo.toml`, `.cargo/config.toml`),
//! so a copied binary or a wheel runs on a machine with none of them installed.

use std::collections::BTreeSet;
use std::process::Command;

/// What the dynamic loader is asked for: `ldd`'s names, without paths or addresses.
fn needed_libraries(binary: &str) -> BTreeSet<String> {
    let out = Command::new("ldd").arg(binary).output().expect("ldd runs");
    assert!(
        out.status.success(),
        "ldd {binary}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(|name| name.rsplit('/').next().unwrap_or(name).to_string())
        .collect()
}

#[test]
fn the_binary_links_only_the_c_library() {
    let allowed = [
        "linux-vdso.so.1",
        "libc.so.6",
        "libm.so.6",
        "libgcc_s.so.1",
        "ld-linux-x86-64.so.2",
    ];
    let needed = needed_libraries(env!("CARGO_BIN_EXE_zarrfs"));
    let extra: Vec<_> = needed.iter().filter(|n| !allowed.contains(&n.as_str())).collect();
    assert!(
        extra.is_empty(),
        "the binary needs {extra:?} beyond the C library ({needed:?})"
    );
    assert!(needed.contains("libc.so.6"), "ldd's output was not read: {needed:?}");
}
