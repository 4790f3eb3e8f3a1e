"""Solvers over in-memory data (SPEC §4).

========================  =============================================================
module                    holds
========================  =============================================================
:mod:`.kernel`            the epoch kernel ``run_epochs``: every 1PMB/2PMB/PSG step
:mod:`.order`             seeded row/block orders and 2PMB's reservoir keys
:mod:`.sgd`               1PMB (Algorithm 1) and 2PMB (Algorithm 2) drivers
:mod:`.psg`               projected subgradient on the whole set (baseline)
:mod:`.cp`                1-slack cutting plane, SVMperf's method (baseline)
:mod:`.planes`            the cutting-plane model and its dual QP (CP, FTRL)
:mod:`.ftrl`              FTRL of eq. (FTRL), with regret penalties
:mod:`.history`           the history record shared by all solvers
:mod:`.measure`           measure name -> surrogate loss, metric, intercept rule
:mod:`.defaults`          default hyper-parameters (functions of ``d``)
========================  =============================================================
"""
from .cp import CPResult, cutting_plane
from .ftrl import FTRL, ftrl
from .history import History, HistoryRecord
from .psg import PSGResult, psg
from .sgd import Reservoir, SGDResult, one_pass_mb, two_pass_mb

__all__ = [
    "one_pass_mb", "two_pass_mb", "psg", "cutting_plane", "ftrl", "FTRL",
    "SGDResult", "PSGResult", "CPResult", "Reservoir", "History", "HistoryRecord",
]
