"""``vbnn.comparison``: which family for my data? Families and baselines over the same folds.

:func:`compare` (``vbnn compare`` on the command line) trains every family on K folds or given
splits of one table, tuned per fold on validation rows carved from the training rows, and
reports each metric as mean +- standard error over folds, the paired gap of each family to the
best one and a plain verdict (``compare.report``).
"""

from vbnn.comparison.config import CompareConfig
from vbnn.comparison.folds import Task
from vbnn.comparison.run import ComparisonResult, compare

__all__ = ["CompareConfig", "ComparisonResult", "Task", "compare"]
