"""
GCP: a loss that matches the data
=================================

:class:`~sktensor_fast.GCP` fits a CP model under the loss of a statistical model of the
data.  With binary data (did user *i* do *j* at time *k*?) a Bernoulli loss models the
probability through a logistic link; with counts a Poisson loss models the rate.  Least
squares (the ``"gaussian"`` loss) treats both as real numbers.

Here the data are drawn from planted models and each loss's fit is compared with the truth by
the factor match score (:meth:`KruskalTensor.score <sktensor_fast.KruskalTensor.score>`) and
by how well it predicts the true probabilities.
"""

# %%
# Binary data from a logistic model
# ---------------------------------
# The planted model ``M`` holds log-odds; each entry is 1 with probability
# ``1 / (1 + exp(-M))``.
import matplotlib.pyplot as plt
import numpy as np

from sktensor_fast import GCP, KruskalTensor, SparseTensor

rng = np.random.default_rng(0)
shape, rank = (40, 35, 30), 3
logit_truth = KruskalTensor(
    np.full(rank, 0.8), [rng.standard_normal((n, rank)) for n in shape]
)
prob = 1.0 / (1.0 + np.exp(-logit_truth.full()))
B = SparseTensor.from_dense((rng.random(shape) < prob).astype(float))
print(f"binary tensor {B.shape}: {B.nnz} ones ({B.nnz / B.size:.0%})")

# %%
# ``bernoulli_logit`` fits the log-odds; ``gaussian`` fits the 0/1 values directly.  Both use
# L-BFGS-B on the exact loss (the tensor has 42,000 entries).
binary_fits = {
    loss: GCP(
        rank=rank, loss=loss, solver="lbfgsb", max_iter=300, random_state=0
    ).fit(B)
    for loss in ("bernoulli_logit", "gaussian")
}
logit_fms = binary_fits["bernoulli_logit"].model_.score(logit_truth)[0]
print(
    f"bernoulli_logit: factor match with the planted log-odds {logit_fms:.3f}"
)

# the probability each model predicts for every entry
logits = np.clip(binary_fits["bernoulli_logit"].model_.full(), -50, 50)
pred = {
    "bernoulli_logit": 1.0 / (1.0 + np.exp(-logits)),
    "gaussian": np.clip(binary_fits["gaussian"].model_.full(), 0, 1),
}
for loss, p in pred.items():
    print(
        f"{loss:16s} mean |predicted - true probability| = "
        f"{np.abs(p - prob).mean():.3f}"
    )

# %%
# Counts from a Poisson model
# ---------------------------
# Nonnegative factors; the expected total number of events sets how noisy (and how sparse)
# the counts are.  Each loss gets 3 random starts per tensor.
count_truth = KruskalTensor(
    np.ones(rank), [rng.gamma(0.5, 1.0, (n, rank)) for n in shape]
)
rates = count_truth.full()
scale = 1.0 / rates.sum()
totals = [1_000, 3_000, 10_000]
count_fms = {"poisson": [], "gaussian": []}
for total in totals:
    truth = KruskalTensor(
        count_truth.weights * scale * total, count_truth.factors
    )
    C = SparseTensor.from_dense(
        rng.poisson(rates * scale * total).astype(float)
    )
    for loss, fms in count_fms.items():
        fms.append(
            [
                GCP(
                    rank=rank,
                    loss=loss,
                    solver="lbfgsb",
                    max_iter=300,
                    random_state=s,
                )
                .fit(C)
                .model_.score(truth)[0]
                for s in range(3)
            ]
        )
    print(
        f"{total:6d} events, {C.nnz:5d} nonzeros: mean factor match "
        + ", ".join(
            f"{loss} {np.mean(f[-1]):.3f}" for loss, f in count_fms.items()
        )
    )

# %%
# The comparison
# --------------
fig, axes = plt.subplots(1, 2, figsize=(9, 4), layout="constrained")
sample = rng.choice(prob.size, 1500, replace=False)
for loss in ("gaussian", "bernoulli_logit"):
    p = pred[loss]
    axes[0].scatter(
        prob.ravel()[sample],
        p.ravel()[sample],
        s=4,
        alpha=0.5,
        label=f"{loss} (mean error {np.abs(p - prob).mean():.3f})",
    )
axes[0].plot([0, 1], [0, 1], color="0.3", linewidth=0.8)
axes[0].set(
    xlabel="true probability",
    ylabel="fitted probability",
    title="Binary data: predicted probabilities",
)
axes[0].legend(loc="upper left", markerscale=3)

for (loss, fms), color in zip(count_fms.items(), ("tab:green", "tab:gray")):
    fms = np.array(fms)
    axes[1].plot(totals, fms.mean(axis=1), marker="o", color=color, label=loss)
    axes[1].fill_between(
        totals, fms.min(axis=1), fms.max(axis=1), color=color, alpha=0.2
    )
axes[1].set(
    xscale="log",
    xlabel="expected number of events",
    ylim=(0, 1.05),
    ylabel="factor match score with the planted model",
    title="Count data: components found (3 starts)",
)
axes[1].legend(title="loss", loc="lower right")
plt.show()

# %%
# The Bernoulli loss recovers the probabilities; least squares, asked to reproduce zeros and
# ones, pulls them towards the data and predicts values outside [0, 1] (clipped above).  On
# counts the Poisson loss weighs each entry by its expected variance; it finds the planted
# components from fewer events than least squares, whose fits also depend more on the start.
