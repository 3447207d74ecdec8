"""Where a chain store keeps its chains on disk, and how a chain in flight is stored and read back.

A chain store is a directory (``vbnn.stores.unit_store``) that ``chain_runner.run_chains`` fills:

* every finished chain, keyed by :func:`chain_settings` (the sampler, the chain's index, the
  run's config, a digest of its start and whatever else made its draws);
* ``<store>/in-flight`` (``IN_FLIGHT``): the chain in flight, its state, tuned parameters, the
  carry of a segmented tuning stage under way and its draws so far (:func:`save_checkpoint`,
  :func:`load_checkpoint`), from which a rerun goes on;
* ``<store>/starts`` (``STARTS``): what the chains start from (an experiment's pre-training),
  so that every machine starts them alike and their store keys agree;
* ``<store>/pooled`` (``POOLED``): the tuning the chains share, where the sampler pools it
  (``chain_runner.Pooling``), keyed by the chains' keys.

A separate ``chain_ends`` directory keeps where every finished chain ended, keyed by
:func:`end_settings` (its settings but for the number of draws), so the same chain asked for
more draws goes on from there (:func:`keep_end`). :func:`merge_chain_stores` brings chains
sampled on another machine into this one's store.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import jax
import numpy as np
from blackjax.adaptation.mclmc_adaptation import MCLMCAdaptationState

from vbnn.references.jax_nuts import ChainsConfig
from vbnn.stores import unit_store

IN_FLIGHT = "in-flight"  # the folder of a chain store that holds its chains in flight
# the folder of a chain store that holds what its chains start from (an experiment's
# pre-training), so that every machine starts them alike and their store keys agree
STARTS = "starts"
POOLED = "pooled"  # the folder of a chain store that holds the tuning its chains share


def digest(array: np.ndarray) -> str:
    """A short digest of an array's bytes (a chain's start, a preconditioner), for store keys."""
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


def chain_settings(
    name: str, index: int, start: np.ndarray, config: ChainsConfig, extra: dict | None = None
) -> dict:
    """What makes one chain's draws (its store key): the sampler, the chain's index (its random
    key), the run's config (seed and budgets), a digest of its start and whatever else the
    sampler was given (``extra``, e.g. a preconditioner's digest)."""
    settings = {"sampler": name, "chain": index, "chains": config.to_dict(), "start": digest(start)}
    return {**settings, **(extra or {})}


def end_settings(settings: dict) -> dict:
    """A chain's store key without its number of draws: the key of where it ended
    (``chain_ends``), shared by the same chain asked for more draws."""
    chains = {name: value for name, value in settings["chains"].items() if name != "samples"}
    return {**settings, "chains": chains}


def save_checkpoint(
    store: Path, settings: dict, progress: dict, state, params, draws: list, carry=None
) -> None:
    """Store a chain in flight: its state, its tuned parameters, the carry of the segmented
    stage under way (its leaves in order) and its draws so far."""
    arrays = {f"state.{name}": np.asarray(value) for name, value in state._asdict().items()}
    if params is not None:
        arrays.update({f"params.{n}": np.asarray(v) for n, v in params._asdict().items()})
    if carry is not None:
        leaves = jax.tree.leaves(carry)
        arrays.update({f"carry.{i}": np.asarray(leaf) for i, leaf in enumerate(leaves)})
    if draws:
        arrays.update({f"draw.{n}": np.concatenate([d[n] for d in draws]) for n in draws[0]})
    unit_store.save(store, settings, arrays, progress)


def keep_end(store: Path, settings: dict, progress: dict, state, params, draws: list) -> None:
    """Store where a finished chain ended, unless the same chain with more draws ended there."""
    key = end_settings(settings)
    stored = unit_store.load_info(store, key)
    if stored is None or stored["drawn"] <= progress["drawn"]:
        save_checkpoint(store, key, progress, state, params, draws)


def chain_name(settings: dict) -> str:
    """A chain in words, "mams chain 2": its store key's sampler ("run_mams_chains"), its index."""
    sampler = str(settings.get("sampler", "")).removeprefix("run_").removesuffix("_chains")
    return f"{sampler} chain {settings.get('chain', '?')}".strip()


def describe_progress(progress: dict) -> str:
    """A chain in flight's progress, in words."""
    segments = progress.get("segment", 0)
    within = f" and {segments} segment(s) of stage {progress['stage'] + 1}" if segments else ""
    return (
        f"{progress['stage']} tuning stage(s){within} done ({progress['tuning_gradients']:.0f} "
        f"gradients), {progress['drawn']} draws, {progress['seconds']:.0f} s"
    )


def progress_order(progress: dict) -> tuple[int, int, int]:
    """How far a chain in flight is, comparable: (tuning stages done, segments of the next
    done, draws)."""
    return progress["stage"], progress.get("segment", 0), progress["drawn"]


def load_checkpoint(
    store: Path, settings: dict, state_template
) -> tuple[dict, Any, Any, list] | None:
    """(progress, state, params, draws) of a stored chain in flight, or None; the carry of a
    segmented stage under way is in ``progress["carry"]`` (its leaves, in order)."""
    stored = unit_store.load(store, settings)
    if stored is None:
        return None
    arrays, progress = stored
    if progress.get("segment", 0):
        count = sum(name.startswith("carry.") for name in arrays)
        progress = {**progress, "carry": [arrays[f"carry.{i}"] for i in range(count)]}
    state = type(state_template)(*(arrays[f"state.{n}"] for n in state_template._fields))
    fields = MCLMCAdaptationState._fields
    params = None  # before the first stage
    if "params.L" in arrays:
        params = MCLMCAdaptationState(*(arrays[f"params.{name}"] for name in fields))
    drawn = {name[len("draw.") :]: arrays[name] for name in arrays if name.startswith("draw.")}
    return progress, state, params, [drawn] if drawn else []


def merge_chain_stores(source: Path, target: Path) -> list[str]:
    """Bring chains sampled elsewhere into ``target``: ``source`` is a copy of a run's chain
    stores (``<out>/chains/<unit>/``, as ``vbnn reproduce depth --chains-only`` leaves them on
    another machine), ``target`` this machine's. Per chain, by its store key:

    * finished there, not here: copied, and a checkpoint of it here dropped;
    * in flight there: copied if no finished chain is here and the checkpoint here (if any) has
      fewer tuning stages or draws, so neither machine's further progress is lost;
    * claimed here by a process that may be running it: left alone;
    * claims (``*.claim``) are never copied: a process of another host cannot be checked, so its
      claim would keep every process here off that chain.

    What a unit's chains start from (its ``STARTS`` folder) is copied where none is here; where
    one is here and differs, this machine's is kept and the chains started from the other stay
    inert (a chain's store key holds a digest of its start). The tuning its chains share (its
    ``POOLED`` folder) is copied where none is here; where one is, it was pooled from the same
    chains' parameters, and is kept.

    Returns one line per chain (and per starts folder) saying what was done.

    Raises:
        FileNotFoundError: ``source`` is not a directory.
        ValueError: a stored chain in ``source`` is not whole (``unit_store.load`` names it).
    """
    source, target = Path(source), Path(target)
    if not source.is_dir():
        raise FileNotFoundError(f"merge_chain_stores: {source} is not a directory")
    said = []
    for path in sorted(source.rglob(f"{STARTS}/*.json")):
        said.append(_merge_starts(path, target / path.parent.relative_to(source)))
    for path in sorted(source.rglob(f"{POOLED}/*.json")):
        here = target / path.parent.relative_to(source)
        name = f"{path.parent.parent.name}/{POOLED}"
        settings = json.loads(path.read_text())["settings"]
        if unit_store.load_info(here, settings) is not None:
            said.append(f"{name}: here already")
        else:
            unit_store.save(here, settings, None, unit_store.load_info(path.parent, settings))
            said.append(f"{name}: brought here")
    for path in sorted(source.rglob("*.json")):
        if path.parent.name in (STARTS, POOLED):
            continue
        in_flight = path.parent.name == IN_FLIGHT
        unit = path.parent.parent if in_flight else path.parent
        settings = json.loads(path.read_text())["settings"]
        arrays, info = unit_store.load(path.parent, settings)
        here = target / unit.relative_to(source)
        name = f"{unit.name}/{chain_name(settings)}"
        if unit_store.load_info(here, settings) is not None:
            said.append(f"{name}: finished here already")
        elif unit_store.claimed(here, settings):
            said.append(f"{name}: running here, left alone")
        elif not in_flight:
            unit_store.save(here, settings, arrays, info)
            unit_store.remove(here / IN_FLIGHT, settings)
            said.append(f"{name}: finished there, brought here")
        else:
            mine = unit_store.load_info(here / IN_FLIGHT, settings)
            if mine is not None and progress_order(mine) >= progress_order(info):
                said.append(f"{name}: as far or further here ({describe_progress(mine)}), kept")
            else:
                unit_store.save(here / IN_FLIGHT, settings, arrays, info)
                said.append(f"{name}: in flight there, brought here ({describe_progress(info)})")
    return said


def _merge_starts(path: Path, here: Path) -> str:
    """``merge_chain_stores`` for one unit's starts: copied where none is here."""
    settings = json.loads(path.read_text())["settings"]
    arrays, info = unit_store.load(path.parent, settings)
    name = f"{path.parent.parent.name}/{STARTS}"
    mine = unit_store.load(here, settings)
    if mine is None:
        unit_store.save(here, settings, arrays, info)
        return f"{name}: brought here (its chains go on from that machine's starts)"
    same = mine[0].keys() == arrays.keys() and all(
        np.array_equal(mine[0][key], value) for key, value in arrays.items()
    )
    if same:
        return f"{name}: the same here"
    return f"{name}: differ here; this machine's kept, so the chains started there stay inert"
