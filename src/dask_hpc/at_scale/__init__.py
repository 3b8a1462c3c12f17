"""Dask changed at scale: our own versions of Dask's methods and settings, each kept to what a
measurement at scale justifies, with the Dask releases it was checked against.

Owns: ``many_workers`` (the scheduler's cost per worker kept flat), ``heartbeats`` (workers'
heartbeats over the stream they already hold), ``event_loop`` (a bounded number of ready
connections per turn of the scheduler's loop), ``log_summary`` (Dask's repeated warnings
summarised), ``lighter_tls`` (listeners that hand out no TLS session tickets), ``closing`` (a
cluster's end without Dask's O(W) loops per leaving worker), ``stealing`` (work stealing's
thief found in O(log W), not O(W), per task), ``sends`` (at most so many writes to workers per
turn of the scheduler's loop), ``dependencies`` (a task with many dependencies placed in one
pass over them), ``removals`` (the workers removed in a turn told to the others together, not
one by one). Each module's
docstring says which Dask methods it replaces, the Dask releases it was checked against (the
low end of the declared range, constraints.txt, and the newest in it,
tests/test_newest_dask.py) and the measurement behind it (docs/scale.md, docs/performance.md).

May import: nothing of dask-hpc (Dask only), so any process of ours can take a change alone.
"""

# Per-worker actions in one turn of the scheduler's event loop (ready connections, writes,
# closes, removals): each costs ~1-1.5 ms of the loop's CPU at 10,000 workers on a loaded
# machine (docs/scale.md), so 64 keep a turn near 0.1 s. One value for all four.
PER_TURN = 64
