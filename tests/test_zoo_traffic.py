"""The zoo's traffic mode (``benchmarks/zoo/run.py --traffic``): the shapes each model's traffic
draws, and the summary of a sequence of timed calls. What the calls take is measured, never
asserted: these check the harness's bookkeeping on made-up figures."""

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ZOO = Path(__file__).resolve().parents[1] / "benchmarks" / "zoo"

pytestmark = pytest.mark.skipif(not ZOO.is_dir(), reason="benchmarks/ is not beside the tests")


@pytest.fixture(scope="module")
def zoo() -> SimpleNamespace:
    """benchmarks/zoo/run.py and the catalog it imports, as modules. run.py puts its folders
    first on sys.path and imports ``catalog`` and ``common`` from them: both are undone once it
    is loaded, so that no other test imports benchmarks/' modules by chance."""
    path = list(sys.path)
    spec = importlib.util.spec_from_file_location("zoo_run", ZOO / "run.py")
    run = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(run)
        return SimpleNamespace(run=run, catalog=sys.modules["catalog"])
    finally:
        sys.path[:] = path
        for name in ("catalog", "common"):
            sys.modules.pop(name, None)


def test_each_model_draws_every_symbolic_dim_and_only_those(zoo) -> None:
    for model in zoo.catalog.MODELS:
        symbolic = {d for i in model.inputs for d in i.dims if isinstance(d, str)}
        assert set(model.traffic.dims) == symbolic, model.name


def test_the_shapes_drawn_are_distinct_in_range_capped_and_the_same_every_time(zoo) -> None:
    for model in zoo.catalog.MODELS:
        traffic = model.traffic
        shapes = traffic.draw(24)
        assert shapes == traffic.draw(24), model.name
        assert len(shapes) == min(24, traffic.calls or 24), model.name
        assert len({tuple(s.values()) for s in shapes}) == len(shapes), model.name
        for sizes in shapes:
            for name, d in traffic.dims.items():
                assert sizes[name] == d if isinstance(d, int) else sizes[name] in d, model.name


def test_a_distribution_smaller_than_the_count_gives_each_shape_once(zoo) -> None:
    traffic = zoo.catalog.Traffic({"batch": range(1, 4), "n": 5})
    shapes = traffic.draw(24)
    assert sorted(s["batch"] for s in shapes) == [1, 2, 3]
    assert all(s["n"] == 5 for s in shapes)


def test_the_summary_sets_the_first_call_apart_and_skips_failed_calls(zoo) -> None:
    def call(pass_name, index, relvm_ms, ort_ms):
        c = {"pass": pass_name, "index": index}
        if relvm_ms is not None:
            c["relvm_ms"] = relvm_ms
        return {**c, "ort_ms": ort_ms}

    calls = [call("new", 0, 100.0, 50.0), call("new", 1, 30.0, 10.0),
             call("new", 2, 10.0, 10.0), call("new", 3, None, 10.0),
             call("repeated", 0, 9.0, 8.0), call("repeated", 1, 10.0, 10.0),
             call("repeated", 2, 10.0, 10.0), call("repeated", 3, None, 10.0)]
    m = zoo.run.traffic_summary(calls)
    assert (m["relvm_first_ms"], m["ort_first_ms"]) == (100.0, 50.0)
    assert (m["new_calls"], m["repeated_calls"]) == (2, 2)
    assert (m["relvm_new_mean_ms"], m["relvm_new_median_ms"]) == (20.0, 20.0)
    assert m["ort_new_mean_ms"] == m["relvm_repeated_mean_ms"] == 10.0
    assert m["relvm_new_repeated"] == m["relvm_ort_new"] == 2.0
    assert m["ort_new_repeated"] == m["relvm_ort_repeated"] == 1.0
