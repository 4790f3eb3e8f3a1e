r"""The cutting-plane model of the 1-slack structural SVM and its small dual QP (CP, FTRL).

With planes ``xi >= c_j + a_j . z`` (``j = 0 .. m-1``; plane 0 is ``xi >= 0``,
valid because every surrogate is non-negative), the model problem is

.. math::

    \min_{\|z\| \le R} \; \frac{\lambda}{2}\|z\|^2 + \max_j \,(c_j + a_j^\top z).

Its Lagrange dual over the simplex :math:`\Delta_m` is, with :math:`v = A^\top\alpha`
and the Gram matrix :math:`G = A A^\top` (:math:`\|v\|^2 = \alpha^\top G \alpha`),

.. math::

    D(\alpha) = c^\top\alpha + \min_{\|z\| \le R} \big[\tfrac{\lambda}{2}\|z\|^2 + v^\top z\big],
    \qquad z(\alpha) = -\sigma v, \quad
    \sigma = \begin{cases} 1/\lambda & \|v\| \le \lambda R \text{ (or } R = \infty)\\
                           R / \|v\| & \text{otherwise,} \end{cases}

so :math:`D(\alpha) = c^\top\alpha - \|v\|^2 / (2\lambda)` inside the ball and
:math:`c^\top\alpha - R\|v\| + \lambda R^2/2` outside.  ``D`` is concave with
gradient :math:`g = c + A z(\alpha) = c - \sigma G\alpha`, and in both cases
the duality gap of the model at ``z(alpha)`` is the Frank-Wolfe gap

.. math::

    \Big[\tfrac{\lambda}{2}\|z\|^2 + \max_j (c_j + a_j^\top z)\Big] - D(\alpha)
    = \max_j g_j - \alpha^\top g .

Every ``alpha`` in the simplex gives a lower bound ``D(alpha)`` on the model's
optimum, hence (the planes being under-estimators) on the true objective.

**Solver.** Without the ball, ``D`` is the quadratic
:math:`c^\top\alpha - \tfrac12\alpha^\top Q\alpha`, ``Q = G / lambda``, maximised
exactly by a primal active-set method (Nocedal & Wright, Alg. 16.3) on the
simplex: solve the KKT system of the face spanned by the support ``S``; if
the solution is positive, move there and add the plane of largest gradient
(stop when the gap is at most ``tol``); otherwise step to the first face
boundary and drop the planes that reach 0.  ``G`` has rank at most ``d`` while
planes accumulate, so a ridge of ``1e-10 max(diag Q)`` keeps each face's
system non-singular (it moves ``D`` by at most that much).  Warm-started at
the previous ``alpha``, a new plane costs a few ``|S| x |S|`` solves.  With the
ball, the multiplier ``mu`` of ``||z|| <= R`` enters as ``lambda + mu``: for
fixed ``alpha`` the best ``mu`` is ``max(0, ||v|| / R - lambda)`` (which gives
the formula above), for fixed ``mu`` the problem is the quadratic one; the
two are alternated until the gap is at most ``tol``.
"""
from __future__ import annotations

import numpy as np

__all__ = ["PlaneModel", "maximise_on_simplex"]


def maximise_on_simplex(Q: np.ndarray, c: np.ndarray, alpha: np.ndarray, tol: float,
                        max_iter: int = 10_000) -> np.ndarray:
    """``argmax c.alpha - alpha.Q.alpha / 2`` over the simplex, from the feasible ``alpha``.

    Primal active-set method (module doc); returns the new ``alpha`` (the
    input is not modified).  Stops when ``max_j g_j - alpha.g <= tol``, with
    ``g = c - Q alpha``.
    """
    alpha = alpha.copy()
    ridge = 1e-10 * max(float(Q.diagonal().max()), 1e-300)
    S = np.flatnonzero(alpha > 0)
    for _ in range(max_iter):
        k = S.shape[0]
        K = np.ones((k + 1, k + 1))
        K[:k, :k] = Q[np.ix_(S, S)] + ridge * np.eye(k)
        K[k, k] = 0.0
        beta = np.linalg.solve(K, np.append(c[S], 1.0))[:k]
        if np.all(beta > 0):
            alpha[S] = beta
            g = c - Q[:, S] @ beta
            best = int(np.argmax(g))
            if g[best] - beta @ g[S] <= tol or best in S:
                break
            S = np.append(S, best)
        else:
            blocking = beta <= 0
            a_S = alpha[S]
            t = float(np.min(a_S[blocking] / (a_S[blocking] - beta[blocking])))
            a_S = a_S + t * (beta - a_S)
            a_S[blocking & (a_S <= a_S.max() * 1e-15)] = 0.0
            a_S[np.argmin(np.where(blocking, a_S, np.inf))] = 0.0
            alpha[S] = a_S
            S = S[a_S > 0]
    return alpha


class PlaneModel:
    """Planes ``(a_j, c_j)``, their Gram matrix and the current dual point ``alpha``.

    Parameters
    ----------
    dim : int
        Dimension of ``z``.
    lam : float > 0
        The regularisation ``lambda``.
    radius : float or None
        ``R`` of the ball (None: unconstrained).
    """

    def __init__(self, dim: int, lam: float, radius: float | None = None) -> None:
        if not lam > 0:
            raise ValueError(f"the cutting-plane model needs lam > 0, got {lam!r}")
        self.lam, self.radius = float(lam), radius
        self.A = np.zeros((1, dim))
        self.c = np.zeros(1)
        self.G = np.zeros((1, 1))
        self.alpha = np.ones(1)
        self.mu = 0.0

    @property
    def n_planes(self) -> int:
        return self.c.shape[0]

    def add(self, a: np.ndarray, c: float) -> None:
        """Add the plane ``xi >= c + a . z`` (its dual weight starts at 0)."""
        a = np.asarray(a, dtype=np.float64)
        Ga = self.A @ a
        m = self.n_planes
        G = np.empty((m + 1, m + 1))
        G[:m, :m] = self.G
        G[:m, m] = G[m, :m] = Ga
        G[m, m] = a @ a
        self.G, self.A = G, np.vstack([self.A, a])
        self.c, self.alpha = np.append(self.c, float(c)), np.append(self.alpha, 0.0)

    def _dual(self) -> tuple[float, float, float]:
        """``(D, gap, sigma)`` at the current ``alpha`` (module doc)."""
        Ga = self.G @ self.alpha
        q = max(float(self.alpha @ Ga), 0.0)
        r, lam, R = np.sqrt(q), self.lam, self.radius
        if R is None or r <= lam * R:
            sigma, D = 1.0 / lam, float(self.c @ self.alpha) - q / (2.0 * lam)
        else:
            sigma, D = R / r, float(self.c @ self.alpha) - R * r + lam * R * R / 2.0
        g = self.c - sigma * Ga
        return D, float(g.max() - self.alpha @ g), sigma

    def solve(self, tol: float, max_rounds: int = 100) -> tuple[np.ndarray, float, float]:
        """Maximise the dual from the current ``alpha`` (warm start).

        Returns
        -------
        z : ndarray of shape (dim,)
            ``z(alpha)``, the model's (approximate) minimiser.
        dual : float
            ``D(alpha)``, a lower bound of the model's optimum.
        gap : float
            The model's duality gap at ``z`` (``<= tol`` unless ``max_rounds`` ran out).
        """
        for _ in range(max_rounds):
            self.alpha = maximise_on_simplex(self.G / (self.lam + self.mu), self.c, self.alpha, tol / 2.0)
            D, gap, sigma = self._dual()
            if self.radius is None or gap <= tol:
                break
            r = np.sqrt(max(float(self.alpha @ self.G @ self.alpha), 0.0))
            self.mu = max(0.0, r / self.radius - self.lam)
        return -sigma * (self.A.T @ self.alpha), D, gap
