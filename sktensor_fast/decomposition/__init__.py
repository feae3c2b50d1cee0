"""CP decomposition estimators (scikit-learn API)."""
from ._base import BaseCP
from ._progress import FitProgress, fit_callback
from .cp_als import CPALS
from .cp_apr import CPAPR
from .gcp import GCP

__all__ = ["BaseCP", "CPALS", "CPAPR", "GCP", "FitProgress", "fit_callback"]
