"""The inputs of vbnn's scikit-learn estimators, checked as scikit-learn checks them.

``fit_input`` and ``predict_input`` run scikit-learn's own validation (``validate_data``: 2-D,
dense, real, at least one feature; ``n_features_in_`` and ``feature_names_in_`` set in fit and
compared in predict), so the estimators give the errors and warnings that
``sklearn.utils.estimator_checks`` expects: a 1-D X is refused with "Reshape your data", a sparse
one with a TypeError, a y of shape (N, 1) is raveled with a ``DataConversionWarning``. On top of
them, vbnn's own checks name the row of a NaN/inf and the argument at fault. ``as_arrays`` is the
same check without an estimator (X as (N, I) and y as (N,)).
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_array, column_or_1d, validate_data

FIT_ROWS = 2  # fitting standardises the inputs by their std, which one row does not have


def check_finite_rows(label: str, values: np.ndarray) -> None:
    """Raise a ValueError naming the first row of ``values`` (N, ...) holding a NaN or inf."""
    if values.dtype.kind not in "fc":
        return
    bad = ~np.isfinite(values.reshape(len(values), -1)).all(axis=1)
    if bad.any():
        raise ValueError(f"{label} has NaN or inf in row {int(np.flatnonzero(bad)[0])}")


def check_fit_rows(rows: int) -> None:
    """Raise a ValueError unless X has ``FIT_ROWS`` rows to fit on."""
    if rows < FIT_ROWS:
        raise ValueError(
            f"X has {rows} sample{'' if rows == 1 else 's'}; fitting needs at least "
            f"{FIT_ROWS} (the inputs are standardised by their std over the rows)"
        )


def one_per_row(y, rows: int, numeric: bool) -> np.ndarray:
    """y as (N,) with N = ``rows``: a column (N, 1) raveled with a ``DataConversionWarning``
    (scikit-learn's ``column_or_1d``), float64 when ``numeric``, every NaN/inf named by row.

    Raises:
        ValueError: y complex, not one value per row, or holding NaN/inf (numeric y: the row
            is named).
    """
    dtype = np.float64 if numeric else None
    y = check_array(
        y,
        ensure_2d=False,
        dtype=dtype,
        ensure_all_finite=False,
        ensure_min_samples=0,
        input_name="y",
    )
    if y.ndim == 2 and y.shape[1] == 1:
        y = column_or_1d(y, warn=True)
    if y.ndim != 1 or len(y) != rows:
        raise ValueError(
            f"y must be 1-D with {rows} {'values' if numeric else 'labels'} (one per row of X), "
            f"got shape {y.shape}"
        )
    if numeric:
        check_finite_rows("y", y)
    return y


def fit_input(
    estimator: BaseEstimator, X, y, numeric: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """X as (N, I) float64 and y as (N,) for ``estimator.fit``; sets ``n_features_in_`` (and
    ``feature_names_in_`` for a DataFrame X).

    Raises:
        ValueError: y None, X not 2-D, complex, without rows or features, with fewer than
            ``FIT_ROWS`` rows or holding NaN/inf (the row is named), y not one value per row.
        TypeError: a sparse X (the networks take dense inputs).
    """
    if y is None:
        raise ValueError(
            f"{type(estimator).__name__} requires y to be passed, but the target y is None"
        )
    x = validate_data(estimator, X, dtype=np.float64, ensure_all_finite=False)
    check_fit_rows(len(x))
    check_finite_rows("X", x)
    return x, one_per_row(y, len(x), numeric)


def predict_input(estimator: BaseEstimator, X) -> np.ndarray:
    """X as (N, I) float64 for a fitted ``estimator``, its features checked against fit's.

    Raises:
        NotFittedError: ``estimator`` not fitted.
        ValueError: X not 2-D, complex, empty, holding NaN/inf (the row is named), or with
            another number of features than in fit.
        TypeError: a sparse X.
    """
    x = validate_data(estimator, X, dtype=np.float64, ensure_all_finite=False, reset=False)
    check_finite_rows("X", x)
    return x


def as_arrays(x, y=None, name: str = "X") -> tuple[np.ndarray, np.ndarray | None]:
    """X as (N, I) float64 and y as (N,), with errors naming the argument, shape and row.

    Args:
        x, y: the inputs and, optionally, one target per row.
        name: the inputs' name in the errors.

    Raises:
        ValueError: X not 2-D (a 1-D X is one feature: pass X.reshape(-1, 1)), y not 1-D,
            different lengths, no rows, or a NaN/inf (the first row holding one is named).
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(
            f"{name} must be 2-D (n_samples, n_features) with at least one row, got shape "
            f"{x.shape}" + (" (one feature? use X.reshape(-1, 1))" if x.ndim == 1 else "")
        )
    check_finite_rows(name, x)
    if y is None:
        return x, None
    y = np.asarray(y, dtype=np.float64)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1 or len(y) != len(x):
        raise ValueError(
            f"y must be 1-D with {len(x)} values (one per row of {name}), got shape {y.shape}"
        )
    check_finite_rows("y", y)
    return x, y
