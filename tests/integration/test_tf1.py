"""TF1 graph-mode code under the bootstrap, and seed 004's migration check (real runs).

``scripts/tf1_mlp.py`` is a TF1-style script (graph mode, placeholders, ``get_variable``,
dropout, a TF1 optimizer, its own ``ConfigProto``, a ``Session`` loop) that runs without
the launcher; ``scripts/tf2_port.py`` is its TF2 port.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import q, run_dir_of

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parent / "scripts"
MIGRATION = ("determinism.random_ops=num_random_ops", "train.save_weights=true", "determinism.trace_every=1")


def _run(launch, store: Path, script: Path, *args: str, overrides: tuple[str, ...] = ()) -> Path:
    done = launch(
        "train=script",
        f"train.script={q(script)}",
        f"train.args=[{','.join(map(q, args))}]",
        f"store.root={q(store)}",
        *overrides,
    )
    return run_dir_of(done)


@pytest.mark.parametrize("level", ["strict", "seeded"])
def test_a_tf1_graph_mode_script_reproduces_under_the_bootstrap(launch, store, mnist_npz, level):
    args = (str(mnist_npz), "20", "adam", "0.2")  # with dropout: a random op every step
    a = _run(launch, store, SCRIPTS / "tf1_mlp.py", *args, overrides=(f"determinism={level}",))
    b = _run(launch, store, SCRIPTS / "tf1_mlp.py", *args, overrides=(f"determinism={level}",))
    result = json.loads((a / "result.json").read_text())
    assert result["weights_sha256"] and result["observed"]["session_variables"] == 4
    assert set(result["layer_sha256"]) == {"w1", "b1", "w2", "b2"}
    fp = json.loads((a / "fingerprint.json").read_text())
    assert fp["determinism"]["sessions"] == [{"intra_op_threads": 1, "inter_op_threads": 1}]  # its own ConfigProto
    trace = [json.loads(line) for line in (a / "trace.jsonl").read_text().splitlines()]
    assert [p["step"] for p in trace] == [0, 10, 20] and trace[-1]["weights"] == result["weights_sha256"]
    assert [name for name, _ in trace[0]["layers"]] == ["w1", "b1", "w2", "b2"]  # creation order
    done = launch("compare", a, b)
    assert done.returncode == 0, done.stdout


def test_a_tf2_port_is_equivalent_and_a_wrong_port_is_not(launch, store, mnist_npz, tmp_path):
    tf1 = _run(launch, store, SCRIPTS / "tf1_mlp.py", str(mnist_npz), "5", overrides=MIGRATION)
    port = _run(launch, store, SCRIPTS / "tf2_port.py", str(mnist_npz), "5", overrides=MIGRATION)
    done = launch("compare", tf1, port, "--migration", "--tolerance", "1e-6,1e-6")
    assert done.returncode == 0, done.stdout
    assert done.stdout.startswith("EQUIVALENT: 4 variables and 5 steps' losses within rtol=1e-06, atol=1e-06")
    # Deliberately wrong ports: their code differs from the right port's (nothing else does).
    source = (SCRIPTS / "tf2_port.py").read_text()
    for variant, named in (("tanh", "variable w1 / sequential/dense/kernel"), ("no-bias", "variable b1 (32,)")):
        wrong = tmp_path / f"tf2_port_{variant}.py"
        wrong.write_text(source.replace('else "correct"', f'else "{variant}"'))
        run = _run(launch, store, wrong, str(mnist_npz), "5", overrides=MIGRATION)
        done = launch("compare", tf1, run, "--migration", "--tolerance", "1e-6,1e-6")
        assert done.returncode == 1, done.stdout
        assert done.stdout.startswith(f"NOT EQUIVALENT (rtol=1e-06, atol=1e-06): {named}"), done.stdout
    # Anything besides code refuses, as any comparison does.
    other_seed = _run(launch, store, SCRIPTS / "tf2_port.py", str(mnist_npz), "5", overrides=(*MIGRATION, "+seed=1"))
    done = launch("compare", tf1, other_seed, "--migration", "--tolerance", "1e-6,1e-6")
    assert done.returncode == 3 and "determinism.seed" in done.stdout, done.stdout
