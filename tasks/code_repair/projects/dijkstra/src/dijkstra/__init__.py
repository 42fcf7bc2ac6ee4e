"""Weighted directed graphs and Dijkstra shortest paths."""

from .graph import Graph, NegativeWeightError
from .paths import (
    NoPathError,
    distances,
    eccentricity,
    k_nearest,
    settle_order,
    shortest_distances,
    shortest_path,
)

__all__ = [
    "Graph",
    "NegativeWeightError",
    "NoPathError",
    "distances",
    "eccentricity",
    "k_nearest",
    "settle_order",
    "shortest_distances",
    "shortest_path",
]
