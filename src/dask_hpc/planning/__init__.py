"""Making the plan: from the command line's settings, the environment and the site, what this
rank will start, decided before anything starts (``plan.make_plan``, a ``plan.Plan``).

Owns: ``settings`` (the command line's options, typed: argparse stays in ``cli``), ``plan``
and the parts it asks: ``paths`` (the cluster's directory, the scheduler
file), ``network`` (addresses, ports, TLS), ``worker_kind`` (GPUs, worker class), ``scaling``
(timeouts and limits for the cluster's size), ``sites`` (the profiles in ``dask_hpc/sites/``),
``launchers`` and ``pmi`` (the rank from the launcher's environment), ``binding``,
``resources`` and ``gpus`` (the node's CPUs, memory and GPUs).

May import: ``errors``, ``config``, ``guard``. Nothing here starts a process or imports
``distributed``'s server side: a plan is plain data.
"""
