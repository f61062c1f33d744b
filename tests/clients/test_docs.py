"""The documentation keeps up with the binary and with itself: every long option each subcommand's
`--help` prints is in docs/configuration.md under that subcommand (and every option the page's
tables name exists); every relative link of README.md and docs/*.md reaches an existing file,
and a `#anchor` an existing heading of it (GitHub's slug rules); every repository path the
pages name in code (scripts, benchmarks, tests, sources) exists.

Links and paths are checked apart: links are what a reader clicks, paths are what a reader
types. No server and no mount is needed."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import run_zarrfs

REPO = Path(__file__).resolve().parents[2]
CONFIGURATION = REPO / "docs" / "configuration.md"
# clap's own flags, on every command: the page says so once instead of per command.
CLAP_FLAGS = {"--help", "--version"}


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def subcommands(zarrfs_bin) -> list[str]:
    """The subcommands `zarrfs --help` lists (clap's `help` aside)."""
    out = run_zarrfs(zarrfs_bin, "--help").stdout
    listed = out.split("Commands:", 1)[1].split("\n\n", 1)[0]
    names = [line.split()[0] for line in listed.splitlines() if line.strip()]
    return [n for n in names if n != "help"]


def declared_long_options(help_text: str) -> set[str]:
    """The long options a clap `--help` declares: lines that start (after at most six spaces of
    indentation, as clap lays them out) with `--name` or `-x, --name`; descriptions are indented
    further, so an option only mentioned in a description is not taken for one."""
    return set(re.findall(r"(?m)^ {2,6}(?:-\w, )?(--[a-z0-9][a-z0-9-]*)", help_text)) - CLAP_FLAGS


def outside_code_fences(text: str) -> str:
    """The text with fenced code blocks blanked (line count kept)."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else line)
    return "\n".join(out)


def sections(text: str) -> list[tuple[str, str]]:
    """(heading line, body up to the next heading of the same or a higher level) for every
    `##` heading outside code."""
    text = outside_code_fences(text)
    heads = list(re.finditer(r"(?m)^## .*$", text))
    return [(h.group(0), text[h.end():(heads[i + 1].start() if i + 1 < len(heads) else len(text))])
            for i, h in enumerate(heads)]


def section_for(command: str, text: str) -> str:
    """The configuration page's section(s) whose heading names `zarrfs COMMAND`."""
    found = [body for head, body in sections(text) if f"`zarrfs {command}`" in head]
    assert found, f"docs/configuration.md has no section headed with `zarrfs {command}`"
    return "\n".join(found)


def documented(option: str, text: str) -> bool:
    """`--option` written in code (alone or with its value: `--uid N`, `--shard [SHAPE|auto]`)."""
    return re.search(r"`" + re.escape(option) + r"(?![a-z0-9-])[^`]*`", text) is not None


def test_every_long_option_of_every_subcommand_is_in_the_configuration_page(zarrfs_bin):
    text = CONFIGURATION.read_text()
    commands = subcommands(zarrfs_bin)
    assert {"mount", "copy", "unmount", "stats", "inspect"} <= set(commands), commands
    missing, total = [], 0
    for command in commands:
        options = declared_long_options(run_zarrfs(zarrfs_bin, command, "--help").stdout)
        total += len(options)
        body = section_for(command, text)
        missing += [f"zarrfs {command} {o}" for o in sorted(options) if not documented(o, body)]
    # mount alone declares more than 25: a parse that finds next to nothing must not pass
    assert total >= 35, total
    assert not missing, f"options missing from docs/configuration.md: {missing}"


def test_every_option_the_configuration_page_names_exists(zarrfs_bin):
    """The first column of each table row names options of the section's command(s)."""
    text = CONFIGURATION.read_text()
    commands = subcommands(zarrfs_bin)
    declared = {c: declared_long_options(run_zarrfs(zarrfs_bin, c, "--help").stdout) for c in commands}
    stale = []
    for head, body in sections(text):
        named = [c for c in commands if f"`zarrfs {c}`" in head]
        if not named:
            continue
        have = set().union(*(declared[c] for c in named))
        for row in re.findall(r"(?m)^\|(.*)$", body):
            cells = [c.strip() for c in row.split("|")]
            for option in re.findall(r"`(--[a-z0-9][a-z0-9-]*)", " ".join(cells[:2])):
                if option not in have:
                    stale.append(f"{head}: {option}")
    assert not stale, f"docs/configuration.md names options the binary does not have: {stale}"


# ---------------------------------------------------------------------------------------------
# links


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text (links, code and emphasis marks gone),
    lower case, every character but letters, digits, `_`, `-` and spaces dropped, spaces `-`."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a page, repeated headings numbered as GitHub does (-1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"(?m)^#{1,6} +(.*?) *#*$", outside_code_fences(path.read_text())):
        slug = github_slug(m.group(1))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(path: Path) -> list[str]:
    """Link targets of a page outside code: `[text](target)` and `[text]: target`."""
    text = re.sub(r"`[^`\n]*`", "", outside_code_fences(path.read_text()))
    inline = re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text)
    refs = re.findall(r"(?m)^\s*\[[^\]]+\]:\s*(\S+)", text)
    return inline + refs


def broken_links(page: Path) -> list[str]:
    bad = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            bad.append(f"{page.relative_to(REPO)}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    return bad


def test_the_slug_rules():
    assert github_slug("The v2 view (`--view v2`)") == "the-v2-view---view-v2"
    assert github_slug("/etc/fstab") == "etcfstab"
    assert github_slug("Many machines: `--part K/N`") == "many-machines---part-kn"
    assert github_slug("Other people's test suites") == "other-peoples-test-suites"


def test_a_broken_link_is_found(tmp_path):
    """The checker itself: a missing file and a missing heading are both reported."""
    (tmp_path / "a.md").write_text("# A\n\n## Some heading\n\n```\n## not a heading\n```\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#some-heading) [x](a.md#not-a-heading) [y](gone.md) "
                    "`[code](gone.md)` [z](#b) [w](https://example.org/x)\n\n# B\n")
    global REPO
    saved, REPO = REPO, tmp_path
    try:
        assert broken_links(page) == ["b.md: a.md#not-a-heading (no such heading)",
                                      "b.md: gone.md (no such file)"]
    finally:
        REPO = saved


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    assert not broken_links(page)


def test_the_pages_are_linked_from_the_readme():
    targets = {t.partition("#")[0] for t in links(REPO / "README.md")}
    unlinked = [p.name for p in pages()[1:] if f"docs/{p.name}" not in targets]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


# ---------------------------------------------------------------------------------------------
# paths named in code

PATH = re.compile(r"(?<![\w/.~$-])((?:scripts|bench|tests|src|systemd|fuzz)/[\w./@-]*[\w/])")


def named_paths(page: Path) -> set[str]:
    """Repository paths a page names in code (spans and blocks): files (with an extension) and
    directories (ending in `/`); other words with a slash (`bench/many`, a fixture a benchmark
    makes) are not paths of the repository."""
    text = page.read_text()
    code = re.findall(r"`[^`\n]+`", outside_code_fences(text))
    code += re.findall(r"(?ms)^```[^\n]*\n(.*?)^```", text)
    return {p for chunk in code for p in PATH.findall(chunk)
            if p.endswith("/") or re.search(r"\.[a-z0-9]+$", p.rsplit("/", 1)[-1])}


def test_every_path_named_in_code_exists():
    missing = []
    for page in pages():
        for p in sorted(named_paths(page)):
            if (REPO / p).exists():
                continue
            missing.append(f"{page.relative_to(REPO)}: {p}")
    assert not missing, f"paths named in the docs that do not exist: {missing}"
