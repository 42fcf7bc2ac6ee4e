import math

import pytest

from dijkstra import (
    Graph,
    NegativeWeightError,
    NoPathError,
    distances,
    eccentricity,
    k_nearest,
    settle_order,
    shortest_distances,
    shortest_path,
)


def sample_graph() -> Graph:
    #   A --4--> B --1--> D
    #   |        ^        |
    #   1        2        3
    #   v        |        v
    #   C -------+--7---> E        F (isolated)
    g = Graph.from_edges(
        [
            ("A", "B", 4),
            ("A", "C", 1),
            ("C", "B", 2),
            ("B", "D", 1),
            ("C", "E", 7),
            ("D", "E", 3),
        ]
    )
    g.add_node("F")
    return g


def test_graph_basic_structure():
    g = sample_graph()
    assert g.nodes() == ["A", "B", "C", "D", "E", "F"]
    assert len(g) == 6
    assert g.edge_count() == 6
    assert "F" in g
    assert "Z" not in g
    assert g.neighbors("A") == {"B": 4, "C": 1}
    assert g.neighbors("F") == {}


def test_neighbors_returns_copy_and_unknown_raises():
    g = sample_graph()
    g.neighbors("A")["Z"] = 1
    assert "Z" not in g.neighbors("A")
    with pytest.raises(KeyError):
        g.neighbors("Z")


def test_add_edge_keeps_smaller_weight():
    g = Graph()
    g.add_edge("x", "y", 5)
    g.add_edge("x", "y", 3)
    assert g.weight("x", "y") == 3
    g.add_edge("x", "y", 3)
    g.add_edge("x", "y", 9)
    assert g.weight("x", "y") == 3
    assert g.edge_count() == 1


def test_add_edge_default_weight_and_zero_weight():
    g = Graph()
    g.add_edge(1, 2)
    g.add_edge(2, 3, 0)
    assert g.weight(1, 2) == 1.0
    assert g.weight(2, 3) == 0
    assert shortest_path(g, 1, 3) == (1.0, [1, 2, 3])


@pytest.mark.parametrize("weight", [-1, -0.001])
def test_negative_weight_rejected(weight):
    g = Graph()
    with pytest.raises(NegativeWeightError):
        g.add_edge("a", "b", weight)
    assert "a" not in g
    assert len(g) == 0


def test_negative_weight_error_is_value_error():
    with pytest.raises(ValueError):
        Graph.from_edges([("a", "b", 1), ("b", "c", -2)])


def test_nan_weight_rejected():
    g = Graph()
    with pytest.raises(ValueError) as info:
        g.add_edge("a", "b", float("nan"))
    assert not isinstance(info.value, NegativeWeightError)


def test_from_edges_undirected():
    g = Graph.from_edges([("a", "b", 2), ("b", "c", 5)], undirected=True)
    assert g.weight("b", "a") == 2
    assert g.weight("c", "b") == 5
    assert g.edge_count() == 4
    directed = Graph.from_edges([("a", "b", 2)])
    assert directed.neighbors("b") == {}


def test_remove_edge():
    g = sample_graph()
    g.remove_edge("A", "C")
    assert g.neighbors("A") == {"B": 4}
    assert "C" in g
    with pytest.raises(KeyError) as info:
        g.remove_edge("A", "C")
    assert info.value.args == (("A", "C"),)
    with pytest.raises(KeyError) as info:
        g.remove_edge("Z", "A")
    assert info.value.args == (("Z", "A"),)
    assert shortest_path(g, "A", "D") == (5, ["A", "B", "D"])


def test_weight_missing_edge():
    g = sample_graph()
    with pytest.raises(KeyError) as info:
        g.weight("B", "A")
    assert info.value.args == (("B", "A"),)
    with pytest.raises(KeyError) as info:
        g.weight("Q", "A")
    assert info.value.args == (("Q", "A"),)


def test_shortest_distances_full_map():
    dist, prev = shortest_distances(sample_graph(), "A")
    assert dist == {"A": 0, "B": 3, "C": 1, "D": 4, "E": 7, "F": math.inf}
    assert prev == {"A": None, "B": "C", "C": "A", "D": "B", "E": "D", "F": None}


def test_shortest_distances_unknown_source():
    with pytest.raises(KeyError):
        shortest_distances(sample_graph(), "Z")


def test_distances_only_reachable():
    assert distances(sample_graph(), "B") == {"B": 0, "D": 1, "E": 4}
    assert distances(sample_graph(), "F") == {"F": 0}


@pytest.mark.parametrize(
    "source, target, cost, path",
    [
        ("A", "E", 7, ["A", "C", "B", "D", "E"]),
        ("A", "B", 3, ["A", "C", "B"]),
        ("C", "E", 6, ["C", "B", "D", "E"]),
        ("A", "A", 0, ["A"]),
        ("D", "E", 3, ["D", "E"]),
    ],
)
def test_shortest_path(source, target, cost, path):
    assert shortest_path(sample_graph(), source, target) == (cost, path)


def test_shortest_path_unreachable():
    with pytest.raises(NoPathError):
        shortest_path(sample_graph(), "E", "A")
    with pytest.raises(LookupError):
        shortest_path(sample_graph(), "A", "F")


def test_shortest_path_unknown_nodes():
    with pytest.raises(KeyError):
        shortest_path(sample_graph(), "A", "Z")
    with pytest.raises(KeyError):
        shortest_path(sample_graph(), "Z", "A")


def test_equal_cost_paths_keep_first_discovered():
    g = Graph.from_edges(
        [("s", "a", 1), ("s", "b", 1), ("a", "t", 1), ("b", "t", 1)]
    )
    assert shortest_path(g, "s", "t") == (2, ["s", "a", "t"])


def test_longer_hop_path_can_be_cheaper():
    g = Graph.from_edges(
        [("s", "t", 10), ("s", "a", 2), ("a", "b", 2), ("b", "c", 2), ("c", "t", 2)]
    )
    assert shortest_path(g, "s", "t") == (8, ["s", "a", "b", "c", "t"])
    g.add_edge("s", "t", 8)
    assert shortest_path(g, "s", "t") == (8, ["s", "t"])


def test_float_weights():
    g = Graph.from_edges([("a", "b", 0.5), ("b", "c", 0.25), ("a", "c", 1.0)])
    cost, path = shortest_path(g, "a", "c")
    assert cost == pytest.approx(0.75)
    assert path == ["a", "b", "c"]


def test_settle_order_visits_each_node_once():
    # "b" is first discovered via the expensive direct edge and later improved,
    # leaving a stale heap entry that must be skipped.
    g = Graph.from_edges([("s", "b", 10), ("s", "a", 1), ("a", "b", 1), ("b", "c", 1)])
    assert settle_order(g, "s") == ["s", "a", "b", "c"]
    assert settle_order(sample_graph(), "A") == ["A", "C", "B", "D", "E"]


def test_settle_order_ties_by_discovery():
    g = Graph.from_edges([("s", "y", 1), ("s", "x", 1), ("s", "z", 0)])
    assert settle_order(g, "s") == ["s", "z", "y", "x"]


def test_k_nearest():
    g = sample_graph()
    assert k_nearest(g, "A", 2) == [("C", 1), ("B", 3)]
    assert k_nearest(g, "A", 10) == [("C", 1), ("B", 3), ("D", 4), ("E", 7)]
    assert k_nearest(g, "A", 0) == []
    assert k_nearest(g, "A", 2, include_source=True) == [("A", 0), ("C", 1)]


def test_k_nearest_tie_break_by_insertion_order():
    g = Graph()
    for node in ["hub", "z", "m", "a"]:
        g.add_node(node)
    g.add_edge("hub", "a", 2)
    g.add_edge("hub", "m", 2)
    g.add_edge("hub", "z", 2)
    assert k_nearest(g, "hub", 3) == [("z", 2), ("m", 2), ("a", 2)]


def test_k_nearest_negative_k():
    with pytest.raises(ValueError):
        k_nearest(sample_graph(), "A", -1)


def test_eccentricity():
    g = sample_graph()
    assert eccentricity(g, "A") == math.inf
    g.remove_edge("A", "C")
    h = Graph.from_edges([("a", "b", 2), ("a", "c", 5), ("b", "c", 1)])
    assert eccentricity(h, "a") == 3
    single = Graph()
    single.add_node("only")
    assert eccentricity(single, "only") == 0
