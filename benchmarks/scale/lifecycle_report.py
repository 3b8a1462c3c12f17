"""The scale benchmark's tables (``lifecycle``): a column per W, a fit of each number against
W, where the scheduler's loop was while late, and issue 28's goals."""

from __future__ import annotations

import os

from .common import Row, goals_table, line, table

PHASES = ("start", "idle", "computation", "shutdown")


def fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """y = a + b * x**p, least squares: a and b for each p in 0, 0.05, ... 2, the best p kept."""
    best = (float("inf"), ys[0] if ys else 0.0, 0.0, 1.0)
    for p in (i / 20 for i in range(41)):
        zs = [x**p for x in xs]
        a, b = line(zs, ys)
        err = sum((a + b * z - y) ** 2 for z, y in zip(zs, ys, strict=True))
        if err < best[0] - 1e-12:
            best = (err, a, b, p)
    return best[1], best[2], best[3]


def probe_cell(r: dict, phase: str, what: str) -> str:
    """A user's probe in a phase: median / longest seconds."""
    got = r["probes"].get(phase, {}).get(what)
    failed = r["probes"].get(phase, {}).get(f"{what} failed")
    text = f"{got[0]:.2f} / {got[1]:.2f}" if got else "–"
    return text + (f" ({failed[2]} failed)" if failed else "")


def gc_cell(gc: dict[str, list[float]]) -> str:
    young = [gc.get(g, [0] * 5) for g in ("0", "1")]
    full = gc.get("2", [0] * 5)
    return (f"{sum(y[0] for y in young):.0f}, {sum(y[3] for y in young):.2f}; "
            f"{full[0]:.0f}, {full[3]:.2f}, {full[4]:.2f}")  # fmt: skip


def number(fmt: str, value: object) -> str:
    return "–" if value is None else fmt.format(value)


COLUMNS: list[Row] = [
    ("last start -> all connected (s)", lambda r: number("{:.2f}", r["connect_s"])),
    ("launch -> all connected (s)", lambda r: number("{:.1f}", r["start_s"])),
    ("COMMAND exit -> all gone (s)", lambda r: number("{:.2f}", r["shutdown_s"])),
    ("  of which rank 0 after the last rank left (s)",
     lambda r: number("{:.2f}", r["rank0_shutdown_s"])),  # fmt: skip
    ("rank 0 CPU: until all connected, after COMMAND's exit, in all (s)",
     lambda r: f"{r['start_cpu_s']:.1f}, {r['shutdown_cpu_s']:.1f}, {r['cpu_s']:.1f}"),
    ("scheduler loop CPU per join (ms)", lambda r: number("{:.2f}", r["sched_join_ms"])),
    ("  heartbeats it handled meanwhile, per join", lambda r:
     f"{r['join_heartbeats'] / max(1, r['workers'] - 1):.2f}"),  # fmt: skip
    ("scheduler loop CPU per removal at the end (ms)",
     lambda r: number("{:.2f}", r["sched_leave_ms"])),  # fmt: skip
    ("scheduler loop CPU while idle (% of a core)",
     lambda r: number("{:.1f}", r["idle_loop_pct"])),  # fmt: skip
    ("heartbeats handled per second while idle",
     lambda r: number("{:.0f}", r["heartbeats_per_s"])),  # fmt: skip
    ("computation: tasks; submit -> result (s); right",
     lambda r: f"{r['graph_tasks']}; {number('{:.1f}', r['computation_s'])}; "
               + {True: "yes", False: f"NO {r['job_error']}", None: "–"}[r["result_ok"]]),
    ("scheduler loop CPU per task (ms)", lambda r: number("{:.2f}", r["task_loop_ms"])),
    ("workers removed before COMMAND's end (why)",
     lambda r: ", ".join(f"{n} {why}" for why, n in r["dropped"].items()) or "0"),
    ("workers at the end / after the start", lambda r: r["workers_kept"]),
    *((f"longest loop stall, {p}: wall; the loop's own CPU (s)",
       lambda r, p=p: f"{r['longest_stall_s'][p]:.2f}; {r['longest_stall_cpu_s'][p]:.2f}")
      for p in PHASES),
    ("loop stalls over 0.5 s (wall)", lambda r: str(r["stalls_over_half_s"])),
    ("scheduler GC, whole run: young passes, CPU s; full passes, CPU s, longest s",
     lambda r: gc_cell(r["gc"])),
    *((f"scheduler_info() while {p}: median / longest (s)",
       lambda r, p=p: probe_cell(r, p, "scheduler_info")) for p in ("idle", "computation")),
    ("dashboard /status opened while computing (s)",
     lambda r: probe_cell(r, "computation", "/status").split(" / ")[0]),
    ("dashboard /info/main/workers.html while computing: median / longest (s)",
     lambda r: probe_cell(r, "computation", "/info/main/workers.html")),
    ("simulated ranks' CPU (s); all CPU / (cores x wall)",
     lambda r: f"{r['sim_cpu_s']:.0f}; {r['busy']:.2f}"),
    ("rank 0 peak RSS (MiB)", lambda r: f"{r['peak_mib']:.0f}"),
    ("scheduler-file reads/s while the ranks wait", lambda r: f"{r['stats_per_s']:.0f}"),
    ("rank 0 open fds (rank + scheduler)", lambda r: str(r["fds"])),
    ("progress lines", lambda r: str(r["progress_lines"])),
    ("load avg (1 min) at the end", lambda r: f"{r['load']:.1f}"),
]  # fmt: skip
FITTED = [("connect_s", "last start -> all connected (s)"),
          ("shutdown_s", "COMMAND exit -> all gone (s)"),
          ("cpu_s", "rank 0 CPU (s)"),
          ("sched_join_ms", "scheduler loop CPU per join (ms)"),
          ("sched_leave_ms", "scheduler loop CPU per removal (ms)"),
          ("idle_loop_pct", "scheduler loop CPU while idle (% of a core)"),
          ("peak_mib", "rank 0 peak RSS (MiB)"),
          ("fds", "rank 0 open fds")]  # fmt: skip


def goals(by_w: dict[int, dict]) -> list[tuple[str, str, str, bool]]:
    """Issue 28's goals that these sizes measure: (what, measured, target, met)."""
    out = []
    if 10000 in by_w:
        r = by_w[10000]
        out.append(("10,000 workers: last start -> all connected (s)", f"{r['connect_s']:.1f}",
                    "<= 30", r["connect_s"] <= 30))  # fmt: skip
        out.append(("10,000 workers: COMMAND exit -> all gone (s)", f"{r['shutdown_s']:.1f}",
                    "<= 10", r["shutdown_s"] <= 10))  # fmt: skip
        if 1000 in by_w:
            ratio = r["sched_join_ms"] / by_w[1000]["sched_join_ms"]
            out.append(("scheduler CPU per join, 10,000 vs 1,000", f"{ratio:.2f}x", "<= 1.3x",
                        ratio <= 1.3))  # fmt: skip
        if 20000 in by_w:
            ratio = by_w[20000]["connect_s"] / r["connect_s"]
            out.append(("20,000 vs 10,000: last start -> all connected", f"{ratio:.2f}x",
                        "<= 2.2x", ratio <= 2.2))  # fmt: skip
    for w, r in by_w.items():
        for p in ("start", "computation", "shutdown"):
            wall, own = r["longest_stall_s"][p], r["longest_stall_cpu_s"][p]
            out.append((f"{w:,} workers: longest loop stall, {p}: wall; own CPU (s)",
                        f"{wall:.2f}; {own:.2f}", "<= 1", wall <= 1))  # fmt: skip
        lost = sum(r["dropped"].values())
        out.append((f"{w:,} workers: workers lost before COMMAND's end", str(lost), "0",
                    lost == 0))  # fmt: skip
    return out


def report(results: list[dict]) -> None:
    """The tables of every W measured (and the sizes not run, why)."""
    skipped = [r for r in results if "not_run" in r]
    results = [r for r in results if "not_run" not in r]
    for r in skipped:
        print(f"\nW={r['workers']}: not run: {r['not_run']}")
    if not results:
        return
    first = results[0]
    print(f"\nScale, {os.cpu_count()} CPUs, TLS on, {first['workers'] // first['ranks']} "
          "worker(s) per rank (rank 0 real, the other ranks simulated)"
          + ("; rank 0 on a CPU of its own" if first["pinned"] else "")
          + f"; worker-saturation {first['saturation']}"
          + (f"; medians of {first['runs']} runs" if first["runs"] > 1 else ""))  # fmt: skip
    table("W (= ranks x per rank)", [f"{r['workers']:,}" for r in results], COLUMNS, results)
    ws = [float(r["workers"]) for r in results]
    if len(ws) >= 3:
        print("\n| fit against W | model | at 10,000 | at 100,000 |\n|---|---|---|---|")
        for key, label in FITTED:
            a, b, p = fit(ws, [float(r[key] or 0) for r in results])
            at = [a + b * w**p for w in (1e4, 1e5)]
            print(f"| {label} | {a:.3g} + {b:.3g} W^{p:.2f} | {at[0]:.4g} | {at[1]:.4g} |")
    for r in results:
        for phase, top in r["stall_stacks"].items():
            print(f"\nW={r['workers']:,}, {phase}: where the scheduler's loop was while over "
                  "0.25 s late (samples every 50 ms; innermost first):")  # fmt: skip
            for where, n in top:
                print(f"    {n:5d}  {where[:240]}")
        for phase, counts in r.get("longest_stall_functions", {}).items():
            print(f"\nW={r['workers']:,}, {phase}: the longest stall's samples, by the function "
                  "they were in (anywhere in the innermost 8 frames):")  # fmt: skip
            print("    " + ", ".join(f"{where} {n}" for where, n in counts))
    met = goals({r["workers"]: r for r in results})
    if met:
        goals_table(("goal (issue 28)", "measured", "target", "met"),
                    (((what, value, target), ok) for what, value, target, ok in met))  # fmt: skip


