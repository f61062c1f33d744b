"""A child pytest of a client venv and the failed tests of its JUnit report (the peers' suites
run in a child pytest of each client venv: test_zarr_suites.py, test_client_suites.py)."""
from __future__ import annotations

import os
import re
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path


def run_child(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float, junit: Path) -> dict:
    """Run a child pytest (`cmd` writes its JUnit report to `junit`) with this process's
    environment less its Python and pytest variables, plus `env`; returns the exit code ("timeout"
    if it ran out of time), its output, duration, the failed tests ({node id: the error's first
    lines}) and how many passed."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST"))}
    child_env.update(env)
    start = time.monotonic()
    try:
        res = subprocess.run(cmd, cwd=cwd, env=child_env, capture_output=True, text=True, timeout=timeout)
        code, out = res.returncode, res.stdout + res.stderr
    except subprocess.TimeoutExpired as e:
        code = "timeout"
        out = "".join(x.decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr))
    return {"code": code, "output": out, "seconds": time.monotonic() - start,
            "failed": failures(junit), "passed": passed(junit)}


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
