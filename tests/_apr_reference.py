"""Plain NumPy reference of CP-APR's row subproblem solvers (one row at a time, slow).

Row ``i`` of mode ``n`` minimises ``f(b) = sum(b) - sum_t x_t log(b . pi_t)`` over ``b >= 0``,
``t`` running over the nonzeros of that row and ``pi_t`` the product of the other factors'
rows.  Written for readability, to check the compiled solvers of ``_cpapr.pyx``.
"""
import numpy as np


def row_data(X, factors, mode, i):
    """The row's values and Khatri-Rao rows, nonzeros in the order of ``X.subs``."""
    sel = np.flatnonzero(X.subs[:, mode] == i)
    R = factors[0].shape[1]
    Pi = np.ones((sel.size, R))
    for k, f in enumerate(factors):
        if k != mode:
            Pi = Pi * f[X.subs[sel, k]]
    return X.vals[sel].astype(np.float64), Pi


def objective(x, Pi, m):
    with np.errstate(divide="ignore"):
        return -(-np.sum(m) + np.sum(x * np.log(Pi @ m)))


def partials(x, Pi, m, eps):
    v = Pi @ m
    phi = (x / np.maximum(v, eps)) @ Pi
    ups = x / np.maximum(v * v, eps)
    return phi, ups


def kkt_violation(m, g):
    return float(np.max(np.abs(np.minimum(m, g))))


def active_threshold(m, g, eps_active):
    return min(eps_active, float(np.linalg.norm(np.minimum(m, g))))


def line_search(x, Pi, m_old, d, g, phi):
    """Projected backtracking (unit step, halving, <= 10 tries, Armijo 1e-4) with the
    multiplicative step as fall-back; returns (m_new, f_old, f_unit)."""
    f_old = objective(x, Pi, m_old)
    step, count, f_new, f_1 = 1.0, 1, np.inf, np.inf
    m_new = m_old
    while count <= 10:
        m_new = np.maximum(m_old + step * d, 0.0)
        gd = float(np.sum(g * (m_new - m_old)))
        if gd > 0 or np.sum(m_new) < 1e-7:
            f_new = np.inf
        else:
            f_new = objective(x, Pi, m_new)
            if count == 1:
                f_1 = f_new
            if f_new <= f_old + 1e-4 * gd:
                break
        step *= 0.5
        count += 1
    if np.isinf(f_1):
        f_1 = f_old
    if (count >= 10 and f_new > f_old) or np.sum(m_new) < 1e-7:
        m_new = np.maximum(m_old * phi, 0.0)
        f_1 = f_old
    return m_new, f_old, f_1


def pdnr_row(x, Pi, m, p):
    mu = p["mu0"]
    kkt0, changed, n_it = 0.0, False, 0
    for i in range(p["max_inner"]):
        n_it = i + 1
        phi, ups = partials(x, Pi, m, p["eps_div_zero"])
        g = 1.0 - phi
        kkt = kkt_violation(m, g)
        if i == 0:
            kkt0 = kkt
        if kkt < p["tol"]:
            break
        changed = True
        wk = active_threshold(m, g, p["eps_active"])
        bound = (m <= wk) & (g > 0)
        free = np.flatnonzero(~bound)
        d = np.where(bound & (m != 0), -g, 0.0)
        Hd = (Pi[:, free] * ups[:, None]).T @ Pi[:, free] + mu * np.eye(free.size)
        try:
            d[free] = np.linalg.solve(Hd, -g[free])
        except np.linalg.LinAlgError:
            d = -g
        pred = float(d[free] @ g[free] + 0.5 * d[free] @ Hd @ d[free])
        if pred > 0:
            d = -g
        m, f_old, f_1 = line_search(x, Pi, m, d, g, phi)
        if pred == 0:
            mu *= 10.0
        else:
            rho = (f_old - f_1) / -pred
            if rho < 0.25:
                mu *= 3.5
            elif rho > 0.75:
                mu *= 2.0 / 7.0
    return m, kkt0, n_it, changed


def lbfgs_direction(m, g, pairs, eps_active):
    """Two-loop recursion over ``pairs`` = [(s, y), ...], newest last."""
    wk = active_threshold(m, g, eps_active)
    fixed = (g > 0) & (m <= wk)
    d = np.where(fixed, 0.0, -g)
    if not pairs:
        return d
    alpha = []
    for s, y in reversed(pairs):
        a = (s @ d) / (s @ y)
        alpha.append(a)
        d = d - a * y
    s, y = pairs[-1]
    d = d * (s @ y) / (y @ y)
    for (s, y), a in zip(pairs, reversed(alpha)):
        b = (y @ d) / (s @ y)
        d = d + (a - b) * s
    d[fixed] = 0.0
    return d


def pqnr_row(x, Pi, m, p):
    pairs = []
    kkt0, changed, n_it = 0.0, False, 0
    m_old = g_old = None
    for i in range(p["max_inner"]):
        n_it = i + 1
        phi, _ = partials(x, Pi, m, p["eps_div_zero"])
        g = 1.0 - phi
        if i == 0:
            m_old, g_old = m, g
            m, _, _ = line_search(x, Pi, m_old, -g, g, phi)
            phi, _ = partials(x, Pi, m, p["eps_div_zero"])
            g = 1.0 - phi
        kkt = kkt_violation(m, g)
        if i == 0:
            kkt0 = kkt
        if kkt < p["tol"]:
            break
        changed = True
        s, y = m - m_old, g - g_old
        if s @ y > 0:
            pairs = (pairs + [(s, y)])[-p["lbfgs_mem"]:]
        d = lbfgs_direction(m, g, pairs, p["eps_active"])
        m_old, g_old = m, g
        m, _, _ = line_search(x, Pi, m_old, d, g_old, phi)
    return m, kkt0, n_it, changed


def row_solve_ref(X, factors, mode, B, method, params):
    """Every row of ``mode`` solved from ``B``; returns (B_new, kkt, inner, changed) per row."""
    solve = pdnr_row if method == "pdnr" else pqnr_row
    B = np.array(B, dtype=np.float64)
    I = B.shape[0]
    kkt = np.zeros(I)
    inner = np.zeros(I, dtype=np.int64)
    changed = np.zeros(I, dtype=bool)
    for i in range(I):
        x, Pi = row_data(X, factors, mode, i)
        if x.size == 0:
            B[i] = 0.0
            continue
        B[i], kkt[i], inner[i], changed[i] = solve(x, Pi, B[i].copy(), params)
    return B, kkt, inner, changed
