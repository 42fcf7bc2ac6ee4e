"""Dijkstra's algorithm and helpers built on :class:`~dijkstra.graph.Graph`."""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Dict, List, Optional, Tuple

from .graph import Graph, Node


class NoPathError(LookupError):
    """Raised when the target cannot be reached from the source."""


def _dijkstra(
    graph: Graph, source: Node
) -> Tuple[Dict[Node, float], Dict[Node, Optional[Node]], List[Node]]:
    """Core Dijkstra loop returning ``(dist, prev, settled_order)``.

    An unknown ``source`` raises ``KeyError`` (from :meth:`Graph.neighbors`).
    """
    dist: Dict[Node, float] = {node: math.inf for node in graph.nodes()}
    prev: Dict[Node, Optional[Node]] = {node: None for node in graph.nodes()}
    settled: List[Node] = []
    dist[source] = 0
    counter = itertools.count()
    heap: List[Tuple[float, int, Node]] = [(0, next(counter), source)]
    while heap:
        d, _, node = heapq.heappop(heap)
        if d > dist[node]:
            continue
        settled.append(node)
        for succ, weight in graph.neighbors(node).items():
            candidate = d + weight
            if candidate < dist[succ]:
                dist[succ] = candidate
                prev[succ] = node
                heapq.heappush(heap, (candidate, next(counter), succ))
    return dist, prev, settled


def shortest_distances(
    graph: Graph, source: Node
) -> Tuple[Dict[Node, float], Dict[Node, Optional[Node]]]:
    """Run Dijkstra from ``source``.

    Returns ``(dist, prev)`` where ``dist`` maps every node of the graph to
    its distance (``math.inf`` when unreachable) and ``prev`` maps each node
    to its predecessor on a shortest path (``None`` for the source and for
    unreachable nodes).  When two paths have equal cost, the one discovered
    first is kept.  Raises ``KeyError`` if ``source`` is not in the graph.
    """
    dist, prev, _ = _dijkstra(graph, source)
    return dist, prev


def settle_order(graph: Graph, source: Node) -> List[Node]:
    """Return reachable nodes in the order Dijkstra finalizes them.

    Each node appears exactly once; the order is by nondecreasing distance,
    with equal distances in the order the nodes were (last) improved.
    """
    return _dijkstra(graph, source)[2]


def distances(graph: Graph, source: Node) -> Dict[Node, float]:
    """Return distances from ``source`` to every *reachable* node."""
    dist, _ = shortest_distances(graph, source)
    return {node: d for node, d in dist.items() if d != math.inf}


def shortest_path(graph: Graph, source: Node, target: Node) -> Tuple[float, List[Node]]:
    """Return ``(cost, path)`` for a shortest path from ``source`` to ``target``.

    The path includes both endpoints.  Raises ``KeyError`` for unknown nodes
    and :class:`NoPathError` if ``target`` is unreachable.
    """
    dist, prev = shortest_distances(graph, source)
    if dist[target] == math.inf:
        raise NoPathError(f"no path from {source!r} to {target!r}")
    path: List[Node] = [target]
    while path[-1] != source:
        path.append(prev[path[-1]])
    path.reverse()
    return dist[target], path


def k_nearest(
    graph: Graph, source: Node, k: int, include_source: bool = False
) -> List[Tuple[Node, float]]:
    """Return up to ``k`` reachable nodes closest to ``source``.

    Results are ``(node, distance)`` pairs ordered by distance; ties are
    broken by node insertion order.  The source itself is only included when
    ``include_source`` is true.  Raises ``ValueError`` if ``k`` is negative.
    """
    if k < 0:
        raise ValueError("k must be non-negative")
    dist = distances(graph, source)
    order = {node: index for index, node in enumerate(graph.nodes())}
    ranked = sorted(dist.items(), key=lambda item: (item[1], order[item[0]]))
    if not include_source:
        ranked = [item for item in ranked if item[0] != source]
    return ranked[:k]


def eccentricity(graph: Graph, source: Node) -> float:
    """Return the greatest distance from ``source`` to any node.

    Returns ``math.inf`` if some node is unreachable, and 0 for a graph
    containing only the source.
    """
    dist, _ = shortest_distances(graph, source)
    return max(dist.values())
