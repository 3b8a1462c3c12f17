"""Where our Python processes import code from: never a directory another user can change.

``python -m M`` and ``python -c CODE`` put the working directory first on ``sys.path``, and a
script its own directory. A batch job starts in its submit directory, often a project directory
its group can write: a ``colorsys.py`` or ``argparse.py`` planted there ran as the owner in every
rank and worker (issue 34). So:

- every process we start runs without that entry (:func:`python_argv`: ``-P`` on Python 3.11
  and later, else :data:`BOOTSTRAP`, which drops it before anything is imported), or is a
  console script (``start-cluster``: ``sys.path[0]`` is the environment's ``bin``);
- first thing in each of our programs, :func:`settle` drops an entry Python put there that
  another user can change, and adds the working directory back at the end of ``sys.path``
  only when nobody else can change it (``private.changeable_by_others``), so the user's own
  modules beside their job still import in the workers, as under ``python -m`` and
  dask-jobqueue. Directories the user names in ``PYTHONPATH`` are theirs and stay, unless
  empty, relative or writable by others (``search_paths``: dropped first, with one line).

``python -m dask_hpc.guard.import_path MODULE ARGS...`` runs MODULE after :func:`settle`
(JupyterLab's kernels: ``ipykernel_launcher``).
"""

from __future__ import annotations

import os
import runpy
import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from . import search_paths
from .private import UnsafePath, changeable_by_others

# Python 3.10 has no -P: ``python -c BOOTSTRAP`` drops the working directory ('' first on
# sys.path under -c) before importing anything, then runs the module as ``-m`` would. The same
# text is in entrypoints/start-cluster (tests/test_import_rules.py checks it).
BOOTSTRAP = (
    'import sys; getattr(sys.flags, "safe_path", 0) or sys.path.pop(0); '
    'import runpy; runpy.run_module("{module}", run_name="__main__", alter_sys=True)'
)


def python_argv(module: str, python: str | None = None) -> list[str]:
    """``python -m module`` without the working directory on ``sys.path``.

    ``python``: the interpreter (default: this one). ``-P`` where it is known to be Python 3.11
    or later (this one), else :data:`BOOTSTRAP`, which any Python 3 runs.
    """
    if python is None or python == sys.executable:
        python = sys.executable
        if sys.version_info >= (3, 11):
            return [python, "-P", "-m", module]
    return [python, "-c", BOOTSTRAP.format(module=module)]


def _pythonpath() -> set[str]:
    return {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}


def _implicit_entry() -> str | None:
    """The entry Python put first by itself (the working directory, or the script's
    directory), if it is still there."""
    if getattr(sys.flags, "safe_path", False) or not sys.path:
        return None
    first = sys.path[0]
    if first == "":
        return first
    script = sys.argv[0] if sys.argv else ""
    candidates = {os.getcwd()}
    if script and os.path.isfile(script):
        candidates.add(os.path.dirname(os.path.realpath(script)))
    return first if os.path.realpath(first) in candidates else None


def settle() -> list[str]:
    """Make the search paths and ``sys.path`` safe (see the module's docstring and
    ``search_paths``); the lines to tell the user (what was left out, and why)."""
    try:  # (the console scripts ran it first already: dask_hpc.entry)
        lines = search_paths.apply()  # before the user's PYTHONPATH below counts as theirs
    except search_paths.PlantedModules as error:
        raise UnsafePath(error.problem, error.fix) from None
    try:
        cwd = os.getcwd()
    except OSError:  # the working directory was removed: nothing to add
        cwd = None
    theirs = _pythonpath()
    first = _implicit_entry()
    if first is not None and os.path.abspath(first or ".") not in theirs:
        if changeable_by_others(first or ".") is not None:
            del sys.path[0]
    if cwd is None or cwd in {os.path.abspath(p or ".") for p in sys.path}:
        return lines
    problem = changeable_by_others(cwd)
    if problem is not None:
        return [
            *lines,
            f"the working directory {cwd} is not on the workers' module path: {problem}, so a "
            "module put there would run as you; keep your modules in a directory only you can "
            "write, or name it in PYTHONPATH",
        ]
    sys.path.append(cwd)
    return lines


def program(name: str) -> str | None:
    """The program ``name`` of this Python's environment (its ``bin``), else the one on
    ``PATH``; None where there is none. A program another user could change (its file, or a
    directory above it: a ``.`` on ``PATH`` in a submit directory) is an ``UnsafePath``."""
    beside = os.path.join(os.path.dirname(sys.executable), name)
    found = beside if os.access(beside, os.X_OK) else shutil.which(name)
    if found is None:
        return None
    found = os.path.abspath(found)
    problem = changeable_by_others(found)
    if problem:
        raise UnsafePath(
            f"{name} at {found} can be changed by other users: {problem}",
            f"install {name} where only you or root can write, or put that first on PATH",
        )
    return found


SAFE_PATH_SET = "DASK_HPC_SAFE_PATH_SET"  # we set PYTHONSAFEPATH: our forkserver drops it


@contextmanager
def new_pythons_without_working_directory() -> Iterator[None]:
    """Pythons that multiprocessing starts meanwhile (its own forkserver and resource tracker,
    ``python -c ...``, where ``forked_mp`` cannot fork them) get no working directory on
    ``sys.path`` (``PYTHONSAFEPATH``, 3.11 and later; on 3.10 ``forked_mp`` always forks).
    The forkserver forgets it again (``zygote``), so the workers' tasks do not inherit it."""
    if "PYTHONSAFEPATH" in os.environ:
        yield
        return
    os.environ.update(PYTHONSAFEPATH="1", **{SAFE_PATH_SET: "1"})
    try:
        yield
    finally:
        os.environ.pop("PYTHONSAFEPATH", None)
        os.environ.pop(SAFE_PATH_SET, None)


def forget_safe_path() -> None:
    """In a Python started under :func:`new_pythons_without_working_directory`: what it
    starts from now on (the workers, their tasks' programs) has the user's environment."""
    if os.environ.pop(SAFE_PATH_SET, None):
        os.environ.pop("PYTHONSAFEPATH", None)


def run(argv: Sequence[str]) -> None:
    """Run module ``argv[0]`` as ``__main__`` with ``argv[1:]``, after :func:`settle`."""
    settle()
    sys.argv = [sys.argv[0], *argv[1:]]
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m dask_hpc.guard.import_path MODULE [ARGS...]")
    run(sys.argv[1:])
