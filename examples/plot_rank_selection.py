"""
Choosing the rank
=================

A CP model of too low a rank misses structure; one of too high a rank fits noise and its
components change from one random start to the next.  Two checks, on a synthetic tensor with a
planted rank of 3:

1. **Cross-validation.**  The estimators treat mode-0 slices as samples, so scikit-learn's
   :class:`~sklearn.model_selection.GridSearchCV` can hold out slices: ``score`` refits the
   held-out slices' loadings with the other factors fixed and returns the fit (greater is
   better).
2. **Stability across restarts.**  Fit several random starts per rank and compare each
   model's components with the best one's by the factor match score
   (:meth:`KruskalTensor.score <sktensor_fast.KruskalTensor.score>`, 1 = the same components).
"""

# %%
# A planted rank-3 tensor with noise
# ----------------------------------
import matplotlib.pyplot as plt
import numpy as np
from sklearn.model_selection import GridSearchCV, KFold

from sktensor_fast import CPALS, KruskalTensor, SparseTensor

rng = np.random.default_rng(1)
shape, true_rank = (40, 30, 25), 3
truth = KruskalTensor(
    np.ones(true_rank), [rng.standard_normal((n, true_rank)) for n in shape]
)
dense = truth.full()
noise = rng.standard_normal(shape)
dense += (
    0.3 * np.linalg.norm(dense) / np.linalg.norm(noise) * noise
)  # 30% noise
X = SparseTensor.from_dense(dense)
print(X.shape, X.nnz, "entries")

# %%
# Cross-validated fit per rank
# ----------------------------
# Five folds of the 40 mode-0 slices; each candidate is fitted with 3 random starts
# (``n_init``) so that a bad start does not decide the comparison.  Above the true rank a fit
# on four fifths of the slices can take several hundred iterations to reach ``tol``:
# ``max_iter=1000`` lets every one of them converge.
ranks = [1, 2, 3, 4, 5, 6]
search = GridSearchCV(
    CPALS(n_init=3, tol=1e-6, max_iter=1000, random_state=0),
    {"rank": ranks},
    cv=KFold(5, shuffle=True, random_state=0),
)
search.fit(X)
cv_mean = search.cv_results_["mean_test_score"]
cv_std = search.cv_results_["std_test_score"]
print("best rank by cross-validation:", search.best_params_["rank"])

# %%
# Stability across random starts
# ------------------------------
# For every rank, 6 fits from different seeds; the score of each against the best-fitting
# one.  Up to the true rank most starts find the same components again (a start can still
# end in a poorer local optimum, which is what ``n_init`` guards against); above it the extra
# components fit noise and differ between runs.
stability = []
train_fit = []
for rank in ranks:
    models = [
        CPALS(rank=rank, tol=1e-6, max_iter=200, random_state=s).fit(X)
        for s in range(6)
    ]
    best = max(models, key=lambda m: m.fit_)
    scores = [m.model_.score(best.model_)[0] for m in models if m is not best]
    stability.append(scores)
    train_fit.append(best.fit_)

# %%
# The curves
# ----------
fig, axes = plt.subplots(1, 2, figsize=(9, 3.8), layout="constrained")
axes[0].errorbar(
    ranks,
    cv_mean,
    yerr=cv_std,
    marker="o",
    capsize=3,
    label="held-out slices (5-fold CV)",
)
axes[0].plot(
    ranks,
    train_fit,
    marker="s",
    linestyle="--",
    label="whole tensor (training)",
)
axes[0].axvline(true_rank, color="0.6", linestyle=":", label="planted rank")
axes[0].set(
    xlabel="rank",
    ylabel="fit  1 − ‖X − M‖ / ‖X‖",
    title="Fit against rank",
)
axes[0].legend()

axes[1].boxplot(stability, positions=ranks, widths=0.5)
axes[1].axvline(true_rank, color="0.6", linestyle=":")
axes[1].set(
    xlabel="rank",
    ylabel="factor match score with the best run",
    title="Stability over 6 random starts",
    ylim=(0, 1.05),
)
plt.show()

# %%
# The held-out fit stops improving at the planted rank while the training fit keeps creeping
# up, and the components stop being reproducible just above it: both point at rank 3.
