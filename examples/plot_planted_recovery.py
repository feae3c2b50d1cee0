"""
Recovering a planted model
==========================

How much noise can a decomposition take before it stops finding the components that made
the data?  We plant a model, add noise of growing strength, fit, and compare the fitted
components with the planted ones by the factor match score (FMS,
:meth:`KruskalTensor.score <sktensor_fast.KruskalTensor.score>`: 1 when every component is
found, with its weight).

* **Gaussian noise, CP-ALS**: dense data ``X = M + noise`` with the noise's norm a given
  fraction of the model's.
* **Poisson counts, CP-APR**: sparse counts drawn from a nonnegative model; the fewer events
  in all, the noisier the tensor (and the sparser).
"""

# %%
# The planted models
# ------------------
import matplotlib.pyplot as plt
import numpy as np

from sktensor_fast import CPALS, CPAPR, KruskalTensor, SparseTensor

shape, rank = (30, 25, 20), 3
rng = np.random.default_rng(0)
gauss_truth = KruskalTensor(
    np.ones(rank), [rng.standard_normal((n, rank)) for n in shape]
)
count_truth = KruskalTensor(
    np.ones(rank), [rng.gamma(0.3, 1.0, (n, rank)) for n in shape]
)

# %%
# Gaussian noise and CP-ALS
# -------------------------
# Three noise draws per level; each fit keeps the best of 2 random starts.
noise_levels = [0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0]
dense = gauss_truth.full()
fms_gauss = []
for eta in noise_levels:
    scores = []
    for seed in range(3):
        noise = np.random.default_rng(seed).standard_normal(shape)
        X = dense + eta * np.linalg.norm(dense) / np.linalg.norm(noise) * noise
        model = CPALS(
            rank=rank, n_init=2, tol=1e-6, max_iter=300, random_state=seed
        ).fit(SparseTensor.from_dense(X))
        scores.append(model.model_.score(gauss_truth)[0])
    fms_gauss.append(scores)
    print(f"noise {eta:4.2f} x ||M||: FMS {np.mean(scores):.3f}")

# %%
# Poisson counts and CP-APR
# -------------------------
# The planted rates are scaled to a given expected total number of events (the weights of
# the planted model with them, since the score compares weights too).
totals = [100, 300, 1_000, 3_000, 10_000, 30_000]
rates = count_truth.full()
scale = 1.0 / rates.sum()
rates *= scale
fms_count, nnz = [], []
for total in totals:
    scores = []
    for seed in range(3):
        counts = (
            np.random.default_rng(seed).poisson(total * rates).astype(float)
        )
        X = SparseTensor.from_dense(counts)
        model = CPAPR(
            rank=rank, solver="pdnr", n_init=2, random_state=seed
        ).fit(X)
        truth = KruskalTensor(
            count_truth.weights * scale * total, count_truth.factors
        )
        scores.append(model.model_.score(truth)[0])
    fms_count.append(scores)
    nnz.append(X.nnz)
    print(
        f"{total:7d} events ({X.nnz:5d} nonzeros): FMS {np.mean(scores):.3f}"
    )

# %%
# The curves
# ----------
fig, axes = plt.subplots(1, 2, figsize=(9, 3.8), layout="constrained")
for ax, x, fms, xlabel, title in (
    (
        axes[0],
        noise_levels,
        fms_gauss,
        "noise norm / model norm",
        "CP-ALS, Gaussian noise",
    ),
    (
        axes[1],
        totals,
        fms_count,
        "expected number of events",
        "CP-APR, Poisson counts",
    ),
):
    fms = np.array(fms)
    ax.plot(x, fms.mean(axis=1), marker="o", label="mean of 3 draws")
    ax.fill_between(
        x, fms.min(axis=1), fms.max(axis=1), alpha=0.25, label="min – max"
    )
    ax.set(
        xlabel=xlabel, ylabel="factor match score", title=title, ylim=(0, 1.05)
    )
    ax.legend(loc="lower right" if ax is axes[1] else "lower left")
axes[1].set_xscale("log")
plt.show()

# %%
# Least squares keeps finding the planted components (FMS above 0.9) until the noise norm is
# about twice the model's, since 15,000 noisy entries determine the 225 parameters of the
# model well; at five times and more it fails.  For counts, what matters is the number of
# events per parameter: from about a thousand events the components of this model are found.
