"""Worker-to-worker transfers and a P2P shuffle, with TLS (the default) and with --no-tls.

Each round starts two real clusters with start-cluster (local mode, 2 workers on loopback, one
with TLS and one with ``--no-tls``, in alternating order) and runs this script inside each as
COMMAND. Inside, for every size, a fresh NumPy array of random bytes is made on worker A and a
task on worker B that needs it is submitted: B fetches it from A (Dask's gather_dep). The time
is the one B's Dask measures for the fetch (``Worker.transfer_incoming_log``); the client's
wall clock around the task is kept too, and the user+system CPU seconds of both worker
processes. Then a P2P DataFrame shuffle of ``--shuffle-mib`` MiB (needs pandas and pyarrow).
Prints one table, best of all repeats, with the 1-minute load average seen around each
measurement (the machine may be shared: read the best, not the median).

    python benchmarks/transfer.py [--rounds 3] [--repeat 2] [--sizes-mib 256 1024]
                                  [--shuffle-mib 512] [--start-cluster start-cluster]
                                  [--floor-repeat 5] [--floor-tls12 CIPHERS ...]

The floor: the same 1 GiB over blocking sockets between two processes, with Dask's own
SSLContext (TLS 1.3, and TLS 1.2 with each ``--floor-tls12`` cipher string, set through Dask's
distributed.comm.tls.ciphers and max-version), no Dask or Tornado: what TLS costs by itself.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODES = {"TLS": [], "TCP (--no-tls)": ["--no-tls"]}
MIB = 2**20
GIB = 2**30


# --- inside the cluster ---------------------------------------------------------------------


def make_array(nbytes: int, seed: int):  # on worker A
    import numpy as np

    return np.random.default_rng(seed).integers(0, 255, nbytes, dtype=np.uint8)


def nbytes_of(array) -> int:  # on worker B, after fetching ``array`` from A
    return int(array.nbytes)


def incoming_log(dask_worker) -> list[dict]:
    return [
        {k: v for k, v in entry.items() if k in ("start", "stop", "total", "who", "duration")}
        for entry in dask_worker.transfer_incoming_log
    ]


def cpu_seconds() -> tuple[float, float]:
    """(user, system) CPU seconds of this worker process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def comm_ciphers(dask_worker) -> list:
    """The (cipher, protocol, bits) of this worker's pooled connections (TLS only)."""
    comms = [c for pool in dask_worker.rpc.available.values() for c in pool]
    return sorted({str(c.extra_info.get("cipher")) for c in comms})


def shuffle_partition(i: int, rows: int):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(i)
    return pd.DataFrame(
        {
            "key": rng.integers(0, 2**31, rows),
            "a": rng.random(rows),
            "b": rng.random(rows),
            "c": rng.integers(0, 2**62, rows),
        }
    )


def inner(out: Path, sizes_mib: list[int], repeat: int, shuffle_mib: int) -> None:
    from distributed import Client, wait

    client = Client(timeout=60)
    client.wait_for_workers(2, timeout=60)
    a, b = sorted(client.sync(client.scheduler.identity, n_workers=-1)["workers"])[:2]
    result: dict = {"transfers": {}, "shuffle": None, "ciphers": None}
    seed = 0
    for size in sizes_mib:
        runs = []
        for _ in range(repeat):
            seed += 1
            x = client.submit(make_array, size * MIB, seed, workers=[a], pure=False)
            wait(x)
            load = os.getloadavg()[0]
            before = len(client.run(incoming_log, workers=[b])[b])
            cpu0 = client.run(cpu_seconds, workers=[a, b])
            start = time.perf_counter()
            y = client.submit(nbytes_of, x, workers=[b], allow_other_workers=False, pure=False)
            assert y.result() == size * MIB
            wall = time.perf_counter() - start
            cpu1 = client.run(cpu_seconds, workers=[a, b])
            cpu = {
                w: [end - begin for begin, end in zip(cpu0[w], cpu1[w], strict=True)]
                for w in (a, b)
            }
            log = client.run(incoming_log, workers=[b])[b][before:]
            fetched = [e for e in log if e["total"] >= size * MIB]
            assert len(fetched) == 1, log
            runs.append(
                {
                    "duration": fetched[0]["duration"],
                    "wall": wall,
                    "load": load,
                    "bytes": size * MIB,
                    "send_cpu": cpu[a],
                    "recv_cpu": cpu[b],
                }
            )
            del x, y
            client.run(lambda: None)  # let the releases reach the workers
        result["transfers"][str(size)] = runs
    result["ciphers"] = client.run(comm_ciphers)
    if shuffle_mib:
        import dask
        import dask.dataframe as dd

        rows = 2**20  # 32 MiB partitions of 4 x 8-byte columns
        parts = max(2, shuffle_mib // 32)
        df = dd.from_map(shuffle_partition, range(parts), rows=rows)
        load = os.getloadavg()[0]
        start = time.perf_counter()
        with dask.config.set({"dataframe.shuffle.method": "p2p"}):
            shuffled = df.shuffle("key", npartitions=parts).persist()
            wait(shuffled)
        wall = time.perf_counter() - start
        assert len(shuffled) == parts * rows
        result["shuffle"] = {"wall": wall, "load": load, "bytes": parts * rows * 32}
        del shuffled
    out.write_text(json.dumps(result))
    client.close()


# --- outside: start the clusters, print the table -------------------------------------------


def run_cluster(start_cluster: list[str], mode: str, tmp: Path, opts: argparse.Namespace) -> dict:
    out = tmp / "result.json"
    out.unlink(missing_ok=True)
    argv = [
        *start_cluster,
        "cpu",
        "2",
        *MODES[mode],
        "--nthreads",
        "1",
        "--interface",
        "lo",
        "--dashboard-address",
        "127.0.0.1:0",
        "--local-directory",
        str(tmp / "local"),
        "--",
        sys.executable,
        __file__,
        "--inner",
        str(out),
        "--repeat",
        str(opts.repeat),
        "--shuffle-mib",
        str(opts.shuffle_mib),
        "--sizes-mib",
        *map(str, opts.sizes_mib),
    ]
    env = {**os.environ, "DASK_HPC__SCHEDULER_DIRECTORY": str(tmp / "s"), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"{mode} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())


def best(runs: list[dict], key: str) -> dict:
    return min(runs, key=lambda r: r[key])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="cluster pairs started")
    parser.add_argument("--repeat", type=int, default=2, help="transfers per size per cluster")
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--shuffle-mib", type=int, default=512, help="0: no shuffle")
    parser.add_argument(
        "--start-cluster",
        default=f"{sys.executable} -m dask_hpc",
        help="how to run start-cluster (default: this Python's -m dask_hpc)",
    )
    parser.add_argument(
        "--floor-repeat", type=int, default=5, help="1 GiB socket transfers per side (0: none)"
    )
    parser.add_argument(
        "--floor-tls12",
        nargs="*",
        default=["ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"],
        help="also run the floor with TLS 1.2 and each of these OpenSSL cipher strings",
    )
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    parser.add_argument("--inner", type=Path, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.inner:
        inner(opts.inner, opts.sizes_mib, opts.repeat, opts.shuffle_mib)
        return 0

    tmp = Path(tempfile.mkdtemp(prefix="dask-hpc-transfer-"))
    (tmp / "s").mkdir(mode=0o700)
    results: dict[str, list[dict]] = {mode: [] for mode in MODES}
    floors: dict[str, list[dict]] = {}
    try:
        if opts.floor_repeat:
            floors = {
                mode: floor(mode == "TLS", GIB, opts.floor_repeat, tmp / "s") for mode in MODES
            }
            for ciphers in opts.floor_tls12:
                floors[f"TLS 1.2 {ciphers}"] = floor(
                    True, GIB, opts.floor_repeat, tmp / "s", tls12_ciphers=ciphers
                )
        for r in range(opts.rounds):
            order = list(MODES) if r % 2 == 0 else list(reversed(MODES))
            for mode in order:
                res = run_cluster(opts.start_cluster.split(), mode, tmp, opts)
                results[mode].append(res)
                fastest = {size: best(runs, "duration") for size, runs in res["transfers"].items()}
                summary = ", ".join(
                    f"{size} MiB {run['bytes'] / GIB / run['duration']:.2f} GiB/s"
                    for size, run in fastest.items()
                )
                if res["shuffle"]:
                    summary += f", shuffle {res['shuffle']['wall']:.2f} s"
                print(f"  round {r + 1} {mode}: {summary}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if opts.json:
        opts.json.write_text(json.dumps({"clusters": results, "floor": floors}, indent=1))
    print_table(results, opts)
    if floors:
        print_floor(floors)
    return 0


def per_gib(run: dict, key: str) -> float:
    return sum(run[key]) / (run["bytes"] / GIB)


def print_table(results: dict[str, list[dict]], opts: argparse.Namespace) -> None:
    tls, tcp = results["TLS"], results["TCP (--no-tls)"]
    runs = opts.rounds * opts.repeat
    print(
        f"\nWorker-to-worker fetch, best of {runs} ({opts.rounds} clusters x {opts.repeat}), "
        f"{os.cpu_count()} CPUs. GiB/s as the receiving worker's Dask measures it (the client's "
        "wall clock in brackets); CPU: user+system seconds per GiB of the receiving and the "
        "sending worker process (best run); load: 1-minute load average, min-max over the runs"
    )
    ciphers = sorted({c for res in tls for cs in res["ciphers"].values() for c in cs})
    print(f"TLS connections: {', '.join(ciphers)}\n")
    print(
        "| transfer | TLS GiB/s | TCP GiB/s | TLS / TCP | receiver CPU s/GiB, TLS / TCP "
        "| sender CPU s/GiB, TLS / TCP | load (TLS) | load (TCP) |"
    )
    print("|---|---|---|---|---|---|---|---|")

    def loads(all_runs: list[dict]) -> str:
        values = [r["load"] for r in all_runs]
        return f"{min(values):.1f}-{max(values):.1f}"

    for size in map(str, opts.sizes_mib):
        sides = [[run for res in side for run in res["transfers"][size]] for side in (tls, tcp)]
        speed = [r[0]["bytes"] / GIB / best(r, "duration")["duration"] for r in sides]
        wall = [r[0]["bytes"] / GIB / best(r, "wall")["wall"] for r in sides]
        recv = [min(per_gib(run, "recv_cpu") for run in r) for r in sides]
        send = [min(per_gib(run, "send_cpu") for run in r) for r in sides]
        label = f"{int(size) // 1024} GiB" if int(size) >= 1024 else f"{size} MiB"
        print(
            f"| {label} NumPy array | {speed[0]:.2f} ({wall[0]:.2f}) "
            f"| {speed[1]:.2f} ({wall[1]:.2f}) "
            f"| {speed[0] / speed[1]:.2f}x | {recv[0]:.2f} / {recv[1]:.2f} "
            f"| {send[0]:.2f} / {send[1]:.2f} | {loads(sides[0])} | {loads(sides[1])} |"
        )
    if opts.shuffle_mib:
        shuffles = [[res["shuffle"] for res in side] for side in (tls, tcp)]
        b_tls, b_tcp = (min(s["wall"] for s in side) for side in shuffles)
        nbytes = shuffles[0][0]["bytes"]
        print(
            f"| P2P shuffle, {nbytes // MIB} MiB DataFrame | {b_tls:.2f} s | {b_tcp:.2f} s "
            f"| {b_tcp / b_tls:.2f}x | | | {loads(shuffles[0])} | {loads(shuffles[1])} |"
        )


# --- the floor: the same bytes over plain sockets, no Dask, no Tornado --------------------------

FLOOR_CHUNK = 64 * MIB


def floor_contexts(directory: Path, tls12_ciphers: str | None = None) -> tuple:
    """Dask's own server and client SSLContexts for a fresh dask-hpc certificate.

    ``tls12_ciphers``: TLS 1.2 with these ciphers (distributed.comm.tls.ciphers and
    max-version; Python's ssl cannot choose among TLS 1.3's ciphers).
    """
    import ssl

    from distributed.security import Security

    from dask_hpc.guard import security

    files = security.create(directory, "transfer-floor")
    choice = {}
    if tls12_ciphers:
        choice = {"tls_ciphers": tls12_ciphers, "tls_max_version": ssl.TLSVersion.TLSv1_2}
    sec = Security(
        tls_ca_file=str(files.ca),
        tls_worker_cert=str(files.cert),
        tls_worker_key=str(files.key),
        require_encryption=True,
        **choice,
    )
    server = sec.get_listen_args("worker")["ssl_context"]
    client = sec.get_connection_args("worker")["ssl_context"]
    return server, client


def floor_sender(port: int, ctx, nbytes: int, repeat: int, conn) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    if ctx is not None:
        sock = ctx.wrap_socket(sock)
    chunk = memoryview(bytearray(os.urandom(MIB)) * (FLOOR_CHUNK // MIB))
    for _ in range(repeat):
        sock.recv(1)  # go
        cpu0 = cpu_seconds()
        for _ in range(nbytes // FLOOR_CHUNK):
            sock.sendall(chunk)
        sock.recv(1)  # all received
        conn.send([end - begin for begin, end in zip(cpu0, cpu_seconds(), strict=True)])
    sock.close()


def floor(
    tls: bool, nbytes: int, repeat: int, tmp: Path, tls12_ciphers: str | None = None
) -> list[dict]:
    """A blocking sender process and this process receiving into a reused 64 MiB buffer."""
    import multiprocessing

    server_ctx, client_ctx = floor_contexts(tmp, tls12_ciphers) if tls else (None, None)
    listener = socket.create_server(("127.0.0.1", 0))
    mp = multiprocessing.get_context("fork")
    here, there = mp.Pipe()
    port = listener.getsockname()[1]
    proc = mp.Process(target=floor_sender, args=(port, client_ctx, nbytes, repeat, there))
    proc.start()
    sock, _ = listener.accept()
    listener.close()
    if tls:
        sock = server_ctx.wrap_socket(sock, server_side=True)
    cipher = sock.cipher()[0] if tls else "TCP"
    view = memoryview(bytearray(FLOOR_CHUNK))
    runs = []
    try:
        for _ in range(repeat):
            load = os.getloadavg()[0]
            cpu0 = cpu_seconds()
            start = time.perf_counter()
            sock.sendall(b"g")
            got = 0
            while got < nbytes:
                got += sock.recv_into(view[got % FLOOR_CHUNK :])
            duration = time.perf_counter() - start
            recv_cpu = [end - begin for begin, end in zip(cpu0, cpu_seconds(), strict=True)]
            sock.sendall(b"d")
            runs.append(
                {
                    "duration": duration,
                    "load": load,
                    "bytes": nbytes,
                    "recv_cpu": recv_cpu,
                    "send_cpu": here.recv(),
                    "cipher": cipher,
                }
            )
    finally:
        sock.close()
        proc.join(60)
    return runs


def print_floor(runs: dict[str, list[dict]]) -> None:
    tcp = runs["TCP (--no-tls)"]
    tcp_speed = tcp[0]["bytes"] / GIB / best(tcp, "duration")["duration"]
    tcp_recv = min(per_gib(run, "recv_cpu") for run in tcp)
    tcp_send = min(per_gib(run, "send_cpu") for run in tcp)
    tcp_load = f"{min(x['load'] for x in tcp):.1f}-{max(x['load'] for x in tcp):.1f}"
    for mode, tls in runs.items():
        if mode == "TCP (--no-tls)":
            continue
        speed = tls[0]["bytes"] / GIB / best(tls, "duration")["duration"]
        recv = min(per_gib(run, "recv_cpu") for run in tls)
        send = min(per_gib(run, "send_cpu") for run in tls)
        load = f"{min(x['load'] for x in tls):.1f}-{max(x['load'] for x in tls):.1f}"
        print(
            f"| floor: {tls[0]['bytes'] // GIB} GiB, blocking sockets, no Dask, "
            f"{tls[0]['cipher']} | {speed:.2f} | {tcp_speed:.2f} | {speed / tcp_speed:.2f}x "
            f"| {recv:.2f} / {tcp_recv:.2f} | {send:.2f} / {tcp_send:.2f} | {load} | {tcp_load} |"
        )


if __name__ == "__main__":
    sys.exit(main())
