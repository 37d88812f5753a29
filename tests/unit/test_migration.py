"""The migration check's verdict (seed 004), on variables and losses built in memory."""

import numpy as np
import pytest

from launcher.errors import ConfigError
from launcher.verdict import migration


def _vars(*shapes, bump: float = 0.0):
    return [(f"v{i}", np.full(shape, 1.0 + bump, dtype=np.float32)) for i, shape in enumerate(shapes)]


def test_within_tolerance_is_equivalent():
    m = migration.check(_vars((3, 2), (2,)), _vars((3, 2), (2,), bump=1e-7), {1: 0.5}, {1: 0.5 + 1e-7}, 1e-6, 1e-6)
    assert (m.verdict, m.exit_code) == ("EQUIVALENT", 0)
    assert all(v.ok for v in m.variables) and m.losses == [(1, 0.5, 0.5 + 1e-7, True)]


def test_the_first_variable_out_of_tolerance_is_named_in_order():
    a = _vars((3, 2), (2,), (4,))
    b = _vars((3, 2), (2,), (4,))
    b[1] = ("v1", b[1][1] + 1e-3)
    b[2] = ("v2", b[2][1] + 1.0)
    m = migration.check(a, b, {}, {}, 1e-6, 1e-6)
    assert m.verdict == "NOT EQUIVALENT" and m.exit_code == 1
    assert m.problem.startswith("variable v1 / v1: max abs error 0.001")
    assert [v.ok for v in m.variables] == [True, False, False]


def test_a_missing_variable_is_named_and_the_rest_still_pair_by_shape():
    m = migration.check(_vars((784, 32), (32,), (32, 10), (10,)), _vars((784, 32), (32, 10)), {}, {}, 1e-6, 1e-6)
    assert m.problem == "variable v1 (32,) has no counterpart of that shape"
    assert [(v.name_a, v.name_b) for v in m.variables] == [("v0", "v0"), ("v2", "v1")]


def test_a_loss_out_of_tolerance_names_its_step():
    m = migration.check(_vars((2,)), _vars((2,)), {0: None, 1: 0.5, 2: 0.4}, {0: None, 1: 0.5, 2: 0.41}, 1e-6, 1e-6)
    assert m.problem == "step 2: loss 0.4 vs 0.41" and len(m.losses) == 2


def test_a_mapping_pairs_by_name(tmp_path):
    path = tmp_path / "map.json"
    path.write_text('[["v1", "v0"], ["v0", "v1"]]')
    a, b = _vars((2,), (3,)), _vars((3,), (2,))
    m = migration.check(a, b, {}, {}, 0, 0, migration.read_mapping(str(path)))
    assert m.verdict == "EQUIVALENT" and [v.shape for v in m.variables] == [(3,), (2,)]
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="--mapping"):
        migration.read_mapping(str(path))


def test_only_code_may_differ():
    diffs = [
        ("code.script_sha256", "a", "b"),
        ("config.train.script", "x", "y"),
        ("determinism.seed", 0, 1),
        ("determinism.sessions", [], [{}]),
        ("data.x.npz", "h1", "h2"),
    ]
    assert [d[0] for d in migration.blocking(diffs)] == ["determinism.seed", "data.x.npz"]
