"""The observer's notion of what the job's own code trained (real TensorFlow, no training run)."""

from __future__ import annotations

import pytest

from launcher.job.training import observer as observe

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")


class Noter:
    """Stands in for the Observer: keeps what note_variables was given."""

    def __init__(self) -> None:
        self.noted: list = []

    def note_variables(self, variables: list) -> None:
        self.noted += [v for v in variables if all(v is not n for n in self.noted)]


@pytest.fixture
def noter(monkeypatch):
    noter = Noter()
    monkeypatch.setattr(observe, "_assignments_to", None)  # put back after the test
    observe._wrap_assignments(keras, noter)  # the methods stay wrapped in this process, telling no one
    return noter


def test_assignments_by_the_jobs_code_are_noted(noter):
    noter.noted.clear()
    w, b, k = tf.Variable(1.0), tf.Variable(0.0), keras.Variable(2.0)
    w.assign_sub(0.5)
    b.assign_add(0.25)
    k.assign(3.0)
    assert len(noter.noted) == 3 and noter.noted[0] is w and noter.noted[1] is b and noter.noted[2] is k
    assert float(w.numpy()) == 0.5 and float(k.numpy()) == 3.0  # the assignment itself is untouched

    @tf.function
    def step(v):
        v.assign_sub(1.0)  # traced from the job's code (AutoGraph's copy of it)

    noter.noted.clear()
    step(w)
    assert noter.noted == [w] and float(w.numpy()) == -0.5


def test_assignments_by_keras_and_tensorflow_are_theirs(noter):
    noter.noted.clear()
    metric = keras.metrics.Mean()
    metric.update_state([1.0, 2.0])  # assign_add inside Keras
    optimizer = keras.optimizers.SGD(0.1)
    v = tf.Variable([1.0])
    optimizer.apply_gradients([(tf.constant([1.0]), v)])  # assign_sub inside the optimizer
    assert noter.noted == []


def test_a_saved_model_loads_compiled_under_the_compile_wrapper(tmp_path, monkeypatch):
    """Keras' tutorial pattern: ``model.save``, then ``load_model(...).evaluate``. Keras compiles a
    loaded model only when its class has Keras' own ``compile``; a wrapper in the wrong place
    left it uncompiled ("No loss to compute")."""
    owner = next(c for c in keras.Model.__mro__ if "compile" in vars(c))
    monkeypatch.setattr(owner, "compile", owner.compile)  # put back after the test
    observe._wrap_compile(keras, observe.Observer(tmp_path, 0, lambda *a: None))
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
    model.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    assert loaded.compiled and loaded.loss is not None
    loaded.evaluate(tf.zeros((2, 4)), tf.constant([0, 1]), verbose=0)


def test_library_code_covers_the_installation_and_the_launcher():
    library = observe._library_code()
    assert library[0] == "<frozen"
    assert any(tf.__file__.startswith(root) for root in library)
    assert any(observe.__file__.startswith(root) for root in library)
