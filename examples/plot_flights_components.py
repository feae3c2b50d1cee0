"""
What CP-APR finds in the New York flights
=========================================

The flights-routes tensor counts the 336,776 flights that left the three New York City
airports in 2013 by origin × destination × carrier × scheduled hour × weekday.  A Poisson CP
model (:class:`~sktensor_fast.CPAPR`) splits these counts into a few components; each
component is a product of one distribution per mode, so it reads as a "kind of flight": which
airport, to where, on which airline, at what time.

We fit five components and draw, for each, the largest entries of the airport, destination
and carrier modes with their labels (:func:`sktensor_fast.plotting.plot_components`), then
the hour and weekday profiles.
"""

# %%
# Load the data and fit
# ---------------------
# ``load_flights_routes`` returns the tensor and, per mode, the names of its indices.
# ``solver="pdnr"`` (a projected Newton method per factor row) converges here in a few dozen
# outer iterations.
from sktensor_fast import CPAPR
from sktensor_fast.datasets import load_flights_routes

data = load_flights_routes()
X = data.tensor
print(X.shape, X.nnz, "nonzeros,", int(X.sum()), "flights")

model = CPAPR(rank=5, solver="pdnr", random_state=0).fit(X)
print(
    f"{model.n_iter_} outer iterations, "
    f"log-likelihood {model.log_likelihood_:.6g}"
)

# %%
# Each factor column of CP-APR sums to one: a distribution over that mode's indices, and the
# weight is the expected number of flights the component explains.
print("weights:", model.weights_.round(0))
print(
    "share of the flights:", (model.weights_ / model.weights_.sum()).round(3)
)

# %%
# Where, with whom, to where
# --------------------------
# One row per component, one panel per mode; the bars are the largest entries of the factor
# columns of origin, destination and carrier.  They come out tied together: a hub airline at
# its airport with its main destinations.
import matplotlib.pyplot as plt

from sktensor_fast.plotting import plot_components

fig = plot_components(
    model,
    labels=data.labels,
    mode_names=data.mode_names,
    top=6,
    modes=[0, 1, 2],
)
fig.suptitle("flights-routes, CP-APR rank 5: origin, destination, carrier")
plt.show()

# %%
# When
# ----
# The hour and weekday factors are best read in their natural order.  Each component has its
# own daily profile (morning and evening banks of departures), while the weekdays are nearly
# uniform apart from fewer Saturday flights: the timetable repeats every week.
import numpy as np

hour, weekday = data.mode_names.index("hour"), data.mode_names.index("weekday")
days = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
]
day_order = [data.labels[weekday].index(d) for d in days]
hour_order = np.argsort([int(h) for h in data.labels[hour]])

fig, axes = plt.subplots(
    1,
    2,
    figsize=(9, 4.2),
    layout="constrained",
    gridspec_kw={"width_ratios": [2, 1]},
)
for r in range(model.rank):
    name = f"{r}: {data.labels[2][np.argmax(model.factors_[2][:, r])]}"
    axes[0].plot(
        [data.labels[hour][j] for j in hour_order],
        model.factors_[hour][hour_order, r],
        marker=".",
        label=name,
    )
    axes[1].plot(
        [d[:3] for d in days],
        model.factors_[weekday][day_order, r],
        marker=".",
    )
axes[0].set(title="scheduled hour", ylabel="share of the component's flights")
axes[0].tick_params(axis="x", labelsize=8)
fig.legend(
    title="component: main carrier",
    loc="outside lower center",
    ncols=5,
    fontsize=8,
)
axes[1].set(title="weekday", ylim=(0, None))
plt.show()

# %%
# The labels of a component
# -------------------------
# The same information as text: the three largest entries of each mode.
for r in range(model.rank):
    parts = []
    for k, name in enumerate(data.mode_names):
        col = model.factors_[k][:, r]
        top = np.argsort(-col)[:3]
        parts.append(
            f"{name}: "
            + ", ".join(f"{data.labels[k][j]} {col[j]:.2f}" for j in top)
        )
    print(f"component {r}:\n   " + "\n   ".join(parts))
