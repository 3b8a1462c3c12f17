"""The parts of the hung-rank check on their own: rank 0's account of silence (``liveness``),
what travels on the roll call (``roster``), and the scheduler's side (``given_up``) against a
real Dask scheduler and workers. The whole, under real launchers: tests/test_hung.py."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest
from distributed import Client, Scheduler

from dask_hpc import given_up, liveness, roster
from dask_hpc.errors import UsageError
from dask_hpc.worker import HpcWorker


def test_a_rank_silent_for_the_timeout_is_hung_once_and_others_are_not() -> None:
    silence = liveness.Silence(timeout=30, interval=5)
    for rank in (1, 2, 3):
        silence.heard(rank, 0.0)
    for now in range(1, 30):  # rank 0's loop, a turn a second; ranks 1 and 3 beat every 5 s
        if now % 5 == 0:
            silence.heard(1, now)
            silence.heard(3, now)
        assert silence.hung(now) == []
    assert silence.hung(30.0) == [2]
    assert silence.hung(31.0) == []  # said once
    assert silence.next_due() == 55.0  # ranks 1 and 3, last heard at 25


def test_rank_0s_own_stall_is_not_the_ranks_silence() -> None:
    """Rank 0's node loaded: its loop did not run for 40 s. What the ranks sent meanwhile is
    read first; a rank that sends next gets one more interval before it counts as silent."""
    silence = liveness.Silence(timeout=30, interval=5)
    silence.heard(1, 0.0)
    silence.heard(2, 0.0)
    assert silence.hung(1.0) == []
    silence.heard(1, 41.0)  # read right after the stall
    assert silence.hung(41.0) == []  # rank 2's beats may still be on their way
    assert silence.hung(45.0) == []
    assert silence.hung(46.5) == [2]  # an interval after rank 0 ran again, still nothing


def test_a_forgotten_rank_is_never_hung() -> None:
    silence = liveness.Silence(timeout=30, interval=5)
    silence.heard(4, 0.0)
    silence.forget(4)
    assert silence.hung(100.0) == [] and silence.next_due() is None


def test_the_beat_interval_grows_with_the_ranks_up_to_a_third_of_the_timeout() -> None:
    assert liveness.beat_interval(30, 3) == 5
    assert liveness.beat_interval(30, 1000) == 5
    assert liveness.beat_interval(30, 10_000) == 10  # 1,000 beats a second at rank 0
    assert liveness.beat_interval(30, 1_000_000) == 10  # never over a third


@pytest.mark.parametrize("value", ["abc", "", "nan", "4.9", "-30", [1]])
def test_a_bad_timeout_is_a_usage_error_naming_the_setting_and_the_fix(value: object) -> None:
    with pytest.raises(UsageError) as error:
        liveness.hung_timeout(value)
    assert "hpc.hung-timeout" in error.value.problem and "DASK_HPC__HUNG_TIMEOUT" in error.value.fix


@pytest.mark.parametrize(("value", "seconds"), [(30, 30.0), ("45", 45.0), (0, None),
                                                ("0", None), (False, None)])  # fmt: skip
def test_good_timeouts(value: object, seconds: float | None) -> None:
    assert liveness.hung_timeout(value) == seconds


def test_what_rank_0_says_is_read_by_lines_even_split_anywhere() -> None:
    said = roster.FromRank0()
    for part in (b"be", b"at 5\nsto", b"p\ngiven-up 3", b"1\n"):
        said.feed(part)
    assert said.beat_every == 5.0 and said.stop and said.given_up == 31.0 and not said.ended


def test_a_rank_beats_only_once_asked_and_only_when_due() -> None:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    theirs.setblocking(False)
    beats = roster.Beats(ours.fileno())
    beats.beat()
    with pytest.raises(BlockingIOError):
        theirs.recv(64)  # not asked yet: nothing
    assert beats.wait(1.0) == 1.0
    beats.every = 100.0
    beats.beat()
    beats.beat()  # not due again for 100 s
    assert theirs.recv(64) == roster.BEAT
    assert 99 < beats.wait(1000.0) <= 100
    ours.close()
    theirs.close()


def test_rank_0_tells_a_joining_rank_how_often_to_beat_and_gives_it_up() -> None:
    """The roster's two ends over loopback: the rank is told the interval as it joins, its
    bytes are heard, and once given up it reads ``given-up`` before the connection's end."""
    watched: dict[int, object] = {}
    silence = liveness.Silence(timeout=30, interval=5)
    roll = roster.Roster("127.0.0.1", watched.__setitem__, lambda fd: watched.pop(fd, None),
                         silence)  # fmt: skip
    conn = roster.join(roll.address, roll.token, 2, 10)
    try:
        for _ in range(100):  # the rank 0 loop's turns, by hand
            for callback in list(watched.values()):
                callback()  # type: ignore[operator]
            if 2 in roll.alive:
                break
        assert 2 in roll.alive and 2 in silence.heard_at
        said = roster.FromRank0()
        conn.setblocking(True)
        said.feed(conn.recv(64))
        assert said.beat_every == 5.0
        roll.give_up([2], 30)
        assert 2 not in roll.alive and roll.given_up == [2] and roll.lost == []
        data = b""
        while chunk := conn.recv(64):
            data += chunk
        said.feed(data)
        assert said.given_up == 30.0
    finally:
        conn.close()
        roll.close()


def test_the_scheduler_removes_a_given_up_ranks_workers_and_refuses_their_names() -> None:
    """A real scheduler and two workers: rank 0 names worker "2" on the pipe; the scheduler
    removes it (its results are computed again on the other), and a worker that comes back
    with that name is refused, as a name already taken is."""

    async def run() -> None:
        read, write = os.pipe()
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as scheduler:
            watch = given_up.GivenUp(scheduler, read)
            async with (
                HpcWorker(scheduler.address, name="1", nthreads=1, host="127.0.0.1") as one,
                HpcWorker(scheduler.address, name="2", nthreads=1, host="127.0.0.1") as two,
                Client(scheduler.address, asynchronous=True) as client,
            ):
                held = client.submit(lambda: 6 * 7, workers=[two.address],
                                     allow_other_workers=True, pure=False)  # fmt: skip
                assert await held == 42
                given_up.tell_scheduler(write, ["2", "9"])  # 9: no such worker, no harm
                while "2" in scheduler.aliases:
                    await asyncio.sleep(0.01)
                assert list(scheduler.aliases) == ["1"]
                assert await held == 42  # computed again, on the other
                assert (await client.who_has(held))[held.key] == (one.address,)
                assert watch.names == {"2", "9"}
                with pytest.raises(RuntimeError, match="failed to start") as refused:
                    await HpcWorker(scheduler.address, name="2", nthreads=1, host="127.0.0.1")
                assert "given up (its rank hung), 2" in str(refused.value.__cause__)
                assert list(scheduler.aliases) == ["1"]
        os.close(write)
        os.close(read)

    asyncio.run(asyncio.wait_for(run(), 60))


def test_a_rank_hung_before_the_cluster_is_ready_fails_the_start_naming_it(capsys) -> None:
    """Before "ready" a hung rank is not a warning (the cluster would never become ready): the
    start fails with it named (``left_early``, which rank 0's start checks each turn)."""
    from types import SimpleNamespace

    from dask_hpc.roll_call import RollCall

    plan = SimpleNamespace(hung_timeout=30.0, abort_on_node_loss=False,
                           rank=SimpleNamespace(size=3))  # fmt: skip
    roll = RollCall(plan)  # type: ignore[arg-type]
    watched: dict[int, object] = {}
    sup = SimpleNamespace(watch_ready=watched.__setitem__, unwatch=lambda fd: watched.pop(fd))
    roll.open("tls://127.0.0.1:1", sup)  # type: ignore[arg-type]
    assert roll.roster is not None and roll.roster.silence is not None
    conn = roster.join(roll.roster.address, roll.roster.token, 2, 10)
    try:
        while 2 not in roll.roster.alive:
            for callback in list(watched.values()):
                callback()  # type: ignore[operator]
        roll.roster.silence.heard(2, -100.0)  # as if its last beat was long ago
        assert roll.newly_hung() == [2]
        assert capsys.readouterr().err == ""  # not ready: no warning
        assert roll.left_early() == (
            "rank(s) [2] hung (no sign of life for 30 s) before the cluster was ready")
    finally:
        conn.close()
        roll.roster.close()
