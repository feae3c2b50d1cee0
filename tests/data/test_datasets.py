import numpy as np

from sktensor_fast.datasets import list_datasets, load_flights_routes
from sktensor_fast.tensor import SparseTensor


def test_list_datasets():
    assert "flights-routes" in list_datasets()


def test_flights_routes_bunch():
    data = load_flights_routes()
    X = data.tensor
    assert isinstance(X, SparseTensor)
    assert X.shape == (3, 105, 16, 20, 7)
    assert X.nnz == 15188
    assert X.sum() == 336776
    assert X.vals.max() == 106
    assert X.dtype == np.float64
    assert np.all(X.vals == np.round(X.vals)) and np.all(X.vals > 0)
    assert data.mode_names == ["origin", "dest", "carrier", "hour", "weekday"]
    assert [len(lab) for lab in data.labels] == list(X.shape)
    assert data.labels[0] == ["EWR", "JFK", "LGA"]
    assert all(isinstance(x, str) and x for lab in data.labels for x in lab)
    assert len(set(data.labels[1])) == 105
    assert sorted(data.labels[4]) == sorted(["Monday", "Tuesday", "Wednesday", "Thursday",
                                             "Friday", "Saturday", "Sunday"])
    assert "nycflights13" in data.DESCR and "CC0" in data.DESCR


def test_flights_routes_tuple():
    X, labels = load_flights_routes(return_X_labels=True)
    assert X.shape == (3, 105, 16, 20, 7)
    assert labels[0] == ["EWR", "JFK", "LGA"]


def test_flights_routes_matches_shared_copy(shared_data):
    from sktensor_fast.io import load_tns
    shared = load_tns(shared_data / "flights-routes" / "tensor.tns.gz")
    assert load_flights_routes().tensor == shared


def test_flights_routes_labels_in_natural_order():
    """Indices follow their labels' natural order, so a factor can be plotted against them."""
    labels = load_flights_routes().labels
    assert labels[4] == ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday",
                         "Sunday"]
    hours = [int(h) for h in labels[3]]
    assert hours == sorted(hours) and len(set(hours)) == len(hours)
    for k in (0, 1, 2):                      # airport and carrier codes
        assert labels[k] == sorted(labels[k])


def test_flights_routes_weekday_totals_follow_the_calendar():
    """The counts moved with the labels: Saturday is the quietest day of 2013's flights."""
    data = load_flights_routes()
    X = data.tensor
    per_day = np.bincount(X.subs[:, 4], weights=X.vals, minlength=7)
    assert data.labels[4][int(np.argmin(per_day))] == "Saturday"
    assert per_day.sum() == 336776
