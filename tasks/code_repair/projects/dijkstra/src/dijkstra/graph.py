"""A small weighted directed graph backed by adjacency dictionaries."""

from __future__ import annotations

import math
from typing import Dict, Hashable, Iterable, List, Tuple

Node = Hashable


class NegativeWeightError(ValueError):
    """Raised when an edge weight is negative (Dijkstra cannot handle it)."""


class Graph:
    """Weighted directed graph.

    Nodes are kept in insertion order.  Parallel edges are not stored: adding
    an edge that already exists keeps the smaller of the two weights.
    """

    def __init__(self) -> None:
        self._adj: Dict[Node, Dict[Node, float]] = {}

    @classmethod
    def from_edges(
        cls, edges: Iterable[Tuple[Node, Node, float]], undirected: bool = False
    ) -> "Graph":
        """Build a graph from ``(u, v, weight)`` triples.

        With ``undirected=True`` every edge is added in both directions.
        """
        graph = cls()
        for u, v, weight in edges:
            graph.add_edge(u, v, weight)
            if undirected:
                graph.add_edge(v, u, weight)
        return graph

    def add_node(self, node: Node) -> None:
        """Add ``node`` if it is not already present."""
        self._adj.setdefault(node, {})

    def add_edge(self, u: Node, v: Node, weight: float = 1.0) -> None:
        """Add a directed edge ``u -> v``; both endpoints are created.

        Raises :class:`NegativeWeightError` for negative weights and
        ``ValueError`` for NaN weights.
        """
        if math.isnan(weight):
            raise ValueError("edge weight must be a number")
        if weight < 0:
            raise NegativeWeightError(f"negative weight {weight} on edge {u!r}->{v!r}")
        self.add_node(u)
        self.add_node(v)
        current = self._adj[u].get(v)
        if current is None or weight < current:
            self._adj[u][v] = weight

    def remove_edge(self, u: Node, v: Node) -> None:
        """Remove the edge ``u -> v``.

        Raises ``KeyError`` whose argument is the ``(u, v)`` pair if the edge
        (or either node) is missing.
        """
        if u not in self._adj or v not in self._adj[u]:
            raise KeyError((u, v))
        del self._adj[u][v]

    def weight(self, u: Node, v: Node) -> float:
        """Return the weight of ``u -> v``; raises ``KeyError((u, v))`` if missing."""
        try:
            return self._adj[u][v]
        except KeyError:
            raise KeyError((u, v)) from None

    def neighbors(self, node: Node) -> Dict[Node, float]:
        """Return a copy of the ``{successor: weight}`` mapping of ``node``.

        Raises ``KeyError`` if ``node`` is not in the graph.
        """
        return dict(self._adj[node])

    def nodes(self) -> List[Node]:
        """Return all nodes in insertion order."""
        return list(self._adj)

    def edge_count(self) -> int:
        """Return the number of directed edges."""
        return sum(len(targets) for targets in self._adj.values())

    def __contains__(self, node: object) -> bool:
        return node in self._adj

    def __len__(self) -> int:
        return len(self._adj)
