"""The pure parts of resuming an observed Keras fit (issue 28): what a checkpoint keeps of the
callbacks and History, bit for bit; which data iterator each resumed epoch must use; what is refused."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from launcher.errors import ResumeError
from launcher.job.training import checkpoints, fitstate, jobstate
from launcher.record import checkpoints as stored
from launcher.record import hashing, layout
from launcher.record.store import runs
from launcher.run import resume


def _roundtrip(value):
    return fitstate.decode(json.loads(json.dumps(fitstate.encode(value))))


def test_encoding_keeps_types_and_bits():
    value = {"loss": [np.float32(0.1), 0.1, np.float64(-0.0)], 3: (np.int64(7), None, "x"), "inf": np.inf}
    back = _roundtrip(value)
    assert back.keys() == value.keys()
    assert type(back["loss"][0]) is np.float32 and back["loss"][0] == np.float32(0.1)
    assert repr(back["loss"][0]) == repr(np.float32(0.1))  # what a script printing its history prints
    assert type(back["loss"][1]) is float and math.copysign(1, back["loss"][2]) == -1
    assert back[3] == (7, None, "x") and type(back[3][0]) is np.int64 and isinstance(back[3], tuple)
    assert back["inf"] == math.inf
    assert math.isnan(_roundtrip(np.float32("nan")))
    with pytest.raises(TypeError, match="cannot keep a object"):
        fitstate.encode(object())


class Counter:  # a callback of the job's own: its attributes that change are kept, whatever they are
    def __init__(self):
        self.count, self.seen, self.patience, self.best_weights, self.op = 0, set(), 5, None, None
        self.log = open(os.devnull, "w")  # a resource, not state: the resumed job opens its own


def test_each_callbacks_changed_attributes_are_kept_and_restored():
    keras = pytest.importorskip("keras")
    callbacks = [Counter(), Counter()]
    state = jobstate.CallbackState(callbacks)
    state.begin()  # once every on_train_begin ran
    callbacks[1].count, callbacks[1].seen = 3, {"a", 2}
    callbacks[1].best_weights = [np.arange(40, dtype=np.float32), np.ones((2, 2))]
    callbacks[1].op = keras.ops.less  # ReduceLROnPlateau's monitor_op, set at its first epoch's end
    callbacks[1].log = open(os.devnull, "w")
    states, arrays, unkept = state.save()
    assert unkept == [] and [(s["index"], sorted(s["attrs"])) for s in states] == [
        (1, ["best_weights", "count", "op", "seen"])
    ]  # not patience: unchanged; not the file: a resource
    fresh = [Counter(), Counter()]
    states = json.loads(json.dumps(states))
    assert fitstate.restore_callbacks(fresh, states, arrays) == []
    assert fresh[1].count == 3 and fresh[1].seen == {"a", 2} and fresh[1].op is keras.ops.less
    assert all(np.array_equal(a, b) for a, b in zip(fresh[1].best_weights, callbacks[1].best_weights, strict=True))
    assert fresh[0].count == 0
    assert fitstate.restore_callbacks([Counter()], states, arrays) == ["callback 1 is no longer a Counter"]
    callbacks[0].op = lambda a, b: a < b  # what a checkpoint cannot keep: named
    assert state.save()[2] == ["Counter.op (a function)"]


def test_history_includes_the_epoch_ending_now():
    assert fitstate.history_after({"loss": [1.0]}, [0], 1, {"loss": 0.5, "lr": 0.1}) == (
        [0, 1],
        {"loss": [1.0, 0.5], "lr": [0.1]},
    )


def test_each_resumed_epoch_uses_the_iterator_the_uninterrupted_run_used():
    # Keras 3 (measured): the first epoch makes 1 (unknown length) or 2 iterators, later epochs 2.
    alignment = fitstate.IteratorAlignment(used=[0, 2], made_at_checkpoint=4)
    assert [alignment.target(i) for i in range(3)] == [4, 6, 8]
    assert fitstate.IteratorAlignment.to_make(4, 1) == 3  # the resumed fit made one (its model build)
    assert fitstate.IteratorAlignment.to_make(6, 6) == 0
    with pytest.raises(ValueError, match="past the 4"):
        fitstate.IteratorAlignment.to_make(4, 5)
    assert fitstate.IteratorAlignment(used=[0], made_at_checkpoint=1).target(1) == 3  # one epoch seen: Keras' 2
    assert fitstate.IteratorAlignment().target(0) is None  # not resuming: nothing to align


def test_what_feeds_a_fit_is_classified():
    x = np.zeros((4, 2))
    assert fitstate.input_kind(x) == "arrays"
    assert fitstate.input_kind((x, x)) == fitstate.input_kind({"a": x, "b": [x]}) == "arrays"  # several inputs
    assert fitstate.input_kind((x, "text")) == "tuple" and fitstate.input_kind([]) == "list"
    assert fitstate.input_kind(i for i in range(3)) == "generator"
    py_dataset = type("PyDataset", (), {"__module__": "keras.src.trainers.data_adapters.py_dataset_adapter"})
    assert fitstate.input_kind(type("Batches", (py_dataset,), {})()) == "PyDataset"  # a subclass, by its base
    assert fitstate.input_kind(type("PyDataset", (), {})()) == "PyDataset"  # not Keras': its own name


def test_what_cannot_be_resumed_is_named():
    ok = {"fit": 1, "input": "tf.data", "steps_per_epoch": None, "batches": 12}
    assert stored.why_not_resumable(ok) is None
    for fast_forwarded in (
        {"input": "generator"},
        {"input": "PyDataset"},
        {"steps_per_epoch": 10},
        {"built": False},
        {"input": "dict"},
    ):
        assert stored.why_not_resumable({**ok, **fast_forwarded}) is None  # read again, or built, before the restore
    assert "its validation_data is a generator" in stored.why_not_resumable({**ok, "validation": "generator"})
    assert "its callback attribute Counter.op (a function) changed" in stored.why_not_resumable(
        {**ok, "unkept": ["Counter.op (a function)"]}
    )
    old = {"fit": 1, "input": "tf.data", "steps_per_epoch": None}  # a checkpoint of a launcher from before
    assert "a Python generator cannot be rewound" in stored.why_not_resumable({**old, "input": "generator"})
    assert "PyDataset" in stored.why_not_resumable({**old, "input": "PyDataset"})
    assert "reads dict, not a tf.data.Dataset or arrays" in stored.why_not_resumable({**old, "input": "dict"})
    assert "steps_per_epoch" in stored.why_not_resumable({**old, "steps_per_epoch": 10})
    assert "its model had no variables when the fit began" in stored.why_not_resumable({**old, "built": False})
    assert all(
        stored.why_not_resumable({**old, "input": kind}).endswith("; run it again with launch")
        for kind in ("generator", "PyDataset", "dict")
    )


def test_a_later_fit_is_resumed_when_every_earlier_one_can_be_fast_forwarded():
    first = {"fit": 1, "input": "arrays", "steps_per_epoch": None, "checkpoint": "epoch-000002"}
    second = {"fit": 2, "input": "tf.data", "steps_per_epoch": None, "before": [first]}
    assert stored.why_not_resumable(second) is None
    assert "after call 1, which a resume must fast-forward and cannot: a Python generator" in stored.why_not_resumable(
        {**second, "before": [{**first, "input": "generator"}]}
    )
    assert "after call 1, whose last epoch has no checkpoint" in stored.why_not_resumable(
        {**second, "before": [{**first, "checkpoint": None}]}
    )
    assert "does not keep the earlier fits' ends" in stored.why_not_resumable({**second, "before": None})


def test_a_fits_last_epoch_is_its_end_and_named_for_later_fits():
    class Model:
        stop_training = False

    model = Model()
    fit = {"fit": 1, "input": "tf.data", "epochs": 3, "steps_per_epoch": None, "before": []}
    state = fitstate.FitCheckpoints(None, model, 2, 5, [], fit, lambda: 0, (None, None))
    assert [state.ends_at(e) for e in range(3)] == [False, False, True]
    model.stop_training = True  # EarlyStopping ended it
    assert state.ends_at(0)
    assert state.ending() == {
        "fit": 1,
        "input": "tf.data",
        "steps_per_epoch": None,
        "built": None,
        "validation": None,
        "checkpoint": None,
    }


def _checkpoint(run_dir, epoch: int, extra: dict) -> None:
    path = layout.RunPaths(run_dir).checkpoints / stored.name(epoch)
    path.mkdir(parents=True)
    runs.write_json(path / stored.EXTRA, extra)
    runs.write_json(
        path / stored.MANIFEST, {"epoch": epoch, "files": {stored.EXTRA: hashing.file_sha256(path / stored.EXTRA)}}
    )


def test_resume_refuses_a_checkpoint_in_a_fit_after_a_generator_in_one_line(tmp_path):
    run_dir = runs.create(tmp_path)
    runs.write_bytes(run_dir / "config.yaml", b"seed: 0\ntrain:\n  name: script\n")
    first = {"fit": 1, "input": "generator", "steps_per_epoch": None, "checkpoint": "epoch-000002", "final": True}
    _checkpoint(run_dir, 2, first)
    _checkpoint(run_dir, 3, {"fit": 2, "fit_epoch": 1, "input": "tf.data", "steps_per_epoch": None, "before": [first]})
    with pytest.raises(
        ResumeError,
        match=r"cannot be resumed: its checkpoint is in call 2 of Keras fit, after call 1, "
        r"which a resume must fast-forward and cannot: a Python generator cannot be "
        r"rewound.*; run it again with launch$",
    ):
        resume.check_resumable(run_dir)


def test_a_later_fits_checkpoint_needs_the_earlier_fits_end(tmp_path):
    run_dir = runs.create(tmp_path)
    first = {"fit": 1, "input": "tf.data", "steps_per_epoch": None, "checkpoint": "epoch-000002"}
    _checkpoint(run_dir, 1, {**first, "final": False})
    _checkpoint(run_dir, 3, {"fit": 2, "fit_epoch": 1, "input": "tf.data", "steps_per_epoch": None, "before": [first]})
    path, epoch, notes = stored.latest_complete(run_dir)
    assert (path.name, epoch) == ("epoch-000001", 1)  # not epoch 3: fit 1's end is gone
    assert notes == [
        "checkpoint epoch-000003 is incomplete (it needs epoch-000002, the end of an earlier fit, and "
        "that one has no checkpoint.json); falling back to an earlier one"
    ]
    _checkpoint(run_dir, 2, {**first, "final": True})
    assert stored.latest_complete(run_dir)[:2] == (run_dir / "checkpoints" / "epoch-000003", 3)


def test_pruning_keeps_the_newest_and_every_fits_end(tmp_path):
    run_dir = runs.create(tmp_path)
    for epoch, final in ((1, False), (2, True), (3, False), (4, True), (5, False), (6, False)):
        _checkpoint(run_dir, epoch, {"fit": 1 + (epoch > 2), "final": final})
    checkpointer = object.__new__(checkpoints.Checkpointer)  # no model: pruning only
    checkpointer.root, checkpointer.keep = layout.RunPaths(run_dir).checkpoints, 2
    checkpointer._prune()
    assert sorted(p.name for p in checkpointer.root.iterdir()) == [
        "epoch-000002",
        "epoch-000004",
        "epoch-000005",
        "epoch-000006",
    ]


def test_a_subclassed_model_has_variables_only_once_called():
    """What ``built`` in a fit's record reads (``bool(model.variables)``): a subclassed model has
    none until its first call, even after ``build(input_shape)``; a resume builds it from its data's
    shapes before it restores (``FitCheckpoints.build``; tests/integration/test_resume_state.py)."""
    keras = pytest.importorskip("keras")

    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(2)

        def call(self, x):
            return self.dense(x)

    model = Net()
    model.build((None, 3))
    assert not model.variables
    model(np.zeros((1, 3), "float32"))
    assert model.variables
    assert keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]).variables


def test_iterator_counts_are_keyed_by_the_dataset_not_its_id():
    """A count never passes to another dataset that reuses a collected one's id (issue 40): the
    counts are held by the dataset object, weakly, and go with it. (Whether CPython hands the
    freed address to the next object depends on what else the process allocated: the test does
    not wait for a reuse; it checks that nothing of the collected dataset's count remains.)"""
    import gc

    class Dataset:  # stands for tf.data's: an object whose iterators are counted
        pass

    before = len(fitstate._made)
    first = Dataset()
    for _ in range(3):
        fitstate.note_iterator(first)
    assert fitstate.made(first) == 3 and len(fitstate._made) == before + 1
    del first
    gc.collect()
    assert len(fitstate._made) == before  # gone with its dataset: no id can inherit it
    again = [Dataset() for _ in range(100)]
    assert all(fitstate.made(d) == 0 for d in again)
    fitstate.note_iterator(again[0])
    assert fitstate.made(again[0]) == 1 and fitstate.made(again[1]) == 0
    fitstate.note_iterator(7)  # not weakly referenceable: never counted, never an error
    assert fitstate.made(7) == 0


def test_a_loss_scale_optimizers_variables_are_named_by_path_and_made_once(tmp_path):
    """A LossScaleOptimizer (mixed_float16): its own counters and loss scale, its inner optimizer's under
    ``inner_optimizer``; a checkpointer of an optimizer already built (in training) builds it no second
    time (a second build added a second loss scale: the checkpoint then held 14 optimizer variables, a
    resumed job 12)."""
    keras = pytest.importorskip("keras")
    from launcher.job.training.checkpoints import Checkpointer, named_variables

    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        inputs = keras.Input((3,))
        outputs = keras.layers.Activation("softmax", dtype="float32")(keras.layers.Dense(2, name="d")(inputs))
        model = keras.Model(inputs, outputs)
        model.compile(optimizer=keras.optimizers.RMSprop(), loss="sparse_categorical_crossentropy")
    finally:
        keras.mixed_precision.set_global_policy("float32")
    model.optimizer.build(model.trainable_variables)  # as the first training step does
    checkpointer = Checkpointer(tmp_path, model, 2)
    assert list(checkpointer.named) == list(named_variables(model))
    assert sorted(k for k in checkpointer.named if k.startswith("optimizer/")) == [
        "optimizer/dynamic_scale",
        "optimizer/inner_optimizer/d_bias_velocity",
        "optimizer/inner_optimizer/d_kernel_velocity",
        "optimizer/inner_optimizer/iteration",
        "optimizer/inner_optimizer/learning_rate",
        "optimizer/iteration",
        "optimizer/learning_rate",
        "optimizer/step_counter",
    ]
