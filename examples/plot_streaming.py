"""
Streaming: one day of flights at a time with ``partial_fit``
=============================================================

The flights-carrier-dest-date-hour tensor counts the flights that left New York City in 2013
by carrier × destination × date × hour.  Put the date first and every mode-0 slice is one
day: a stream in which each day arrives as a batch.  :meth:`GCP.partial_fit
<sktensor_fast.GCP.partial_fit>` fits the first day, then, for each new day, solves its
loadings with the other factors fixed and refits the last ``window`` days and the new one
from the current model: the cost of a day does not grow with the history, and only the
window's slices are kept.

We stream the first two months, compare each day's loss with that of a batch fit on all of
them, and follow how the components move as the days come in.

The data set is in ``../shared/data`` next to the repository (see its README); where it is
missing, the example streams the embedded flights-routes tensor by weekday instead.
"""

# %%
# The stream
# ----------
# ``load_tns`` reads the tensor and its label files; ``transpose`` puts the date first.
from pathlib import Path

import numpy as np

from sktensor_fast import GCP, load_tns

try:
    HERE = Path(__file__).resolve().parent
except NameError:  # run line by line
    HERE = Path.cwd()
DATA = HERE.parent.parent / "shared" / "data" / "flights-carrier-dest-date-hour"

if (DATA / "tensor.tns.gz").exists():
    X, labels = load_tns(DATA / "tensor.tns.gz", with_labels=True)
    order = [2, 0, 1, 3]  # date, carrier, dest, hour
    X = X.transpose(order)[:60]
    labels = [labels[k] for k in order]
    days, hours = labels[0][:60], labels[3]
    what = "day"
else:
    from sktensor_fast.datasets import load_flights_routes

    print(f"{DATA} is missing: streaming the embedded flights-routes by weekday")
    data = load_flights_routes()
    order = [4, 2, 1, 3, 0]  # weekday, carrier, dest, hour, origin
    X = data.tensor.transpose(order)
    labels = [data.labels[k] for k in order]
    days, hours = labels[0], labels[3]
    what = "weekday"
print(X.shape, X.nnz, "nonzeros")

# %%
# Stream it
# ---------
# A Poisson GCP of rank 4 with a window of 7 days; ten short epochs per update (``tol=0``: a
# fixed number, on purpose) keep every day cheap.  After each day we record the day's loss (``score`` solves the day's loadings
# with the model of that moment: it is ``−loss / entries``) and the non-sample factors.
import time

stream = GCP(4, loss="poisson", window=7, epoch_iters=200, max_iter=10, tol=0, random_state=0)
day_loss, snapshots, seconds = [], [], []
for t in range(X.shape[0]):
    batch = X[t:t + 1]
    t0 = time.perf_counter()
    stream.partial_fit(batch)
    seconds.append(time.perf_counter() - t0)
    day_loss.append(-stream.score(batch) * batch.size)
    snapshots.append([f.copy() for f in stream.factors_[1:]])
print(f"{len(seconds)} batches, {1e3 * np.median(seconds):.0f} ms per {what} (median); "
      f"{stream.n_samples_seen_} slices seen, {stream.factors_[0].shape[0]} kept")

# %%
# The batch fit on all the days (default settings: epochs until the loss stops improving),
# scored day by day with the same loss.
batch_model = GCP(4, loss="poisson", random_state=0).fit(X)
batch_loss = [-batch_model.score(X[t:t + 1]) * X[t:t + 1].size for t in range(X.shape[0])]
print(f"total loss: streamed {sum(day_loss):.6g} (each {what} as it came), batch "
      f"{sum(batch_loss):.6g}; the final streamed model on every {what}: "
      f"{-stream.score(X) * X.size:.6g}")

# %%
# Loss per batch
# --------------
# The streamed model meets each day with what it learnt from the days before (and the day
# itself); the batch model saw every day at once.
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(8, 3.5))
ax.plot(day_loss, label="streamed (partial_fit, window 7)")
ax.plot(batch_loss, label="batch fit on all of them", alpha=0.8)
step = max(1, len(days) // 8)
ax.set_xticks(range(0, len(days), step), [str(d) for d in days[::step]], rotation=30)
ax.set_ylabel(f"Poisson loss of the {what}")
ax.set_title("Loss per batch")
ax.legend()
fig.tight_layout()

# %%
# Components drifting over time
# -----------------------------
# ``partial_fit`` lists the components by decreasing weight after every update, so two of
# similar weight may change places: we match each snapshot's components to the final
# model's (the assignment of largest cosine similarity of the carrier, destination and hour
# factors) and draw how similar each one is to its final self.  The components settle as
# the days accumulate; what moves late is what the last weeks changed.
from scipy.optimize import linear_sum_assignment


def stacked(factors):
    """The non-sample factors of each component, one unit column per component."""
    S = np.vstack(factors)
    return S / np.linalg.norm(S, axis=0)


final = stacked(stream.factors_[1:])
similarity, hour_profile = [], []
for snap in snapshots:
    cos = stacked(snap).T @ final
    rows, cols = linear_sum_assignment(-cos)
    match = rows[np.argsort(cols)]  # the snapshot's component matched to each final one
    similarity.append(cos[match, np.arange(cos.shape[1])])
    hour_profile.append(snap[2][:, match[0]])

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
ax1.plot(np.array(similarity))
ax1.set_xlabel(what)
ax1.set_ylabel("cosine similarity to the final factors")
ax1.set_title("Each component against its final self")
ax1.legend([f"component {r}" for r in range(final.shape[1])], fontsize=8)
im = ax2.imshow(np.array(hour_profile).T, aspect="auto", origin="lower", cmap="viridis")
ax2.set_yticks(range(0, len(hours), 4), [str(h) for h in hours[::4]])
ax2.set_xlabel(what)
ax2.set_ylabel("hour")
ax2.set_title("Hour profile of component 0, batch after batch")
fig.colorbar(im, ax=ax2)
fig.tight_layout()
plt.show()
