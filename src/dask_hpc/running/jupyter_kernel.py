"""Our ``python3`` kernel (``jupyter.kernel_spec``): ipykernel without a TCP listener.

With ``KernelManager.transport=ipc`` the kernel's five ZMQ sockets are IPC sockets in the
private runtime directory, but ipykernel also listens on 127.0.0.1 by itself, where every
user of the node can connect:

- the IOPub pipe: a ZMQ PULL socket (``tcp://127.0.0.1:random``) that forwards the output of
  processes forked from the kernel. Off here (``IOPubThread(pipe=False)``): what a forked child
  prints goes to the kernel's own output (JupyterLab's log), not to the notebook;
- the debugger: debugpy listens on 127.0.0.1 once the notebook's debugger is switched on, and
  debugpy runs whatever its client sends, unauthenticated. Off here: the kernel does not
  announce a debugger, and debug requests get no answer.

A kernel whose ipykernel lacks either switch is refused (one line), never run with the
listener. Run as ``python -P -m dask_hpc.guard.import_path dask_hpc.running.jupyter_kernel
ARGS`` (ARGS: ipykernel's); imports nothing of dask-hpc's but this.
"""

from __future__ import annotations

import sys
from typing import Any


def main() -> int:
    from ipykernel import debugger, iostream

    opened = iostream.IOPubThread.__init__
    if not hasattr(debugger, "_is_debugpy_available") or "pipe" not in opened.__code__.co_varnames:
        print(
            "dask-hpc: this ipykernel opens loopback listeners in a way dask-hpc does not know,"
            " so the kernel is not started: install ipykernel 6 or 7",
            file=sys.stderr,
        )
        return 2
    debugger._is_debugpy_available = False  # read when the kernel starts and on each request

    def without_pipe(self: Any, socket: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("pipe", None)
        opened(self, socket, *args[1:], pipe=False, **kwargs)

    iostream.IOPubThread.__init__ = without_pipe  # type: ignore[method-assign]
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()
    return 0


if __name__ == "__main__":
    sys.exit(main())
