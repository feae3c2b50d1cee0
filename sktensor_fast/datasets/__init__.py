"""Small real data sets shipped with the package.

Examples
--------
>>> from sktensor_fast.datasets import list_datasets, load_flights_routes
>>> list_datasets()
['flights-routes']
>>> data = load_flights_routes()
>>> data.tensor.shape, data.mode_names[0], data.labels[0]
((3, 105, 16, 20, 7), 'origin', ['EWR', 'JFK', 'LGA'])
"""
import os

from ..io import load_tns
from ..tensor import _attach_labels

__all__ = ["list_datasets", "load_flights_routes"]

_DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")

_FLIGHTS_ROUTES_MODES = ("origin", "dest", "carrier", "hour", "weekday")


def list_datasets():
    """Names of the data sets shipped with the package.

    Returns
    -------
    list of str
        Sorted names; each is a folder of ``sktensor_fast/datasets/data``.

    Examples
    --------
    >>> from sktensor_fast.datasets import list_datasets
    >>> "flights-routes" in list_datasets()
    True
    """
    if not os.path.isdir(_DATA_DIR):
        return []
    return sorted(name for name in os.listdir(_DATA_DIR)
                  if os.path.isfile(os.path.join(_DATA_DIR, name, "tensor.tns.gz")))


def load_flights_routes(return_X_labels=False):
    """Load the flights-routes count tensor (nycflights13, CC0).

    Every flight that left a New York City airport (EWR, JFK, LGA) in 2013, counted by
    origin × destination × carrier × scheduled hour × weekday: shape (3, 105, 16, 20, 7), 15,188
    nonzeros, 336,776 flights in all.  Indices follow the natural order of their labels:
    hours ascending, weekdays from Monday to Sunday, airports and carriers alphabetical, so a
    factor column can be plotted against its index.

    Parameters
    ----------
    return_X_labels : bool, default=False
        Return ``(tensor, labels)`` instead of a Bunch.

    Returns
    -------
    data : sklearn.utils.Bunch
        With fields

        - ``tensor``: the :class:`~sktensor_fast.tensor.SparseTensor` of counts (float64),
          carrying ``labels`` and ``mode_names`` (so that ``tensor.transpose(...)`` keeps
          them);
        - ``labels``: list with one list of strings per mode (index ``j`` of mode ``k`` is
          named ``labels[k][j]``);
        - ``mode_names``: ``["origin", "dest", "carrier", "hour", "weekday"]``;
        - ``DESCR``: description and attribution of the data.
    (tensor, labels) : tuple
        With ``return_X_labels=True``.

    Examples
    --------
    >>> from sktensor_fast.datasets import load_flights_routes
    >>> X, labels = load_flights_routes(return_X_labels=True)
    >>> X.nnz, int(X.sum()), labels[4][:2]
    (15188, 336776, ['Monday', 'Tuesday'])
    """
    folder = os.path.join(_DATA_DIR, "flights-routes")
    X, labels = load_tns(os.path.join(folder, "tensor.tns.gz"), with_labels=True)
    _attach_labels(X, labels, _FLIGHTS_ROUTES_MODES)
    if return_X_labels:
        return X, labels
    from sklearn.utils import Bunch

    with open(os.path.join(folder, "README.md"), encoding="utf-8") as f:
        descr = f.read()
    return Bunch(tensor=X, labels=labels, mode_names=list(_FLIGHTS_ROUTES_MODES), DESCR=descr)
