"""What compare prints for each verdict, exactly, and compare on sealed run directories (issue 17).

The first line of a report is the verdict a user (or a script) acts on; the lines after
it say why. These tests pin whole reports, so a verdict worded, ordered or tabled
differently fails here; ``compare_runs`` is checked on real, sealed run directories
written without training.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from launcher.errors import ConfigError, SchemaError, SealError
from launcher.record import trace
from launcher.record.probe import key
from launcher.verdict import compare
from tests import factories
from tests.unit.test_compare import _record, _steps
from tests.unit.test_fingerprint import _fp


def _refused_pair():
    b = _record()
    b.fingerprint = copy.deepcopy(b.fingerprint)
    b.fingerprint["config_sha256"] = "other"
    b.config = {**b.config, "determinism": {"intra_op_threads": 2}}
    b.fingerprint["software"]["distributions"]["keras"]["files_sha256"] = "f" * 70
    return _record(), b


TABLE = [
    "  field                                      a                                             b",
    "  software.distributions.keras.files_sha256  f1                                            " + "f" * 43 + "…",
    "  config.determinism.intra_op_threads        1                                             2",
]


def test_refused_report():
    c = compare.decide(*_refused_pair())
    assert compare.report(c, Path("/x/a"), Path("/y/b")).splitlines() == [
        "REFUSED: the runs differ in 2 field(s) that decide comparability; a bitwise comparison would mean nothing",
        *TABLE,
        "use --allow-mismatch to compare anyway (labelled NOT COMPARABLE)",
    ]


def test_forced_reports_say_whether_results_differ_and_where():
    a, b = _refused_pair()
    c = compare.decide(a, b, allow_mismatch=True)
    assert (c.exit_code, c.equal, c.compared) == (3, True, ["weights", "2 epochs' metrics"])
    assert compare.report(c, Path("a"), Path("b")).splitlines() == [
        "NOT COMPARABLE (forced: results are bitwise equal)",
        *TABLE,
    ]
    b.metrics = [{"epoch": 1, "loss": 0.5}, {"epoch": 2, "loss": 0.3}]
    b.result = {**b.result, "weights_sha256": "x", "layer_sha256": {"conv1": "c2", "logits": "l1"}}
    c = compare.decide(a, b, allow_mismatch=True)
    assert (c.first_differing_epoch, c.differing_layers, c.differences[0][0]) == (
        2,
        ["conv1"],
        "software.distributions.keras.files_sha256",
    )
    assert compare.report(c, Path("a"), Path("b")).splitlines() == [
        "NOT COMPARABLE (forced: results differ)",
        "  no step trace in common (a run has no trace.jsonl, or they recorded no common step)",
        "  first differing epoch: 2 (metrics.jsonl)",
        "  layers whose final weights differ (model order): conv1",
        *TABLE,
    ]


def test_forced_runs_that_recorded_nothing_say_so():
    a, b = _refused_pair()
    for r in (a, b):
        r.metrics, r.result = [], {}
    c = compare.decide(a, b, allow_mismatch=True)
    assert c.notes == ["forced: neither run recorded any result"] and c.compared == []


def test_different_report_names_step_epoch_and_every_layer():
    b = _record(steps=_steps(split_at=5))
    b.result = {**b.result, "weights_sha256": "x", "layer_sha256": {"conv1": "c2", "logits": "l2"}}
    b.metrics = [{"epoch": 1, "loss": 0.5}, {"epoch": 2, "loss": 0.3}]
    c = compare.decide(_record(steps=_steps()), b)
    assert (c.differences, c.compared, c.equal) == ([], ["weights", "2 epochs' metrics", "3 traced steps"], False)
    assert compare.report(c, Path("a"), Path("b")).splitlines() == [
        "DIFFERENT: same comparability key, different results — a determinism bug",
        "  first diverging step: 5 (epoch 1), equal at step 0: the bits split in steps 1-5; "
        "first differing layer in model order: logits",
        "  first differing epoch: 2 (metrics.jsonl)",
        "  layers whose final weights differ (model order): conv1, logits",
    ]


def test_identical_and_nothing_compared_reports():
    c = compare.decide(_record(), _record())
    assert (c.equal, c.differences) == (True, [])
    assert compare.report(c, Path("a"), Path("b")) == "IDENTICAL: weights and 2 epochs' metrics are bitwise equal"
    empty = [_record(metrics=[], result={}) for _ in range(2)]
    c = compare.decide(*empty)
    assert (c.equal, c.compared, c.differences) == (None, [], [])
    assert compare.report(c, Path("a"), Path("b")).splitlines() == [
        "NOTHING COMPARED: neither run recorded a result",
        "  neither run recorded weights, metrics, output files or a step trace: there is nothing to compare",
        "  let the launcher observe your training (train.observe=true, the default), call "
        "launcher.record_model(model), or save results under launcher.output_dir()",
    ]


def test_one_run_that_recorded_nothing_is_different_from_one_that_did():
    c = compare.decide(_record(metrics=[], result={}), _record())
    assert (c.verdict, c.exit_code) == ("DIFFERENT", 1)
    c = compare.decide(_record(), _record(metrics=[], result={}))
    assert (c.verdict, c.compared) == ("DIFFERENT", [])


def test_tolerance_reports():
    b = _record()
    b.fingerprint = copy.deepcopy(b.fingerprint)
    b.fingerprint["software"]["numpy"] = "2.5.0"
    b.metrics = [{"epoch": 1, "loss": 0.5 + 1e-3}, {"epoch": 2, "loss": 0.25}]
    c = compare.decide_equivalent(_record(), b, rtol=0, atol=0)
    assert compare.report(c, Path("a"), Path("b")).splitlines() == [
        "NOT EQUIVALENT",
        "  field           a                                             b",
        "  software.numpy  2.4.6                                         2.5.0",
        "  epoch 1: loss 0.5 vs 0.501",
    ]
    b.fingerprint["config_sha256"] = "other"
    c = compare.decide_equivalent(_record(), b, rtol=0, atol=0)
    assert (c.verdict, c.exit_code) == ("REFUSED", 3)
    assert compare.report(c, Path("a"), Path("b")).splitlines()[-1] == (
        "  --tolerance admits differences in software only"
    )  # and no --allow-mismatch hint: it has notes
    assert not any("use --allow-mismatch" in line for line in compare.report(c, Path("a"), Path("b")).splitlines())


def test_tolerance_lists_at_most_ten_problems():
    b = _record()
    b.metrics = [{"epoch": i, "loss": float(i)} for i in range(1, 13)]
    a = _record(metrics=[{"epoch": i, "loss": -float(i)} for i in range(1, 13)])
    c = compare.decide_equivalent(a, b, rtol=0, atol=0)
    assert len(c.notes) == 10 and c.notes[0] == "epoch 1: loss -1.0 vs 1.0"


def test_values_in_the_table_are_json_and_cut_at_44_characters():
    assert compare._short("x" * 44) == "x" * 44
    assert compare._short("x" * 45) == "x" * 43 + "…"
    assert compare._short({"b": 1, "a": [1, 2]}) == '{"a": [1, 2], "b": 1}'
    assert compare._short(None) == "null" and compare._short("null") == "null"
    assert compare._short(compare.comparability.Unknown("old")) == '"unknown (old)"'
    assert compare._short("abcdef", width=4) == "abc…"
    assert compare.difference_table([("f", 1, "2")]) == [
        "  field  run A                                         run B",
        "  f      1                                             2",
    ]


def test_config_differences_expand_nested_dicts_over_both_sides():
    a = {"train": {"lr": 1, "opt": {"name": "adam"}}, "seed": 0, "only_a": 1}
    b = {"train": {"lr": 2, "opt": "sgd"}, "seed": 0, "only_b": 2}
    assert compare.config_differences(a, b) == [
        ("config.only_a", 1, None),
        ("config.only_b", None, 2),
        ("config.train.lr", 1, 2),
        ("config.train.opt", {"name": "adam"}, "sgd"),
    ]


def test_metrics_compare_bitwise_whatever_the_key_order_and_without_epoch_numbers():
    a, b = _record(), _record()
    b.metrics = [{"loss": 0.5, "epoch": 1}, {"loss": 0.25, "epoch": 2}]  # another writer's key order
    assert compare.decide(a, b).verdict == "IDENTICAL"
    a.metrics, b.metrics = [{"loss": 0.5}, {"loss": 0.25}], [{"loss": 0.5}, {"loss": 0.2}]
    assert compare.decide(a, b).first_differing_epoch == 2  # counted from 1 when not recorded
    a.metrics, b.metrics = [{"loss": 0.5}], [{"loss": 0.5}, {"loss": 0.2}]
    assert compare.bitwise(a, b)[1] == 2 and compare.bitwise(b, a)[1] == 2
    a.metrics, b.metrics = [{"epoch": 7, "loss": 0.5}], [{"epoch": 7, "loss": 0.4}]
    assert compare.bitwise(a, b)[1] == 7
    a.metrics, b.metrics = [{"epoch": 3, "loss": 0.5}], [{"epoch": 4, "loss": 0.5}]  # numbered differently
    assert compare.bitwise(a, b)[1] == 3 and compare.bitwise(b, a)[1] == 4  # named as the first run numbers it
    a.metrics, b.metrics = [{"epoch": 3, "loss": 0.5}], [{"epoch": 3, "loss": 0.5}, {"epoch": 9, "loss": 0.1}]
    assert compare.bitwise(a, b)[1] == 9 and compare.bitwise(b, a)[1] == 9  # the epoch only one run has


def test_layers_only_one_run_has_and_layers_outside_the_trace_are_listed_last():
    a = _record(steps=[{"step": 0, "epoch": 0, "loss": None, "weights": "w", "layers": [["zeta", "1"], ["mid", "2"]]}])
    b = _record(steps=a.steps)
    a.result = {**a.result, "layer_sha256": {"zeta": "z", "mid": "m", "beta": "1", "alpha": "1"}}
    b.result = {**b.result, "layer_sha256": {"zeta": "y", "mid": "m2", "beta": "2", "extra": "e"}}
    assert compare.bitwise(a, b)[2] == ["zeta", "mid", "alpha", "beta", "extra"]


def test_compared_items_need_both_runs():
    a, b = _record(), _record()
    b.result = {**b.result, "weights_sha256": None}
    assert compare.compared_items(a, b) == ["2 epochs' metrics"]
    two = _steps()[:2]
    assert compare.compared_items(_record(metrics=[], steps=two), _record(metrics=[], steps=two))[-1] == (
        "2 traced steps"
    )


@pytest.mark.parametrize("text, expected", [("0,0", (0.0, 0.0)), ("1e-5,1e-8", (1e-5, 1e-8)), (" 2 , 3 ", (2.0, 3.0))])
def test_good_tolerances(text, expected):
    assert compare.parse_tolerance(text) == expected


def test_bad_tolerances_say_what_is_expected():
    with pytest.raises(ConfigError) as info:
        compare.parse_tolerance("1e-5 1e-8")
    assert str(info.value) == "--tolerance takes RTOL,ATOL (e.g. 1e-5,1e-8), got '1e-5 1e-8'"
    for text in ("-1e-9,0", "0,-1e-9"):
        with pytest.raises(ConfigError) as info:
            compare.parse_tolerance(text)
        assert str(info.value) == "--tolerance values must be non-negative"


# ---------------------------------------------------------------- describe: every sentence
@pytest.mark.parametrize(
    "d, text",
    [
        (None, "no step trace in common (a run has no trace.jsonl, or they recorded no common step)"),
        (trace.Divergence(3), "step traces equal at all 3 common steps"),
        (
            trace.Divergence(3, 0, 0, None, ["conv1"]),
            "first diverging step: 0, before any training (the initial weights differ: a seeding problem); "
            "first differing layer in model order: conv1",
        ),
        (trace.Divergence(3, 4, None, 3, ["a"]), "first diverging step: 4; first differing layer in model order: a"),
        (
            trace.Divergence(3, 5, 2, 3, ["a", "b", "c"], (0.5, 0.25)),
            "first diverging step: 5 (epoch 2), equal at step 3: the bits split in steps 4-5; "
            "first differing layer in model order: a (also b, c); loss 0.5 vs 0.25",
        ),
        (
            trace.Divergence(3, 5, 2, None, ["a", "b"]),
            "first diverging step: 5 (epoch 2); first differing layer in model order: a (also b)",
        ),
        (
            trace.Divergence(3, 6, 1, 5, [], (0.5, 0.25)),
            "first diverging step: 6 (epoch 1); weights equal there, the loss differs; loss 0.5 vs 0.25",
        ),
        (trace.Divergence(3, 6, 1, 5, [], None), "first diverging step: 6 (epoch 1)"),
    ],
)
def test_describe(d, text):
    assert trace.describe(d) == text


def test_weights_that_differ_with_an_equal_loss_name_no_loss():
    a = [trace.point(1, 1, 0.5, [("l", "l/k", __import__("numpy").zeros(1))])]
    b = [trace.point(1, 1, 0.5, [("l", "l/k", __import__("numpy").ones(1))])]
    d = trace.first_divergence(a, b)
    assert d.layers == ["l"] and d.loss is None


# ---------------------------------------------------------------- compare on sealed run directories
def _sealed(
    store: Path,
    name: str,
    *,
    weights: str = "w",
    fp: dict | None = None,
    metrics=(0.5, 0.25),
    steps: list | None = None,
    seal: bool = True,
) -> Path:
    """A sealed run (``seal``: False, unsealed) whose ``metrics`` are its epochs' losses (None: no
    metrics.jsonl) and ``steps`` its trace."""
    return factories.sealed_run(
        store,
        name,
        config="seed: 0\ntrain:\n  name: mnist\n  epochs: 2\nstore:\n  root: ${oc.env:HOME}\n",  # resolved on load
        fingerprint=fp or _fp(),
        metrics=None if metrics is None else [{"epoch": i + 1, "loss": v} for i, v in enumerate(metrics)],
        result={"weights_sha256": weights, "outputs": {}},
        trace=steps,
        state="complete" if seal else None,
    )


def test_compare_runs_reads_sealed_runs(tmp_path):
    a = _sealed(tmp_path, "a", steps=_steps())
    b = _sealed(tmp_path, "b", steps=_steps())
    rec = compare.load(a)
    assert (
        rec.path == a
        and rec.fingerprint == _fp()
        and rec.metrics == [{"epoch": 1, "loss": 0.5}, {"epoch": 2, "loss": 0.25}]
    )
    assert rec.config["train"] == {"name": "mnist", "epochs": 2} and rec.config["store"]["root"].startswith("/")
    assert rec.result["weights_sha256"] == "w" and rec.steps == _steps()
    c = compare.compare_runs(a, b)
    assert c.verdict == "IDENTICAL" and c.compared == ["weights", "2 epochs' metrics", "3 traced steps"]
    c = compare.compare_runs(a, _sealed(tmp_path, "c", weights="x"))
    assert (c.verdict, c.exit_code) == ("DIFFERENT", 1)
    assert compare.compare_runs(a, _sealed(tmp_path, "d", metrics=(0.5, 0.2500001)), tolerance=(1e-5, 0)).verdict == (
        "EQUIVALENT"
    )
    no_metrics = _sealed(tmp_path, "e", metrics=None)
    assert compare.load(no_metrics).metrics == []


def test_compare_runs_forces_a_refused_comparison_only_when_asked(tmp_path):
    other = _fp()
    other["determinism"]["intra_op_threads"] = 2
    a, b = _sealed(tmp_path, "a"), _sealed(tmp_path, "b", fp=other)
    assert compare.compare_runs(a, b).verdict == "REFUSED"
    assert compare.compare_runs(a, b, allow_mismatch=True).verdict == "NOT COMPARABLE"
    assert compare.compare_runs(a, b, tolerance=(1, 1)).verdict == "REFUSED"
    assert compare.compare_runs(a, b, allow_mismatch=True, tolerance=(1, 1)).verdict == "EQUIVALENT"


def test_compare_runs_checks_seals_and_schemas_first(tmp_path):
    a = _sealed(tmp_path, "a")
    changed = _sealed(tmp_path, "b")
    (changed / ".hidden").write_text("added after sealing")
    with pytest.raises(SealError, match=r"\.hidden was added after sealing"):
        compare.compare_runs(a, changed)
    with pytest.raises(SealError, match=r"\.hidden was added after sealing"):
        compare.compare_runs(changed, a)
    future = _fp()
    future["schema"] = 99
    future_run = _sealed(tmp_path, "c", fp=future)
    with pytest.raises(SchemaError) as info:
        compare.compare_runs(a, future_run)
    assert str(info.value) == (
        f"{future_run}: fingerprint schema 99 is not readable by this launcher (reads 1, 2, 3, 4, 5)"
    )
    with pytest.raises(SealError, match="not complete"):
        compare.load(_sealed(tmp_path, "d", seal=False))


def test_a_refusal_on_cpu_flags_names_the_flags_that_differ():
    """Two flag lists that share a long prefix printed identically when truncated; the table
    names the items instead (and keeps scalars as values)."""
    common = ["avx", "avx2", "avx512_bf16", "avx512_bitalg", "avx512bw", "avx512cd", "avx512dq", "avx512f"]
    a, b = _fp(), _fp()
    a["hardware"]["cpu"]["isa"] = [*common, "avx512_vp2intersect", "avx_vnni"]
    b["hardware"]["cpu"]["isa"] = [*common, "amx_tile"]
    b["hardware"]["cpu"]["stepping"] = "8"
    b["software"]["distributions"]["keras"] = {"version": "3.16.0", "files_sha256": "f1"}
    table = "\n".join(compare.difference_table(key.key_differences(a, b), "A", "B"))
    assert "hardware.cpu.isa" in table and "only in A: avx512_vp2intersect, avx_vnni; only in B: amx_tile" in table
    assert "hardware.cpu.stepping" in table and " 7 " in table.replace('"', " ")
    assert "software.distributions.keras.version" in table and "3.16.0" in table
    mapping = compare.item_differences({"x": 1, "y": 2}, {"y": 3, "z": 4}, "A", "B")
    assert mapping == "only in A: x; only in B: z; changed: y"
    assert compare.item_differences([1, 2], [2, 1]) == "the same items in another order"


def test_a_long_list_difference_wraps_at_88_columns_between_whole_names():
    """Wrapped at spaces only: a distribution's name is never cut at its hyphens; up to 88
    characters stay on one line."""
    from launcher.verdict import compare

    wheels = [
        "tensorflow-cpu",
        "nvidia-cublas-cu12",
        "nvidia-cudnn-cu12",
        "nvidia-cuda-runtime-cu12",
        "nvidia-nccl-cu12",
    ]
    short = ["libnvidia-cublas-cu12-with-a-long-name", "xxxxx"]  # 82 characters of differences
    assert compare.difference_table([("software.distributions", wheels, ["keras"]), ("x", short, ["keras"])]) == [
        "  field                   run A                                         run B",
        "  software.distributions  only in run A: tensorflow-cpu, nvidia-cublas-cu12, nvidia-cudnn-cu12,",
        "                          nvidia-cuda-runtime-cu12, nvidia-nccl-cu12; only in run B: keras",
        "  x                       only in run A: libnvidia-cublas-cu12-with-a-long-name, xxxxx; only in run B: keras",
    ]


def test_a_report_of_runs_that_differ_only_in_output_files_says_what_is_equal():
    from launcher.verdict import compare

    c = compare.Comparison("DIFFERENT", 1, notes=[f"{compare.ONLY_OUTPUTS}: outputs/log.txt"], equal=False)
    assert compare.report(c, Path("/runs/a"), Path("/runs/b")).splitlines() == [
        "DIFFERENT: same comparability key; weights, metrics and trace are bitwise equal, but output files your code "
        "wrote differ (what else did it write into them?)",
        f"  {compare.ONLY_OUTPUTS}: outputs/log.txt",
    ]
    other = compare.Comparison(
        "DIFFERENT",
        1,
        notes=["no weights were recorded: compared what is listed above", f"{compare.ONLY_OUTPUTS}: outputs/log.txt"],
        equal=False,
    )
    first = compare.report(other, Path("/runs/a"), Path("/runs/b")).splitlines()[0]
    assert first == "DIFFERENT: same comparability key, different results — a determinism bug"


def test_a_not_comparable_report_names_every_note_on_its_first_line():
    from launcher.verdict import compare

    c = compare.Comparison(
        "NOT COMPARABLE", 3, notes=["neither run recorded data (an older launcher)", "results differ"], equal=None
    )
    assert compare.report(c, Path("/runs/a"), Path("/runs/b")) == (
        "NOT COMPARABLE (neither run recorded data (an older launcher); results differ)"
    )


def test_a_list_difference_of_89_characters_is_wrapped():
    from launcher.verdict import compare

    wheels = ["a" * 30, "b" * 24]  # "only in run A: " + 30 + ", " + 24 + "; only in run B: c" = 89 characters
    table = compare.difference_table([("f", wheels, ["c"])])
    assert table[1:] == [f"  f      only in run A: {'a' * 30}, {'b' * 24}; only in run B:", "         c"]
