"""CP decomposition estimators (scikit-learn API)."""
from ._base import BaseCP
from .cp_als import CPALS
from .cp_apr import CPAPR
from .gcp import GCP

__all__ = ["BaseCP", "CPALS", "CPAPR", "GCP"]
