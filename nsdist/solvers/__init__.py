"""Solvers over in-memory data (docs/solvers.md).

========================  =============================================================
module                    holds
========================  =============================================================
:mod:`.kernel`            the epoch kernel ``run_epochs`` for a population of models; ``mix_states``
:mod:`.blocks`            dense row blocks in the kernel's (Fortran) layout, gathered in one copy
:mod:`.config`            ``TrainConfig``: the validated, resolved configuration and its candidates
:mod:`.plan`              the stream plan: holdout, buffers, checks, data-parallel rounds
:mod:`.select`            in-fit selection: checks, halving, early stopping, plug-in F1
:mod:`.scaling`           feature scaling as a preconditioner, folded back into the model
:mod:`.order`             seeded row/block orders, reservoir and holdout keys
:mod:`.sgd`               1PMB (Algorithm 1) and 2PMB (Algorithm 2) drivers; ``drive``, the check loop
:mod:`.psg`               projected subgradient on the whole set (baseline)
:mod:`.cp`                1-slack cutting plane, SVMperf's method (baseline)
:mod:`.planes`            the cutting-plane model and its dual QP (CP, FTRL)
:mod:`.ftrl`              FTRL of eq. (FTRL), with regret penalties
:mod:`.history`           the history record shared by all solvers
:mod:`.measure`           the one table of measures: surrogate, metric, result key, intercept rule
:mod:`.defaults`          the baselines' fixed step scale (PSG, FTRL)
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
