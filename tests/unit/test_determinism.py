import pytest

from launcher.errors import DeterminismError
from launcher.job import determinism


def test_off_sets_nothing_but_records_the_seed():
    p = determinism.plan("off", 123)
    assert p.seed == 123
    assert p.env == {}
    assert not p.seed_everything and not p.op_determinism


def test_seeded_sets_hash_seed_before_start_and_seeds_everything():
    p = determinism.plan("seeded", 7)
    assert p.env == {"PYTHONHASHSEED": "7"}
    assert p.seed_everything and not p.op_determinism
    assert p.intra_op_threads is None


def test_strict_pins_everything():
    p = determinism.plan("strict", 3, intra_op_threads=1, inter_op_threads=2, onednn_opts=False)
    assert p.env == {
        "PYTHONHASHSEED": "3",
        "TF_DETERMINISTIC_OPS": "1",
        "TF_CUDNN_DETERMINISTIC": "1",
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "TF_ENABLE_ONEDNN_OPTS": "0",
    }
    assert p.op_determinism and p.seed_everything and p.deterministic_data
    assert (p.intra_op_threads, p.inter_op_threads) == (1, 2)
    assert p.jit_compile is False


def test_strict_refuses_unpinned_threads():
    with pytest.raises(DeterminismError, match="fixed intra_op_threads"):
        determinism.plan("strict", 0, None, 1)


def test_plan_round_trips_through_json_dict():
    p = determinism.plan("strict", 3, 1, 1, True)
    assert determinism.Plan.from_dict(p.to_dict()) == p


@pytest.mark.parametrize(
    "value,cores,expected", [(1, 64, 1), (4, 2, 4), ("auto", 8, 8), ("auto", None, 1), (None, 8, None)]
)
def test_resolve_threads(value, cores, expected):
    assert determinism.resolve_threads(value, cores) == expected


@pytest.mark.parametrize("value", [0, -1, "many", 1.5, True])
def test_resolve_threads_rejects(value):
    with pytest.raises(DeterminismError):
        determinism.resolve_threads(value, 4)


def _effective(plan, **over):
    eff = {
        "op_determinism": plan.op_determinism,
        "intra_op_threads": plan.intra_op_threads or 0,
        "inter_op_threads": plan.inter_op_threads or 0,
        "env": dict(plan.env),
        "graph_rewrites": dict(plan.graph_rewrites or {}),
    }
    eff.update(over)
    return eff


def test_verify_accepts_what_was_planned_and_judges_only_what_was_planned():
    strict = determinism.plan("strict", 1, 1, 1, False)
    assert determinism.verify(strict, _effective(strict)) is None
    with pytest.raises(DeterminismError, match=r"intra_op_threads=8 \(planned 1\)"):
        determinism.verify(strict, _effective(strict, intra_op_threads=8))
    seeded = determinism.plan("seeded", 1)  # no thread counts planned: TensorFlow's choice is not judged
    assert determinism.verify(seeded, _effective(seeded, intra_op_threads=8, inter_op_threads=4)) is None
    off = determinism.plan("off", 1)
    assert determinism.verify(off, _effective(off, op_determinism=True, env={"PYTHONHASHSEED": "3"})) is None


def test_verify_names_every_setting_that_did_not_take():
    p = determinism.plan("strict", 1, 1, 1, False)
    eff = _effective(p, op_determinism=False, intra_op_threads=2, env={**p.env, "PYTHONHASHSEED": None})
    with pytest.raises(DeterminismError) as info:
        determinism.verify(p, eff)
    text = str(info.value)
    assert "op determinism" in text and "intra_op_threads=2" in text and "PYTHONHASHSEED" in text
    assert len(info.value.problems) == 3
    assert info.value.problems == [
        "PYTHONHASHSEED=None (planned '1')",
        "op determinism is not enabled",
        "intra_op_threads=2 (planned 1)",
    ]
    assert text == "determinism settings did not take effect: " + "; ".join(info.value.problems)


def test_strict_turns_grappler_dependency_optimizer_off_and_verify_holds_it():
    """A Keras metric of a sum (keras-io's VAE) rounded otherwise in some processes while this pass
    ran (docs/determinism.md, "A metric's last bits"): strict and portable turn it off, seeded and off
    leave TensorFlow's default; a job whose pass is back on fails before training."""
    for level in ("strict", "portable"):
        p = determinism.plan(level, 1, 1, 1, True)
        assert p.graph_rewrites == {"dependency_optimization": False}
        on = {"dependency_optimization": None}  # never set: TensorFlow's default, on
        with pytest.raises(DeterminismError) as info:
            determinism.verify(p, _effective(p, graph_rewrites=on))
        assert info.value.problems == ["graph rewrite dependency_optimization=None (planned False)"]
        assert determinism.verify(p, _effective(p)) is None
    assert determinism.plan("seeded", 1).graph_rewrites is None and determinism.plan("off", 1).graph_rewrites is None


def test_tf_data_kept_in_order_though_a_dataset_asked_for_none_is_no_failure():
    """Op determinism keeps tf.data's order whatever a dataset asks: stricter than planned."""
    p = determinism.plan("strict", 1, 1, 1, False, deterministic_data=False)
    assert determinism.verify(p, _effective(p, deterministic_data=True)) is None
    xla = determinism.plan("strict", 1, 1, 1, False, jit_compile=False)
    with pytest.raises(DeterminismError, match=r"jit_compile=True \(planned False\)"):
        determinism.verify(xla, _effective(xla, jit_compile=True))  # XLA on is not stricter


def test_drawn_seeds_are_in_range_and_vary():
    seeds = {determinism.draw_seed() for _ in range(20)}
    assert len(seeds) > 1 and all(0 <= s < 2**31 for s in seeds)


def test_xla_and_tf_data_order_follow_the_config_else_the_level():
    strict = determinism.plan("strict", 0, 1, 1, False)
    assert (strict.jit_compile, strict.deterministic_data) == (False, True)
    xla = determinism.plan("strict", 0, 1, 1, False, jit_compile=True, deterministic_data=False)
    assert (xla.jit_compile, xla.deterministic_data) == (True, False)
    off = determinism.plan("off", 0)
    assert (off.jit_compile, off.deterministic_data) == (None, None)  # Keras' and tf.data's defaults
    assert determinism.plan("seeded", 0, jit_compile=True).jit_compile is True


def test_a_strict_run_that_leaves_most_of_a_big_machine_idle_says_so_once():
    note = determinism.idle_note("strict", 1, 64)
    assert note.startswith("[launch] note: strict pins 1 intra-op thread(s) on this 64-core machine")
    assert "determinism.intra_op_threads=auto" in note and "not comparable" in note and "\n" not in note
    assert determinism.idle_note("strict", 1, 2) is None  # a small machine: one of two cores is half of it
    assert determinism.idle_note("strict", 17, 64) is None  # more than a quarter of the machine in use
    assert determinism.idle_note("strict", "auto", 64) is None
    assert determinism.idle_note("seeded", None, 64) is None


READ_BACK = """
import json
import tensorflow as tf
from launcher.errors import DeterminismError
from launcher.job import determinism
out = {}
p = determinism.plan("strict", 0, 1, 1, False, deterministic_data=False)
determinism.apply(p)
out["applied"] = {k: determinism.read_back(p)[k] for k in ("deterministic_data", "jit_compile", "op_determinism")}
tf.config.optimizer.set_jit("autoclustering")  # the job's own code turns XLA's auto-clustering on
effective = determinism.read_back(p)
out["user_jit"] = effective["jit_compile"]
try:
    determinism.verify(p, effective)
except DeterminismError as exc:
    out["refused"] = str(exc)
out["strict"] = {k: v for k, v in effective.items() if k not in ("env", "keras", "sessions")}
out["strict_env"] = sorted(effective["env"])
out["keras"] = effective["keras"]
out["sessions"] = effective["sessions"]
off = determinism.read_back(determinism.plan("off", 3, random_ops="constant"))
out["off"] = {k: off[k] for k in ("level", "seed", "random_ops")}
out["off_rewrites"] = "graph_rewrites" in off
out["off_env"] = sorted(off["env"])
portable = determinism.plan("portable", 4, 1, 1, False)
portable_read = determinism.read_back(portable)
out["portable_env"] = sorted(portable_read["env"])
out["portable_caps"] = sorted(portable.env)
out["portable_isa"] = sorted(portable_read["isa_baseline"])
print(json.dumps(out))
"""


def test_read_back_asks_tensorflow_what_took_effect_not_the_plan(tmp_path):
    """XLA and tf.data's order as TensorFlow reports them (one process: TensorFlow is imported,
    nothing trains). Op determinism keeps tf.data in order even where a dataset asks for none."""
    import json
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    planned = determinism.plan("strict", 0, 1, 1, False, deterministic_data=False).env  # set before start
    env = {
        **os.environ,
        **planned,
        "PYTHONPATH": str(REPO),
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "KERAS_HOME": str(tmp_path),
    }  # Keras' defaults, whatever ~/.keras/keras.json says
    done = subprocess.run([sys.executable, "-c", READ_BACK], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["applied"] == {"deterministic_data": True, "jit_compile": False, "op_determinism": True}
    assert out["user_jit"] is True
    assert out["refused"] == "determinism settings did not take effect: jit_compile=True (planned False)"
    # Every setting read back, under its name: what the fingerprint records and verify judges.
    assert out["strict"] == {
        "level": "strict",
        "seed": 0,
        "op_determinism": True,
        "intra_op_threads": 1,
        "inter_op_threads": 1,
        "deterministic_data": True,
        "jit_compile": True,
        "random_ops": None,
        "graph_rewrites": {"dependency_optimization": False},
    }
    names = sorted(
        [
            "PYTHONHASHSEED",
            "TF_DETERMINISTIC_OPS",
            "TF_CUDNN_DETERMINISTIC",
            "CUBLAS_WORKSPACE_CONFIG",
            "TF_ENABLE_ONEDNN_OPTS",
        ]
    )
    assert out["strict_env"] == names
    assert out["off"] == {"level": "off", "seed": 3, "random_ops": "constant"}
    assert out["off_rewrites"] is False  # nothing planned, nothing recorded: TensorFlow's defaults
    assert out["off_env"] == names  # an off run records these unset, rather than not at all
    assert out["portable_env"] == sorted(set(names) | set(out["portable_caps"])) != names  # and the ISA caps
    assert out["portable_isa"] == ["name", "numpy_dispatch", "openblas_cores", "supported_by_cpu"]
    assert out["keras"] == {
        "backend": "tensorflow",
        "floatx": "float32",
        "epsilon": 1e-07,
        "image_data_format": "channels_last",
    }
    assert out["sessions"] == []  # no TF1 session was made


@pytest.mark.parametrize("random_ops", [None, "num_random_ops", "constant"])
def test_every_random_ops_mode_is_planned(random_ops):
    assert determinism.plan("strict", 1, 1, 1, False, random_ops=random_ops).random_ops == random_ops
    assert determinism.plan("off", 1, random_ops=random_ops).random_ops == random_ops


# The whole plan of each level, field by field: what the bootstrap is told to do is the promise of
# docs/determinism.md's table, so every field is asserted, not only the ones a level changes.
STRICT_ENV = {
    "PYTHONHASHSEED": "5",
    "TF_DETERMINISTIC_OPS": "1",
    "TF_CUDNN_DETERMINISTIC": "1",
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
}
# Written out, not read from determinism.STRICT_GRAPH_REWRITES: the plan is held to this table.
GRAPH_REWRITES = {"dependency_optimization": False}


@pytest.mark.parametrize(
    "level,args,kwargs,expected",
    [
        ("off", (5,), {}, determinism.Plan(level="off", seed=5)),
        (
            "off",
            (5, 2, 3, True),
            {"jit_compile": True, "deterministic_data": False, "random_ops": "constant"},
            determinism.Plan(
                level="off",
                seed=5,
                env={"TF_ENABLE_ONEDNN_OPTS": "1"},
                jit_compile=True,
                deterministic_data=False,
                random_ops="constant",
            ),
        ),
        (
            "seeded",
            (5,),
            {},
            determinism.Plan(level="seeded", seed=5, env={"PYTHONHASHSEED": "5"}, seed_everything=True),
        ),
        (
            "seeded",
            (5, 2, 3, False),
            {"jit_compile": True},
            determinism.Plan(
                level="seeded",
                seed=5,
                env={"PYTHONHASHSEED": "5", "TF_ENABLE_ONEDNN_OPTS": "0"},
                seed_everything=True,
                intra_op_threads=2,
                inter_op_threads=3,
                jit_compile=True,
            ),
        ),
        (
            "strict",
            (5, 2, 3),
            {},
            determinism.Plan(
                level="strict",
                seed=5,
                env=STRICT_ENV,
                seed_everything=True,
                op_determinism=True,
                intra_op_threads=2,
                inter_op_threads=3,
                deterministic_data=True,
                jit_compile=False,
                graph_rewrites=GRAPH_REWRITES,
            ),
        ),
        (
            "strict",
            (5, 1, 1, True),
            {"jit_compile": True, "deterministic_data": False, "random_ops": "num_random_ops"},
            determinism.Plan(
                level="strict",
                seed=5,
                env={**STRICT_ENV, "TF_ENABLE_ONEDNN_OPTS": "1"},
                seed_everything=True,
                op_determinism=True,
                intra_op_threads=1,
                inter_op_threads=1,
                deterministic_data=False,
                jit_compile=True,
                random_ops="num_random_ops",
                graph_rewrites=GRAPH_REWRITES,
            ),
        ),
        # The NumPy the job imports names its dispatch targets (2.4 renamed them): both namings, so that one
        # of them is not the NumPy installed here and the plan must follow the version it is given.
        *[
            (
                "portable",
                (5, 1, 1, False),
                {"numpy_version": version},
                determinism.Plan(
                    level="portable",
                    seed=5,
                    env={**STRICT_ENV, "TF_ENABLE_ONEDNN_OPTS": "0", **determinism.isa_caps("x86-64-v3", version)},
                    seed_everything=True,
                    op_determinism=True,
                    intra_op_threads=1,
                    inter_op_threads=1,
                    deterministic_data=True,
                    jit_compile=False,
                    isa_baseline="x86-64-v3",
                    graph_rewrites=GRAPH_REWRITES,
                ),
            )
            for version in ("2.4.0", "1.26.4")
        ],
    ],
)
def test_each_levels_plan_is_exactly_its_table_row(level, args, kwargs, expected):
    assert determinism.plan(level, *args, **kwargs) == expected


def test_a_plan_the_config_did_not_check_is_refused_by_name():
    """The bootstrap's plan refuses on its own what config.validate would have (a job.json written by
    hand, an older launcher's config): a level, a random_ops mode, threads left open."""
    with pytest.raises(DeterminismError) as info:
        determinism.plan("strictest", 0, 1, 1)
    assert str(info.value) == "unknown determinism level 'strictest'; choose one of off, seeded, strict, portable"
    with pytest.raises(DeterminismError) as info:
        determinism.plan("strict", 0, 1, 1, random_ops="sometimes")
    assert str(info.value) == "determinism.random_ops must be one of None, num_random_ops, constant, got 'sometimes'"
    for level in ("strict", "portable"):
        with pytest.raises(DeterminismError) as info:
            determinism.plan(level, 0, 1, None)
        assert str(info.value) == f"{level} determinism needs fixed intra_op_threads and inter_op_threads"
