"""Carrying out the plan: a rank's processes, from the fork of its nanny host to the last
child's exit (``runtime.run``).

Owns: ``runtime``; the ranks (``first_rank``: the scheduler, the roll call, COMMAND, the
ready block ``banner``, JupyterLab ``jupyter``, run as ``jupyter_lab`` with kernels
``jupyter_kernel``; ``worker_rank``; ``rank``: what both do with
their own workers); the roll call of the ranks (``roll_call``, ``roster``, ``liveness``:
hung ranks found, ``given_up``: their workers removed, ``flux_job``); the processes
(``nanny_host``, ``nannies``, ``processes``, ``supervisor``, ``children``, ``forked_mp``,
``zygote``) and the worker class they run (``worker``).

May import: ``errors``, ``config``, ``guard``, ``planning``, ``at_scale``.
"""
