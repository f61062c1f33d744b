//! Directory listings of plain web servers, read from their HTML index pages (nginx
//! `autoindex`, Apache `mod_autoindex`, `python -m http.server`, and the like), for HTTP
//! sources whose server offers no WebDAV `PROPFIND`.
//!
//! An index page is a list of links. Each link to a direct child (a relative name without
//! `/` inside it, `?`, `#` or a scheme) is an entry; a trailing `/` makes it a directory. Names
//! are percent-decoded. Sizes are taken from the page only where it shows them exactly (nginx
//! prints the byte count after the date; other servers round, e.g. `1.2K`): entries without one
//! are asked for with a HEAD by the caller. Anything else on the page — the parent link, column
//! sorting links (`?C=N;O=D`), absolute links — is ignored.
//!
//! Why by hand: no maintained crate parses directory index pages, and an HTML parser would not
//! help with the part that matters (which links are entries); the scan below only looks for
//! `href` attributes and the text that follows each link on its line.

/// One entry of an index page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    pub name: String,
    pub dir: bool,
    /// The exact size, when the page shows one.
    pub size: Option<u64>,
}

/// Whether a body looks like an HTML page (rather than a stored file that a path happened to
/// name).
pub fn is_html(body: &[u8]) -> bool {
    let head = String::from_utf8_lossy(&body[..body.len().min(1024)]).to_ascii_lowercase();
    head.contains("<html") || head.contains("<!doctype html") || head.contains("<title>index of")
}

/// The entries linked from an index page, in page order, without duplicates.
pub fn parse(html: &str) -> Vec<IndexEntry> {
    let mut out: Vec<IndexEntry> = Vec::new();
    let lower = html.to_ascii_lowercase();
    let mut at = 0;
    while let Some(found) = lower[at..].find("href=") {
        let start = at + found + "href=".len();
        let Some((target, after)) = attribute_value(html, start) else {
            break;
        };
        at = after;
        let Some((name, dir)) = child_name(&target) else {
            continue;
        };
        if out.iter().any(|e| e.name == name) {
            continue;
        }
        let size = if dir { None } else { size_after_link(html, after) };
        out.push(IndexEntry { name, dir, size });
    }
    out
}

/// The (quoted or bare) attribute value starting at `start`, and where it ends.
fn attribute_value(html: &str, start: usize) -> Option<(String, usize)> {
    let rest = html.get(start..)?;
    let quote = rest.chars().next()?;
    let (value, len) = if quote == '"' || quote == '\'' {
        let end = rest[1..].find(quote)?;
        (&rest[1..1 + end], end + 2)
    } else {
        let end = rest.find(|c: char| c.is_whitespace() || c == '>').unwrap_or(rest.len());
        (&rest[..end], end)
    };
    Some((unescape_entities(value), start + len))
}

/// The child a link names, and whether it is a directory; `None` for anything that is not a
/// direct child (parent, absolute, query, fragment, deeper paths).
fn child_name(target: &str) -> Option<(String, bool)> {
    let target = target.strip_prefix("./").unwrap_or(target);
    if target.is_empty() || target.contains(['?', '#', ':']) || target.starts_with('/') {
        return None;
    }
    let (name, dir) = match target.strip_suffix('/') {
        Some(name) => (name, true),
        None => (target, false),
    };
    if name.is_empty() || name.contains('/') {
        return None;
    }
    let name = percent_decode(name)?;
    if name == "." || name == ".." || name.contains('/') {
        return None;
    }
    Some((name, dir))
}

/// The exact byte count that nginx prints after a link: the last token of the rest of the
/// line, when the text after the link's `</a>` ends in plain digits.
fn size_after_link(html: &str, after: usize) -> Option<u64> {
    let rest = html.get(after..)?;
    let close = rest.to_ascii_lowercase().find("</a>")?;
    let tail = &rest[close + 4..];
    let line = tail.split('\n').next()?;
    if line.contains('<') {
        return None; // table layouts (Apache, lighttpd): sizes are rounded there
    }
    let last = line.split_whitespace().last()?;
    last.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| last.parse().ok())
        .flatten()
}

fn unescape_entities(s: &str) -> String {
    s.replace("&amp;", "&")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, dir: bool, size: Option<u64>) -> IndexEntry {
        IndexEntry {
            name: name.into(),
            dir,
            size,
        }
    }

    #[test]
    fn nginx_autoindex() {
        let page = "<html>\r\n<head><title>Index of /zarrfs/data.zarr/</title></head>\r\n<body>\r\n\
<h1>Index of /zarrfs/data.zarr/</h1><hr><pre><a href=\"../\">../</a>\r\n\
<a href=\"c/\">c/</a>                                                 23-Nov-2026 14:00                   -\r\n\
<a href=\"my%20notes.txt\">my notes.txt</a>                                 23-Nov-2026 14:00                  12\r\n\
<a href=\"zarr.json\">zarr.json</a>                                          23-Nov-2026 14:00                 403\r\n\
</pre><hr></body>\r\n</html>\r\n";
        assert!(is_html(page.as_bytes()));
        assert_eq!(
            parse(page),
            vec![
                entry("c", true, None),
                entry("my notes.txt", false, Some(12)),
                entry("zarr.json", false, Some(403)),
            ]
        );
    }

    #[test]
    fn apache_and_python_pages_have_no_exact_sizes() {
        let apache = "<!DOCTYPE HTML PUBLIC \"-//W3C//DTD HTML 3.2 Final//EN\"><html><head><title>Index of /d</title></head><body>\
<table><tr><th><a href=\"?C=N;O=D\">Name</a></th></tr>\
<tr><td><a href=\"/\">Parent Directory</a></td></tr>\
<tr><td><a href=\"0/\">0/</a></td><td align=\"right\">2026-11-23 14:00  </td><td align=\"right\">  - </td></tr>\
<tr><td><a href=\"zarr.json\">zarr.json</a></td><td align=\"right\">2026-11-23 14:00  </td><td align=\"right\">403 </td></tr>\
</table></body></html>";
        assert_eq!(
            parse(apache),
            vec![entry("0", true, None), entry("zarr.json", false, None)]
        );
        let python = "<!DOCTYPE HTML>\n<html lang=\"en\"><body><ul>\n<li><a href=\"c/\">c/</a></li>\n\
<li><a href='zarr.json'>zarr.json</a></li>\n</ul></body></html>";
        assert_eq!(
            parse(python),
            vec![entry("c", true, None), entry("zarr.json", false, None)]
        );
    }

    #[test]
    fn links_that_are_not_children_are_ignored() {
        let page = "<html><a href=\"../\">up</a><a href=\"https://example.org/x\">x</a>\
<a href=\"/abs/y\">y</a><a href=\"a/b\">deep</a><a href=\"#top\">top</a><a href=\"./k\">k</a>\
<a href=\"k\">again</a><a href=\"bad%zz\">bad</a><a href=\"%2e%2e/\">dots</a></html>";
        assert_eq!(parse(page), vec![entry("k", false, None)]);
        assert!(!is_html(b"\x00\x01 binary shard bytes"));
    }
}
