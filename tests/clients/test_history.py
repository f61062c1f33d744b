"""The history checker (history.py) itself: it must accept what a correct filesystem can show
and flag each kind of wrong answer, so the model-checked workloads can fail."""
import math

from history import ABSENT, EMPTY, PRESENT, Checker, Op

INF = math.inf


def check(*ops, window=0.0) -> list[str]:
    return [p.what for p in Checker(list(ops), window).check()]


def w(value, inv, resp, mount=0, kind="write", errno=None):
    return Op(0, mount, kind, "k", inv, resp, value, errno)


def r(value, inv, resp, mount=0, kind="read"):
    return Op(1, mount, kind, "k", inv, resp, value)


def test_sequential_histories():
    assert check(w("a", 0, 1), w("b", 2, 3), r("b", 4, 5)) == []
    assert check(w("a", 0, 1), r("a", 0.5, 0.6)) == []            # read while the write runs
    assert check(r(ABSENT, 0, 1), w("a", 2, 3), r(ABSENT, 1.5, 2.5)) == []  # before it took effect
    stale = check(w("a", 0, 1), w("b", 2, 3), r("a", 4, 5))
    assert len(stale) == 1 and "stale" in stale[0]


def test_invented_and_future_values():
    assert "which no operation wrote" in check(w("a", 0, 1), r("zz", 2, 3))[0]
    assert "stale, or before" in check(r("a", 0, 1), w("a", 2, 3))[0]


def test_absent():
    assert check(w("a", 0, 1), w(None, 2, 3, kind="delete"), r(ABSENT, 4, 5)) == []
    assert len(check(w("a", 0, 1), r(ABSENT, 2, 3))) == 1       # deleted by nobody
    # a delete that found nothing changed nothing
    assert len(check(w("a", 0, 1), w(None, 2, 3, kind="delete", errno=2), r(ABSENT, 4, 5))) == 1
    assert check(w("a", 0, 1), r(PRESENT, 2, 3, kind="list")) == []
    assert len(check(r(PRESENT, 0, 1, kind="list"))) == 1


def test_other_mounts_within_the_window():
    ops = (w("a", 0, 1, mount=0), w("b", 2, 3, mount=0), r("a", 3.5, 4, mount=1))
    assert check(*ops, window=1.0) == []
    assert len(check(*ops, window=0.2)) == 1


def test_reads_never_go_back():
    # b's write runs long; once a read has seen b, a later read may not see a again
    ops = [w("a", 0, 1), w("b", 2, 10), r("b", 3, 4), r("a", 5, 6)]
    assert check(*ops) == ["a read went back to an older value"]
    assert check(*ops[:3], r("b", 5, 6)) == []


def test_failed_writes_may_land_late_and_empty_files():
    assert check(w("a", 0, 1), w("b", 2, INF, errno=5), r("b", 100, 101)) == []
    assert check(w("a", 0, 5), r(EMPTY, 1, 2)) == []
    assert check(w("a", 0, 5, mount=1), r(EMPTY, 1, 2, mount=0)) == []
    assert len(check(w("a", 0, 1, mount=1), r(EMPTY, 3, 4, mount=0), window=2.5)) == 0
    assert len(check(w("a", 0, 1, mount=1), r(EMPTY, 3, 4, mount=0), window=0.5)) == 1
    assert len(check(w("a", 0, 1), r(EMPTY, 2, 3))) == 1


def test_the_documented_limit_is_narrow():
    ops = [w("a", 0, 1), w("b", 2, 3), w(None, 4, 6, kind="delete"), r(EMPTY, 5, 5.5)]
    checker = Checker(ops, 0.0)
    assert checker.check() == [] and len(checker.known) == 1
    assert len(check(w("a", 0, 1), w(None, 4, 6, kind="delete"), r(EMPTY, 7, 8))) == 1


def test_another_mounts_change_may_be_ordered_before_within_the_window():
    # a delete through mount 1 shortly after mount 0's write may not have seen it yet
    ops = (w("a", 0, 1, mount=0), w(None, 1.2, 1.5, mount=1, kind="delete"), r("a", 2, 3, mount=1))
    assert check(*ops, window=1.0) == []
    assert len(check(*ops, window=0.1)) == 1
