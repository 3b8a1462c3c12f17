"""Search paths our processes hand on: no entry that names the working directory or a
directory another user can write.

``export PYTHONPATH=$PYTHONPATH:$HOME/lib`` with PYTHONPATH unset gives ``:/home/you/lib``; the
empty entry is the working directory, before the standard library: a batch job starts in its
submit directory, often a project directory others write, and a planted ``argparse.py`` there
ran in the rank, its scheduler and its workers (issue 43). The same holds for ``PATH`` (a
planted ``jupyter`` or ``flux``), ``LD_LIBRARY_PATH`` (a planted ``libc`` dependency), R's and
node's library paths (what JupyterLab's helpers start) and Jupyter's own.

So an entry is dropped when it is empty or relative, or when a user other than its owner can
write it or a directory above it (group or others write, a sticky directory excepted above
it; :func:`writable_by_others`). An entry owned by another account and writable only by it (a
site's software tree installed by a staff account, what ``module load`` adds) stays: the user
chose to run its software, as they do when they type its commands.

Where it is enforced:
- job scripts (``batch/templates``) clean these variables in the shell before any Python
  starts, so the rank's own first imports are safe;
- every rank, ``hpc-cluster`` and the elastic scheduler call :func:`apply` first: what they
  start from then on (the scheduler, the workers, JupyterLab, its kernels, COMMAND, Flux's
  Python) inherits the cleaned environment, and ``sys.path`` loses the dropped entries;
- one line says what was dropped, with the fix.
"""

# Only built-in and frozen modules here (sys, os, stat: ``_imp.is_frozen``): this runs first
# in every console script (``dask_hpc.entry``), before the entries it drops leave sys.path.
import os
import stat
import sys

# The variables that name directories searched for code, by what reads them.
VARIABLES = (
    "PYTHONPATH",  # Python: modules
    "PATH",  # programs found by name: jupyter, flux, srun, Rscript, node
    "LD_LIBRARY_PATH",  # the dynamic loader: every program
    "JUPYTER_PATH",  # Jupyter: kernel specs, extensions
    "JUPYTER_CONFIG_PATH",  # Jupyter: configuration (code, in *.py)
    "R_LIBS",  # R (jupyter-lsp's language-server detection runs Rscript)
    "R_LIBS_USER",
    "R_LIBS_SITE",
    "NODE_PATH",  # node (JupyterLab's build tools, language servers)
)


def _writable(step: str, st: os.stat_result) -> bool:
    """Can a user other than the owner write directory ``step``? Group write counts unless
    the group is root's (gid 0: images and system trees made under umask 002, whose members
    are root's own); nothing counts on a read-only mount (an image's squashfs)."""
    mode = st.st_mode
    if not (mode & stat.S_IWOTH or (mode & stat.S_IWGRP and st.st_gid != 0)):
        return False
    try:
        return not os.statvfs(step).f_flag & os.ST_RDONLY
    except OSError:
        return True


def writable_by_others(path: str) -> str | None:
    """Why another user could change what directory ``path`` (absolute) holds, or None.

    Each directory from ``/`` down to ``path`` (or to the deepest one that exists: another
    user could make the rest) must not be writable by others (:func:`_writable`), except a
    sticky one above the last (they cannot rename what is not theirs there). Symbolic links
    are followed as the kernel does (``os.stat``).
    """
    parts = [p for p in os.path.normpath(path).split("/") if p]
    steps = ["/"] + ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]
    last = None
    for at, step in enumerate(steps):
        try:
            st = os.stat(step)
        except OSError:
            break  # does not exist (yet): whoever can write the one above could make it
        if not stat.S_ISDIR(st.st_mode) and at < len(steps) - 1:
            return None  # a file on the way: nothing can be found below it
        last = (step, st, at == len(steps) - 1)
        sticky_above = st.st_mode & stat.S_ISVTX and at < len(steps) - 1
        if not sticky_above and _writable(step, st):
            return f"{step} can be written by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    if last is not None and not last[2]:  # it does not exist: who could make it?
        step, st, _ = last
        if _writable(step, st):
            return f"{path} does not exist and {step} can be written by other users"
    return None


def unsafe(entry: str) -> str | None:
    """Why search-path ``entry`` is unsafe to hand on, or None."""
    if entry == "":
        return "an empty entry (the working directory)"
    if not os.path.isabs(entry):
        return f"the relative entry {entry!r} (below the working directory)"
    return writable_by_others(entry)


class PlantedModules(Exception):
    """Modules were imported from a dropped entry before we could drop it."""

    def __init__(self, problem: str, fix: str) -> None:
        self.problem, self.fix = problem, fix
        super().__init__(f"{problem}; {fix}")


SAID: list[str] = []  # every line apply() produced in this process (settle reports them)


def clean(env: "os._Environ[str] | dict[str, str]") -> tuple[dict[str, list[str]], list[str]]:
    """Drop unsafe entries of :data:`VARIABLES` from ``env`` in place; (the dropped entries
    by variable, one line for the user per variable that lost any)."""
    dropped: dict[str, list[str]] = {}
    lines = []
    for name in VARIABLES:
        value = env.get(name)
        if value is None:
            continue
        keep, lost = [], []
        for entry in value.split(os.pathsep):
            why = unsafe(entry)
            (lost if why else keep).append((entry, why))
        if not lost:
            continue
        dropped[name] = [entry for entry, _ in lost]
        if keep:
            env[name] = os.pathsep.join(entry for entry, _ in keep)
        else:
            del env[name]
        reasons = "; ".join(f"{why}" for _, why in lost[:3])
        lines.append(
            f"{name}: left out {reasons}: code there would run as you; "
            f"name only directories only you or root can write (for an empty entry write "
            f"{name}=${{{name}:+${name}:}}DIR)"
        )
    return dropped, lines


def apply() -> list[str]:
    """Clean this process's environment (inherited by all it starts) and drop the same
    ``PYTHONPATH`` entries from ``sys.path``; every line to tell the user so far (a second
    call adds none). :class:`PlantedModules` when a module was already imported from a
    dropped entry."""
    dropped, lines = clean(os.environ)
    SAID.extend(lines)
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = None
    gone = set()
    for entry in dropped.get("PYTHONPATH", []):
        if os.path.isabs(entry):
            gone.add(os.path.normpath(entry))
        elif cwd is not None:  # Python made it absolute at start, from this directory
            gone.add(os.path.normpath(os.path.join(cwd, entry)))
    if gone:
        sys.path[:] = [
            p for p in sys.path if os.path.normpath(os.path.abspath(p or ".")) not in gone
        ]
        planted = loaded_from(gone)
        if planted:
            # Python imported them at its start (site's .pth files, the console script),
            # before any code of ours ran: too late to keep them out of this process, so
            # nothing is started with them in it.
            raise PlantedModules(
                f"module(s) {', '.join(planted[:5])} were imported from {sorted(gone)[0]} "
                "through PYTHONPATH before start-cluster could leave that entry out",
                "remove the empty, relative or shared entry from PYTHONPATH (and any module "
                "there you did not write) and start again; nothing was started",
            )
    return list(SAID)


def loaded_from(directories: set[str]) -> list[str]:
    """The modules already imported from a file in one of ``directories`` (not below)."""
    found = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file or name == "__main__":  # the user's own script, where they ran it
            continue
        where = os.path.dirname(os.path.abspath(file))
        if os.path.basename(file) == "__init__.py":
            where = os.path.dirname(where)  # a package: the directory that holds it
        if os.path.normpath(where) in directories:
            found.append(name)
    return sorted(found)


def start(prog: str) -> int | None:
    """A program's first call: the search paths made safe (:func:`apply`); the exit status
    where it must stop (a module came from a dropped entry: one line on stderr), else None."""
    try:
        apply()
    except PlantedModules as error:
        sys.stderr.write(f"{prog}: error: {error}\n")
        return 2
    return None
