"""The comparison verdicts, on run records built in memory (no training)."""

import copy
from pathlib import Path

import pytest

from launcher.errors import ConfigError
from launcher.verdict import compare
from tests.unit.test_fingerprint import _fp


def _record(**over):
    rec = compare.RunRecord(
        path=Path("/runs/a"),
        fingerprint=_fp(),
        config={
            "train": {"name": "mnist", "epochs": 2},
            "determinism": {"intra_op_threads": 1},
            "seed": 0,
            "store": {"root": "/a"},
        },
        metrics=[{"epoch": 1, "loss": 0.5}, {"epoch": 2, "loss": 0.25}],
        result={
            "weights_sha256": "w",
            "layer_sha256": {"conv1": "c1", "logits": "l1"},
            "final_metrics": {"loss": 0.25},
            "outputs": {},
        },
    )
    for key, value in over.items():
        setattr(rec, key, value)
    return rec


def test_identical():
    c = compare.decide(_record(), _record(path=Path("/elsewhere/b")))
    assert (c.verdict, c.exit_code) == ("IDENTICAL", 0)


def test_store_paths_do_not_matter():
    b = _record()
    b.config = {**b.config, "store": {"root": "/b"}}
    assert compare.decide(_record(), b).verdict == "IDENTICAL"


def test_different_names_the_first_epoch_and_the_layers():
    b = _record()
    b.metrics = [{"epoch": 1, "loss": 0.5}, {"epoch": 2, "loss": 0.2500001}]
    b.result = {**b.result, "weights_sha256": "x", "layer_sha256": {"conv1": "c1", "logits": "l2"}}
    c = compare.decide(_record(), b)
    assert (c.verdict, c.exit_code, c.first_differing_epoch, c.differing_layers) == ("DIFFERENT", 1, 2, ["logits"])
    text = compare.report(c, Path("a"), Path("b"))
    assert "first differing epoch: 2" in text and "logits" in text


def test_refused_shows_config_fields_not_a_hash():
    b = _record()
    b.fingerprint = copy.deepcopy(b.fingerprint)
    b.fingerprint["config_sha256"] = "other"
    b.config = {**b.config, "determinism": {"intra_op_threads": 2}}
    c = compare.decide(_record(), b)
    assert (c.verdict, c.exit_code) == ("REFUSED", 3)
    assert c.differences == [("config.determinism.intra_op_threads", 1, 2)]
    forced = compare.decide(_record(), b, allow_mismatch=True)
    assert (forced.verdict, forced.exit_code) == ("NOT COMPARABLE", 3)
    assert forced.notes == ["forced: results are bitwise equal"]


def test_runs_of_different_tasks_are_bad_input():
    b = _record()
    b.config = {**b.config, "train": {"name": "custom"}}
    with pytest.raises(ConfigError, match="different tasks"):
        compare.decide(_record(), b)


def _other_tensorflow(metric=0.25):
    b = _record()
    b.fingerprint = copy.deepcopy(b.fingerprint)
    b.fingerprint["software"]["tensorflow"] = "2.20.0"
    b.metrics = [{"epoch": 1, "loss": 0.5}, {"epoch": 2, "loss": metric}]
    return b


def test_tolerance_admits_a_software_migration_but_never_says_identical():
    c = compare.decide_equivalent(_record(), _other_tensorflow(0.2500001), rtol=1e-5, atol=0)
    assert (c.verdict, c.exit_code) == ("EQUIVALENT", 0)
    c = compare.decide_equivalent(_record(), _other_tensorflow(0.26), rtol=1e-5, atol=0)
    assert (c.verdict, c.exit_code) == ("NOT EQUIVALENT", 1)
    assert any("epoch 2: loss" in note for note in c.notes)


def test_tolerance_still_refuses_other_differences():
    b = _other_tensorflow()
    b.fingerprint["determinism"] = {**b.fingerprint["determinism"], "intra_op_threads": 4}
    c = compare.decide_equivalent(_record(), b, rtol=1e-5, atol=0)
    assert c.verdict == "REFUSED" and [d[0] for d in c.differences] == ["determinism.intra_op_threads"]


@pytest.mark.parametrize("text", ["1e-5", "a,b", "-1,0", ""])
def test_bad_tolerance(text):
    with pytest.raises(ConfigError):
        compare.parse_tolerance(text)


def _steps(split_at=None):
    """A three-point trace; from ``split_at`` on, layer logits differs."""
    points = []
    for step in (0, 5, 10):
        logits = "l2" if split_at is not None and step >= split_at else "l1"
        points.append(
            {
                "step": step,
                "epoch": 1,
                "loss": 0.5,
                "weights": f"w{step}{logits}",
                "layers": [["conv1", "c1"], ["logits", logits]],
            }
        )
    return points


def test_identical_runs_agree_at_every_traced_step():
    c = compare.decide(_record(steps=_steps()), _record(steps=_steps()))
    assert c.verdict == "IDENTICAL" and c.divergence.common_steps == 3
    first = compare.report(c, Path("a"), Path("b")).splitlines()[0]
    assert first == "IDENTICAL: weights, 2 epochs' metrics and 3 traced steps are bitwise equal"


def test_runs_that_recorded_nothing_are_nothing_compared_never_identical():
    empty = {"weights_sha256": None, "final_metrics": {}, "outputs": {}}
    a, b = _record(metrics=[], result=dict(empty)), _record(metrics=[], result=dict(empty))
    c = compare.decide(a, b)
    assert (c.verdict, c.exit_code) == ("NOTHING COMPARED", 6)
    assert compare.report(c, Path("a"), Path("b")).startswith("NOTHING COMPARED")
    # One recorded output file is something compared, and says so.
    a.result["outputs"] = b.result["outputs"] = {"model.npy": "h"}
    c = compare.decide(a, b)
    assert c.verdict == "IDENTICAL" and c.compared == ["1 output file"]
    # Something on one side only is a difference, not "nothing".
    b.result["weights_sha256"] = "w"
    assert compare.decide(a, b).verdict == "DIFFERENT"


def test_a_trace_that_splits_makes_runs_different_and_names_step_and_layer():
    c = compare.decide(_record(steps=_steps()), _record(steps=_steps(split_at=5)))
    assert (c.verdict, c.divergence.step, c.divergence.layer) == ("DIFFERENT", 5, "logits")
    assert "first diverging step: 5 (epoch 1), equal at step 0" in compare.report(c, Path("a"), Path("b"))


def test_forced_comparison_of_different_keys_shows_where_the_bits_split():
    b = _record(steps=_steps(split_at=10))
    b.fingerprint = copy.deepcopy(b.fingerprint)
    b.fingerprint["determinism"] = {**b.fingerprint["determinism"], "intra_op_threads": 2}
    b.result = {**b.result, "weights_sha256": "x"}
    c = compare.decide(_record(steps=_steps()), b, allow_mismatch=True)
    assert (c.verdict, c.equal, c.divergence.step) == ("NOT COMPARABLE", False, 10)
    text = compare.report(c, Path("a"), Path("b"))
    assert text.startswith("NOT COMPARABLE (forced: results differ)")
    assert "first diverging step: 10" in text and "first differing layer in model order: logits" in text


def test_final_layers_are_listed_in_model_order():
    a = _record(
        steps=[{"step": 0, "epoch": 0, "loss": None, "weights": "w", "layers": [["zeta", "1"], ["alpha", "2"]]}]
    )
    b = _record(steps=a.steps)
    a.result = {**a.result, "layer_sha256": {"alpha": "a", "zeta": "z"}}
    b.result = {**b.result, "weights_sha256": "x", "layer_sha256": {"alpha": "b", "zeta": "y"}}
    assert compare.decide(a, b).differing_layers == ["zeta", "alpha"]


def test_runs_whose_loss_became_nan_alike_are_identical():
    a, b = _record(), _record()
    for rec in (a, b):  # parsed separately, as from two metrics.jsonl files: distinct nan objects
        rec.metrics = [{"epoch": 1, "loss": float("nan")}]
        rec.result = {**rec.result, "final_metrics": {"loss": float("nan")}}
    assert compare.decide(a, b).verdict == "IDENTICAL"


# ---------------------------------------------------------------- everything recorded is compared (issue 17)
def test_output_files_that_differ_make_runs_different():
    a, b = _record(), _record()
    a.result = {**a.result, "outputs": {"model.npy": "h1", ".state": "s"}}
    b.result = {**b.result, "outputs": {"model.npy": "h1", ".state": "s2"}}
    c = compare.decide(a, b)
    assert (c.verdict, c.exit_code, c.equal) == ("DIFFERENT", 1, False)
    b.result["outputs"] = {"model.npy": "h1"}  # a file only one run wrote
    assert compare.decide(a, b).verdict == "DIFFERENT"
    b.result["outputs"] = dict(a.result["outputs"])
    c = compare.decide(a, b)
    assert c.verdict == "IDENTICAL" and "2 output files" in c.compared


def test_final_metrics_that_differ_make_runs_different():
    a, b = _record(metrics=[]), _record(metrics=[])
    b.result = {**b.result, "final_metrics": {"loss": 0.25000000000000006}}
    c = compare.decide(a, b)
    assert (c.verdict, c.exit_code) == ("DIFFERENT", 1)
    b.result["final_metrics"] = {"loss": 0.25}
    c = compare.decide(a, b)
    assert c.verdict == "IDENTICAL" and c.compared == ["weights", "final metrics"]
    # With per-epoch metrics the final ones are not listed twice, but still compared.
    a, b = _record(), _record()
    b.result = {**b.result, "final_metrics": {"loss": 0.26}}
    assert compare.decide(a, b).verdict == "DIFFERENT"
    assert compare.compared_items(a, a) == ["weights", "2 epochs' metrics"]


def test_a_metric_epoch_only_one_run_has_is_a_difference():
    a, b = _record(), _record()
    b.metrics = b.metrics[:1]
    c = compare.decide(a, b)
    assert (c.verdict, c.first_differing_epoch) == ("DIFFERENT", 2)
    assert compare.compared_items(a, b) == ["weights", "1 epoch's metrics"]


def test_weights_alone_or_layers_alone_make_runs_different():
    a, b = _record(), _record()
    b.result = {**b.result, "weights_sha256": "other"}
    c = compare.decide(a, b)
    assert (c.verdict, c.differing_layers, c.first_differing_epoch) == ("DIFFERENT", [], None)
    b = _record()
    b.result = {**b.result, "layer_sha256": {"conv1": "c1", "logits": "l2"}}
    assert compare.decide(a, b).differing_layers == ["logits"]


def test_a_run_with_no_weights_says_what_was_compared():
    a, b = _record(), _record()
    for r in (a, b):
        r.result = {**r.result, "weights_sha256": None}
    c = compare.decide(a, b)
    assert c.verdict == "IDENTICAL" and c.compared == ["2 epochs' metrics"]
    assert c.notes == ["no weights were recorded: compared what is listed above"]
    text = compare.report(c, Path("a"), Path("b"))
    assert text.splitlines() == [
        "IDENTICAL: 2 epochs' metrics are bitwise equal",
        "  no weights were recorded: compared what is listed above",
    ]


def test_recorded_anything_counts_each_kind_of_result():
    empty = _record(metrics=[], result={"weights_sha256": None, "final_metrics": {}, "outputs": {}})
    assert not compare.recorded_anything(empty)
    for change in (
        {"metrics": [{"epoch": 1}]},
        {"steps": _steps()},
        {"result": {"weights_sha256": "w"}},
        {"result": {"outputs": {"f": "h"}}},
        {"result": {"final_metrics": {"loss": 1.0}}},
    ):
        assert compare.recorded_anything(_record(**{"metrics": [], "result": {}, **change})), change


def test_a_single_traced_step_and_one_output_file_are_named_in_the_singular():
    step = _steps()[:1]
    a = _record(metrics=[], steps=step, result={"outputs": {"f": "h"}})
    assert compare.compared_items(a, _record(metrics=[], steps=step, result={"outputs": {"f": "h"}})) == [
        "1 output file",
        "1 traced step",
    ]


@pytest.mark.parametrize(
    ("result", "steps", "line"),
    [
        ({"outputs": {"f": "h"}}, [], "IDENTICAL: 1 output file is bitwise equal"),
        ({}, "one", "IDENTICAL: 1 traced step is bitwise equal"),
        ({"outputs": {"f": "h", "g": "i"}}, [], "IDENTICAL: 2 output files are bitwise equal"),
        ({"weights_sha256": "w"}, [], "IDENTICAL: weights are bitwise equal"),
        ({"outputs": {"f": "h"}}, "one", "IDENTICAL: 1 output file and 1 traced step are bitwise equal"),
    ],
)
def test_identicals_line_agrees_in_number_with_what_was_compared(result, steps, line):
    steps = _steps()[:1] if steps == "one" else steps
    a, b = (_record(metrics=[], steps=steps, result=dict(result)) for _ in range(2))
    c = compare.decide(a, b)
    assert compare.report(c, Path("a"), Path("b")).splitlines()[0] == line


# ---------------------------------------------------------------- --tolerance reads the weights (issue 17)
def _weights_file(path: Path, **arrays) -> Path:
    import h5py

    with h5py.File(path, "w") as f:
        group = f.create_group("layers").create_group("dense").create_group("vars")
        for name, value in arrays.items():
            group.create_dataset(name, data=value)
    return path


def _with_weights(tmp_path: Path, name: str, **arrays) -> compare.RunRecord:
    run_dir = tmp_path / name
    run_dir.mkdir()
    _weights_file(run_dir / "model.weights.h5", **arrays)
    rec = _other_tensorflow() if name == "b" else _record()
    rec.path = run_dir
    rec.result = {**rec.result, "weights_file": "model.weights.h5"}
    return rec


def test_read_weights_reads_every_array_of_the_file_by_path(tmp_path):
    import numpy as np

    rec = _with_weights(tmp_path, "a", **{"0": np.ones((2, 3), np.float32), "1": np.zeros(3, np.float32)})
    got = compare.read_weights(rec)
    assert sorted(got) == ["layers/dense/vars/0", "layers/dense/vars/1"]
    assert got["layers/dense/vars/0"].shape == (2, 3) and got["layers/dense/vars/1"].tolist() == [0, 0, 0]
    assert compare.read_weights(_record()) == {}  # no weights file: nothing to read


def test_tolerance_compares_the_weights_themselves(tmp_path):
    import numpy as np

    kernel = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    a = _with_weights(tmp_path, "a", **{"0": kernel, "1": np.zeros(3, np.float32)})
    near = _with_weights(tmp_path, "b", **{"0": kernel + np.float32(1e-7), "1": np.zeros(3, np.float32)})
    assert compare.decide_equivalent(a, near, rtol=0, atol=1e-6).verdict == "EQUIVALENT"
    c = compare.decide_equivalent(a, near, rtol=0, atol=1e-9)
    assert (c.verdict, c.exit_code) == ("NOT EQUIVALENT", 1)
    assert c.notes == ["weight layers/dense/vars/0: max abs difference 1.19e-07"]


def test_tolerance_reports_weights_of_another_shape_or_name(tmp_path):
    import numpy as np

    a = _with_weights(tmp_path, "a", **{"0": np.zeros((2, 3), np.float32)})
    b = _with_weights(tmp_path, "b", **{"0": np.zeros((3, 2), np.float32), "extra": np.zeros(1, np.float32)})
    c = compare.decide_equivalent(a, b, rtol=1, atol=1)
    assert c.verdict == "NOT EQUIVALENT"
    assert c.notes == ["the runs' weights have different names", "weight layers/dense/vars/0: shape (2, 3) vs (3, 2)"]


def test_tolerance_compares_every_epoch_and_every_metric():
    b = _other_tensorflow()
    b.metrics = [{"epoch": 1, "loss": 0.5}]
    c = compare.decide_equivalent(_record(), b, rtol=1, atol=1)
    assert c.notes == ["epoch counts differ: 2 vs 1"]
    b.metrics = [{"epoch": 1, "loss": 0.5}, {"epoch": 2, "loss": 0.25, "accuracy": 0.9}]
    c = compare.decide_equivalent(_record(), b, rtol=1, atol=1)
    assert c.notes == ["epoch 2: accuracy None vs 0.9"]
    b.metrics = [{"epoch": 1, "loss": 0.5 + 2e-6}, {"epoch": 2, "loss": 0.25}]
    assert compare.decide_equivalent(_record(), b, rtol=0, atol=1e-6).notes == ["epoch 1: loss 0.5 vs 0.500002"]
    assert compare.decide_equivalent(_record(), b, rtol=0, atol=3e-6).verdict == "EQUIVALENT"
    assert compare.decide_equivalent(_record(), b, rtol=1e-5, atol=0).verdict == "EQUIVALENT"  # relative


def test_tolerance_admits_the_launcher_version_and_software_but_not_code_or_config():
    b = _record()
    b.fingerprint = copy.deepcopy(b.fingerprint)
    b.fingerprint["code"]["launcher_modules"] = {"launcher.job.bootstrap": "b2"}
    b.fingerprint["software"]["numpy"] = "2.5.0"
    c = compare.decide_equivalent(_record(), b, rtol=0, atol=0)
    assert c.verdict == "EQUIVALENT"
    assert [d[0] for d in c.differences] == ["software.numpy", "code.launcher.launcher.job.bootstrap"]
    b.fingerprint["code"]["modules"]["helper"]["sha256"] = "h2"
    c = compare.decide_equivalent(_record(), b, rtol=0, atol=0)
    assert c.verdict == "REFUSED" and [d[0] for d in c.differences] == ["code.modules.helper"]
    assert c.notes == ["--tolerance admits differences in software only"]
    forced = compare.decide_equivalent(_record(), b, rtol=0, atol=0, allow_mismatch=True)
    assert forced.verdict == "EQUIVALENT" and len(forced.differences) == 3


def test_tolerance_never_says_equivalent_about_what_it_could_not_compare():
    """Script runs once kept no weight values: weights that differ by hash were called EQUIVALENT."""
    b = _other_tensorflow(0.25)
    b.result = {**b.result, "weights_sha256": "other"}
    c = compare.decide_equivalent(_record(), b, rtol=1, atol=1)
    assert (c.verdict, c.exit_code) == ("NOT EQUIVALENT", 1)
    assert any("differ by hash and their values were not kept" in note for note in c.notes)
    empty_a, empty_b = _record(metrics=[]), _record(metrics=[])
    c = compare.decide_equivalent(empty_a, empty_b, rtol=1, atol=1)
    assert c.verdict == "NOT EQUIVALENT" and any("nothing to compare" in note for note in c.notes)


def test_tolerance_compares_a_scripts_kept_variables(tmp_path):
    import numpy as np

    for name, value in (("a", 1.0), ("b", 1.0 + 1e-7)):
        (tmp_path / name).mkdir()
        np.savez(tmp_path / name / "weights.npz", **{"0000 dense/kernel": np.full((2, 2), value, np.float32)})
    a = _record(path=tmp_path / "a", metrics=[])
    b = _record(path=tmp_path / "b", metrics=[])
    for rec, digest in ((a, "wa"), (b, "wb")):
        rec.result = {**rec.result, "weights_sha256": digest, "weights_file": "weights.npz"}
    assert compare.decide_equivalent(a, b, rtol=1e-5, atol=0).verdict == "EQUIVALENT"
    assert compare.decide_equivalent(a, b, rtol=0, atol=0).verdict == "NOT EQUIVALENT"


def test_runs_whose_reads_were_not_fully_observed_are_never_called_a_determinism_bug():
    """A program the job started read what the key may not hold: differing results are NOT
    COMPARABLE, naming it; equal results are still IDENTICAL (the bits were compared)."""
    gap = "the job ran 1 program(s) whose reads are seen only for ...: sh -c 'cat /data/x'"
    a, b = _record(), _record(path=Path("/runs/b"))
    a.fingerprint = {**a.fingerprint, "observation": {"children": [["sh", "-c", "cat /data/x"]], "gaps": [gap]}}
    assert compare.decide(a, b).verdict == "IDENTICAL"
    b.result = {**b.result, "weights_sha256": "x", "layer_sha256": {"conv1": "c1", "logits": "l2"}}
    c = compare.decide(a, b)
    assert (c.verdict, c.exit_code) == ("NOT COMPARABLE", 3)
    text = compare.report(c, Path("a"), Path("b"))
    assert "not fully observed" in text and "cat /data/x" in text and "determinism bug" not in text
    a.fingerprint["observation"]["gaps"] = []
    assert compare.decide(a, b).verdict == "DIFFERENT"


def test_runs_that_trained_alike_and_differ_only_in_output_files_say_so():
    a, b = _record(), _record()
    a.result = {**a.result, "outputs": {"model.npy": "h1", "log.txt": "t1"}}
    b.result = {**b.result, "outputs": {"model.npy": "h1", "log.txt": "t2"}}
    c = compare.decide(a, b)
    assert c.verdict == "DIFFERENT" and c.notes == [f"{compare.ONLY_OUTPUTS}: outputs/log.txt"]
    b.result["weights_sha256"] = "w2"  # the training differs too: no such note
    assert not any(n.startswith(compare.ONLY_OUTPUTS) for n in compare.decide(a, b).notes)


def test_trained_alike_needs_every_training_record_bitwise_equal():
    from launcher.record.trace import Divergence

    a, b = _record(), _record()
    assert compare.trained_alike(a, b, None, [], None)
    assert compare.trained_alike(a, b, None, [], Divergence(common_steps=3))  # traces equal at every step
    assert not compare.trained_alike(a, b, None, [], Divergence(common_steps=3, step=2))
    assert not compare.trained_alike(a, b, 1, [], None)  # an epoch's metrics differ
    assert not compare.trained_alike(a, b, None, ["conv1"], None)  # a layer's weights differ
    for field, other in (("weights_sha256", "w2"), ("final_metrics", {"loss": 0.5})):
        changed = _record()
        changed.result = {**changed.result, field: other}
        assert not compare.trained_alike(a, changed, None, [], None), field
        assert not compare.trained_alike(changed, a, None, [], None), field
    minus_zero = _record()
    minus_zero.result = {**minus_zero.result, "final_metrics": {"loss": -0.0}}
    zero = _record()
    zero.result = {**zero.result, "final_metrics": {"loss": 0.0}}
    assert not compare.trained_alike(minus_zero, zero, None, [], None)  # bit for bit: -0.0 is not 0.0


def _schema_1(rec):
    rec.fingerprint = copy.deepcopy(rec.fingerprint)
    rec.fingerprint["schema"] = 1
    del rec.fingerprint["code"]["modules"], rec.fingerprint["software"]["distributions"]
    del rec.fingerprint["software"]["libraries"]
    return rec


OLDER = "neither run recorded software.distributions, software.libraries, code.modules, data (an older launcher)"


def test_runs_of_an_older_launcher_that_differ_are_not_comparable_with_where_they_split():
    """What neither run recorded may be what differs: no determinism bug is claimed, but the
    difference is located as for DIFFERENT."""
    a = _schema_1(_record(steps=_steps()))
    b = _schema_1(_record(steps=_steps(split_at=10)))
    b.result = {**b.result, "weights_sha256": "w2", "layer_sha256": {"conv1": "c2", "logits": "l1"}}
    b.metrics = [{"epoch": 1, "loss": 0.5}, {"epoch": 2, "loss": 0.3}]
    c = compare.decide(a, b)
    assert (
        c.verdict,
        c.exit_code,
        c.differences,
        c.first_differing_epoch,
        c.differing_layers,
        c.notes,
        c.equal,
        c.compared,
    ) == (
        "NOT COMPARABLE",
        3,
        [],
        2,
        ["conv1"],
        [OLDER, "results differ"],
        False,
        ["weights", "2 epochs' metrics", "3 traced steps"],
    )
    assert c.divergence is not None and c.divergence.step == 10
    same = compare.decide(a, _schema_1(_record(steps=_steps())))
    assert (same.verdict, same.exit_code, same.notes, same.equal) == ("IDENTICAL", 0, [OLDER], True)
    assert compare.decide(_schema_1(_record()), _record()).verdict == "REFUSED"  # one of them recorded them


def test_differing_runs_whose_reads_were_not_fully_observed_are_not_comparable():
    a, b = _record(steps=_steps()), _record(steps=_steps(split_at=5))
    a.fingerprint = {**a.fingerprint, "observation": {"gaps": ["g1", "g2"]}}
    b.fingerprint = {**b.fingerprint, "observation": {"gaps": ["g2", "g3"]}}
    b.result = {**b.result, "weights_sha256": "w2"}
    c = compare.decide(a, b)
    assert (
        c.verdict,
        c.exit_code,
        c.differences,
        c.first_differing_epoch,
        c.differing_layers,
        c.equal,
        c.compared,
    ) == ("NOT COMPARABLE", 3, [], None, [], False, ["weights", "2 epochs' metrics", "3 traced steps"])
    assert c.notes == ["results differ, and the runs' reads were not fully observed: g1 (and 2 more)"]
    assert c.divergence.step == 5
    b.fingerprint["observation"] = {"gaps": ["g1"]}
    a.fingerprint["observation"] = {"gaps": ["g1"]}
    assert compare.decide(a, b).notes == ["results differ, and the runs' reads were not fully observed: g1"]
    same = _record(steps=_steps())
    same.fingerprint = a.fingerprint
    assert compare.decide(a, same).verdict == "IDENTICAL"  # equal results: the gaps change nothing


def test_a_generator_made_without_a_seed_is_named_as_the_likely_cause_up_to_three():
    a, b = _record(), _record()
    made = [{"call": f"c{i}", "where": f"t.py:{i}"} for i in range(4)]
    a.result = {**a.result, "unseeded_generators": made[:1]}
    b.result = {**b.result, "weights_sha256": "w2", "unseeded_generators": made}
    c = compare.decide(a, b)
    assert (c.verdict, c.exit_code) == ("DIFFERENT", 1)
    assert c.notes == [
        "likely cause: a generator made without a seed: c0 at t.py:0, c1 at t.py:1, c2 at t.py:2 "
        "(seed it from launcher.seed())"
    ]


def test_item_differences_name_what_only_one_side_has_and_what_changed():
    assert compare.item_differences({"a": 1, "b": 2, "c": 3}, {"b": 2, "c": 4, "d": 5, "e": 6}) == (
        "only in run A: a; only in run B: d, e; changed: c"
    )
    assert compare.item_differences({"a": 1, "z": 2}, {"a": 1, "z": 3}, "x", "y") == "changed: z"
    assert compare.item_differences({"a": 1}, {"a": 1, "b": 2, "c": 3}) == "only in run B: b, c"
    assert compare.item_differences({"a": 1, "b": 1}, {}) == "only in run A: a, b"
    assert compare.item_differences({"a": 1}, ["a"]) is None and compare.item_differences(["a"], {"a": 1}) is None


def test_outputs_are_compared_by_meaning_only_where_both_runs_recorded_it(monkeypatch):
    from launcher.record import outputs

    calls = []
    monkeypatch.setattr(outputs, "differences", lambda ca, cb: calls.append((ca, cb)) or ["outputs/m.keras (weights)"])
    a, b = _record(), _record()
    a.result = {**a.result, "outputs": {"m.keras": "h1"}, "outputs_content": {"m.keras": "A"}}
    b.result = {**b.result, "outputs": {"m.keras": "h2"}, "outputs_content": {"m.keras": "B"}}
    assert compare.output_differences(a, b) == ["outputs/m.keras (weights)"] and calls == [
        ({"m.keras": "A"}, {"m.keras": "B"})
    ]
    for one in (a, b):  # one run recorded no meaning: compared by bytes
        c, d = _record(), _record()
        c.result, d.result = dict(a.result), dict(b.result)
        (c if one is a else d).result.pop("outputs_content")
        assert compare.output_differences(c, d) == ["outputs/m.keras"]
    assert len(calls) == 1


def test_a_scripts_saved_variables_are_read_by_their_names(tmp_path):
    import numpy as np

    np.savez(
        tmp_path / "weights.npz",
        **{
            "0 dense/kernel": np.ones(2),
            "1 dense/bias": np.zeros(1),
            "2 a b/c": np.ones(1),
            "3  lead": np.ones(1),
            "v": np.ones(1),
        },
    )
    rec = _record(path=tmp_path)
    rec.result = {**rec.result, "weights_file": "weights.npz"}
    got = compare.read_weights(rec)
    assert list(got) == ["dense/kernel", "dense/bias", "a b/c", " lead", "v"]  # "N " is the save order
    assert got["dense/kernel"].tolist() == [1.0, 1.0]


def test_what_a_tolerance_cannot_vouch_for_is_named():
    a, b = _record(metrics=[]), _record(metrics=[])
    b.result = {**b.result, "weights_sha256": "w2"}
    assert compare._unjudged(a, b, {}, {}) == [
        "neither run kept weight values or per-epoch metrics: nothing to compare within a tolerance",
        "the weights differ by hash and their values were not kept (train.save_weights=true keeps them): they "
        "cannot be compared within a tolerance",
    ]
    kept = {"dense/kernel": 1}
    assert compare._unjudged(a, b, kept, {}) == [
        "the weights differ by hash and their values were not kept (train.save_weights=true keeps them): they "
        "cannot be compared within a tolerance"
    ]  # one run's values alone compare nothing
    assert compare._unjudged(a, b, kept, kept) == []


def test_list_items_that_are_mappings_compare_by_content_whatever_their_key_order():
    """Both sides canonical (a bug once: run B's items kept their key order, so equal GPU
    records written in another key order were listed as only in one run)."""
    assert compare.item_differences([{"b": 1, "a": 2}], [{"a": 2, "b": 1}]) == "the same items in another order"
    assert compare.item_differences([{"b": 1, "a": 2}], [{"b": 1, "a": 3}]) == (
        'only in run A: {"a": 2, "b": 1}; only in run B: {"a": 3, "b": 1}'
    )
    assert compare.item_differences({"a": 1, "b": 1, "c": 1}, {"a": 2, "b": 2, "c": 1}) == "changed: a, b"


def test_only_output_files_names_the_first_five():
    a, b = _record(), _record()
    names = [f"f{i}" for i in range(6)]
    a.result = {**a.result, "outputs": {n: "h1" for n in names}}
    b.result = {**b.result, "outputs": {n: "h2" for n in names}}
    listed = ", ".join(f"outputs/f{i}" for i in range(5))
    assert compare.decide(a, b).notes == [f"{compare.ONLY_OUTPUTS}: {listed} and more"]
    b.result["outputs"]["f5"] = "h1"
    assert compare.decide(a, b).notes == [f"{compare.ONLY_OUTPUTS}: {listed}"]


def test_output_files_are_not_the_only_difference_when_an_epoch_a_layer_or_a_step_differs():
    for change in ("epoch", "layer", "step"):
        a, b = _record(steps=_steps()), _record(steps=_steps(split_at=10 if change == "step" else None))
        a.result = {**a.result, "outputs": {"f": "h1"}}
        b.result = {**b.result, "outputs": {"f": "h2"}}
        if change == "epoch":
            b.metrics = [{"epoch": 1, "loss": 0.4}, {"epoch": 2, "loss": 0.25}]
        if change == "layer":
            b.result["layer_sha256"] = {"conv1": "c2", "logits": "l1"}
        c = compare.decide(a, b)
        assert c.verdict == "DIFFERENT" and not any(n.startswith(compare.ONLY_OUTPUTS) for n in c.notes), change


def test_two_unobserved_gaps_name_the_first_and_one_more():
    a, b = _record(), _record()
    a.fingerprint = {**a.fingerprint, "observation": {"gaps": ["g1", "g2"]}}
    b.metrics = [{"epoch": 1, "loss": 0.5}, {"epoch": 2, "loss": 0.3}]
    c = compare.decide(a, b)
    assert c.notes == ["results differ, and the runs' reads were not fully observed: g1 (and 1 more)"]
    assert (c.verdict, c.first_differing_epoch) == ("NOT COMPARABLE", 2)


def test_a_resumed_run_that_differs_is_not_called_a_determinism_bug():
    """What a checkpoint does not hold (a callback's own counters, a generator, a cached
    dataset) can differ after ``launch resume``: the difference is shown, never blamed on
    determinism; equal bits are still IDENTICAL."""
    resumed = _record(path=Path("/runs/b"), resumed={"epoch": 1, "checkpoint": "checkpoints/epoch-000001"})
    assert compare.decide(_record(), resumed).verdict == "IDENTICAL"
    resumed.result = {**resumed.result, "weights_sha256": "x", "layer_sha256": {"conv1": "c1", "logits": "l2"}}
    c = compare.decide(_record(), resumed)
    assert (c.verdict, c.exit_code, c.differing_layers) == ("NOT COMPARABLE", 3, ["logits"])
    text = compare.report(c, Path("/runs/a"), Path("/runs/b"))
    assert "b continued from a checkpoint (launch resume)" in text and "determinism bug" not in text
