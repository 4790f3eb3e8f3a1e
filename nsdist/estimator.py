"""``NonDecomposableClassifier``: the scikit-learn face of the solvers (SPEC §6).

It only validates, encodes labels and dispatches to :mod:`nsdist.solvers`;
it holds no graph or Dask code (:mod:`nsdist.api` streams the same 1PMB/2PMB
steps through Dask, reading the resolved settings from :meth:`_sgd_setup`).
"""
from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from ._validation import check_beta, resolve_k
from .losses.base import Loss
from .solvers.cp import cutting_plane
from .solvers.defaults import BUFFER_SIZE, N_PASSES, default_eta
from .solvers.ftrl import FTRL, ftrl
from .solvers.history import History, Recorder, Validate
from .solvers.kernel import SGDState
from .solvers.measure import MEASURES, cut_intercept, learns_intercept, make_loss, measure_function
from .solvers.order import row_order
from .solvers.psg import psg
from .solvers.sgd import Reservoir, model_of, one_pass_mb, rare_label, run_pass, two_pass_mb

__all__ = ["NonDecomposableClassifier", "SOLVERS"]

#: the solvers (SPEC §4)
SOLVERS = ("1pmb", "2pmb", "ftrl", "psg", "cp")
_ONLINE = ("1pmb", "2pmb", "ftrl")


@dataclass(frozen=True)
class SGDSetup:
    """Resolved training settings shared with the Dask engine.

    ``fit_intercept`` is the *effective* flag: True only when the user asked
    for an intercept and the measure learns one (F1, see
    :func:`~nsdist.solvers.measure.learns_intercept`).
    """

    loss: Loss
    eta: float
    radius: float | None
    fit_intercept: bool


def _check_int(name: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


def _check_positive(name: str, value, *, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, Real) or not np.isfinite(value) or value <= 0:
        none = " or None" if allow_none else ""
        raise ValueError(f"{name} must be a number > 0{none}, got {value!r}")


def _check_choice(name: str, value, choices: tuple) -> None:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(map(repr, choices))}")


class NonDecomposableClassifier(ClassifierMixin, BaseEstimator):
    """Linear scorer ``s(x) = w.x + b`` trained for a non-decomposable measure.

    Parameters
    ----------
    measure : {"pauc", "auc", "prec@k", "prbep", "f1"}, default "pauc"
        The measure to maximise (SPEC §2); :meth:`score` reports it.
    beta : float in (0, 1], default 0.1
        pAUC's false-positive range.
    k : int >= 1 or float in (0, 1], default None
        Prec@k's ``k`` (required for ``measure="prec@k"``).  Training buffers
        use the fraction ``k / n_train`` when ``k`` is an int; :meth:`score`
        uses ``k`` as given.
    surrogate : {"hinge", "logistic", "squared_hinge"}, default "hinge"
        ``phi`` of the pairwise surrogates (pauc, auc); the structural measures
        (prec@k, prbep, f1) take "hinge" only.
    solver : {"1pmb", "2pmb", "ftrl", "psg", "cp"}, default "1pmb"
        Algorithm 1, Algorithm 2, eq. (FTRL), or the batch baselines
        (projected subgradient, cutting plane); see :mod:`nsdist.solvers`.
    buffer_size : int >= 2, default 500
        Epoch / buffer length ``s`` (1PMB, 2PMB), batch size (FTRL).
    eta : float > 0, default None
        Step-length scale ``eta`` (1PMB, 2PMB, PSG: step ``eta / sqrt(e)``) or
        the regulariser of eq. (FTRL) (FTRL).  None: ``10 / d`` (pauc, auc) or
        ``1000 / d`` (prec@k, prbep, f1) for standardised features, ``1`` for
        FTRL (:func:`~nsdist.solvers.defaults.default_eta`, where the choice is explained).
    radius : float > 0, default None
        Radius of the L2 ball ``W`` the iterates are projected on (None: no projection).
    alpha : float > 0, default 1e-4
        CP's regularisation ``lambda`` (objective ``(lambda/2)||w||^2 + l(w)``).
    n_passes : int >= 1, default 10
        Passes of 1PMB/2PMB over the data (:meth:`partial_fit` makes one).
    max_iter : int >= 1, default 200
        Iterations of PSG and CP, inner CP iterations per FTRL round.
    tol : float > 0, default 1e-3
        CP's (and FTRL's inner) certified gap.
    average : bool, default True
        Return the averaged iterate (Algorithms 1, 2; FTRL's averaged leaders;
        PSG's average) -- False: the last iterate (PSG: the best one).  CP
        always returns its best iterate.
    shuffle : bool, default True
        Randomise the stream order per pass (1PMB, 2PMB, FTRL).
    fit_intercept : bool, default True
        F1: learn ``b``.  Ranking measures (their surrogates ignore ``b`` or
        are linear in it): ``b`` puts :meth:`predict`'s threshold at the
        measure's cut-off on the training scores
        (:func:`~nsdist.solvers.measure.cut_intercept`).  False: ``b = 0``.
    random_state : int >= 0, default 0
        Seed of every random order; the same seed and data give the same
        model bit for bit (an int, so the order is the same on every machine).

    Attributes
    ----------
    coef_ : ndarray of shape (1, n_features)
    intercept_ : ndarray of shape (1,)
    classes_ : ndarray of shape (2,)
        ``classes_[1]`` is the positive class (+1 for labels {-1, +1}, 1 for
        {0, 1}, True for bool; the larger label otherwise).
    n_features_in_ : int
    history_ : History
        Per epoch / round / iteration: time, rows seen, step, surrogate loss and
        (with validation data) the measure.  The loss is the epoch buffer's
        (1PMB, 2PMB), the training set's (PSG, CP), or the round's regret
        penalty per arriving row (FTRL; :class:`~nsdist.solvers.ftrl.FTRL`).
    n_iter_ : int
        Passes (1PMB, 2PMB; partial_fit calls), rounds (FTRL) or iterations (PSG, CP).

    Notes
    -----
    Defaults are chosen for standardised features (e.g. behind a
    ``StandardScaler``); ``bench/defaults.py`` documents how.
    """

    def __init__(self, measure: str = "pauc", *, beta: float = 0.1, k: int | float | None = None,
                 surrogate: str = "hinge", solver: str = "1pmb", buffer_size: int = BUFFER_SIZE,
                 eta: float | None = None, radius: float | None = None, alpha: float = 1e-4,
                 n_passes: int = N_PASSES, max_iter: int = 200, tol: float = 1e-3, average: bool = True,
                 shuffle: bool = True, fit_intercept: bool = True, random_state: int = 0) -> None:
        self.measure = measure
        self.beta = beta
        self.k = k
        self.surrogate = surrogate
        self.solver = solver
        self.buffer_size = buffer_size
        self.eta = eta
        self.radius = radius
        self.alpha = alpha
        self.n_passes = n_passes
        self.max_iter = max_iter
        self.tol = tol
        self.average = average
        self.shuffle = shuffle
        self.fit_intercept = fit_intercept
        self.random_state = random_state

    # ------------------------------------------------------------------ setup

    def _sgd_setup(self, n_features: int, n_samples: int | None = None) -> SGDSetup:
        """Validate every parameter and resolve the loss, ``eta``, ``radius`` and intercept flag.

        ``n_samples`` turns an int ``k`` into the fraction ``k / n_samples``
        for the training buffers (left as is when None).
        """
        _check_choice("measure", self.measure, MEASURES)
        _check_choice("solver", self.solver, SOLVERS)
        check_beta(self.beta)
        k = self.k
        if self.measure == "prec@k" and k is not None:
            if n_samples is not None:
                resolve_k(k, n_samples)             # range check against the training set
                if isinstance(k, Integral):
                    k = k / n_samples
        loss = make_loss(self.measure, beta=self.beta, k=k, surrogate=self.surrogate)
        _check_int("buffer_size", self.buffer_size, 2)
        _check_int("n_passes", self.n_passes, 1)
        _check_int("max_iter", self.max_iter, 1)
        _check_int("random_state", self.random_state, 0)
        _check_positive("eta", self.eta, allow_none=True)
        _check_positive("radius", self.radius, allow_none=True)
        _check_positive("alpha", self.alpha, allow_none=False)
        _check_positive("tol", self.tol, allow_none=False)
        for name in ("average", "shuffle", "fit_intercept"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        eta = default_eta(self.solver, self.measure, n_features) if self.eta is None else float(self.eta)
        return SGDSetup(loss, eta, self.radius, bool(self.fit_intercept) and learns_intercept(self.measure))

    def _measure_of(self, y: np.ndarray, s: np.ndarray) -> float:
        """The chosen measure of scores ``s`` against ``{-1, +1}`` labels ``y``."""
        return measure_function(self.measure, beta=self.beta, k=self.k)(y, s)

    def _model_params(self) -> dict:
        """The parameters as plain JSON values (``eta`` resolved when fitted)."""
        params = self.get_params()
        if hasattr(self, "eta_"):
            params["eta"] = self.eta_
        return params

    def _encode(self, y: np.ndarray) -> np.ndarray:
        """Labels as int8 ``{-1, +1}`` (``classes_[1]`` is +1)."""
        unknown = ~np.isin(y, self.classes_)
        if unknown.any():
            i = int(np.flatnonzero(unknown)[0])
            raise ValueError(f"y[{i}] = {y[i]!r} is not one of the classes {self.classes_.tolist()}")
        return np.where(y == self.classes_[1], 1, -1).astype(np.int8)

    def _set_classes(self, y: np.ndarray) -> None:
        check_classification_targets(y)
        y_type = type_of_target(y, input_name="y")
        if y_type != "binary":
            raise ValueError(f"Only binary classification is supported. The type of the target is {y_type}.")
        classes = np.unique(y)
        if classes.shape[0] != 2:
            raise ValueError(f"y holds only one class ({classes[0]!r}); training needs both classes")
        self.classes_ = classes

    def _validator(self, X_val, y_val) -> Validate | None:
        """``(w, b) -> measure`` on the validation rows, or None."""
        if X_val is None and y_val is None:
            return None
        if X_val is None or y_val is None:
            raise ValueError("give both X_val and y_val, or neither")
        X_val = check_array(X_val, dtype=[np.float64, np.float32])
        if X_val.shape[1] != self.n_features_in_:
            raise ValueError(f"X_val has {X_val.shape[1]} features, X has {self.n_features_in_}")
        y_val = self._encode(np.asarray(y_val))
        if y_val.shape[0] != X_val.shape[0]:
            raise ValueError(f"y_val has {y_val.shape[0]} labels but X_val has {X_val.shape[0]} rows")
        return lambda w, b: self._measure_of(y_val, X_val @ w.astype(X_val.dtype) + b)

    def _set_model(self, w: np.ndarray, b: float, X: np.ndarray, y: np.ndarray, setup: SGDSetup) -> None:
        """``coef_``, ``intercept_``; a ranking model's intercept is its cut on ``(X, y)``.

        Prec@k's cut uses the training ``k`` (an int ``k`` as the fraction of the first training set).
        """
        self.coef_ = np.asarray(w, dtype=np.float64).reshape(1, -1)
        if not setup.fit_intercept:
            k = setup.loss.params().get("k")
            b = cut_intercept(self.measure, y, X @ w.astype(X.dtype), k=k) if self.fit_intercept else 0.0
        self.intercept_ = np.array([b], dtype=np.float64)

    # -------------------------------------------------------------------- fit

    def fit(self, X, y, X_val=None, y_val=None) -> "NonDecomposableClassifier":
        """Train on ``(X, y)`` from ``w = 0`` with the chosen solver.

        Parameters
        ----------
        X : array-like of shape (n, d), float32 or float64 (kept)
        y : array-like of shape (n,), two classes
        X_val, y_val : optional
            Validation rows; their measure is recorded in ``history_``.
        """
        X, y = validate_data(self, X, y, dtype=[np.float64, np.float32])
        self._set_classes(y)
        y = self._encode(y)
        setup = self._sgd_setup(X.shape[1], X.shape[0])
        self.eta_ = setup.eta
        validate = self._validator(X_val, y_val)
        common = dict(eta=setup.eta, radius=setup.radius, fit_intercept=setup.fit_intercept,
                      average=self.average, validate=validate)
        streamed = dict(buffer_size=self.buffer_size, shuffle=self.shuffle, random_state=self.random_state)
        self._setup, self._rows, self._next_block = setup, X.shape[0], 1
        if self.solver in ("1pmb", "2pmb"):
            run = one_pass_mb if self.solver == "1pmb" else two_pass_mb
            res = run(X, y, setup.loss, n_passes=self.n_passes, **streamed, **common)
            w, b, self.history_, self.n_iter_ = res.coef, res.intercept, res.history, self.n_passes
            self._state, self._reservoir = res.state, res.reservoir
        elif self.solver == "psg":
            res = psg(X, y, setup.loss, max_iter=self.max_iter, **common)
            w, b, self.history_, self.n_iter_ = res.coef, res.intercept, res.history, res.state.epoch
        elif self.solver == "cp":
            res = cutting_plane(X, y, setup.loss, lam=self.alpha, radius=setup.radius,
                                fit_intercept=setup.fit_intercept, tol=self.tol, max_iter=self.max_iter,
                                validate=validate)
            w, b, self.history_, self.n_iter_ = res.coef, res.intercept, res.history, res.n_iter
        else:
            self._ftrl = ftrl(X, y, setup.loss, tol=self.tol, max_iter=self.max_iter, **streamed, **common)
            (w, b), self.history_, self.n_iter_ = self._ftrl.model(), self._ftrl.history, self._ftrl.t
        self._set_model(w, b, X, y, setup)
        return self

    def _is_online(self) -> bool:
        if self.solver not in _ONLINE:
            raise AttributeError(f"partial_fit needs an online solver ({', '.join(_ONLINE)}); "
                                 f"solver={self.solver!r} is a batch method: use fit")
        return True

    @available_if(_is_online)
    def partial_fit(self, X, y, classes=None) -> "NonDecomposableClassifier":
        """Continue training on one more block of rows (from ``w = 0`` on the first call).

        Blocks are numbered in calling order, ``j = 0, 1, ...`` (a :meth:`fit`
        counts as block 0).  1PMB: one pass over the block, continuing the
        state (epoch counter, iterate sums); its rows go in
        ``row_order(random_state, 0, j, n_j, shuffle)`` and epochs never span
        calls, so with ``shuffle=False`` and block lengths that are multiples
        of ``buffer_size`` the calls equal one :meth:`fit` pass over the
        concatenated rows (``n_passes=1``).  2PMB: the block's rare-class rows
        join the reservoir (keys by global row index over all calls; the rare
        class is fixed by the first block), then the block's other-class rows
        are streamed against it.  FTRL: one round, the block is ``Z_t``.  The
        settings (``eta``, an int ``k``'s fraction ...) are those of the first
        call.  A ranking model's intercept is its cut on the latest block.

        Parameters
        ----------
        X, y :
            The block.
        classes : array-like of shape (2,), optional
            Both labels; needed on the first call if that block has one class.
        """
        first = not hasattr(self, "_setup")
        X, y = validate_data(self, X, y, dtype=[np.float64, np.float32], reset=first)
        if first:
            self._set_classes(np.asarray(classes) if classes is not None else y)
        y = self._encode(y)
        if first:
            setup = self._setup = self._sgd_setup(X.shape[1], X.shape[0])
            self.eta_, self.history_, self.n_iter_, self._rows, self._next_block = setup.eta, History(), 0, 0, 0
            self._state = SGDState.zeros(X.shape[1])
            if self.solver == "2pmb":
                self._reservoir = Reservoir.empty(rare_label(y), self.buffer_size, X.shape[1], X.dtype)
            if self.solver == "ftrl":
                self._ftrl = FTRL(setup.loss, X.shape[1], eta=setup.eta, radius=setup.radius,
                                  fit_intercept=setup.fit_intercept, tol=self.tol, max_iter=self.max_iter,
                                  average=self.average)
        setup = self._setup
        if self.solver == "ftrl":
            self._ftrl.round(X, y)
            w, b = self._ftrl.model()
            self.history_ = self._ftrl.history
        else:
            rows, reservoir = np.arange(X.shape[0]), None
            if self.solver == "2pmb":
                reservoir = self._reservoir = self._reservoir.offer(
                    X, y, self._rows + np.arange(X.shape[0]), self.random_state)
                rows = np.flatnonzero(y != reservoir.label)
            rows = rows[row_order(self.random_state, 0, self._next_block, rows.shape[0], self.shuffle)]
            self._state = run_pass(self._state, X, y, rows, setup.loss, buffer_size=self.buffer_size,
                                   eta=setup.eta, radius=setup.radius, fit_intercept=setup.fit_intercept,
                                   average=self.average, recorder=Recorder(history=self.history_),
                                   reservoir=reservoir)
            w, b = model_of(self._state, self.average)
        self._rows += X.shape[0]
        self._next_block += 1
        self.n_iter_ += 1
        self._set_model(w, b, X, y, setup)
        return self

    # ---------------------------------------------------------------- predict

    def decision_function(self, X) -> np.ndarray:
        """Scores ``X @ coef_ + intercept_``, shape (n,); positive means ``classes_[1]``."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        return (X @ self.coef_[0].astype(X.dtype) + self.intercept_[0]).astype(np.float64, copy=False)

    def predict(self, X) -> np.ndarray:
        """``classes_[1]`` where the score is positive, else ``classes_[0]``."""
        positive = self.decision_function(X) > 0
        return self.classes_[positive.astype(int)]

    def score(self, X, y) -> float:
        """The chosen measure of :meth:`decision_function` on ``(X, y)`` (higher is better)."""
        s = self.decision_function(X)
        return self._measure_of(self._encode(np.asarray(y)), s)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags
