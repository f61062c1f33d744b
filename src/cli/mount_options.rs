//! `-o` option lists, the way `mount -t fuse.zarrfs`, `/etc/fstab` and the FUSE mount helper
//! hand them over, turned into zarrfs's own command line before it is parsed.
//!
//! The helper runs `zarrfs SOURCE DIR -o OPTIONS` (no command word): that is
//! `zarrfs mount SOURCE DIR -o OPTIONS`. Every item of every `-o` list follows one rule, in
//! this order:
//! 1. **Mount options.** `ro`, `rw`, `allow_other`, `uid=N` and `gid=N` take effect. The ones
//!    the kernel, mount(8) or the helper deal with (`dev`, `suid`, `exec`, `noatime`, `auto`,
//!    `user`, `defaults`, `_netdev`, `nofail`, `x-*`, …) are accepted and ignored.
//! 2. **zarrfs options**, by the name of their long flag, with `_` or `-`: `view=raw`,
//!    `cache_size=1G`, `endpoint_url=…`, `write_back_delay=5`, `read_only`, `no_sign_request`.
//! 3. **object_store client keys** (`key=value`, e.g. `aws_virtual_hosted_style_request=true`):
//!    passed to the remote source, which refuses keys its cloud does not know.
//!
//! Anything else is refused with the valid names. Arguments other than `-o` lists are left as
//! they are, so `-o` and flags mix freely.

use std::ffi::OsString;

/// Subcommands; a first argument that is none of these (nor a flag) starts the helper form.
const COMMANDS: [&str; 6] = ["mount", "unmount", "inspect", "stats", "copy", "help"];

/// Mount options that take effect, by what they become.
const APPLIED: [&str; 5] = ["ro", "rw", "allow_other", "uid=N", "gid=N"];

/// Mount options accepted and ignored: the kernel's (zarrfs mounts nodev, nosuid, noatime
/// whatever is asked), mount(8)'s and the helper's.
const IGNORED: [&str; 34] = [
    "dev",
    "nodev",
    "suid",
    "nosuid",
    "exec",
    "noexec",
    "atime",
    "noatime",
    "relatime",
    "norelatime",
    "strictatime",
    "nostrictatime",
    "lazytime",
    "nolazytime",
    "diratime",
    "nodiratime",
    "iversion",
    "noiversion",
    "mand",
    "nomand",
    "async",
    "sync",
    "dirsync",
    "auto",
    "noauto",
    "user",
    "nouser",
    "users",
    "owner",
    "group",
    "defaults",
    "_netdev",
    "nofail",
    "default_permissions",
];

/// A long option of `zarrfs mount`: its name and whether it takes a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LongOption {
    pub name: String,
    pub takes_value: bool,
}

/// The argument list with the helper form and every `-o` list expanded (see the module docs).
pub fn expand(argv: Vec<OsString>, options: &[LongOption]) -> Result<Vec<OsString>, String> {
    let mut args = argv.into_iter();
    let mut out: Vec<OsString> = args.next().into_iter().collect();
    let rest: Vec<OsString> = args.collect();
    let helper_form = rest
        .first()
        .and_then(|a| a.to_str())
        .is_some_and(|first| !first.starts_with('-') && !COMMANDS.contains(&first));
    if helper_form {
        out.push("mount".into());
    } else if rest.first().and_then(|a| a.to_str()) != Some("mount") {
        out.extend(rest);
        return Ok(out);
    }
    let mut rest = rest.into_iter();
    while let Some(arg) = rest.next() {
        let list = match arg.to_str() {
            Some("--") => {
                out.push(arg);
                out.extend(rest.by_ref());
                break;
            }
            Some("-o") => match rest.next() {
                Some(list) => list
                    .into_string()
                    .map_err(|_| "-o: the option list is not UTF-8".to_string())?,
                None => return Err("-o needs a list of options (NAME or NAME=VALUE, comma-separated)".into()),
            },
            Some(a) if a.starts_with("-o") && a.len() > 2 => a[2..].to_string(),
            _ => {
                out.push(arg);
                continue;
            }
        };
        for item in list.split(',').filter(|i| !i.is_empty()) {
            out.extend(expand_item(item, options)?.into_iter().map(OsString::from));
        }
    }
    Ok(out)
}

/// The command-line arguments one `-o` item stands for.
fn expand_item(item: &str, options: &[LongOption]) -> Result<Vec<String>, String> {
    let (name, value) = match item.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (item, None),
    };
    let flag = |f: &str| Ok(vec![f.to_string()]);
    match (name, value) {
        ("ro", None) => return flag("--read-only"),
        ("rw", None) => return Ok(Vec::new()),
        ("allow_other", None) => return flag("--allow-other"),
        ("uid" | "gid", Some(v)) => return Ok(vec![format!("--{name}"), v.to_string()]),
        (n, _) if IGNORED.contains(&n) || n.starts_with("x-") || n == "comment" => return Ok(Vec::new()),
        _ => {}
    }
    let long = name.replace('_', "-");
    if let Some(option) = options.iter().find(|o| o.name == long) {
        return match (option.takes_value, value) {
            (true, Some(v)) => Ok(vec![format!("--{long}"), v.to_string()]),
            (true, None) => Err(format!("-o {name} needs a value: {name}=VALUE")),
            (false, None | Some("true")) => flag(&format!("--{long}")),
            (false, Some("false")) => Ok(Vec::new()),
            (false, Some(_)) => Err(format!("-o {name} takes no value (or true/false)")),
        };
    }
    match value {
        // An object_store client key; the remote source checks it against its cloud's keys.
        Some(v) => Ok(vec!["-o".to_string(), format!("{name}={v}")]),
        None => Err(unknown(name, options)),
    }
}

/// The refusal of an unknown `-o` name, listing what is valid.
pub fn unknown(name: &str, options: &[LongOption]) -> String {
    let zarrfs: Vec<String> = options
        .iter()
        .map(|o| {
            let n = o.name.replace('-', "_");
            if o.takes_value {
                format!("{n}=…")
            } else {
                n
            }
        })
        .collect();
    format!(
        "unknown mount option {name:?}. Valid: the mount options {}; the zarrfs options {}; and, \
         for remote sources, the object_store client keys of the source's cloud as KEY=VALUE \
         (e.g. aws_virtual_hosted_style_request=true). Ignored: {}, x-*.",
        APPLIED.join(", "),
        zarrfs.join(", "),
        IGNORED.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> Vec<LongOption> {
        let o = |name: &str, takes_value| LongOption {
            name: name.into(),
            takes_value,
        };
        vec![
            o("view", true),
            o("cache-size", true),
            o("read-only", false),
            o("no-sign-request", false),
        ]
    }

    fn run(args: &[&str]) -> Result<Vec<String>, String> {
        let argv = args.iter().map(OsString::from).collect();
        expand(argv, &options()).map(|v| v.into_iter().map(|a| a.into_string().unwrap()).collect())
    }

    #[test]
    fn the_helper_form_is_a_mount() {
        assert_eq!(
            run(&["zarrfs", "/src", "/mnt", "-o", "ro,allow_other,uid=5,gid=6,dev,suid"]).unwrap(),
            [
                "zarrfs",
                "mount",
                "/src",
                "/mnt",
                "--read-only",
                "--allow-other",
                "--uid",
                "5",
                "--gid",
                "6"
            ]
        );
        assert_eq!(
            run(&["zarrfs", "/src", "/mnt", "-o", "rw"]).unwrap(),
            ["zarrfs", "mount", "/src", "/mnt"]
        );
        // Commands and flags are left alone.
        assert_eq!(run(&["zarrfs", "inspect", "-o"]).unwrap(), ["zarrfs", "inspect", "-o"]);
        assert_eq!(run(&["zarrfs", "--help"]).unwrap(), ["zarrfs", "--help"]);
        assert_eq!(run(&["zarrfs"]).unwrap(), ["zarrfs"]);
    }

    #[test]
    fn zarrfs_options_then_object_store_keys() {
        assert_eq!(
            run(&[
                "z",
                "mount",
                "s3://b/x",
                "/m",
                "-oview=raw,cache_size=1G,no_sign_request",
                "-o",
                "aws_region=eu,x-systemd.automount,_netdev,nofail"
            ])
            .unwrap(),
            [
                "z",
                "mount",
                "s3://b/x",
                "/m",
                "--view",
                "raw",
                "--cache-size",
                "1G",
                "--no-sign-request",
                "-o",
                "aws_region=eu"
            ]
        );
        assert_eq!(
            run(&["z", "mount", "a", "b", "-o", "read-only=false,read_only=true"]).unwrap(),
            ["z", "mount", "a", "b", "--read-only"]
        );
        assert_eq!(
            run(&["z", "mount", "a", "b", "--", "-o"]).unwrap(),
            ["z", "mount", "a", "b", "--", "-o"]
        );
    }

    #[test]
    fn unknown_names_and_missing_values_are_refused() {
        let e = run(&["z", "a", "b", "-o", "bogus"]).unwrap_err();
        assert!(
            e.contains("\"bogus\"")
                && e.contains("cache_size=…")
                && e.contains("read_only")
                && e.contains("allow_other"),
            "{e}"
        );
        assert!(run(&["z", "a", "b", "-o", "view"]).unwrap_err().contains("view=VALUE"));
        assert!(run(&["z", "a", "b", "-o", "read_only=yes"])
            .unwrap_err()
            .contains("takes no value"));
        assert!(run(&["z", "a", "b", "-o"]).unwrap_err().contains("needs a list"));
    }
}
