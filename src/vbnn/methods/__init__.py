"""Methods: every posterior approximation as one object (``Method``) in one table (``METHODS``).

Read ``methods.base`` first (the contract), then ``methods.registry``; each other module is one
method or a family of them.
"""

from vbnn.methods.base import Fitted, Method, PredictiveKind
from vbnn.methods.registry import METHODS, base_method, method

__all__ = ["METHODS", "Fitted", "Method", "PredictiveKind", "base_method", "method"]
