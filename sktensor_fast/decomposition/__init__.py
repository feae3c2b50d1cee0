"""CP decomposition estimators (scikit-learn API)."""
from ._base import BaseCP
from .cp_als import CPALS

__all__ = ["BaseCP", "CPALS"]
