"""``vbnn.comparison``: which family for my data? Families and baselines over the same folds.

:func:`compare` (``vbnn compare`` on the command line) trains every family on K folds or given
splits of one table, tuned per fold on validation rows carved from the training rows, and
reports each metric as mean +- standard error over folds, the paired gap of each family to the
best one and a plain verdict (``compare.report``).

``compare`` and ``ComparisonResult`` load (with pandas, scikit-learn and Optuna) on first use,
so the package's light parts (``config``, ``folds``, the command's ``arguments``) import
without them.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from vbnn.comparison.config import CompareConfig
from vbnn.comparison.folds import Task, UnseenClassWarning

if TYPE_CHECKING:
    from vbnn.comparison.run import ComparisonResult, compare

_LAZY = {"compare": "vbnn.comparison.run", "ComparisonResult": "vbnn.comparison.run"}


def __getattr__(name: str) -> Any:
    """``compare`` and ``ComparisonResult``, imported from ``comparison.run`` on first access."""
    if name not in _LAZY:
        raise AttributeError(f"module 'vbnn.comparison' has no attribute {name!r}")
    value = getattr(import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["CompareConfig", "ComparisonResult", "Task", "UnseenClassWarning", "compare"]
