"""Shared pieces of the dense families: initialisation and the affine map."""

from __future__ import annotations

import math

import torch

from vbnn.core.kernels import batched_affine
from vbnn.core.randomness import ModelGenerators


def initial_means(
    generators: ModelGenerators, in_features: int, out_features: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """LeCun-normal weight means N(0, 1/I) and zero biases, one draw per model.

    Returns:
        weight (M, I, O), bias (M, O).
    """
    if in_features < 1 or out_features < 1:
        raise ValueError(f"layer sizes must be >= 1, got in={in_features}, out={out_features}")
    weight = generators.randn(in_features, out_features, dtype=dtype) / math.sqrt(in_features)
    bias = torch.zeros(len(generators), out_features, dtype=dtype)
    return weight, bias


def affine(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """x (M, N, I) @ weight (M, I, O) + bias (M, O) -> (M, N, O)."""
    if x.dim() != 3 or x.shape[0] != weight.shape[0] or x.shape[2] != weight.shape[1]:
        raise ValueError(
            f"input of shape {tuple(x.shape)} does not fit a layer of {weight.shape[0]} models "
            f"with {weight.shape[1]} inputs: expected (M={weight.shape[0]}, N, {weight.shape[1]})"
        )
    return batched_affine(x, weight, bias)


def require_generators(generators: ModelGenerators | None, mode: object) -> ModelGenerators:
    if generators is None:
        raise ValueError(f"forward mode {mode!r} draws noise: pass a ModelGenerators")
    return generators
