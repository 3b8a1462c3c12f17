"""The parts of the hung-rank check on their own: rank 0's account of silence (``liveness``),
what travels on the roll call (``roster``), and the scheduler's side (``given_up``) against a
real Dask scheduler and workers. The whole, under real launchers: tests/test_hung.py."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest
from distributed import Client, Scheduler

from dask_hpc.errors import UsageError
from dask_hpc.planning.scaling import hung_timeout
from dask_hpc.running import given_up, liveness, roster
from dask_hpc.running.worker import HpcWorker


def ticks_until_hung(ticks: liveness.Ticks, answering: set[int], start: float = 0.0) -> list:
    """Send ticks every interval from ``start``; the ranks in ``answering`` answer each at once.
    Returns (time, ranks) of each tick that found ranks hung."""
    found, now = [], start
    for _ in range(20):
        number, hung = ticks.tick(now)
        if hung:
            found.append((now - start, hung))
        for rank in answering:
            ticks.answer(rank, number)
        now += ticks.interval
    return found


def test_a_rank_that_answers_no_tick_for_the_timeout_is_hung_once_and_others_never() -> None:
    ticks = liveness.Ticks(timeout=30, interval=5)
    assert ticks.misses == 5
    for rank in (1, 2, 3):
        ticks.joined(rank)
    number, hung = ticks.tick(0.0)  # tick 1: all answer
    for rank in (1, 2, 3):
        ticks.answer(rank, number)
    # rank 2 hangs right after answering tick 1 (at t = 0): found when tick 7 is due, at 30 s
    found = ticks_until_hung(ticks, {1, 3}, start=5.0)
    assert found == [(25.0, [2])]  # 5 + 25 = 30 s after its last answer; said once


def test_ranks_that_hung_together_are_found_together() -> None:
    ticks = liveness.Ticks(timeout=30, interval=5)
    for rank in range(10):
        ticks.joined(rank)
    assert ticks_until_hung(ticks, {0, 1, 2}) == [(25.0, [3, 4, 5, 6, 7, 8, 9])]


def test_rank_0s_own_stall_sends_no_ticks_so_counts_no_silence() -> None:
    """Rank 0's node loaded: its loop did not run for 100 s. No tick went out meanwhile; the
    ranks answered the last one, which is read first: nobody is hung."""
    ticks = liveness.Ticks(timeout=30, interval=5)
    ticks.joined(1)
    number, _ = ticks.tick(0.0)
    ticks.answer(1, number)
    number, hung = ticks.tick(100.0)  # the next tick, 100 s later
    assert hung == []
    ticks.answer(1, number)
    assert ticks.tick(105.0)[1] == []


def test_a_rank_on_a_loaded_node_answering_late_is_not_hung() -> None:
    """It runs only now and then: it answers the newest tick it reads, and is never hung while
    it answers at least one tick in every ``timeout - interval`` seconds."""
    ticks = liveness.Ticks(timeout=30, interval=5)
    ticks.joined(1)
    now = 0.0
    for turn in range(40):
        number, hung = ticks.tick(now)
        assert hung == []
        if turn % 5 == 4:  # runs once every 25 s
            ticks.answer(1, number)
        now += 5


def test_a_forgotten_rank_is_never_hung_and_an_answer_from_the_future_counts_as_now() -> None:
    ticks = liveness.Ticks(timeout=30, interval=5)
    ticks.joined(4)
    ticks.forget(4)
    ticks.joined(5)
    ticks.answer(5, 10**9)  # not a tick rank 0 sent: as the last one sent (0)
    assert ticks.answered == {5: 0}
    assert ticks_until_hung(ticks, set()) == [(25.0, [5])]


def test_the_tick_interval_grows_with_the_ranks_up_to_a_third_of_the_timeout() -> None:
    assert liveness.tick_interval(30, 3) == 5
    assert liveness.tick_interval(30, 1000) == 5
    assert liveness.tick_interval(30, 10_000) == 10  # 1,000 ticks a second from rank 0
    assert liveness.tick_interval(30, 1_000_000) == 10  # never over a third
    assert liveness.Ticks(30, 10).misses == 2  # found 20-30 s after it hung


@pytest.mark.parametrize("value", ["abc", "", "nan", "4.9", "-30", [1]])
def test_a_bad_timeout_is_a_usage_error_naming_the_setting_and_the_fix(value: object) -> None:
    with pytest.raises(UsageError) as error:
        hung_timeout(value)
    assert "hpc.hung-timeout" in error.value.problem and "DASK_HPC__HUNG_TIMEOUT" in error.value.fix


@pytest.mark.parametrize(("value", "seconds"), [(30, 30.0), ("45", 45.0), (0, None),
                                                ("0", None), (False, None)])  # fmt: skip
def test_good_timeouts(value: object, seconds: float | None) -> None:
    assert hung_timeout(value) == seconds


def test_what_rank_0_says_is_read_by_lines_even_split_anywhere() -> None:
    said = roster.FromRank0()
    for part in (b"ti", b"ck 5\nsto", b"p\ngiven-up 3", b"1\n"):
        said.feed(part)
    assert said.tick == 5 and said.stop and said.given_up == 31.0 and not said.ended


def test_a_rank_answers_the_newest_tick_once_and_nothing_once_given_up() -> None:
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    said = roster.FromRank0()
    roster.answer(ours.fileno(), said)  # no tick yet: nothing
    said.feed(b"tick 1\ntick 2\n")
    roster.answer(ours.fileno(), said)
    roster.answer(ours.fileno(), said)  # answered already
    assert theirs.recv(64) == b"beat 2\n"
    said.feed(b"tick 3\ngiven-up 30\n")
    roster.answer(ours.fileno(), said)
    with pytest.raises(BlockingIOError):
        theirs.recv(64)
    ours.close()
    theirs.close()


def test_rank_0_ticks_a_joined_rank_hears_its_answer_and_gives_it_up() -> None:
    """The roster's two ends over loopback: the rank that joined gets the tick, its answer is
    heard, and once given up it reads ``given-up`` before the connection's end."""
    watched: dict[int, object] = {}
    ticks = liveness.Ticks(timeout=30, interval=5)
    roll = roster.Roster("127.0.0.1", watched.__setitem__, lambda fd: watched.pop(fd, None),
                         ticks)  # fmt: skip
    conn = roster.join(roll.address, roll.token, 2, 10)

    def turn() -> None:  # rank 0's loop, by hand
        for callback in list(watched.values()):
            callback()  # type: ignore[operator]

    try:
        for _ in range(100):
            turn()
            if 2 in roll.alive:
                break
        assert ticks.answered == {2: 0}
        roll.tick(ticks.tick(0.0)[0])
        conn.setblocking(True)
        said = roster.FromRank0()
        said.feed(conn.recv(64))
        roster.answer(conn.fileno(), said)
        for _ in range(100):
            turn()
            if ticks.answered[2] == 1:
                break
        assert ticks.answered == {2: 1}
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


def test_a_hung_ranks_workers_are_removed_a_few_a_turn_and_the_others_told_of_each(
    monkeypatch,
) -> None:
    """With start-cluster's scheduler (``many_workers``): three workers given up in one request
    are removed one turn of the loop each (``REMOVALS_PER_TURN`` 1 here), and each remaining
    worker is told of all three, outside the removals (``at_scale.removals``; Dask: one loop
    over every remaining worker per removal, all in one turn: 298.8 s at 10,000 workers)."""
    from dask_hpc.at_scale import many_workers

    monkeypatch.setattr(given_up, "REMOVALS_PER_TURN", 1)

    async def run() -> None:
        read, write = os.pipe()
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as scheduler:
            many_workers.install(scheduler)
            watch = given_up.GivenUp(scheduler, read)
            workers = [
                HpcWorker(scheduler.address, name=str(n), nthreads=1, host="127.0.0.1")
                for n in range(1, 6)
            ]
            await asyncio.gather(*workers)
            told: dict[str, list[str]] = {}
            for worker in workers:  # what each remaining worker hears, as its handler gets it
                handler = worker.stream_handlers["remove-worker"]

                def hear(*args, _name=worker.name, _handler=handler, **kwargs):
                    told.setdefault(_name, []).append(kwargs["worker"])
                    return _handler(*args, **kwargs)

                worker.stream_handlers["remove-worker"] = hear
            gone = {w.name: w.address for w in workers if w.name in ("2", "3", "4")}
            turns: list[int] = []  # workers still there at each turn of the loop

            async def count_turns() -> None:
                while True:
                    turns.append(len(scheduler.workers))
                    await asyncio.sleep(0)

            counter = asyncio.ensure_future(count_turns())
            removed = await watch.give_up(["2", "3", "4"])
            counter.cancel()
            assert sorted(removed) == sorted(gone.values())
            assert {4, 3} <= set(turns)  # a turn after each removal, before the next
            assert sorted(scheduler.aliases) == ["1", "5"]
            while any(len(told.get(name, [])) < 3 for name in ("1", "5")):
                await asyncio.sleep(0.01)
            for name in ("1", "5"):
                assert sorted(told[name]) == sorted(gone.values()), told
            async with Client(scheduler.address, asynchronous=True) as client:
                assert await client.submit(sum, [40, 2]) == 42
            await asyncio.gather(*(w.close() for w in workers))
        os.close(write)
        os.close(read)

    asyncio.run(asyncio.wait_for(run(), 60))


def test_a_rank_hung_before_the_cluster_is_ready_fails_the_start_naming_it(capsys) -> None:
    """Before "ready" a hung rank is not a warning (the cluster would never become ready): the
    start fails with it named (``left_early``, which rank 0's start checks each turn)."""
    from types import SimpleNamespace

    from dask_hpc.running.roll_call import RollCall

    plan = SimpleNamespace(hung_timeout=30.0, abort_on_node_loss=False,
                           rank=SimpleNamespace(size=3))  # fmt: skip
    roll = RollCall(plan)  # type: ignore[arg-type]
    watched: dict[int, object] = {}
    sup = SimpleNamespace(watch_ready=watched.__setitem__, unwatch=lambda fd: watched.pop(fd))
    roll.open("tls://127.0.0.1:1", sup)  # type: ignore[arg-type]
    assert roll.roster is not None and roll.roster.ticks is not None
    conn = roster.join(roll.roster.address, roll.roster.token, 2, 10)
    try:
        while 2 not in roll.roster.alive:
            for callback in list(watched.values()):
                callback()  # type: ignore[operator]
        ticks = roll.roster.ticks
        ticks.number = ticks.misses  # as if it had answered none of the ticks sent so far
        ticks.next_at = 0.0  # the next one is due
        assert roll.newly_hung() == [2]
        assert capsys.readouterr().err == ""  # not ready: no warning
        assert roll.left_early() == (
            "rank(s) [2] hung (no sign of life for 30 s) before the cluster was ready")
    finally:
        conn.close()
        roll.roster.close()
