"""Connecting to a Dask cluster: embedded ``LocalCluster``, an address, or a ``Client``.

:func:`connect` is defined in :mod:`nsdist._connect`, where the data layer
(``ingest``) can reach it too; this is its public name.
"""
from __future__ import annotations

from nsdist._connect import UnguardedScriptError, check_spawn_safe, check_tls, connect

_check_tls = check_tls  # the former private name

__all__ = ["connect", "check_tls", "check_spawn_safe", "UnguardedScriptError"]
