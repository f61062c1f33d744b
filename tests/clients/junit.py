"""The failed tests of a child pytest run, from its JUnit report (the peers' suites run in a
child pytest of each client venv: test_zarr_suites.py, test_xarray_suite.py)."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path


def failures(junit: Path) -> dict[str, str]:
    """Failed or erroring test cases of a JUnit report: node id -> the error's first lines."""
    if not junit.exists():
        return {}
    out = {}
    for case in ET.parse(junit).iter("testcase"):
        for bad in list(case.findall("failure")) + list(case.findall("error")):
            module, *classes = case.get("classname", "").split(".")
            node = "::".join([f"{module}.py", *classes, case.get("name", "")])
            message = " | ".join((bad.get("message") or bad.text or "").strip().splitlines()[:3])
            if "hypothesis.errors.Flaky" in message:
                # the replay did not fail alike: the first error is the one to read
                first = next((m.group(1) for m in FIRST_ERROR.finditer(bad.text or "")
                              if not m.group(1).startswith("hypothesis.")), None)
                message = f"{first} (then on replay: {message})" if first else message
            out[node] = message[:400]
    return out


FIRST_ERROR = re.compile(r"^E\s+([\w.]+(?:Error|Exception|Exists|Found)\b.*)$", re.M)


def passed(junit: Path) -> int:
    """How many test cases of a JUnit report passed (neither failed, erred nor were skipped)."""
    if not junit.exists():
        return 0
    n = 0
    for case in ET.parse(junit).iter("testcase"):
        if not any(case.findall(tag) for tag in ("failure", "error", "skipped")):
            n += 1
    return n
