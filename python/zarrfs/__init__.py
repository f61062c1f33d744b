"""zarrfs from Python: mount sharded Zarr hierarchies as plain unsharded directory trees, and
copy or pack them, through the ``zarrfs`` binary installed with this package.

- :func:`mount` returns a :class:`Mount` (a context manager) once the mount is live;
- :func:`copy` runs ``zarrfs copy`` and returns its JSON summary;
- :func:`zarrfs.dask.copy` (``pip install 'zarrfs[dask]'``) runs the parts of a copy as tasks
  on a Dask cluster.

The binary is looked for beside the interpreter (``sysconfig.get_path("scripts")``, where the
wheel installs it), then at ``$ZARRFS_BIN``, then on ``PATH``. ``python -m zarrfs`` is the
command line. docs/python.md has examples.
"""
from ._binary import ZarrfsError, binary
from ._copy import CopyError, copy
from ._mount import Mount, mount

__all__ = ["mount", "Mount", "copy", "ZarrfsError", "CopyError", "binary"]
