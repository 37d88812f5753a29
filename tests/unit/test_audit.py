"""The audit's pure parts: which runs it plans, how it merges overrides, how it judges."""

from pathlib import Path

import pytest

from launcher.errors import ConfigError
from launcher.run import config
from launcher.run.composition import compose
from launcher.verdict import audit, audit_report


def _plan(*overrides, cores=2, **options):
    return audit.trials(config.resolve(compose(list(overrides)), cpu_count=cores), cores, audit.Options(**options))


def test_a_strict_job_is_repeated_then_every_knob_is_moved_off_its_value():
    plan = _plan()
    assert [(t.knob, t.overrides) for t in plan] == [
        ("repeat", ()),
        ("repeat", ()),
        ("intra_op_threads", ("determinism.intra_op_threads=2",)),
        ("intra_op_threads", ("determinism.intra_op_threads=4",)),
        ("inter_op_threads", ("determinism.inter_op_threads=2",)),
        ("onednn_opts", ("determinism.onednn_opts=false",)),  # strict's default is on
        ("level", ("determinism=off",)),
        ("level", ("determinism=seeded",)),
        ("xla", ("determinism.jit_compile=true",)),
        ("input_pipeline", ("train.data_parallel_calls=autotune",)),
        ("input_pipeline", ("train.data_parallel_calls=autotune", "determinism.deterministic_data=false")),
    ]
    xla = next(t for t in plan if t.knob == "xla")
    assert xla.expect == (("jit_compile", True),)  # checked against what Keras really did


def test_unpinned_knobs_are_tried_against_what_tensorflow_would_use():
    plan = _plan("determinism=seeded", cores=2, repeats=3, knobs=["intra_op_threads", "onednn_opts"])
    assert [t.knob for t in plan].count("repeat") == 3
    intra = [t.overrides for t in plan if t.knob == "intra_op_threads"]
    assert intra == [("determinism.intra_op_threads=1",), ("determinism.intra_op_threads=4",)]  # default = 2 cores
    assert [t.value for t in plan if t.knob == "onednn_opts"] == ["false (was unset)", "true (was unset)"]


def test_knobs_the_launcher_does_not_apply_to_user_code_are_skipped_with_a_reason():
    plan = _plan("train=custom", "train.entrypoint=m:f", knobs=["xla", "input_pipeline", "level"])
    skipped = {t.knob: t.skip for t in plan if t.skip}
    assert set(skipped) == {"xla", "input_pipeline"} and "train=custom" in skipped["xla"]
    assert [t.knob for t in plan if not t.skip] == ["repeat", "repeat", "level", "level"]


def test_overrides_replace_the_users_value_of_the_same_key():
    user = ["train.epochs=1", "+seed=7", "determinism=seeded", "determinism.intra_op_threads=2"]
    merged = audit.with_overrides(user, ["+seed=7", "determinism=strict", "determinism.intra_op_threads=4"])
    assert merged == ["train.epochs=1", "+seed=7", "determinism=strict", "determinism.intra_op_threads=4"]
    compose(merged)  # Hydra accepts it: no key twice


def test_options_parse_and_bad_ones_are_one_line_errors():
    o = audit.parse_options(["audit.repeats=3", "audit.knobs=[onednn_opts,level]", "audit.trace_every=5"])
    assert (o.repeats, o.knobs, o.trace_every) == (3, ["onednn_opts", "level"], 5)
    for bad, message in [
        (["audit.repeats=1"], "at least 2"),
        (["audit.repeats=many"], "bad audit option"),
        (["audit.bogus=1"], "bad audit option"),
        (["audit.knobs=[threads]"], "unknown"),
        (["audit.trace_every=0"], "at least 1"),
    ]:
        with pytest.raises(ConfigError, match=message) as info:
            audit.parse_options(bad)
        assert "\n" not in str(info.value)


def _rows(*statuses):
    rows = [audit_report.Row("repeat", "run 1", "reference"), audit_report.Row("repeat", "run 2", statuses[0])]
    knobs = ["intra_op_threads", "inter_op_threads", "xla", "level"]
    rows += [audit_report.Row(k, "v", s) for k, s in zip(knobs, statuses[1:], strict=False)]
    return rows


def test_the_verdict_pins_what_changed_the_bits_and_frees_what_did_not():
    v = audit_report.judge(_rows("same", "changed", "same", "not applied", "failed"), "strict", audit.KNOBS)
    assert (v.stable, v.pin, v.free, v.not_applied, v.failed) == (
        True,
        ["intra_op_threads"],
        ["inter_op_threads"],
        ["xla"],
        ["level"],
    )
    assert v.recorded_in == {"intra_op_threads": "determinism.intra_op_threads"} and v.exit_code == 0


def test_unstable_repeats_fail_the_audit_and_say_so():
    v = audit_report.judge(_rows("changed", "changed"), "strict", audit.KNOBS)
    assert v.stable is False and v.exit_code == 1
    assert "NOT STABLE" in "\n".join(audit_report.verdict_lines(v))
    assert audit_report.judge(_rows("failed"), "strict", audit.KNOBS).stable is None  # one repeat: not judged
    assert audit_report.judge(_rows("same"), "strict", audit.KNOBS, interrupted=True).exit_code == 130


def test_once_repeats_differ_no_knob_is_judged_and_the_likely_cause_is_named():
    """Unseeded np.random.default_rng() makes the repeats differ: every knob's run would differ
    too, so none is called "must pin" (nor free), and the cause the runs recorded is named."""
    cause = "a generator made without a seed: numpy.random.default_rng() at train.py:7"
    v = audit_report.judge(_rows("changed", "changed", "same"), "strict", audit.KNOBS, causes=[cause])
    assert (v.stable, v.pin, v.free) == (False, [], [])
    text = "\n".join(audit_report.verdict_lines(v))
    assert "must pin" not in text and "free here" not in text and f"likely cause: {cause}" in text


def test_a_knob_the_job_sets_itself_is_reported_as_such_never_free():
    """The script calls set_intra_op_parallelism_threads(2) itself: the audit's 2 looks "same",
    its 4 never reached the job. Neither free nor pinned: set by the job."""
    rows = [
        *_rows("same")[:2],
        audit_report.Row("intra_op_threads", "2 (was 1)", "same"),
        audit_report.Row("intra_op_threads", "4 (was 1)", "set by the job"),
    ]
    v = audit_report.judge(rows, "strict", audit.KNOBS)
    assert (v.set_by_job, v.free, v.pin) == (["intra_op_threads"], [], [])
    assert "set by the job itself" in "\n".join(audit_report.verdict_lines(v))


def test_likely_causes_come_from_what_the_baseline_runs_recorded():
    from launcher.verdict import compare

    def record(generators, gaps=()):
        return compare.RunRecord(
            path=Path("r"),
            fingerprint={"observation": {"gaps": list(gaps)}},
            config={},
            metrics=[],
            result={"unseeded_generators": generators},
        )

    made = [{"call": "numpy.random.default_rng()", "where": "train.py:7"}]
    causes = audit.likely_causes([record(made), record(made, ["the job ran 1 program(s) ...: zcat a.gz"])])
    assert causes == [
        "a generator made without a seed: numpy.random.default_rng() at train.py:7 (seed it from launcher.seed())",
        "input the key may not hold: the job ran 1 program(s) ...: zcat a.gz",
    ]
    assert audit.likely_causes([record([]), record([])]) == []
    # The gaps of the first two runs (the baseline repeats); one run alone has none to compare.
    gap = ["the job ran 1 program(s) ...: zcat a.gz"]
    assert audit.likely_causes([record([], gap)]) == [] and audit.likely_causes([]) == []
    three = audit.likely_causes([record([]), record([]), record([], gap)])
    assert three == []


def test_a_job_that_records_nothing_is_not_judged_and_no_knob_is_free():
    rows = [
        audit_report.Row("repeat", "run 1", "not observed"),
        audit_report.Row("repeat", "run 2", "not observed"),
        audit_report.Row("intra_op_threads", "2", "not observed"),
    ]
    v = audit_report.judge(rows, "strict", audit.KNOBS)
    assert v.stable is None and v.free == [] and v.not_observed == ["repeat", "intra_op_threads"]
    assert v.exit_code == 1
    text = "\n".join(audit_report.verdict_lines(v))
    assert "NOT JUDGED" in text and "not observed" in text and "free here" not in text
    # One knob unobserved beside a stable baseline: that knob is not observed, never free.
    v = audit_report.judge([*_rows("same")[:2], audit_report.Row("xla", "v", "not observed")], "strict", audit.KNOBS)
    assert v.stable is True and v.not_observed == ["xla"] and v.free == []


def test_the_table_shows_the_split_the_cost_and_the_notes():
    rows = _rows("same", "changed")
    rows[2].step, rows[2].epoch, rows[2].layer, rows[2].cost, rows[2].run = 3, 1, "conv1", 1.1, "20260101-000000-abcdef"
    rows.append(audit_report.Row("xla", "jit_compile=true", "not applied", note="jit_compile stayed false"))
    text = audit_report.render(rows, audit_report.judge(rows, "strict", audit.KNOBS))
    line = next(x for x in text.splitlines() if x.startswith("intra_op_threads"))
    assert "CHANGED" in line and "step 3 (epoch 1) conv1" in line and "1.10x" in line
    assert "note: xla jit_compile=true: jit_compile stayed false" in text
    assert "must pin" in text and "intra_op_threads (determinism.intra_op_threads)" in text


def test_every_trial_moves_its_knob_off_the_configured_value():
    plan = _plan("determinism=seeded", "train.data_parallel_calls=4", knobs=["xla", "input_pipeline"])
    xla = [(t.overrides, t.expect) for t in plan if t.knob == "xla"]
    # Keras' auto is on with a GPU and off without: from auto, both values are tried.
    assert xla == [
        (("determinism.jit_compile=false",), (("jit_compile", False),)),
        (("determinism.jit_compile=true",), (("jit_compile", True),)),
    ]
    pipeline = [t.overrides for t in plan if t.knob == "input_pipeline"]
    assert pipeline == [
        ("train.data_parallel_calls=1",),
        ("train.data_parallel_calls=4", "determinism.deterministic_data=false"),
    ]


def test_a_value_that_failed_is_reported_even_beside_one_that_ran():
    rows = [*_rows("same", "same"), audit_report.Row("intra_op_threads", "4", "failed", note="out of memory")]
    v = audit_report.judge(rows, "strict", audit.KNOBS)  # intra_op_threads: one value same, one failed
    assert "intra_op_threads" in v.free and "intra_op_threads" in v.failed
    assert (
        audit_report.judge(
            _rows("failed")[:1] + [audit_report.Row("repeat", "r", "failed")], "strict", audit.KNOBS
        ).exit_code
        == 1
    )


def test_the_verdict_lines_word_for_word():
    V = audit_report.Verdict
    stable = V(
        "strict",
        2,
        True,
        pin=["intra_op_threads", "xla"],
        free=["level", "onednn_opts"],
        not_applied=["input_pipeline"],
        not_observed=["cpu"],
        failed=["inter_op_threads"],
        set_by_job=["xla2"],
        recorded_in={"intra_op_threads": "determinism.intra_op_threads", "xla": "determinism.jit_compile"},
    )
    assert audit_report.verdict_lines(stable) == [
        "VERDICT",
        "  repeats: 2 runs under strict are bitwise identical (weights, every epoch's metrics, every traced step): "
        "STABLE",
        "  must pin (they change the bits; the fingerprint field that records each): intra_op_threads "
        "(determinism.intra_op_threads), xla (determinism.jit_compile)",
        "  free here (varied, bits unchanged on this machine for this job): level, onednn_opts",
        "  set by the job itself, not varied (the launcher's value never reached it; the job's code decides, and its "
        "value is recorded): xla2",
        "  not applied at this level (see the notes): input_pipeline",
        "  not observed (their runs recorded nothing to compare): cpu",
        "  some values failed to run (see the notes): inter_op_threads",
    ]
    unstable = V("seeded", 3, False, causes=["c1", "c2", "c3", "c4"], interrupted=True)
    assert audit_report.verdict_lines(unstable) == [
        "VERDICT",
        "  interrupted: the audit is incomplete",
        "  repeats: runs under seeded differ from each other: NOT STABLE (a determinism bug); no knob was judged: "
        "make the repeats agree first",
        "  likely cause: c1; c2; c3",
    ]
    assert audit_report.verdict_lines(V("strict", 2, None, not_observed=["repeat", "xla"])) == [
        "VERDICT",
        "  the job records nothing to compare (no weights, metrics, output files or trace): stability NOT JUDGED; "
        "see docs/running-your-code.md for what is observed",
        "  not observed (their runs recorded nothing to compare): xla",
    ]
    assert audit_report.verdict_lines(V("strict", 0, None)) == [
        "VERDICT",
        "  the job fails as configured (see the notes): fix it, then audit it",
    ]
    for repeats, interrupted in ((1, False), (0, True)):
        lines = audit_report.verdict_lines(V("strict", repeats, None, interrupted=interrupted))
        assert lines[-1] == f"  repeats: only {repeats} baseline run(s) completed; stability not judged"


def test_a_verdict_keeps_the_level_and_how_many_repeats_completed():
    v = audit_report.judge(_rows("same", "changed"), "seeded", audit.KNOBS)
    assert (v.level, v.completed_repeats) == ("seeded", 2)


def test_the_input_pipeline_trials_say_what_they_try():
    plan = _plan(knobs=["input_pipeline"])
    assert [t.value for t in plan if t.knob == "input_pipeline"] == [
        "parallel_calls=autotune (was 1)",
        "parallel_calls=autotune, deterministic=false",
    ]


def test_each_trial_says_what_it_runs():
    plan = _plan("train=custom", "train.entrypoint=m:f", repeats=3, knobs=["level", "xla"])
    assert [(t.knob, t.value, t.expect, t.skip) for t in plan] == [
        ("repeat", "strict as configured, run 1", (), None),
        ("repeat", "strict as configured, run 2", (), None),
        ("repeat", "strict as configured, run 3", (), None),
        ("level", "off (was strict)", (("level", "off"),), None),
        ("level", "seeded (was strict)", (("level", "seeded"),), None),
        ("xla", "-", (), "train=custom does not take this setting from the launcher"),
    ]


def test_the_verdict_lists_several_knobs_of_a_kind_comma_separated():
    v = audit_report.Verdict(
        "strict", 2, True, not_applied=["a", "b"], not_observed=["c", "d"], failed=["e", "f"], set_by_job=["g", "h"]
    )
    assert audit_report.verdict_lines(v)[2:] == [
        "  set by the job itself, not varied (the launcher's value never reached it; the job's code decides, and its "
        "value is recorded): g, h",
        "  not applied at this level (see the notes): a, b",
        "  not observed (their runs recorded nothing to compare): c, d",
        "  some values failed to run (see the notes): e, f",
    ]


def test_the_emulated_cpu_is_a_knob_to_opt_into():
    assert audit.parse_options(["audit.knobs=[cpu]"]).knobs == ["cpu"]
    assert "cpu" not in audit.Options().knobs


def test_each_trial_says_which_recorded_setting_its_value_must_reach():
    plan = _plan(knobs=["intra_op_threads", "inter_op_threads", "onednn_opts", "xla"])
    assert [(t.knob, t.value, t.expect) for t in plan if t.knob != "repeat"] == [
        ("intra_op_threads", "2 (was 1)", (("intra_op_threads", 2),)),
        ("intra_op_threads", "4 (was 1)", (("intra_op_threads", 4),)),
        ("inter_op_threads", "2 (was 1)", (("inter_op_threads", 2),)),
        ("onednn_opts", "false (was true)", ()),  # TF_ENABLE_ONEDNN_OPTS always reaches the job
        ("xla", "jit_compile=true (was false)", (("jit_compile", True),)),
    ]
