"""Checking what concurrent clients observed against a reference model of the unsharded tree.

Every chunk file of the view is a register: its content is the last write's, or it is absent.
The workload (workload.py) records each operation on a file with the interval it ran in
(invocation and response on one monotonic clock) and what it observed. The history of a file is
explainable when there is an order of its operations, each taking effect at one instant inside
its interval, in which every read returns what the order says. Writes carry unique values, which
makes the check direct (conditions on pairs of operations instead of a search over orders):

  1. a value read was written, by a write that began before the read ended (nothing invented,
     nothing from the future);
  2. it was not definitely overwritten before the read began: no other write or delete began
     after it had completed and itself completed before the read began;
  3. two reads in sequence do not go back: when a read returned v1 and a later read v2, v2's
     write did not complete before v1's began;
  4. "absent" is explained the same way by the initial state or a delete;
  5. an empty file is seen only while a write is open on it (O_TRUNC is visible to readers,
     as on any filesystem; on another mount when a second writer's close commits the file
     the first one's O_TRUNC emptied, within the window) — or, a documented limit, while a
     delete or a rename onto the file runs on the reader's mount (counted in `known`).

Another mount sees a change within a consistency window (the documented `--metadata-ttl`):
an overwrite counts against a read of another mount only once the window has passed. A write
that failed may or may not have taken effect, at any time after it began. The source itself is
checked as one more observer with no window, after the workload ends.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

ABSENT = "absent"
EMPTY = "empty"
PRESENT = "present"  # a listing: the name was shown, content unknown
STORE = -2  # the source itself, read after the run: sees every completed change at once


@dataclass(eq=False)
class Op:
    thread: int
    mount: int
    kind: str            # write | rename | delete | read | list
    key: str
    inv: float
    resp: float = math.inf  # inf: failed or never returned (may take effect any time after inv)
    value: object = None    # what a write wrote (a unique token); what a read returned
    errno: int | None = None
    took: float = 0.0       # how long it ran, failed or not
    note: str = ""          # where a failed operation failed
    # one line of the operation log
    def line(self) -> str:
        end = "…" if self.resp == math.inf else f"{self.resp:.6f}"
        err = f" errno {self.errno} {self.note}".rstrip() if self.errno else ""
        return (f"[{self.inv:.6f}, {end}] t{self.thread} m{self.mount} {self.kind} {self.key}"
                f" -> {self.value}{err}")


@dataclass
class Effect:
    """A write, rename onto the key, delete, or the initial state: what the file could hold."""
    token: object        # the written value, or ABSENT
    inv: float
    resp: float
    mount: int
    op: Op | None = None


@dataclass
class Problem:
    key: str
    what: str
    ops: list[Op] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.key}: {self.what}\n" + "\n".join("    " + o.line() for o in self.ops)


def effects_of(key: str, ops: list[Op], initial: object = ABSENT) -> list[Effect]:
    effects = [Effect(initial, -math.inf, -math.inf, -1)]  # absent, or what an earlier run left
    for o in ops:
        if o.key != key or o.kind not in ("write", "rename", "delete"):
            continue
        if o.kind == "delete" and o.errno is not None:
            # ENOENT: nothing was there, no effect; any other failure may have removed it
            if o.errno == 2:
                continue
        token = ABSENT if o.kind == "delete" else o.value
        resp = o.resp if o.errno is None else math.inf
        effects.append(Effect(token, o.inv, resp, o.mount, o))
    return effects


class Overwrites:
    """For one file and one reading mount: whether some effect began after a time and was
    visible there before another (a suffix minimum over effects sorted by start)."""

    def __init__(self, effects: list[Effect], lag):
        done = sorted((e for e in effects if e.resp != math.inf), key=lambda e: e.inv)
        self.starts = [e.inv for e in done]
        self.visible = [e.resp + lag(e.mount) for e in done]
        self.done = done
        best = math.inf
        self.suffix_min = [0.0] * len(done)
        for i in range(len(done) - 1, -1, -1):
            best = min(best, self.visible[i])
            self.suffix_min[i] = best

    def first_after(self, t: float) -> int:
        return bisect.bisect_right(self.starts, t)

    def before(self, after: float, began: float) -> Effect | None:
        """An effect that began after `after` and was visible before `began`."""
        i = self.first_after(after)
        if i >= len(self.done) or self.suffix_min[i] >= began:
            return None
        return next(self.done[j] for j in range(i, len(self.done)) if self.visible[j] < began)


class Checker:
    def __init__(self, ops: list[Op], window: float, initial: dict | None = None):
        self.ops = ops
        self.window = window
        self.initial = initial or {}  # key -> what it held before these operations
        self.known: list[Op] = []  # reads explained only by the documented limit (see below)

    def lag(self, writer_mount: int, reader_mount: int) -> float:
        same = writer_mount == reader_mount or writer_mount < 0 or reader_mount == STORE
        return 0.0 if same else self.window

    def check_key(self, key: str, ops: list[Op]) -> list[Problem]:
        effects = effects_of(key, ops, self.initial.get(key, ABSENT))
        by_token = {e.token: e for e in effects if e.token != ABSENT}
        mounts = {o.mount for o in ops} | {e.mount for e in effects}
        # over[reader mount][mount of the overwriting effect]
        over = {m: {m2: Overwrites([e for e in effects if e.mount == m2], lambda wm, m=m: self.lag(wm, m))
                    for m2 in mounts} for m in mounts}
        problems = []
        reads = [o for o in ops if o.kind in ("read", "list") and o.errno is None]
        writes = [o for o in ops if o.kind == "write"]
        for r in reads:
            if r.value == EMPTY:
                if any(o.inv < r.resp and o.resp + self.lag(o.mount, r.mount) > r.inv for o in writes):
                    continue
                # Known and documented (README, limits): while a delete or a rename onto the
                # file runs, the name may still show the empty state a concurrent writer's
                # O_TRUNC left in the store, though that writer's bytes went to the replaced
                # file. Counted, not failed.
                if any(o.kind in ("delete", "rename") and o.mount == r.mount and o.inv < r.resp
                       and o.resp > r.inv for o in ops):
                    self.known.append(r)
                    continue
                problems.append(Problem(key, "an empty file with no write open", [r]))
                continue
            if r.value == PRESENT:
                candidates = [e for e in effects if e.token != ABSENT]
            elif r.value == ABSENT:
                candidates = [e for e in effects if e.token == ABSENT]
            elif r.value in by_token:
                candidates = [by_token[r.value]]
            else:
                problems.append(Problem(key, f"read {r.value!r}, which no operation wrote", [r]))
                continue
            # Among a mount's candidates begun before the read ended, the one completing last
            # is the least likely to have been overwritten: it explains the read if any does.
            best: dict[int, Effect] = {}
            for e in candidates:
                if e.inv < r.resp and (e.mount not in best or e.resp > best[e.mount].resp):
                    best[e.mount] = e
            later = None
            for e in best.values():
                # Overwritten only by what began after it was visible on the overwriter's mount.
                later = next((x for m2 in mounts
                              if (x := over[r.mount][m2].before(e.resp + self.lag(e.mount, m2), r.inv))), None)
                if later is None:
                    break
            if not best or later is not None:
                why = [e.op for e in candidates[-3:] if e.op] + [r]
                if later is not None and later.op is not None:
                    why.append(later.op)
                problems.append(Problem(key, f"read {r.value!r}: stale, or before it was written",
                                        sorted(set(why), key=lambda o: o.inv)))
        problems += self.reads_go_forward(key, reads, by_token)
        return problems

    def reads_go_forward(self, key: str, reads: list[Op], by_token: dict) -> list[Problem]:
        """Condition 3: a read that follows (beyond the window) a read of v1 returns nothing
        whose write was definitely before v1's (completed before it began, beyond the window
        when the two were written through different mounts)."""
        valued = [r for r in reads if r.value in by_token]
        problems = []
        for m2 in {r.mount for r in valued}:
            for m1 in {by_token[r.value].mount for r in valued}:
                # (time from which a read of m2 must see at least v1, v1's start), by that time,
                # for the values v1 written through mount m1
                seen = sorted(((r1.resp + self.lag(m1, m2), by_token[r1.value].inv, r1) for r1 in valued
                               if by_token[r1.value].mount == m1), key=lambda s: s[0])
                times = [s[0] for s in seen]
                prefix_max, best = [], -math.inf
                for s in seen:
                    best = max(best, s[1])
                    prefix_max.append(best)
                for r2 in (r for r in valued if r.mount == m2):
                    i = bisect.bisect_left(times, r2.inv)
                    e2 = by_token[r2.value]
                    before = e2.resp + self.lag(e2.mount, m1)
                    if i and prefix_max[i - 1] > before:
                        r1 = next(s[2] for s in seen[:i] if s[1] > before)
                        problems.append(Problem(key, "a read went back to an older value",
                                                [e2.op, by_token[r1.value].op, r1, r2]))
        return problems

    def check(self) -> list[Problem]:
        by_key: dict[str, list[Op]] = {}
        for o in self.ops:
            by_key.setdefault(o.key, []).append(o)
        return [p for k in sorted(by_key) for p in self.check_key(k, by_key[k])]
