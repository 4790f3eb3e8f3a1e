"""In-fit selection: score the candidates on the validation rows, halve, stop early, pick the best.

At every check of the stream plan (:func:`nsdist.solvers.plan.schedule`) each
live candidate's model (averaged or last iterate) is scored on the validation
rows with the exact measure of :mod:`nsdist.metrics`:

* a candidate whose weights are no longer finite is dropped (never chosen);
* all but the best ``ceil(n / 3)`` of the ``n`` live candidates are dropped
  (successive halving with Hyperband's reduction factor ``eta = 3``, Li et
  al. 2018), down to one;
* each candidate keeps a snapshot of its best-scoring model;
* the stochastic candidates stop when their best value has gained less than
  one validation positive's worth, ``1 / v+`` (at least
  :data:`~nsdist.solvers.config.MIN_DELTA`), over the last ``n_iter_no_change``
  checks (early stopping), or when the pass budget is spent.  A smaller gain is
  below what the validation rows resolve: moving one positive changes Prec@k,
  PRBEP and the pAUC of ``v+`` positives by up to ``1 / v+``, F1 by about that;
* a full-batch candidate (:mod:`nsdist.solvers.batch`) is not halved: it
  moves once a pass, so its early checks say little.  It trains on, alone
  once the stochastic ones have stopped, until over its last
  ``n_iter_no_change`` passes both its own value has gained less than that
  and its training objective has fallen by less than ``tol`` (relative).

K-fold selection holds its ``K`` fold fits in lockstep: each check is split
into :meth:`Selection.observe` (score, snapshot) and :meth:`Selection.settle`
(halve, stop), and :class:`Lockstep` makes the decision between them once for
all folds, on the candidates' mean over the folds.

The returned model is the best snapshot.  For F1 the selection scores each
candidate with the plug-in threshold -- the one that maximises F1 on the
validation rows (:func:`~nsdist.solvers.measure.f1_threshold`) -- or its own,
whichever validates better; the drivers then place the winner's threshold at
the F1-optimal one on the rows of the training data (``docs/solvers.md``
§Selection, Result); a ranking model's intercept is the measure's cut on the
validation rows.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from .blocks import put_columns, take_columns
from .config import MIN_DELTA, TrainConfig
from .kernel import SGDState
from .measure import cut_intercept, f1_threshold, get_measure, measure_function

__all__ = ["Selection", "WinnerWatch", "Lockstep", "Observation", "Decision", "OutOfStep", "halving", "REDUCTION"]

#: successive halving keeps the best ``ceil(n / REDUCTION)`` of ``n`` live candidates at a check
#: (Hyperband's default reduction factor, Li et al. 2018: the population is down to one after
#: ``log_3 n`` checks -- 4 for 30 candidates, not 5 as with halves)
REDUCTION = 3


class OutOfStep(RuntimeError):
    """A decision for another check than the selection's (a fold fit restarted, or out of lockstep)."""


def halving(live: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The candidates successive halving drops: all of ``live`` but the best ``ceil(n / REDUCTION)`` by
    ``values`` (ties: the lower index stays)."""
    if live.size < 2:
        return live[:0]
    order = np.lexsort((live, -values))                   # best first; ties: lower index first
    return live[order[-(-live.size // REDUCTION):]]


def _batch_mask(cfg: TrainConfig) -> np.ndarray:
    return np.array([c.batch for c in cfg.candidates], dtype=bool)


@dataclass(frozen=True)
class Observation:
    """What one check of a selection saw (plain data: a fold fit sends it to the driver).

    Attributes
    ----------
    check : int
        The check's number.
    now : ndarray (M,)
        Each live candidate's validation value at this check (``-inf``: not live or diverged).
    value : ndarray (M,)
        Each candidate's best value so far (its snapshot's).
    alive : ndarray (M,)
        The candidates live after dropping the diverged.
    batch : ndarray (M,)
        The full-batch candidates (never halved).
    resolution : float
        The least gain that counts: one validation positive's worth, ``1 / v+``.
    batch_on : bool
        Full-batch candidates live and still gaining (their own stopping rule).
    """

    check: int
    now: np.ndarray
    value: np.ndarray
    alive: np.ndarray
    batch: np.ndarray
    resolution: float
    batch_on: bool


@dataclass(frozen=True)
class Decision:
    """What a check decides (:meth:`Selection.settle`): the candidates still live (``alive``; a candidate not in
    it diverged on another fold), those successive halving drops (``halved``), whether the stochastic ones stop
    (``stalled``) and whether the full-batch ones train on (``batch_on``); ``joint``: the folds' decision."""

    check: int
    alive: np.ndarray
    halved: np.ndarray
    stalled: bool
    batch_on: bool
    joint: bool = False


class Lockstep:
    """The joint decisions of K-fold selection's ``K`` fold fits, checked in lockstep (docs/solvers.md
    §Selection, "K-fold selection").

    At each check the ``K`` fits' :class:`Observation` become one :class:`Decision` for all: a candidate
    diverged on one fold is dropped on all; successive halving ranks the live ones by their mean value over
    the folds; the stochastic candidates stop when the best mean snapshot value over the folds -- the value
    the final choice ranks by -- has gained less than the coarsest fold's resolution over the last
    ``n_iter_no_change`` checks.  Every fold then keeps the same candidates and its stochastic ones stop at
    the same check, so each candidate's mean is over ``K`` models of the same training budget.  Once no
    stochastic candidate is left, each fold's full-batch candidate trains on by its own rule
    (:func:`nsdist.estimator.fit_folds_in_lockstep`).
    """

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg                       # its stopping rule's settings (the folds resolve the candidates)
        self.best: list[float] = []          # the best mean snapshot value of the stochastic candidates, per check

    def decide(self, seen: list[Observation]) -> Decision:
        cfg, batch, check = self.cfg, seen[0].batch, seen[0].check
        if any(o.check != check for o in seen):
            raise OutOfStep(f"fold fits out of step: checks {[o.check for o in seen]}")
        alive = np.logical_and.reduce([o.alive for o in seen])
        now = np.mean([np.where(alive, o.now, -np.inf) for o in seen], axis=0)
        live = np.flatnonzero(alive & ~batch & np.isfinite(now))
        halved = np.zeros_like(alive)
        halved[halving(live, now[live])] = True
        value = np.mean([o.value for o in seen], axis=0)
        self.best.append(float(value[~batch].max()) if (~batch).any() else -np.inf)
        n = cfg.n_iter_no_change
        stalled = (cfg.early_stopping and len(self.best) > n
                   and self.best[-1] - self.best[-1 - n] < max(o.resolution for o in seen))
        return Decision(check, alive, halved, stalled, any(o.batch_on for o in seen), joint=True)


@dataclass
class Selection:
    """The selection's memory across checks (plain data, checkpointed with the state).

    Attributes
    ----------
    value : ndarray (M,)
        Each candidate's best validation value so far (``-inf``: never scored or diverged).
    W, b : ndarray (d, M), (M,)
        Each candidate's best model (``b`` with the plug-in threshold folded in for F1).
    at_epoch : ndarray (M,)
        Step count of each snapshot.
    dropped : ndarray (M,)
        The check that dropped the candidate (0: alive).
    reason : list of str
        Why each dropped candidate was dropped.
    checks : int
        Checks so far.
    best : float
        The best value over all candidates.
    curve : list of dict
        One point per check: rows seen, steps, best value, live candidates; the best of the
        stochastic candidates and of the full-batch ones, and the passes the latter have evaluated.
    """

    value: np.ndarray
    W: np.ndarray
    b: np.ndarray
    at_epoch: np.ndarray
    dropped: np.ndarray
    reason: list[str]
    checks: int = 0
    best: float = -np.inf
    curve: list[dict] = field(default_factory=list)

    @classmethod
    def start(cls, d: int, m: int) -> "Selection":
        return cls(np.full(m, -np.inf), np.zeros((d, m)), np.zeros(m), np.zeros(m, dtype=np.int64),
                   np.zeros(m, dtype=np.int64), [""] * m)

    # ---------------------------------------------------------------- scoring
    def score(self, cfg: TrainConfig, W: np.ndarray, b: np.ndarray, X_val, y_val: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
        """Validation value and effective intercept of each column of ``(W, b)``."""
        with np.errstate(over="ignore", invalid="ignore"):     # a diverged candidate scores non-finite
            S = np.asarray(X_val @ W.astype(X_val.dtype, copy=False), dtype=np.float64)
        P = measure_function(cfg.measure, beta=cfg.beta, k=cfg.k)
        thresholded = get_measure(cfg.measure).thresholded
        values, b_eff = np.empty(W.shape[1]), b.astype(np.float64).copy()
        for j in range(W.shape[1]):
            s = S[:, j] + b[j]
            if not np.all(np.isfinite(s)):
                values[j] = -np.inf
                continue
            if thresholded:
                own = P(y_val, s) if cfg.fit_intercept else P(y_val, S[:, j])
                values[j] = own
                if cfg.plug_in:
                    plug, t = f1_threshold(y_val, s)
                    if plug > own:
                        values[j], b_eff[j] = plug, b[j] - t
            else:
                values[j] = P(y_val, s)
        return values, b_eff

    # ----------------------------------------------------------------- checks
    def check(self, cfg: TrainConfig, state: SGDState, X_val, y_val: np.ndarray) -> tuple[SGDState, bool]:
        """Score the live candidates, update the snapshots, halve; return the state and whether to stop."""
        state, seen = self.observe(cfg, state, X_val, y_val)
        if seen is None:
            return state, True
        batch = _batch_mask(cfg)
        live = np.flatnonzero(seen.alive & ~batch & np.isfinite(seen.now))
        halved = np.zeros_like(seen.alive)
        halved[halving(live, seen.now[live])] = True
        stalled = cfg.early_stopping and self._stalled("best_stochastic", "check", cfg.n_iter_no_change,
                                                        seen.resolution)
        return self.settle(cfg, state, Decision(seen.check, seen.alive, halved, stalled, seen.batch_on))

    def observe(self, cfg: TrainConfig, state: SGDState, X_val, y_val: np.ndarray
                ) -> tuple[SGDState, "Observation | None"]:
        """A check's first half: score the live candidates, drop the diverged, update the snapshots and record
        the check's point; what a decision on halving and stopping needs (None: nothing left to score, stop)."""
        self.checks += 1
        state = replace(state, alive=state.alive.copy())    # a check changes only which candidates live
        cols = np.flatnonzero(state.alive)
        W, b = state.models(cfg.average, cols)               # the live candidates' models, column j: cols[j]
        finite = np.all(np.isfinite(W), axis=0) & np.isfinite(b)
        for c in cols[~finite]:
            self._drop(state, c, "diverged (non-finite weights)")
        if not finite.all():
            cols, W, b = cols[finite], take_columns(W, np.flatnonzero(finite)), b[finite]
        batch = _batch_mask(cfg)
        if cols.size == 0:
            if not np.isfinite(self.value).any():
                raise FloatingPointError("every candidate diverged (non-finite weights); set a smaller eta")
            self._record(state, batch)
            return state, None
        values, b_eff = self.score(cfg, W, b, X_val, y_val)
        for c in cols[~np.isfinite(values)]:
            self._drop(state, c, "diverged (non-finite scores)")
        up = np.flatnonzero(values > self.value[cols])      # the candidates whose snapshot improved
        self.value[cols[up]], self.b[cols[up]], self.at_epoch[cols[up]] = values[up], b_eff[up], state.epoch
        put_columns(self.W, cols[up], take_columns(W, up))  # by row chunks: 0.6-1.4 s column by column at 2^20 x 31
        self.best = max(self.best, float(values.max()) if values.size else -np.inf)
        self._record(state, batch)
        now = np.full(len(cfg.candidates), -np.inf)
        now[cols] = values
        resolution = max(MIN_DELTA, 1.0 / max(1, int(np.count_nonzero(y_val > 0))))
        batch_on = bool((state.alive & batch).any()) and not (
            self._stalled("best_batch", "passes_batch", cfg.n_iter_no_change, resolution)
            and self._stalled("objective_batch", "passes_batch", cfg.n_iter_no_change, cfg.tol, relative=True))
        return state, Observation(self.checks, now, self.value.copy(), state.alive.copy(), batch, resolution,
                                  batch_on)

    def settle(self, cfg: TrainConfig, state: SGDState, decision: "Decision") -> tuple[SGDState, bool]:
        """A check's second half: apply ``decision`` (this selection's own, or the folds' joint one of
        :class:`Lockstep`); return the state and whether to stop."""
        if decision.check != self.checks:
            raise OutOfStep(f"a decision for check {decision.check} reached a selection at check {self.checks}")
        batch = _batch_mask(cfg)
        joint = " (the folds' mean)" if decision.joint else ""
        for c in np.flatnonzero(state.alive & ~decision.alive):
            self._drop(state, c, "diverged on another fold")
        for c in np.flatnonzero(state.alive & decision.halved):
            self._drop(state, c, f"dropped by successive halving at check {self.checks}{joint}")
        self.curve[-1]["alive"] = int(state.alive.sum())
        if not cfg.early_stopping:
            return state, False
        if decision.stalled:
            for c in np.flatnonzero(state.alive & ~batch):
                self._drop(state, c, f"stopped early at check {self.checks}{joint}")
        return state, not (state.alive & ~batch).any() and not decision.batch_on

    def continued(self, cfg: TrainConfig, state: SGDState) -> np.ndarray:
        """The candidates a ``partial_fit`` after the fit trains on: the stochastic ones alive at the end or
        stopped early (not those halved or diverged); not a full-batch one, whose passes end only in a fit."""
        batch = np.array([c.batch for c in cfg.candidates], dtype=bool)
        stopped = np.array([r.startswith("stopped early") for r in self.reason], dtype=bool)
        return (state.alive | stopped) & ~batch

    def _record(self, state: SGDState, batch: np.ndarray) -> None:
        """The check's point of ``curve`` (every check has one: ``dropped`` indexes it)."""
        def best_of(m: np.ndarray) -> float | None:       # None (plain JSON): none scored yet
            v = self.value[m]
            return float(v.max()) if np.isfinite(v).any() else None

        self.curve.append({"check": self.checks, "epoch": int(state.epoch), "rows_seen": int(state.rows_seen),
                           "best": self.best, "alive": int(state.alive.sum()), "best_stochastic": best_of(~batch),
                           "best_batch": best_of(batch),
                           "passes_batch": 0 if state.batch is None else int(state.batch.evaluations),
                           "objective_batch": self._objective(state)})

    @staticmethod
    def _objective(state: SGDState) -> float | None:
        """The full-batch candidates' lowest training objective so far (None: none evaluated)."""
        if state.batch is None:
            return None
        fx = state.batch.fx[state.alive[state.batch.cols] & np.isfinite(state.batch.fx)]
        return float(fx.min()) if fx.size else None

    def _stalled(self, key: str, clock: str, n: int, resolution: float, relative: bool = False) -> bool:
        """``curve[-1][key]`` gained less than ``resolution`` since the last check at least ``n`` ``clock``
        units (checks, or passes of the full-batch candidates) back; never before ``n`` units have passed.
        ``relative``: ``key`` is an objective, and its fall relative to its value must reach ``resolution``."""
        now = self.curve[-1][clock] if clock != "check" else len(self.curve)
        for i in range(len(self.curve) - 2, -1, -1):
            then = self.curve[i][clock] if clock != "check" else i + 1
            if now - then >= n:
                a, b = self.curve[i][key], self.curve[-1][key]
                if a is None or b is None:            # nothing scored (or evaluated) back then, or still
                    return b is None
                return (a - b < resolution * abs(b)) if relative else (b - a < resolution)
        return False

    def _drop(self, state: SGDState, c: int, reason: str) -> None:
        state.alive[c] = False
        self.dropped[c] = self.checks
        self.reason[c] = reason

    # ----------------------------------------------------------------- result
    def winner(self) -> int:
        """The candidate with the best snapshot (ties: the first)."""
        if not np.isfinite(self.value).any():
            raise FloatingPointError("no candidate produced a finite validation score")
        return int(np.argmax(self.value))

    def model(self, cfg: TrainConfig, X_val, y_val: np.ndarray) -> tuple[np.ndarray, float]:
        """The selected ``(w, b)``: the winner's snapshot; a ranking model's cut on the validation rows."""
        m = self.winner()
        w, b = self.W[:, m].copy(), float(self.b[m])
        if not get_measure(cfg.measure).thresholded:
            if cfg.fit_intercept:
                s = np.asarray(X_val @ w.astype(X_val.dtype, copy=False), dtype=np.float64)
                b = cut_intercept(cfg.measure, y_val, s, k=cfg.k if cfg.train_k is None else cfg.train_k)
            else:
                b = 0.0
        return w, b

    def report(self, cfg: TrainConfig) -> list[dict]:
        """Per candidate: its description, best validation value, steps at the snapshot, drop check and
        reason, and its cost: ``steps_trained`` (the steps it was alive for) and ``cost_share``, its
        part of all candidates' steps.  A step costs each live candidate one column of ``X @ W`` and
        of ``X.T @ dS`` and one surrogate evaluation (whose cost differs by surrogate), so the share
        splits a fit's time exactly for the products and approximately for the surrogates.  A full-batch
        candidate's share counts the steps it trained beside the stochastic ones; the passes it trained
        alone after them are the curve's ``passes_batch``."""
        win = self.winner() if np.isfinite(self.value).any() else -1
        epochs = [p["epoch"] for p in self.curve]
        trained = [epochs[d - 1] if d else (epochs[-1] if epochs else 0) for d in self.dropped]
        total = sum(trained)
        rows = []
        for m, c in enumerate(cfg.candidates):
            rows.append({**c.describe(), "validation": float(self.value[m]) if np.isfinite(self.value[m]) else None,
                         "steps": int(self.at_epoch[m]), "dropped_at_check": int(self.dropped[m]) or None,
                         "reason": self.reason[m] or None, "selected": m == win,
                         "steps_trained": int(trained[m]), "cost_share": trained[m] / total if total else 0.0})
        return rows

    def to_dict(self) -> dict:
        return {"value": [float(v) if np.isfinite(v) else None for v in self.value], "W": self.W.tolist(),
                "b": self.b.tolist(), "at_epoch": self.at_epoch.tolist(), "dropped": self.dropped.tolist(),
                "reason": list(self.reason), "checks": self.checks,
                "best": self.best if np.isfinite(self.best) else None, "curve": self.curve}

    @classmethod
    def from_dict(cls, d: dict) -> "Selection":
        return cls(np.array([-np.inf if v is None else v for v in d["value"]], dtype=np.float64),
                   np.asarray(d["W"], dtype=np.float64), np.asarray(d["b"], dtype=np.float64),
                   np.asarray(d["at_epoch"], dtype=np.int64), np.asarray(d["dropped"], dtype=np.int64),
                   list(d["reason"]), int(d["checks"]),
                   -np.inf if d["best"] is None else float(d["best"]), list(d["curve"]))


class WinnerWatch:
    """A selection's winner measured at each check on rows it is watched on (a learning curve's monitor rows).

    ``measure(w, b)`` gives the measure of a snapshot (the caller folds it back
    onto the rows' features).  A snapshot changes only when its value does
    (:meth:`Selection.check`), so the same winner's snapshot is measured once,
    not at every check after the selection settles.
    """

    def __init__(self, measure: Callable[[np.ndarray, float], float | None]) -> None:
        self.measure = measure
        self._key: tuple[int, float] | None = None
        self._value: float | None = None

    def __call__(self, selection: Selection) -> float | None:
        """The winner's measure; None before any candidate has a finite value."""
        if not np.isfinite(selection.value).any():
            return None
        m = selection.winner()
        key = (m, float(selection.value[m]))
        if key != self._key:
            self._key, self._value = key, self.measure(selection.W[:, m], float(selection.b[m]))
        return self._value
