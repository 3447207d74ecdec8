"""Data: UCI regression sets with their standard splits, download and checks, embedded default."""

from vbnn.data.paths import resolve_data_dir
from vbnn.data.uci import DATASETS, DataError, RegressionDataset, load_uci

__all__ = ["DATASETS", "DataError", "RegressionDataset", "load_uci", "resolve_data_dir"]
