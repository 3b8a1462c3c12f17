"""JupyterLab as start-cluster runs it: ``python -P -m dask_hpc.running.jupyter_lab ARGS``,
where ARGS are jupyter-lab's (``jupyter.lab_argv``). Imports nothing of dask-hpc's but this.

What no JupyterLab setting does, done here in JupyterLab's own process before it starts:

- Yarn never runs. Importing ``jupyterlab.labapp`` (JupyterLab 4) asks its bundled Yarn for
  Yarn's configuration (``node yarn.js config --json`` in the jupyterlab package's directory),
  and so does every listing of the extension manager; Yarn reads a ``.yarnrc.yml`` in each
  directory above that one and runs its ``yarnPath`` (or loads its ``plugins``): code of
  whoever can write a directory above the environment. The only use of the answer is the npm
  registry for installing extensions, which ours cannot do (``extension_manager=readonly``), so
  the answer is "no configuration" (``_yarn_config``); a JupyterLab without that function is
  refused (one line), never started with Yarn.
- Only the server extensions ARGS name load. jupyter-server adds every extension that a config
  directory enables (``jupyter_server_config.json``, ``jupyter_server_config.d/*.json``) and
  the command line does not name: each of those is named here, disabled.
"""

from __future__ import annotations

import sys

EXTENSION = "--ServerApp.jpserver_extensions="
NO_YARN = {"yarn config": {}, "npm config": {}}


def found_extensions() -> dict[str, bool]:
    """The server extensions the config directories enable or disable (jupyter-server's own
    reading of them, over the directories its ServerApp reads)."""
    from jupyter_core.paths import jupyter_config_dir, jupyter_config_path
    from jupyter_server.extension.config import ExtensionConfigManager

    paths = jupyter_config_path()
    if jupyter_config_dir() not in paths:
        paths.insert(0, jupyter_config_dir())
    return dict(ExtensionConfigManager(read_config_path=paths).get_jpserver_extensions())


def with_others_disabled(argv: list[str], found: dict[str, bool]) -> list[str]:
    """``argv`` and, for each extension in ``found`` it does not name, that one disabled."""
    named = {a[len(EXTENSION) :].split("=", 1)[0] for a in argv if a.startswith(EXTENSION)}
    return [*argv, *(f"{EXTENSION}{name}=False" for name in sorted(set(found) - named))]


def _no_yarn_config(logger: object = None) -> dict[str, dict]:
    """Yarn's configuration as JupyterLab asks for it: none, and Yarn not run."""
    return {key: {} for key in NO_YARN}


def main(argv: list[str]) -> int:
    from jupyterlab import commands

    if not callable(getattr(commands, "_yarn_config", None)):
        print(
            "dask-hpc: this JupyterLab asks Yarn for its configuration in a way dask-hpc does not"
            " know, so it is not started: install jupyterlab 4 (pip install '.[jupyter]')",
            file=sys.stderr,
        )
        return 2
    commands._yarn_config = _no_yarn_config  # before labapp's import asks for it
    from jupyterlab.labapp import LabApp

    LabApp.launch_instance(argv=with_others_disabled(argv, found_extensions()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
