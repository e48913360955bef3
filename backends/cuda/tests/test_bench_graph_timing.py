"""The CUDA benches' graph timing: how many calls a timed graph holds, and what a replay is divided by.

Every graph-timed row is a replay's time over the calls the graph holds, and each replay carries the gap
between its start event and the graph's first kernel. ``time_graph`` repeats a row's calls until the graph
covers ``GRAPH_MIN_US``, so that gap is under 1% of any row and of the copy it is compared with. These tests
stand in for the device (the capture, the warm-up estimate, the replay times), so they run without a GPU.
"""

import importlib.util
import pathlib
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture
def common(monkeypatch):
    """``cuda_bench_common`` with the device parts replaced: ``captured`` records the calls a graph holds,
    a replay lasts ``per_call_us`` a call, and the replays' times are the graph's length over the divisor."""
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location("cuda_bench_common", BENCH / "cuda_bench_common.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    graphs: list[list] = []
    module.per_call_us = 40.0

    def captured(calls):
        graphs.append(list(calls))
        return graphs[-1]

    monkeypatch.setattr(module, "captured", captured)
    monkeypatch.setattr(module, "warm_up", lambda g, ms: len(g) * module.per_call_us / 1e3)
    monkeypatch.setattr(module, "replay_times", lambda g, n, per: [len(g) * module.per_call_us / per] * n)
    module.graphs = graphs
    return module


def test_a_row_of_one_long_call_is_timed_in_a_graph_covering_the_minimum(common):
    """One 40 µs call (an RGDR row at B = 128 has one input set) is repeated 25 times: the graph covers
    1000 µs, and the replay is divided by the 25 calls it holds, so the per-call time is the call's."""
    call = object()
    assert common.time_graph([call]) == pytest.approx(40.0)
    assert common.graphs[-1] == [call] * 25


def test_the_sets_are_repeated_in_order_so_a_set_comes_back_only_after_every_other(common):
    sets = [object(), object(), object()]
    common.time_graph(sets)
    assert common.graphs[-1] == sets * 9  # 3 x 40 µs a pass: 9 passes reach 1000 µs


def test_a_graph_already_covering_the_minimum_is_not_repeated(common):
    common.per_call_us = 600.0
    sets = [object(), object()]
    assert common.time_graph(sets) == pytest.approx(600.0)
    assert common.graphs == [sets]


def test_repeats_are_capped_for_tiny_calls(common):
    common.per_call_us = 0.5
    common.time_graph([object()])
    assert len(common.graphs[-1]) == 64


def test_per_replay_keeps_the_measure_of_earlier_sessions(common):
    """``per_replay``: the sets once a graph, the replay divided by their count (what rows read until the
    fortieth session)."""
    sets = [object(), object()]
    assert common.time_graph(sets, per_replay=True) == pytest.approx(40.0)
    assert common.graphs == [sets]
