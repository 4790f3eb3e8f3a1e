"""The full-batch candidate: L-BFGS on the logistic loss, one gradient a pass.

The stochastic candidates step after every buffer; on badly conditioned rows
(rare one-hot levels, heavy-tailed norms) their step must stay below the
largest row's curvature, and tens of passes leave them short of the loss's
optimum.  A quasi-Newton method adapts to the curvature but needs exact
gradients.  The stream gives one for free: during a pass a full-batch
candidate's weights stay fixed, so the sum over the pass's blocks of
``X_j.T @ l'(X_j w + b)`` is the gradient of the objective (docs/solvers.md
§Full-batch candidate)::

    F(w, b) = (1/n) sum_i log(1 + exp(-y_i (w.x_i + b))) + (lambda / 2) ||w||^2,   lambda = 1 / n

(scikit-learn's ``LogisticRegression(C=1)`` objective divided by ``n``; ``n``
the rows of a pass).  At the end of each pass :func:`end_pass` makes one
L-BFGS iteration (Nocedal & Wright 2006, Algorithm 7.4, memory
:data:`MEMORY`) with a backtracking line search spread over passes: the point
evaluated in pass ``p`` is accepted if it satisfies the Armijo condition
against the last accepted point, and then the next direction is formed; if
not, the step along the same direction is halved and tried in pass ``p + 1``.
The candidate's model is always its last accepted point (the lowest objective
evaluated).  A block contributes one product pair whatever its number of
epochs, over the block's streamed rows as the driver hands them (in stream
order; in file order in a pass where only full-batch candidates train,
:mod:`nsdist.solvers.plan`), so the engine and the in-memory solvers sum the
same numbers in the same order.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..losses.base import Loss, weight_gradient

__all__ = ["BatchState", "MEMORY", "ARMIJO"]

#: L-BFGS memory (pairs ``(s, y)`` kept); scipy's and Nocedal & Wright's usual value
MEMORY = 10
#: sufficient-decrease constant of the Armijo condition ``F(x + t p) <= F(x) + ARMIJO t g.p``
ARMIJO = 1e-4


@dataclass
class BatchState:
    """What the full-batch candidates carry from block to block and pass to pass.

    Row ``k`` of every array belongs to population column ``cols[k]``; a
    point ``x`` is ``(w, b)`` as one vector of length ``d + 1``.

    Attributes
    ----------
    cols : ndarray of int
        The population's full-batch columns.
    grad, value : ndarray (K, d + 1), (K,)
        Sums over this pass's rows of the loss's gradient and value at the point evaluated.
    rows : int
        Rows summed this pass.
    x, fx, gx : ndarray (K, d + 1), (K,), (K, d + 1)
        The last accepted point, its objective and gradient (``fx = inf``: none yet).
    p, t : ndarray (K, d + 1), (K,)
        The search direction from ``x`` and the step being tried.
    S, Y : ndarray (K, MEMORY, d + 1)
        L-BFGS pairs ``s = x_{k+1} - x_k``, ``y = g_{k+1} - g_k`` in a ring: pair ``j`` (counting from 0)
        is row ``j mod MEMORY``, written once, so that a pass end changes one row, not all of them.
    n_pairs : ndarray of int (K,)
        Pairs held: the last ``n_pairs`` written.
    written : ndarray of int (K,)
        Pairs written so far.
    evaluations : int
        Passes completed (objective evaluations).
    """

    cols: np.ndarray
    grad: np.ndarray
    value: np.ndarray
    rows: int
    x: np.ndarray
    fx: np.ndarray
    gx: np.ndarray
    p: np.ndarray
    t: np.ndarray
    S: np.ndarray
    Y: np.ndarray
    n_pairs: np.ndarray
    written: np.ndarray
    evaluations: int = 0

    @classmethod
    def start(cls, cols: np.ndarray, W: np.ndarray, b: np.ndarray) -> "BatchState":
        """The state before the first pass: every candidate at its column of ``(W, b)``."""
        k, d = cols.shape[0], W.shape[0]
        x = np.concatenate([W[:, cols].T, b[cols][:, None]], axis=1)
        return cls(np.asarray(cols, dtype=np.intp), np.zeros((k, d + 1)), np.zeros(k), 0, x, np.full(k, np.inf),
                   np.zeros((k, d + 1)), np.zeros((k, d + 1)), np.zeros(k), np.zeros((k, MEMORY, d + 1)),
                   np.zeros((k, MEMORY, d + 1)), np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.int64))

    def clock(self) -> tuple[int, np.ndarray]:
        """``(evaluations, written)``: what tells, later, what a run of blocks changed (:meth:`SGDState.change`)."""
        return self.evaluations, self.written.copy()

    def copy(self, deep: bool = True) -> "BatchState":
        """A copy; ``deep=False`` copies only the pass's sums (what :meth:`accumulate` changes) and shares the
        L-BFGS memory, which only :meth:`end_pass` changes (``2 * MEMORY * (d + 1)`` floats: 168 MB at
        ``d = 2^20``, not copied at every block)."""
        return replace(self, **{f: getattr(self, f).copy() for f in (_ARRAYS if deep else _SUMS)})

    def accumulate(self, X, y: np.ndarray, W: np.ndarray, b: np.ndarray, losses: list[Loss],
                   alive: np.ndarray) -> None:
        """Add a block's rows (in stream order) to the pass's sums at the points ``W[:, cols], b[cols]``."""
        n = y.shape[0]
        if n == 0:
            return
        self.rows += n
        for k, c in enumerate(self.cols):
            if not alive[c]:
                continue
            s = np.asarray(X @ W[:, c].astype(X.dtype, copy=False), dtype=np.float64) + b[c]
            mean, dscore = losses[k].value_and_dscore(s, y)        # the mean loss over the block and its derivative
            dscore = dscore * n
            self.value[k] += mean * n
            self.grad[k, :-1] += weight_gradient(X, dscore)
            self.grad[k, -1] += dscore.sum()

    def end_pass(self, learn_b: np.ndarray, first_step: np.ndarray) -> np.ndarray:
        """One L-BFGS iteration per candidate from this pass's sums (module doc); the next points to evaluate.

        Parameters
        ----------
        learn_b : ndarray of bool (K,)
            Candidate ``k`` learns its intercept (otherwise ``b`` stays where it started).
        first_step : ndarray (K,)
            The step along ``-g`` while no curvature pair is held (the first iteration, a restart).

        Returns
        -------
        ndarray (K, d + 1)
            The points the next pass evaluates.
        """
        n = max(self.rows, 1)
        lam = 1.0 / n
        nxt = np.empty_like(self.x)
        for k in range(self.cols.shape[0]):
            x = self._evaluated(k)
            w = x[:-1]
            f = self.value[k] / n + 0.5 * lam * float(w @ w)
            g = self.grad[k] / n
            g[:-1] += lam * w
            if not learn_b[k]:
                g[-1] = 0.0
            nxt[k] = self._iterate(k, x, f, g, float(first_step[k]))
        self.grad[:] = 0.0
        self.value[:] = 0.0
        self.rows = 0
        self.evaluations += 1
        return nxt

    def _evaluated(self, k: int) -> np.ndarray:
        """The point evaluated this pass: the accepted point plus the step tried (the start, before any)."""
        return self.x[k] if not np.isfinite(self.fx[k]) else self.x[k] + self.t[k] * self.p[k]

    def _iterate(self, k: int, x: np.ndarray, f: float, g: np.ndarray, first_step: float) -> np.ndarray:
        if not (np.isfinite(f) and np.all(np.isfinite(g))):
            if not np.isfinite(self.fx[k]):          # the start itself: nothing to fall back on
                self.x[k] = np.nan
                return self.x[k]
            self.t[k] *= 0.5                          # overflow along the step: a shorter one
            return self.x[k] + self.t[k] * self.p[k]
        if np.isfinite(self.fx[k]) and f > self.fx[k] + ARMIJO * self.t[k] * float(self.gx[k] @ self.p[k]):
            self.t[k] *= 0.5                          # not enough decrease: backtrack along p
            return self.x[k] + self.t[k] * self.p[k]
        if np.isfinite(self.fx[k]):
            self._remember(k, x - self.x[k], g - self.gx[k])
        self.x[k], self.fx[k], self.gx[k] = x, f, g
        p = -self._inverse_hessian_times(k, g)
        if not float(g @ p) < 0.0:                    # not a descent direction: restart from the gradient
            self.n_pairs[k] = 0
            p = -g
        self.p[k] = p
        self.t[k] = 1.0 if self.n_pairs[k] else first_step       # L-BFGS's scaled step 1 once it has curvature
        return x + self.t[k] * p

    def _remember(self, k: int, s: np.ndarray, y: np.ndarray) -> None:
        """Keep the pair ``(s, y)`` if it has positive curvature (over the oldest pair once the memory is full)."""
        if not float(s @ y) > 1e-10 * float(y @ y):
            return
        row = int(self.written[k] % MEMORY)
        self.S[k, row], self.Y[k, row] = s, y
        self.written[k] += 1
        self.n_pairs[k] = min(int(self.n_pairs[k]) + 1, MEMORY)

    def pair_rows(self, k: int, since: int) -> np.ndarray:
        """The rows of candidate ``k``'s pairs written after its first ``since``, oldest first (at most
        :data:`MEMORY`: the later ones overwrote the others)."""
        return np.arange(max(int(since), int(self.written[k]) - MEMORY), int(self.written[k])) % MEMORY

    def _inverse_hessian_times(self, k: int, g: np.ndarray) -> np.ndarray:
        """``H g`` by the L-BFGS two-loop recursion (Nocedal & Wright 2006, Algorithm 7.4)."""
        m = int(self.n_pairs[k])
        held = self.pair_rows(k, int(self.written[k]) - m)          # oldest first
        S, Y = self.S[k, held], self.Y[k, held]
        q = g.copy()
        rho = 1.0 / np.einsum("ij,ij->i", S, Y)
        alpha = np.empty(m)
        for i in range(m - 1, -1, -1):
            alpha[i] = rho[i] * float(S[i] @ q)
            q -= alpha[i] * Y[i]
        if m:
            q *= float(S[-1] @ Y[-1]) / float(Y[-1] @ Y[-1])      # H_0 = gamma I (eq. 7.20)
        for i in range(m):
            beta = rho[i] * float(Y[i] @ q)
            q += (alpha[i] - beta) * S[i]
        return q

    def models(self) -> tuple[np.ndarray, np.ndarray]:
        """``(w, b)`` of each candidate's last accepted point: arrays ``(d, K)`` and ``(K,)``."""
        return self.x[:, :-1].T.copy(), self.x[:, -1].copy()

    def to_dict(self) -> dict:
        """Plain data for checkpoints (floats round-trip exactly through JSON)."""
        out = {f: getattr(self, f).tolist() for f in _ARRAYS}
        out["fx"] = [None if not np.isfinite(v) else float(v) for v in self.fx]
        return {**out, "cols": self.cols.tolist(), "rows": self.rows, "evaluations": self.evaluations}

    @classmethod
    def from_dict(cls, d: dict) -> "BatchState":
        arrays = {f: np.asarray(d[f], dtype=np.float64) for f in _ARRAYS if f not in ("fx", "n_pairs", "written")}
        n_pairs = np.asarray(d["n_pairs"], dtype=np.int64)
        return cls(cols=np.asarray(d["cols"], dtype=np.intp), rows=int(d["rows"]), evaluations=int(d["evaluations"]),
                   fx=np.array([np.inf if v is None else v for v in d["fx"]], dtype=np.float64), n_pairs=n_pairs,
                   # a checkpoint from before the ring held its pairs oldest first from row 0
                   written=np.asarray(d.get("written", n_pairs), dtype=np.int64), **arrays)

    @staticmethod
    def mix(start: "BatchState", states: list["BatchState"]) -> "BatchState":
        """``start``'s state plus every chain's sums since ``start``, in chain order (the data-parallel round's
        end: the chains' blocks are rows of the same pass, and their points are ``start``'s)."""
        out = start.copy(deep=False)
        for st in states:
            out.grad += st.grad - start.grad
            out.value += st.value - start.value
            out.rows += st.rows - start.rows
        return out


_ARRAYS = ("grad", "value", "x", "fx", "gx", "p", "t", "S", "Y", "n_pairs", "written")
_SUMS = ("grad", "value")
