"""The divergence locator's pure logic: trace points, the first split, its description."""

import json

import numpy as np

from launcher.job.training import trace as recording
from launcher.record import layout, trace
from launcher.record.hashing import weights_digest


def _weights(conv1=0.0, logits=0.0):
    return [
        ("conv1", "conv1/kernel", np.full((3, 3), conv1, dtype=np.float32)),
        ("conv1", "conv1/bias", np.zeros(3, dtype=np.float32)),
        ("logits", "logits/kernel", np.full((4, 2), logits, dtype=np.float32)),
    ]


def _trace(steps, split_at=None, layer="conv1", loss_only=False, epoch_size=4):
    """Points at ``steps``; from ``split_at`` on, ``layer`` (or only the loss) differs."""
    out = []
    for step in steps:
        moved = split_at is not None and step >= split_at
        bump = 1.0 if moved and not loss_only else 0.0
        arrays = _weights(step + (bump if layer == "conv1" else 0), step + (bump if layer == "logits" else 0))
        loss = None if step == 0 else 1.0 / step + (1e-7 if moved and loss_only else 0)
        out.append(trace.point(step, (step + epoch_size - 1) // epoch_size, loss, arrays))
    return out


def test_a_point_records_the_total_digest_and_short_layer_hashes_in_model_order():
    p = trace.point(10, 3, 0.5, _weights(1.0, 2.0))
    total, per_layer = weights_digest(_weights(1.0, 2.0))
    assert p["weights"] == total  # the same digest as result.json's weights_sha256
    assert [name for name, _ in p["layers"]] == ["conv1", "logits"]
    assert p["layers"][0][1] == per_layer["conv1"][: trace.LAYER_DIGITS]
    assert (p["step"], p["epoch"], p["loss"]) == (10, 3, 0.5)


def test_equal_traces_do_not_split():
    d = trace.first_divergence(_trace(range(0, 13)), _trace(range(0, 13)))
    assert not d.split and d.common_steps == 13
    assert trace.describe(d) == "step traces equal at all 13 common steps"


def test_the_first_step_and_the_first_layer_in_model_order():
    d = trace.first_divergence(_trace(range(0, 13)), _trace(range(0, 13), split_at=7, layer="logits"))
    assert (d.step, d.epoch, d.last_equal_step, d.layer, d.layers) == (7, 2, 6, "logits", ["logits"])
    expected = "first diverging step: 7 (epoch 2); first differing layer in model order: logits"
    assert trace.describe(d).startswith(expected)


def test_coarse_traces_bracket_the_split():
    a, b = _trace(range(0, 13, 5)), _trace(range(0, 13, 5), split_at=7)
    d = trace.first_divergence(a, b)
    assert (d.step, d.last_equal_step, d.layer) == (10, 5, "conv1")
    assert "equal at step 5: the bits split in steps 6-10" in trace.describe(d)


def test_traces_of_different_resolution_are_compared_at_common_steps():
    d = trace.first_divergence(_trace(range(0, 13, 2)), _trace(range(0, 13, 3), split_at=5))
    assert d.common_steps == 3 and (d.step, d.last_equal_step) == (6, 0)  # common: 0, 6, 12


def test_initial_weights_that_differ_are_a_seeding_problem():
    d = trace.first_divergence(_trace(range(0, 5)), _trace(range(0, 5), split_at=0))
    assert d.step == 0 and d.last_equal_step is None
    assert "before any training" in trace.describe(d) and "seeding" in trace.describe(d)


def test_a_loss_that_differs_with_equal_weights_is_still_a_split():
    d = trace.first_divergence(_trace(range(0, 9)), _trace(range(0, 9), split_at=3, loss_only=True))
    assert (d.step, d.layers) == (3, []) and d.loss[0] != d.loss[1]
    assert "weights equal there, the loss differs" in trace.describe(d)


def test_no_common_step_is_no_answer():
    assert trace.first_divergence(_trace([1, 3]), _trace([2, 4])) is None
    assert trace.first_divergence([], _trace([0])) is None
    assert "no step trace in common" in trace.describe(None)


def test_a_layer_only_one_run_has_differs():
    a = trace.point(1, 1, 0.5, _weights())
    b = {**a, "layers": [*a["layers"], ["extra", "0" * 16]]}
    assert trace.first_divergence([a], [b]).layers == ["extra"]


def test_keep_through_drops_later_epochs_atomically(tmp_path):
    points = _trace(range(0, 13))
    (tmp_path / layout.TRACE).write_text("".join(json.dumps(p) + "\n" for p in points))
    trace.keep_through(tmp_path, 2)
    kept = trace.read(tmp_path)
    assert [p["step"] for p in kept] == list(range(0, 9)) and max(p["epoch"] for p in kept) == 2
    trace.keep_through(tmp_path / "no-such-run", 1)  # no trace: nothing to do


def test_keep_through_keeps_the_points_its_checkpoint_counted(tmp_path):
    """A stopped script records its last step on the way out, labelled with the epochs it had
    finished: the checkpoint's count drops it, where the epoch label alone would keep it."""
    points = [*_trace(range(0, 9)), {**_trace([10])[0], "epoch": 2, "loss": None}]
    (tmp_path / layout.TRACE).write_text("".join(json.dumps(p) + "\n" for p in points))
    assert trace.count(tmp_path) == 10 and trace.count(tmp_path / "no-such-run") == 0
    trace.keep_through(tmp_path, 2, points=9)
    assert [p["step"] for p in trace.read(tmp_path)] == list(range(0, 9))
    trace.keep_through(tmp_path, 2, points=50)  # more than there are: all of them
    assert len(trace.read(tmp_path)) == 9


def test_the_callback_is_a_no_op_outside_a_run_or_at_zero(tmp_path):
    import keras

    assert type(recording.keras_callback(None, 10)) is keras.callbacks.Callback
    assert type(recording.keras_callback(tmp_path, 0)) is keras.callbacks.Callback
    assert type(recording.keras_callback(tmp_path, 5)) is not keras.callbacks.Callback


def test_bitwise_means_bitwise_for_nan_and_signed_zero():
    nan = [{**trace.point(1, 1, float("nan"), _weights()), "loss": float("nan")}]
    assert not trace.first_divergence(nan, [dict(nan[0], loss=float("nan"))]).split  # two runs that both blew up
    zero = trace.point(1, 1, 0.0, _weights())
    assert trace.first_divergence([zero], [dict(zero, loss=-0.0)]).split


class _Weight:
    def __init__(self, layer, value):
        self.path = self.name = f"{layer}/kernel"
        self.value = value

    def numpy(self):
        return np.array([self.value], dtype=np.float32)


class _Model:
    """What the recorder reads of a Keras model: layers' weights and the optimizer's step counter."""

    def __init__(self):
        self.iterations = 0
        self.layers = [type("L", (), {"name": "dense", "weights": [_Weight("dense", 0.0)]})()]
        self.optimizer = type("O", (), {"iterations": type("I", (), {"numpy": lambda _: self.iterations})()})()

    def train(self, recorder, epochs, steps, per_execution=1, initial_epoch=0):
        """Drive the callback as Keras' fit does."""
        recorder.on_train_begin()
        for epoch in range(initial_epoch, initial_epoch + epochs):
            recorder.on_epoch_begin(epoch)
            for end in range(per_execution - 1, steps, per_execution):
                self.iterations += per_execution
                self.layers[0].weights[0].value += 1
                recorder.on_train_batch_end(end, {"loss": 1.0 / self.iterations})
            recorder.on_epoch_end(epoch, {"loss": 1.0 / self.iterations})


def _recorder(path, every):
    recorder = recording.keras_callback(path, every)
    recorder.set_model(_Model())
    return recorder


def _steps(path):
    return [(p["step"], p["epoch"]) for p in trace.read(path)]


def test_the_recorder_traces_step_0_every_n_steps_and_each_epochs_end(tmp_path):
    rec = _recorder(tmp_path, 4)
    rec.model.train(rec, epochs=1, steps=6)
    rec.model.train(rec, epochs=1, steps=6, initial_epoch=1)  # the mnist task: one fit per epoch
    assert _steps(tmp_path) == [(0, 0), (4, 1), (6, 1), (8, 2), (12, 2)]
    assert trace.read(tmp_path)[1]["loss"] == 0.25 and trace.read(tmp_path)[0]["loss"] is None


def test_a_resumed_run_continues_its_trace_without_repeating_a_step(tmp_path):
    rec = _recorder(tmp_path, 4)
    rec.model.train(rec, epochs=1, steps=6)
    resumed = _recorder(tmp_path, 4)  # a new process: the optimizer restored from the checkpoint
    resumed.model.iterations, resumed.model.layers[0].weights[0].value = 6, 6.0
    resumed.model.train(resumed, epochs=1, steps=6, initial_epoch=1)
    assert _steps(tmp_path) == [(0, 0), (4, 1), (6, 1), (8, 2), (12, 2)]


def test_a_recompiled_model_continues_the_numbering_and_fits_count_epochs(tmp_path):
    rec = _recorder(tmp_path, 4)
    rec.model.train(rec, epochs=1, steps=6)
    rec.model.iterations = 0  # compile() again: a new optimizer
    rec.model.train(rec, epochs=1, steps=6)  # a fit without initial_epoch
    assert _steps(tmp_path) == [(0, 0), (4, 1), (6, 1), (8, 2), (12, 2)]


def test_steps_per_execution_still_gives_a_point_per_interval(tmp_path):
    rec = _recorder(tmp_path, 10)
    rec.model.train(rec, epochs=1, steps=42, per_execution=7)
    assert [s for s, _ in _steps(tmp_path)] == [0, 14, 21, 35, 42]  # the first step at or past each 10


def test_a_torn_last_line_ends_the_trace(tmp_path):
    good = json.dumps(trace.point(0, 0, None, _weights())) + "\n"
    (tmp_path / layout.TRACE).write_text(good + good[: len(good) // 2])
    assert len(trace.read(tmp_path)) == 1
    trace.keep_through(tmp_path, 0)  # resume after a crash mid-line
    assert trace.read(tmp_path) == [json.loads(good)]
    assert (tmp_path / layout.TRACE).read_text().count("\n") == 1  # the torn tail is gone
