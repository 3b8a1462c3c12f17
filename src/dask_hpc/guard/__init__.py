"""Keeping other users out: what another user of the node or of a shared file system can
reach of a cluster, refused.

Owns: ``private`` (directories and files only their owner can change, made race-free),
``security`` (the cluster's certificate authority and TLS files), ``connection`` (the
scheduler file, read only if it is yours, and the credentials beside it), ``links`` (no token
in an output file others can read), ``dashboard`` (every HTTP route asks for a token),
``import_path`` (never import code from a directory others can write), ``search_paths`` (no
search-path entry that names the working directory or a directory others can write),
``images`` (a site image checked against its signature and sha256 before it runs).

May import: ``errors``, ``config``. ``images`` runs by itself on nodes without dask-hpc: the
standard library at its top, ``config`` only inside a function.
"""
