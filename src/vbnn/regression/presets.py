"""Default hyper-parameters of ``vbnn uci``: tuned values where the Table 1 reproduction has them.

``PRESETS[dataset][method]`` holds the values the overpruning reproduction chose
(``vbnn reproduce overpruning``; Optuna TPE, 30 candidates, tuned once on split 0's training rows
with a validation part carved from them; ``reproductions/overpruning/table1.md`` lists them),
rounded to 4 significant digits. They are a sensible start, not a protocol: split 0's training
rows overlap the test rows of other splits, so a paper-grade evaluation tunes per split
(``vbnn reproduce overpruning --tune per-split``). Where no preset exists, a family gets its
stated defaults (``FamilySpec.config_defaults``: GD's ``GD_POSTERIOR_STD``, as its ``VIConfig``
default 1e-4 makes GD a MAP fit that overfits), and every other value is the config's default
(the paper's settings).
"""

from __future__ import annotations

from vbnn.layers.registry import FAMILIES

GD_POSTERIOR_STD = FAMILIES["gd"].config_defaults["posterior_std"]

# SGLD: prior std and step size (eta) tuned together.

PRESETS: dict[str, dict[str, dict[str, float]]] = {
    "boston": {
        "es": {"learning_rate": 0.006431},
        "fc": {"prior_std": 1.248},
        "gd": {"posterior_std": 0.04312, "prior_std": 0.6431},
        "map": {"prior_std": 0.2055},
        "mf": {"prior_std": 0.6035},
        "sgld": {"prior_std": 0.6522, "step_size": 0.03901},
    },
    "concrete": {
        "es": {"learning_rate": 0.001866},
        "fc": {"prior_std": 3.32},
        "gd": {"posterior_std": 0.02425, "prior_std": 9.711},
        "map": {"prior_std": 0.2279},
        "mf": {"prior_std": 2.793},
        "sgld": {"prior_std": 9.05, "step_size": 0.07427},
    },
    "energy": {
        "es": {"learning_rate": 0.02584},
        "fc": {"prior_std": 1.015},
        "gd": {"posterior_std": 0.00631, "prior_std": 2.191},
        "map": {"prior_std": 0.4154},
        "mf": {"prior_std": 0.8483},
        "sgld": {"prior_std": 0.592, "step_size": 0.02527},
    },
    "power": {
        "es": {"learning_rate": 0.005832},
        "fc": {"prior_std": 9.763},
        "gd": {"posterior_std": 0.008131, "prior_std": 1.576},
        "map": {"prior_std": 5.492},
        "mf": {"prior_std": 1.819},
        "sgld": {"prior_std": 9.05, "step_size": 0.07427},
    },
    "wine": {
        "es": {"learning_rate": 0.005759},
        "fc": {"prior_std": 9.706},
        "gd": {"posterior_std": 0.04704, "prior_std": 0.2618},
        "map": {"prior_std": 0.2092},
        "mf": {"prior_std": 1.933},
        "sgld": {"prior_std": 0.5364, "step_size": 0.3893},
    },
    "yacht": {
        "es": {"learning_rate": 0.02703},
        "fc": {"prior_std": 0.277},
        "gd": {"posterior_std": 0.00295, "prior_std": 2.599},
        "map": {"prior_std": 0.4704},
        "mf": {"prior_std": 5.398},
        "sgld": {"prior_std": 0.592, "step_size": 0.02527},
    },
}


def preset(dataset: str, method: str) -> tuple[dict[str, float], str]:
    """(values, where they come from) for ``dataset`` and ``method`` (a Table 1 name or any
    family); empty when none apply."""
    name = str(method)
    values = PRESETS.get(dataset, {}).get(name)
    if values:
        return dict(values), "tuned by the Table 1 reproduction on split 0"
    stated = FAMILIES[name].config_defaults if name in FAMILIES else {}
    if stated:
        return dict(stated), f"vbnn's stated {name.upper()} default"
    return {}, ""
