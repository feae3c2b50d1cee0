"""
Convergence of the solvers
==========================

Every estimator records its objective after each outer iteration in ``loss_history_``.  This
example fits the same count tensor with the three CP-APR inner solvers, with CP-ALS under two
tolerances, and with GCP's stochastic (Adam) and quasi-Newton (L-BFGS-B) solvers, and draws
the curves.

The tensor is synthetic: Poisson counts drawn from a planted nonnegative rank-4 model of shape
60 × 50 × 40, so every solver has the same well-posed problem.
"""

# %%
# A planted count tensor
# ----------------------
import time

import matplotlib.pyplot as plt
import numpy as np

from sktensor_fast import CPALS, CPAPR, GCP, SparseTensor

rng = np.random.default_rng(0)
shape, rank = (60, 50, 40), 4
factors = [rng.gamma(0.5, 1.0, size=(n, rank)) for n in shape]
rates = np.einsum("ir,jr,kr->ijk", *factors)
rates *= 40_000 / rates.sum()  # about 40,000 events in all
X = SparseTensor.from_dense(rng.poisson(rates).astype(float))
print(X.shape, X.nnz, "nonzeros,", int(X.sum()), "events")

# %%
# CP-APR: three inner solvers
# ---------------------------
# ``mu`` (multiplicative updates) is cheap per iteration and needs many; ``pdnr`` (projected
# damped Newton per row) and ``pqnr`` (projected quasi-Newton per row) need fewer, more
# expensive ones.  ``pdnr`` and ``pqnr`` stop when the KKT violation falls below ``tol``;
# ``mu`` would need about 2,300 iterations to get there on this tensor, so it runs a fixed
# 400 (``tol=0``: a number of iterations asked for on purpose), enough to see its curve
# flatten, and its final KKT violation shows how far it still is.
apr = {}
for solver in ("mu", "pdnr", "pqnr"):
    t0 = time.perf_counter()
    m = CPAPR(
        rank=rank,
        solver=solver,
        tol=0 if solver == "mu" else 1e-4,
        max_iter=400,
        random_state=0,
    ).fit(X)
    apr[solver] = (m, time.perf_counter() - t0)
    print(
        f"{solver:5s} {m.n_iter_:4d} outer iterations, {apr[solver][1]:.2f} s, "
        f"log-likelihood {m.log_likelihood_:.8g}, "
        f"KKT violation {m.kkt_violation_:.1e}"
    )

# %%
# CP-ALS: the tolerance on the change in fit
# ------------------------------------------
# CP-ALS stops when the fit ``1 - ||X - M|| / ||X||`` changes by less than ``tol`` in one
# iteration; a tighter tolerance buys a little more fit for many more iterations.
als = {
    tol: CPALS(rank=rank, tol=tol, max_iter=500, random_state=0).fit(X)
    for tol in (1e-4, 1e-8)
}
for tol, m in als.items():
    print(f"CPALS tol={tol:g}: {m.n_iter_} iterations, fit {m.fit_:.6f}")

# %%
# GCP with the Poisson loss: Adam and L-BFGS-B
# --------------------------------------------
# Adam takes sampled gradient steps grouped in epochs (here 100 steps); the loss it records is
# an estimate from a fixed sample of entries.  L-BFGS-B uses the exact loss and gradient of
# all 120,000 entries.
gcp = {
    "adam": GCP(
        rank=rank,
        loss="poisson",
        solver="adam",
        epoch_iters=100,
        max_iter=40,
        learning_rate=0.01,
        random_state=0,
    ).fit(X),
    "lbfgsb": GCP(
        rank=rank,
        loss="poisson",
        solver="lbfgsb",
        max_iter=200,
        random_state=0,
    ).fit(X),
}
for name, m in gcp.items():
    print(
        f"GCP {name:6s}: {m.n_iter_} epochs/iterations, "
        f"final loss {m.loss_history_[-1]:.6g}"
    )

# %%
# The curves
# ----------
# Each panel shows how far the objective still is from the best value any of its runs
# reached, relative to that value (a point at 0 is not drawn on the log scale).


def rel_gap(history, best, larger_is_better):
    gap = (best - history) if larger_is_better else (history - best)
    gap = gap / abs(best)
    return np.where(gap > 0, gap, np.nan)


fig, ax = plt.subplot_mosaic(
    [["apr", "apr"], ["als", "gcp"]], figsize=(9, 7.5), layout="constrained"
)
axes = [ax["apr"], ax["als"], ax["gcp"]]

best = max(m.log_likelihood_ for m, _ in apr.values())
for solver, (m, secs) in apr.items():
    axes[0].semilogy(
        np.arange(1, m.n_iter_ + 1),
        rel_gap(m.loss_history_, best, True),
        label=f"{solver}: {m.n_iter_} it., {secs:.2f} s",
    )
axes[0].set(
    title="CP-APR (log-likelihood)",
    xlabel="outer iteration",
    ylabel="relative gap to the best",
)
axes[0].legend()

best = max(m.fit_ for m in als.values())
for (tol, m), style in zip(
    als.items(), ({"lw": 5, "alpha": 0.4}, {"marker": "."})
):
    # the tighter tolerance runs on from where the looser one stopped
    axes[1].semilogy(
        np.arange(1, m.n_iter_ + 1),
        rel_gap(m.loss_history_, best, True),
        label=f"tol={tol:g}: {m.n_iter_} it.",
        **style,
    )
axes[1].set(
    title="CP-ALS (fit)", xlabel="iteration", ylabel="relative gap to the best"
)
axes[1].legend()

best = min(m.loss_history_.min() for m in gcp.values())
for name, m in gcp.items():
    axes[2].semilogy(
        np.arange(len(m.loss_history_)),
        rel_gap(m.loss_history_, best, False),
        label=f"{name}: {m.n_iter_} "
        + ("epochs" if name == "adam" else "it."),
    )
axes[2].set(title="GCP, Poisson loss", xlabel="epoch of 100 steps / iteration")
axes[2].legend()
plt.show()

# %%
# Adam's last loss is an estimate from a sample and stays a little above the L-BFGS-B optimum;
# on tensors too large for L-BFGS-B's dense gradient (more than 10⁷ entries) it is the only
# choice.  Among the CP-APR solvers, the Newton-type ones reach the tolerance in a few
# iterations, while the multiplicative updates approach the same log-likelihood slowly.
