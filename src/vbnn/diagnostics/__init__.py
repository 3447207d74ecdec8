"""Diagnostics of trained models (over-pruning of hidden units, training trajectories)."""
