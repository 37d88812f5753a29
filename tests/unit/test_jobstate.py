"""What a fit's checkpoint keeps beyond the model and its optimizer (issue 42): every variable the job
made, known again by name, shape, dtype and place; the job's own Python and NumPy generators, known
again by their state as the fit began."""

from __future__ import annotations

import random

import numpy as np
import pytest

from launcher.job.training import jobstate

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")


def _model():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    return model


def test_every_variable_the_job_made_is_kept_and_restored_by_its_key():
    jobstate.observe_variables()
    model = _model()
    translate = keras.layers.RandomTranslation(0.1, 0.1)  # its seed generator: outside the model
    generator = tf.random.Generator.from_seed(3)
    counter = tf.Variable(0, name="counter")
    entries, arrays = jobstate.save_variables(model)
    names = [e["key"][0] for e in entries]
    assert any("seed_generator_state" in n for n in names) and "counter:0" in names
    assert not any("dense" in n for n in names)  # the model's are the checkpointer's
    kept = {e["key"][0]: arrays[e["array"]] for e in entries}
    translate.generator.next()
    generator.normal(())
    counter.assign(7)
    assert jobstate.restore_variables(model, entries, arrays, moved=set()) == []
    assert int(counter.numpy()) == 0
    assert np.array_equal(generator.state.numpy(), kept[generator.state.name])
    keys = jobstate.variable_keys([counter, counter])
    assert keys == [("counter:0", (), "int32", 0), ("counter:0", (), "int32", 1)]  # the same name: by place


def test_a_variable_made_after_the_restore_is_restored_as_it_is_made():
    jobstate.observe_variables()
    model = _model()
    first = tf.Variable(1.0, name="late")
    entries, arrays = jobstate.save_variables(model)
    entries = [e for e in entries if e["key"][0] == "late:0"]
    arrays = {e["array"]: np.float32(5.0) for e in entries}
    del first
    assert jobstate.restore_variables(model, entries, arrays, moved=set()) == []
    assert jobstate.not_restored() == ["late:0"]
    again = tf.Variable(1.0, name="late")  # made by the resumed job's code after the restore
    assert float(again.numpy()) == 5.0 and jobstate.not_restored() == []


def test_the_jobs_own_generators_are_known_by_their_state_as_the_fit_began():
    mine, legacy, plain = np.random.default_rng(4), np.random.RandomState(5), random.Random(6)
    generators = jobstate.Generators()
    generators.begin()
    for g in (mine, legacy):
        g.random(3)
    plain.random()
    kept = generators.save()
    ended = (mine.random(), legacy.random(), plain.random())
    again = (np.random.default_rng(4), np.random.RandomState(5), random.Random(6))  # the resumed job's, fresh
    del mine, legacy, plain
    resumed = jobstate.Generators()
    resumed.begin()
    assert resumed.restore(kept, moved=set()) == []
    assert (again[0].random(), again[1].random(), again[2].random()) == ended
