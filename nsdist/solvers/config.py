"""The resolved training configuration: one object the estimator, the engine and the CLI read.

:meth:`TrainConfig.from_params` validates the user's parameters (the
:class:`~nsdist.NonDecomposableClassifier` names) without looking at data;
:meth:`TrainConfig.resolve` then fixes what the user left unset from facts of
the training rows: the candidates, the step scales, the pass budget and the
check interval.  Nothing here is a constant chosen on a benchmark data set.

**Candidates.**  Every parameter the user leaves unset becomes an axis of the
population trained together (``docs/solvers.md`` §Selection):

* ``eta`` unset: ``eta = c / E||x||^2`` for ``c`` in :data:`STEP_SCALES`, five
  decades.  ``1 / E||x||^2`` is the step that moves a score by about one unit
  of margin per unit of gradient (``E||x||^2`` is measured on the validation
  rows); the structural surrogates need larger steps than the pairwise ones
  (their subgradient is non-zero on the misranked rows only), which the upper
  decades cover.
* ``surrogate`` unset: the measure's own surrogate with every ``phi`` for
  pAUC / AUC (:data:`PAIRWISE_SURROGATES`), plus logistic regression's
  point-wise loss; for Prec@k, PRBEP and F1 the structural surrogate plus the
  ranking candidates :data:`RANKING_CANDIDATES` (a good ranking plus the
  measure's cut is consistent for these measures, Narasimhan et al. 2014;
  Koyejo et al. 2014).
* ``n_passes`` unset: early stopping on the exact measure of the validation
  rows, up to ``max_passes``.
* ``eta`` unset and whole passes (``fit``, the engine; not ``partial_fit``):
  also the full-batch candidates :data:`FULL_BATCH` (L-BFGS, one gradient a
  pass, :mod:`nsdist.solvers.batch`), which need no step size.

**Folds.**  ``validation_folds="auto"`` selects on one holdout, or by K-fold
selection where a holdout would resolve less than a point of the measure
(:meth:`TrainConfig.folds`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from numbers import Integral, Real
from typing import Any

import numpy as np

from .. import losses
from .._sparse import issparse
from .._validation import check_beta, resolve_k
from ..losses.base import Loss
from .kernel import Population
from .measure import get_measure, make_loss
from .plan import holdout_sizes
from .scaling import Scaling, moments_of, scaling_from_moments, shrinking_scaling

__all__ = ["TrainConfig", "Candidate", "SOLVERS", "STREAMING", "STEP_SCALES", "PAIRWISE_SURROGATES",
           "RANKING_CANDIDATES", "PAIRWISE_RANKING_CANDIDATES", "BOTH_SCHEDULES", "FULL_BATCH", "AUTO_FOLDS",
           "FEW_POSITIVES", "DEFAULTS", "mean_sq_norm"]

#: the solvers (docs/solvers.md)
SOLVERS = ("1pmb", "2pmb", "ftrl", "psg", "cp")
#: the solvers that stream (population, selection, Dask engine)
STREAMING = ("1pmb", "2pmb")
#: step scales ``c`` of the candidates: ``eta = c / E||x||^2``
STEP_SCALES = (0.1, 1.0, 10.0, 100.0, 1000.0)
#: ``phi`` of the pairwise candidates (pAUC, AUC)
PAIRWISE_SURROGATES = ("hinge", "logistic", "squared_hinge", "sigmoid")
#: ranking candidates for the thresholded / structural measures: (loss name, params); each costs
#: O(n log n) a buffer like the measure's own surrogate (the AUC logistic pair sum, O(n+ n-), cost
#: more than the rest of the population together: 40% of an F1 fit's first pass on a 10%-positive set);
#: the squashed scores' pAUC loss is the bounded, non-convex one-way pAUC loss of Zhu et al. (2022)
#: (docs/surrogates.md §Ranking candidates)
RANKING_CANDIDATES = (("auc", {"surrogate": "squared_hinge"}), ("pauc", {"beta": 0.1, "surrogate": "hinge"}),
                      ("pauc", {"beta": 0.1, "surrogate": "sigmoid"}), ("logloss", {}))
#: ranking candidates beside the pairwise measures' own surrogates
PAIRWISE_RANKING_CANDIDATES = (("logloss", {}),)
#: the losses trained with both step schedules where the fit chooses the step: the point-wise loss is
#: the population's plain logistic regression, and averaged constant steps reach its optimum at rate
#: O(1/e) within the loss's smoothness bound (Bach & Moulines 2013) while the decaying steps stay
#: stable beyond it -- the upper step scales are beyond it on rows with heavy-tailed norms
BOTH_SCHEDULES = ("logloss",)
#: the losses that also get a full-batch candidate where the fit chooses the step: the population's logistic
#: regression solved as ``LogisticRegression`` solves it (quasi-Newton on exact gradients), which the stochastic
#: candidates approach slowly on badly conditioned rows (docs/solvers.md §Full-batch candidate)
FULL_BATCH = ("logloss",)
#: steps (epochs) of the default pass budget and of the check interval: successive halving judges
#: a candidate's averaged iterate only once it averages ``CHECK_STEPS`` iterates or more, not its
#: first few noisy steps (a round number, not tuned on any data set; ``docs/solvers.md`` §Selection)
MAX_STEPS, CHECK_STEPS = 20_000, 50
#: streamed rows per validation row between two checks: a check scores each validation row with one
#: product where a training row costs two products and a surrogate, so checks cost about a tenth
#: of the training between them (and at least ``CHECK_STEPS`` buffers apart)
CHECK_VALIDATION = 5
#: ``validation_folds="auto"``: ``AUTO_FOLDS``-fold selection (scikit-learn's default ``cv``) when the
#: holdout would hold fewer than ``FEW_POSITIVES`` positives -- then one validation positive weighs more
#: than a point of the measure, and which candidate wins is partly luck (docs/solvers.md §Selection)
AUTO_FOLDS, FEW_POSITIVES = 5, 100
#: the least gain of the validation measure over ``n_iter_no_change`` checks that keeps training going
#: (with fewer than 10^4 validation positives the gain must be one positive's worth, ``1 / v+``)
MIN_DELTA = 1e-4

#: every parameter and its default (the estimator's signature)
DEFAULTS: dict[str, Any] = dict(
    measure="pauc", beta=0.1, k=None, surrogate=None, solver="1pmb", buffer_size=500, eta=None,
    radius=None, alpha=1e-4, n_passes=None, max_passes=None, max_iter=200, tol=1e-3, average=True,
    shuffle=True, fit_intercept=True, standardize=True, validation_fraction=0.1, validation_max_rows=200_000,
    validation_folds="auto", n_iter_no_change=5, random_state=0,
)


@dataclass(frozen=True)
class Candidate:
    """One model of the population.

    Attributes
    ----------
    name : str
        ``"<loss>/<phi>"`` plus the step scale, e.g. ``"pauc/hinge@10"``.
    loss : Loss
        Its surrogate.
    step_scale : float or None
        ``c`` of ``eta = c / E||x||^2``; None when the user fixed ``eta``.
    eta : float
        Its step scale ``eta``.
    learn_b : bool
        It learns an intercept (F1's own surrogate; the point-wise logloss, which is not
        invariant to a shift of the scores).
    constant : bool
        It steps ``eta`` at every epoch, not ``eta / sqrt(e)``: a population's candidates
        with a smooth surrogate (:class:`~nsdist.solvers.kernel.Population`).
    batch : bool
        A full-batch candidate (:mod:`nsdist.solvers.batch`): one L-BFGS iteration a pass; ``eta`` is
        the length of its first step along the negative gradient.
    """

    name: str
    loss: Loss
    step_scale: float | None
    eta: float
    learn_b: bool
    constant: bool = False
    batch: bool = False

    def describe(self) -> dict:
        schedule = "L-BFGS, one gradient a pass" if self.batch else "eta" if self.constant else "eta/sqrt(e)"
        return {"name": self.name, "loss": self.loss.name, **self.loss.params(),
                "eta": self.eta, "step_scale": self.step_scale, "schedule": schedule}


def _schedules(loss: Loss, *, chosen: bool) -> tuple[bool, ...]:
    """The step schedules of a loss's candidates (True: constant ``eta``; False: ``eta / sqrt(e)``).

    A given ``eta`` runs the paper's decaying steps.  Where the fit chooses the
    step, a smooth loss steps a constant ``eta`` (its averaged iterate converges
    at rate O(1/e), Bach & Moulines 2013), :data:`BOTH_SCHEDULES` both ways.
    """
    if not chosen or not loss.smooth:
        return (False,)
    return (True, False) if loss.name in BOTH_SCHEDULES else (True,)


def mean_sq_norm(X) -> float:
    """``E||x||^2`` over the rows of ``X`` (dense or sparse): the natural step scale is its inverse."""
    if X.shape[0] == 0:
        return float("nan")
    if issparse(X):
        return float(X.multiply(X).sum(dtype=np.float64) / X.shape[0])
    return float(np.einsum("ij,ij->", X, X, dtype=np.float64) / X.shape[0])


def _check_int(name: str, value, low: int, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, Integral) or value < low:
        none = " or None" if allow_none else ""
        raise ValueError(f"{name} must be an int >= {low}{none}, got {value!r}")


def _check_positive(name: str, value, *, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, Real) or not np.isfinite(value) or value <= 0:
        none = " or None" if allow_none else ""
        raise ValueError(f"{name} must be a number > 0{none}, got {value!r}")


def _check_choice(name: str, value, choices: tuple) -> None:
    if not isinstance(value, str) or value not in choices:
        hint = ""
        if isinstance(value, str) and value.lower() in choices:
            hint = f" (did you mean {value.lower()!r}?)"
        raise ValueError(f"unknown {name} {value!r}{hint}; valid: {', '.join(map(repr, choices))}")


@dataclass(frozen=True)
class TrainConfig:
    """Validated parameters and, once :meth:`resolve` d, the candidates and budgets.

    The fields named as :data:`DEFAULTS` keep the user's values (None = unset).
    The resolved fields are ``candidates``, ``passes`` (the pass budget),
    ``early_stopping``, ``check_rows`` and ``selects``.
    """

    measure: str = "pauc"
    beta: float = 0.1
    k: int | float | None = None
    surrogate: str | None = None
    solver: str = "1pmb"
    buffer_size: int = 500
    eta: float | None = None
    radius: float | None = None
    alpha: float = 1e-4
    n_passes: int | None = None
    max_passes: int | None = None
    max_iter: int = 200
    tol: float = 1e-3
    average: bool = True
    shuffle: bool = True
    fit_intercept: bool = True
    standardize: bool = True
    validation_fraction: float = 0.1
    validation_max_rows: int = 200_000
    validation_folds: int | str = "auto"
    n_iter_no_change: int = 5
    random_state: int = 0
    # resolved
    candidates: tuple[Candidate, ...] = field(default=(), compare=False)
    passes: int | None = None
    check_rows: int | None = None
    train_k: int | float | None = None

    # ------------------------------------------------------------ validation
    @classmethod
    def from_params(cls, **params) -> "TrainConfig":
        """Validate the user's parameters (a ``ValueError`` naming the first bad one)."""
        unknown = sorted(set(params) - set(DEFAULTS))
        if unknown:
            raise ValueError(f"unknown parameter(s) {', '.join(map(repr, unknown))}; valid: {', '.join(DEFAULTS)}")
        p = {**DEFAULTS, **params}
        measure = get_measure(p["measure"]).name
        _check_choice("solver", p["solver"], SOLVERS)
        check_beta(p["beta"])
        if measure == "prec@k":
            if p["k"] is None:
                raise ValueError("measure='prec@k' needs k (an int >= 1 or a float in (0, 1])")
            resolve_k(p["k"], max(int(p["k"]) if isinstance(p["k"], Integral) else 1, 1))
        if p["surrogate"] is not None:
            make_loss(measure, beta=p["beta"], k=p["k"], surrogate=p["surrogate"])
        for name, low in (("buffer_size", 2), ("max_iter", 1), ("random_state", 0), ("n_iter_no_change", 1),
                          ("validation_max_rows", 2)):
            _check_int(name, p[name], low)
        vk = p["validation_folds"]
        if vk != "auto" and (isinstance(vk, bool) or not isinstance(vk, Integral) or vk < 1):
            raise ValueError(f"validation_folds must be 'auto' or an int >= 1, got {vk!r}")
        for name in ("n_passes", "max_passes"):
            _check_int(name, p[name], 1, allow_none=True)
        for name in ("eta", "radius"):
            _check_positive(name, p[name], allow_none=True)
        for name in ("alpha", "tol"):
            _check_positive(name, p[name], allow_none=False)
        vf = p["validation_fraction"]
        if isinstance(vf, bool) or not isinstance(vf, Real) or not 0.0 <= float(vf) < 1.0:
            raise ValueError(f"validation_fraction must be a number in [0, 1), got {vf!r}")
        for name in ("average", "shuffle", "fit_intercept", "standardize"):
            if not isinstance(p[name], (bool, np.bool_)):
                raise ValueError(f"{name} must be True or False, got {p[name]!r}")
        if vk != "auto" and vk > 1 and not (p["solver"] in STREAMING and (p["eta"] is None or p["n_passes"] is None)):
            raise ValueError("validation_folds > 1 selects among candidates: it needs solver '1pmb' or '2pmb' "
                             "with eta or n_passes left unset")
        p.update(measure=measure, validation_fraction=float(vf), average=bool(p["average"]),
                 shuffle=bool(p["shuffle"]), fit_intercept=bool(p["fit_intercept"]),
                 standardize=bool(p["standardize"]))
        return cls(**p)

    def params(self) -> dict[str, Any]:
        """The user's parameters (as given, None = unset)."""
        return {name: getattr(self, name) for name in DEFAULTS}

    # ------------------------------------------------------------ resolution
    @property
    def streaming(self) -> bool:
        return self.solver in STREAMING

    @property
    def selects(self) -> bool:
        """A validation split is needed: ``eta`` or ``n_passes`` is left to the fit.

        With both set, the run is one candidate (``surrogate`` unset: the hinge)
        trained for exactly ``n_passes`` passes on every row, as in the paper.
        """
        return self.streaming and (self.eta is None or self.n_passes is None)

    @property
    def early_stopping(self) -> bool:
        return self.streaming and self.n_passes is None

    @property
    def k_fold(self) -> bool:
        """The user asked for K-fold selection (an int ``validation_folds > 1``, not ``"auto"``)."""
        return self.validation_folds != "auto" and self.validation_folds > 1

    def folds(self, n_pos: int, n_neg: int, *, holdout: bool = True) -> int:
        """``K`` of the selection on ``n_pos + n_neg`` training rows (1: one holdout, or no selection).

        An int ``validation_folds`` is the user's ``K``.  ``"auto"`` is
        :data:`AUTO_FOLDS` where the fit would select on a holdout carved from
        the rows (``holdout``: no validation rows given and one stream, not
        ``partial_fit``, ``n_chains > 1`` or a warm start), that holdout would
        hold fewer than :data:`FEW_POSITIVES` positives, every fold gets a
        positive, and the rows number no more than ``validation_max_rows`` (the
        rows a holdout may gather on the driver, so K-fold selection, which
        reads every row there, holds no more); else 1.
        """
        if self.validation_folds != "auto":
            return self.validation_folds
        if not (holdout and self.selects and self.validation_fraction > 0) or \
                n_pos + n_neg > self.validation_max_rows or n_pos < AUTO_FOLDS:
            return 1
        v_pos, _ = holdout_sizes(n_pos, n_neg, self.validation_fraction, self.validation_max_rows)
        return AUTO_FOLDS if v_pos < FEW_POSITIVES else 1

    def with_folds(self, k: int) -> "TrainConfig":
        """This configuration with ``validation_folds`` resolved to ``k`` (:meth:`folds`)."""
        return replace(self, validation_folds=k)

    def resolve(self, *, n_features: int, n_rows: int, mean_sq_norm: float | None = None,
                n_validation: int = 0, whole_passes: bool = True, n_chains: int = 1) -> "TrainConfig":
        """Fix the candidates and budgets for ``n_rows`` training rows of ``n_features`` features.

        Parameters
        ----------
        n_rows : int
            Rows the stream trains on (after the holdout).
        mean_sq_norm : float, optional
            ``E||x||^2`` of the (scaled) rows, measured on the validation rows;
            needed when ``eta`` is unset.
        n_validation : int
            Validation rows (0: none).
        whole_passes : bool
            The driver streams whole passes (``fit``, the engine), so full-batch
            candidates can sum a pass's gradient; ``partial_fit`` does not.
        n_chains : int
            The engine's data-parallel chains ``K``: a round of ``K`` blocks
            advances the mixed state by one block's steps (its step counter is
            the chain's that stepped most, :func:`~nsdist.solvers.kernel.mix_states`),
            so a pass makes ``K`` times fewer steps; the pass budget and the
            check interval count steps, and cover ``K`` times the rows.

        Raises
        ------
        ValueError
            A selection is needed (module doc) but there are no validation rows.
        """
        train_k = self.k
        if self.measure == "prec@k" and isinstance(self.k, Integral) and n_rows > 0:
            resolve_k(self.k, n_rows + n_validation)
            train_k = self.k / (n_rows + n_validation)   # buffers use the fraction of the training set
        if not self.streaming:
            return replace(self, train_k=train_k)
        if self.selects and n_validation == 0:
            raise ValueError(
                "validation_fraction=0 and no validation rows leave nothing to choose the unset parameters on "
                "(eta, surrogate, n_passes): set them explicitly, or give validation rows")
        scales: tuple[float | None, ...]
        if self.eta is None:
            if not mean_sq_norm or not np.isfinite(mean_sq_norm):
                raise ValueError("every feature of the validation rows is 0 (after standardisation: every feature is "
                                 "constant), so nothing ranks the rows and the step size (eta = c / E||x||^2) "
                                 "cannot be chosen: check the feature columns, or set eta")
            scales = STEP_SCALES
        else:
            scales = (None,)
        measure = get_measure(self.measure)
        kinds: list[tuple[str, dict, bool]] = []          # (loss name, params, own loss)
        own_params = {"beta": self.beta, "k": train_k}
        if self.surrogate is not None or not self.selects:
            kinds.append((measure.name, {**own_params, "surrogate": self.surrogate or "hinge"}, True))
        elif measure.pairwise:
            kinds += [(measure.name, {**own_params, "surrogate": phi}, True) for phi in PAIRWISE_SURROGATES]
            kinds += [(name, dict(params), False) for name, params in PAIRWISE_RANKING_CANDIDATES]
        else:
            kinds.append((measure.name, {**own_params, "surrogate": "hinge"}, True))
            kinds += [(name, dict(params), False) for name, params in RANKING_CANDIDATES]
        candidates = []
        for name, params, own in kinds:
            if own:
                loss = make_loss(name, beta=params["beta"], k=params["k"], surrogate=params["surrogate"])
            else:
                loss = losses.get(name, **params)
            label = name if (own and not measure.pairwise) or "surrogate" not in params else f"{name}/{params['surrogate']}"
            # F1's own surrogate learns its threshold; a loss that sees the scores' level (the point-wise
            # loss, the squashed scores: Loss.shift_invariant False) needs an intercept
            learn_b = bool(((own and measure.thresholded) or not loss.shift_invariant) and self.fit_intercept)
            for constant in _schedules(loss, chosen=self.eta is None):
                for c in scales:
                    eta = float(self.eta) if c is None else c / float(mean_sq_norm)
                    tag = (f"{label}/const" if constant and name in BOTH_SCHEDULES else label) + (
                        "" if c is None else f"@{c:g}")
                    candidates.append(Candidate(tag, loss, c, eta, learn_b, constant))
            # 1PMB streams every training row; 2PMB only the frequent class (the reservoir holds the other)
            if self.eta is None and whole_passes and self.solver == "1pmb" and name in FULL_BATCH:
                # its first step (before any curvature is known): 1 / L along -g, L = (E||x||^2 + 1) / 4 the
                # logistic loss's smoothness bound on (x, 1), a step that lowers the objective
                candidates.append(Candidate(f"{label}/lbfgs", loss, None, 4.0 / (float(mean_sq_norm) + 1.0), learn_b,
                                            batch=True))
        steps_per_pass = max(1, math.ceil(n_rows / (self.buffer_size * n_chains)))
        if self.n_passes is not None:
            passes = self.n_passes
        elif self.max_passes is not None:
            passes = self.max_passes
        else:
            passes = max(10, math.ceil(MAX_STEPS / steps_per_pass))
        check_rows = None
        if self.selects:
            check_rows = max(CHECK_STEPS * n_chains * min(self.buffer_size, max(n_rows, 1)),
                             CHECK_VALIDATION * n_validation)
        return replace(self, candidates=tuple(candidates), passes=passes, check_rows=check_rows, train_k=train_k)

    @property
    def population(self) -> Population:
        """The candidates as the kernel's :class:`~nsdist.solvers.kernel.Population`."""
        return Population(tuple(c.loss for c in self.candidates), tuple(c.eta for c in self.candidates),
                          tuple(c.learn_b for c in self.candidates), tuple(c.constant for c in self.candidates),
                          tuple(c.batch for c in self.candidates))

    def scaling_for(self, X, rows: np.ndarray | None = None) -> Scaling | None:
        """The feature scaling of a run trained on the rows ``X`` (``rows``: on ``X[rows]``; None: none,
        :meth:`scales`)."""
        sparse = issparse(X)
        return self.scaling_of(moments_of(X, rows=rows), sparse=sparse) if self.scales(sparse) else None

    def scales(self, sparse: bool) -> bool:
        """Whether the run scales its rows (and so needs their moments): with ``standardize``, dense rows
        always; sparse rows when the fit selects -- a fixed run over sparse rows trains as stored, since in
        the engine it reads no sample (its ranking cut is placed on the blocks the chain loaded last) and
        its moments would cost one."""
        return self.standardize and (self.selects or not sparse)

    def scaling_of(self, moments: tuple[int, np.ndarray, np.ndarray], *, sparse: bool) -> Scaling | None:
        """The feature scaling of given moments ``(n, mean, m2)`` (None: none, :meth:`scales`).

        Sparse rows are only shrunk (:func:`~nsdist.solvers.scaling.shrinking_scaling`: a column whose root
        mean square exceeds 1 is divided by it): text-like features are usually normalised already (tf-idf,
        L2 rows), and dividing each by its standard deviation inflates the rare ones (on a generated
        2^20-feature text set it took E||x||^2 from 1 to 6 * 10^5 and halved Prec@1%); centring would also
        densify them.  Dense rows are centred and scaled, but not centred when ``fit_intercept=False`` --
        centring is an intercept in disguise, and the folded model must keep ``b = 0``.
        """
        if not self.scales(sparse):
            return None
        if sparse:
            return shrinking_scaling(*moments)
        return scaling_from_moments(*moments, center=self.fit_intercept)

    @property
    def plug_in(self) -> bool:
        """F1's threshold may be the F1-optimal one on the validation rows."""
        return get_measure(self.measure).thresholded and self.fit_intercept

    def describe(self) -> dict:
        """Plain data for ``metrics.json`` and model files."""
        out = self.params()
        out.update(passes=self.passes, check_rows=self.check_rows, candidates=[c.describe() for c in self.candidates])
        return out
