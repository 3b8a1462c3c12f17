"""The tables benchmarks/startup.py prints: startup, CPU, start chain, issue 8's budget and
issue 23's goals, from what it measured."""

from __future__ import annotations

import argparse
import os


def print_tables(
    opts: argparse.Namespace,
    results: dict[tuple[str, int], tuple[float, float]],
    cpu: dict[tuple[str, int], tuple[float, float | None]],
    chain: dict[str, float],
    load_seen: list[float],
) -> None:
    load = f"load average {min(load_seen):.1f}-{max(load_seen):.1f}" if load_seen else ""
    print(
        f"\nStartup until every worker is connected (median of {opts.repeat}), "
        f"{os.cpu_count()} CPUs, {load}; ratio to the hand-written floor"
    )
    first, last = opts.workers[0], opts.workers[-1]
    header = "| method | " + " | ".join(f"{n} worker{'s' if n > 1 else ''}" for n in opts.workers)
    print(header + f" | {last} vs {first} | shutdown ({last}) |")
    print("|---" * (len(opts.workers) + 3) + "|")
    for method in opts.methods:
        cells = []
        for n in opts.workers:
            ready = results[method, n][0]
            floor = results.get(("floor", n), (ready, 0))[0]
            cells.append(f"{ready:.2f} s ({ready / floor:.2f}x)")
        scale = results[method, last][0] / results[method, first][0]
        print(
            f"| {method} | "
            + " | ".join(cells)
            + f" | {scale:.2f}x | {results[method, last][1]:.2f} s |"
        )
    if cpu:
        print(
            f"\nCPU seconds (median of {opts.cpu_runs} run(s) under cpu_tree.py): per worker rank "
            "(a process tree with one worker, no scheduler) / of the whole launch per worker"
        )
        print("| method | " + " | ".join(f"{n}" for n in opts.workers) + " |")
        print("|---" * (len(opts.workers) + 1) + "|")
        for method in opts.methods:
            cells = []
            for n in opts.workers:
                total, rank = cpu.get((method, n), (float("nan"), None))
                cells.append(
                    f"{rank:.2f} / {total:.2f}" if rank is not None else f"- / {total:.2f}"
                )
            print(f"| {method} | " + " | ".join(cells) + " |")
    if chain:
        floor = chain.get("floor")
        print(
            f"\nStart chain of one worker rank with a core to itself (median of "
            f"{opts.chain_repeat or opts.repeat}): launch -> its worker listed by the scheduler"
        )
        print("| method | seconds | vs floor |\n|---|---|---|")
        for method, seconds in chain.items():
            ratio = f"{seconds / floor:.2f}x" if floor else "-"
            print(f"| {method} | {seconds:.2f} s | {ratio} |")
    print_budget(results, opts.workers)
    print_goals(results, cpu, chain, opts.workers)


def print_goals(
    results: dict[tuple[str, int], tuple[float, float]],
    cpu: dict[tuple[str, int], tuple[float, float | None]],
    chain: dict[str, float],
    sizes: list[int],
) -> None:
    """Issue 23's goals against what was measured (where both sides ran)."""
    rows = []
    for method in ("mpiexec", "srun", "flux"):
        for n in sizes:
            if (method, n) not in results:
                continue
            ready = results[method, n][0]
            for other, label, goal in (("floor", "the floor", 1.1), ("dask-mpi", "dask-mpi", 1.0)):
                if (other, n) in results:
                    ratio = ready / results[other, n][0]
                    rows.append(
                        (
                            f"{method}, {n} rank(s), vs {label}",
                            f"{ratio:.2f}x",
                            f"<= {goal}x",
                            ratio <= goal,
                        )
                    )
        if method in chain and "floor" in chain:
            ratio = chain[method] / chain["floor"]
            rows.append(
                (
                    f"{method}, one rank's start chain, vs the floor's",
                    f"{ratio:.2f}x",
                    "<= 1.1x",
                    ratio <= 1.1,
                )
            )
    one = min(sizes)
    if ("local", one) in results and ("floor", one) in results:
        ratio = results["local", one][0] / results["floor", one][0]
        rows.append(
            (f"local, {one} worker(s), vs the floor", f"{ratio:.2f}x", "<= 1.1x", ratio <= 1.1)
        )
    for method in ("local", "mpiexec", "srun", "flux"):
        for n in sizes:
            if (method, n) in results:
                down = results[method, n][1]
                rows.append((f"{method} shutdown, {n}", f"{down:.2f} s", "< 0.5 s", down < 0.5))
    if rows:
        print("\n| goal (issue 23) | measured | goal | met |\n|---|---|---|---|")
    for what, value, goal, met in rows:
        print(f"| {what} | {value} | {goal} | {'yes' if met else 'NO'} |")


def print_budget(results: dict[tuple[str, int], tuple[float, float]], sizes: list[int]) -> None:
    """Issue 8's performance budget against what was measured (where both sides ran)."""
    lines = []
    most, one = max(sizes), min(sizes)
    if ("local", most) in results and ("local-no-nanny", most) in results:
        ratio = results["local", most][0] / results["local-no-nanny", most][0]
        lines.append((f"local, {most} workers, vs the forked plain workers", ratio, 1.2, "x"))
    if ("local", 16) in results:
        lines.append(("shutdown of 16 local workers", results["local", 16][1], 1.0, " s"))
    if ("local", one) in results and ("floor", one) in results:
        ratio = results["local", one][0] / results["floor", one][0]
        lines.append((f"local, {one} worker, vs the floor", ratio, 1.1, "x"))
    if lines:
        print("\n| budget | measured | goal | met |\n|---|---|---|---|")
    for what, value, goal, unit in lines:
        print(
            f"| {what} | {value:.2f}{unit} | <= {goal}{unit} | {'yes' if value <= goal else 'NO'} |"
        )
