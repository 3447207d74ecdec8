"""Markdown tables from pandas DataFrames without the optional ``tabulate`` dependency."""

from __future__ import annotations

import pandas as pd


def markdown_table(frame: pd.DataFrame, index: bool = False, float_format: str = "{:.3f}") -> str:
    """A GitHub-flavoured markdown table; floats formatted with ``float_format``."""
    table = frame.reset_index() if index else frame

    def cell(value: object) -> str:
        if isinstance(value, float):
            return "" if pd.isna(value) else float_format.format(value)
        return "" if value is None else str(value).replace("|", "\\|")

    header = "| " + " | ".join(str(c) for c in table.columns) + " |"
    rule = "|" + "|".join("---" for _ in table.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join([header, rule, *rows])
