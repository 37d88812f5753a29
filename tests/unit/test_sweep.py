"""Sweeps without training: expansion, validation, slots, records, summary, verify."""

from __future__ import annotations

import json
import sys
import threading
import time
import types
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import launcher.verdict
from launcher.cli import main as cli
from launcher.errors import ConfigError, NotComparable
from launcher.record import layout
from launcher.record.probe import environment
from launcher.record.store import runs
from launcher.run.pipeline import Outcome
from launcher.sweep import multirun as sweep
from launcher.sweep import replay as sweep_replay
from launcher.sweep import report as sweep_report
from launcher.sweep import slots

CORES2 = [0, 1]
GPUS = [{"index": 0, "name": "A100"}, {"index": 1, "name": "A100"}, {"index": 5, "name": "A100"}]


def _store_arg(store: Path) -> str:
    return f"store.root={sweep.hydra_quote(str(store))}"


# ---------------------------------------------------------------- slots
def test_auto_slots_are_one_per_core_without_gpus():
    got = slots.plan("auto", [], CORES2)
    assert [(s.device, s.cpus, s.env) for s in got] == [
        ("cpu 0", frozenset({0}), {}),
        ("cpu 1", frozenset({1}), {}),
    ]


def test_auto_slots_are_one_per_gpu_and_name_the_gpu_index():
    got = slots.plan("auto", GPUS, list(range(8)))
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in got] == ["0", "1", "5"]
    assert all(s.cpus is None for s in got)


def test_fewer_slots_than_cores_get_equal_groups_of_cores():
    got = slots.plan(2, [], [0, 1, 2, 3, 4])
    assert [sorted(s.cpus) for s in got] == [[0, 1], [2, 3]]  # core 4 idles: equal slots
    assert got[1].device == "cpu 2-3"


def test_auto_cpu_slots_fit_the_jobs_thread_count():
    got = slots.plan("auto", [], range(8), threads_per_job=3)
    assert [s.device for s in got] == ["cpu 0-3", "cpu 4-7"]  # 2 jobs of 3 fit; equal halves
    assert len(slots.plan("auto", [], CORES2, threads_per_job=4)) == 1  # never zero
    assert len(slots.plan("auto", GPUS, CORES2, threads_per_job=4)) == 3  # GPUs: one each


@pytest.mark.parametrize("requested", [0, -1, True, "two", 1.5])
def test_bad_slot_counts_are_config_errors(requested):
    with pytest.raises(ConfigError, match="runtime.slots must be auto or a positive integer"):
        slots.plan(requested, [], CORES2)


def test_more_slots_than_devices_names_what_exists():
    with pytest.raises(ConfigError, match=r"runtime.slots=3 .* 2 CPU core\(s\) and no GPU.*at most 2"):
        slots.plan(3, [], CORES2)
    with pytest.raises(ConfigError, match=r"3 GPU\(s\)"):
        slots.plan(4, GPUS, CORES2)


def test_slot_round_trips_through_json():
    for slot in slots.plan("auto", [], CORES2) + slots.plan("auto", GPUS, []):
        assert slots.Slot.from_dict(json.loads(json.dumps(slot.to_dict()))) == slot


def test_a_held_slot_is_never_given_to_a_second_job(tmp_path):
    plan = slots.plan("auto", [], CORES2)
    with slots.hold(plan, tmp_path) as a, slots.hold(plan, tmp_path) as b:
        assert {a.index, b.index} == {0, 1}
        got: list = []
        waiter = threading.Thread(target=lambda: got.append(_take(plan, tmp_path)))
        waiter.start()
        time.sleep(0.3)
        assert got == []  # both slots busy: the third job waits
    waiter.join(timeout=5)
    assert got and got[0] in (0, 1)


def _take(plan, lock_dir) -> int:
    with slots.hold(plan, lock_dir, poll_s=0.02) as slot:
        return slot.index


def test_no_slots_means_the_scheduler_allocates(tmp_path):
    with slots.hold([], tmp_path / "never") as slot:
        assert slot is None
    assert not (tmp_path / "never").exists()


# ---------------------------------------------------------------- expansion and validation
def test_expand_follows_hydras_job_order_and_separates_hydra_overrides():
    jobs, hydra, swept = sweep.expand(
        ["+seed=range(2)", "train.learning_rate=0.1,0.01", "train.epochs=1", "hydra/launcher=joblib"]
    )
    assert jobs == [
        ["+seed=0", "train.learning_rate=0.1", "train.epochs=1"],
        ["+seed=0", "train.learning_rate=0.01", "train.epochs=1"],
        ["+seed=1", "train.learning_rate=0.1", "train.epochs=1"],
        ["+seed=1", "train.learning_rate=0.01", "train.epochs=1"],
    ]
    assert hydra == ["hydra/launcher=joblib"]
    assert swept == ["+seed", "train.learning_rate"]
    assert sweep.label(jobs[1], swept) == "+seed=0 train.learning_rate=0.01"


@pytest.mark.parametrize(
    "override, message",
    [
        ("+seed=range(0)", r"\+seed=range\(0\) yields no values"),
        ("+seed=range(5,1)", "yields no values"),
        ("+seed=interval(0,1)", r"interval\(\) needs a search: hydra/sweeper=optuna"),
        ("+seed=[1,", "mismatched input|no viable|extraneous|missing"),
    ],
)
def test_expand_rejects_sweeps_that_cannot_run(override, message):
    with pytest.raises(ConfigError, match=message):
        sweep.expand([override])


def test_launcher_choice_is_the_last_on_the_command_line():
    assert sweep.launcher_choice([]) == "joblib"
    assert sweep.launcher_choice(["hydra/launcher=submitit_local"]) == "submitit_local"
    assert sweep.launcher_choice(["hydra/launcher=a", "hydra/launcher=submitit_slurm"]) == ("submitit_slurm")


def test_auto_slots_follow_the_configured_intra_op_threads(store):
    plan = sweep.prepare(
        ["+seed=1,2", "determinism.intra_op_threads=2", _store_arg(store)], gpus=[], cores=[0, 1, 2, 3]
    )
    assert [s.device for s in plan.slots] == ["cpu 0-1", "cpu 2-3"]
    plan = sweep.prepare(
        ["+seed=1,2", "determinism.intra_op_threads=auto", _store_arg(store)], gpus=[], cores=[0, 1, 2, 3]
    )
    assert [s.device for s in plan.slots] == ["cpu 0-3"]


def test_prepare_composes_every_job_and_plans_slots(store):
    plan = sweep.prepare(["+seed=range(3)", _store_arg(store)], gpus=[], cores=CORES2)
    assert plan.seeds == [0, 1, 2] and plan.launcher == "joblib"
    assert [s.device for s in plan.slots] == ["cpu 0", "cpu 1"]
    assert plan.store_root == store


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["+seed=a,b"], r"job 0 \(\+seed=a\): seed must be an integer"),
        (["+seed=1,-2"], r"job 1 \(\+seed=-2\): seed must be an integer"),
        (["+seed=1,2", "runtime.slots=5"], r"runtime.slots=5 but this machine has 2 CPU"),
        (["+seed=1,2", "store.root=a,b"], "store.root cannot be swept"),
        (["seed=1,2"], "Could not override 'seed'"),
        (["+seed=1,2", "train.epochs=0"], "train.epochs must be a positive integer"),
    ],
)
def test_bad_input_is_one_line_before_any_job(overrides, message, store):
    with pytest.raises(ConfigError, match=message) as info:
        sweep.prepare([_store_arg(store), *overrides], gpus=[], cores=CORES2)
    assert "\n" not in str(info.value)


def too_many_slots() -> int:
    """A slot count this machine cannot give, whatever it has: more than its cores and GPUs together."""
    import os

    from launcher.record.probe import probes

    return len(os.sched_getaffinity(0)) + len(probes.hardware()["gpus"]) + 1


def test_cli_reports_bad_sweeps_with_exit_2_and_creates_nothing(store, capsys):
    assert cli.main(["-m", "+seed=range(0)", _store_arg(store)]) == 2
    assert cli.main(["-m", "+seed=1,2", f"runtime.slots={too_many_slots()}", _store_arg(store)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("launch: error: ") for line in err)
    assert f"runtime.slots={too_many_slots()} but this machine has" in err[1]
    assert list(store.iterdir()) == []


def test_slurm_sweeps_compose_and_leave_devices_to_the_scheduler(store):
    overrides = [
        "+seed=range(3)",
        "hydra/launcher=submitit_slurm",
        "hydra.launcher.gpus_per_node=1",
        "hydra.launcher.partition=gpu",
        "runtime.slots=64",
        _store_arg(store),
    ]
    plan = sweep.prepare(overrides, gpus=[], cores=CORES2)
    assert plan.slots == [] and plan.launcher == "submitit_slurm"
    argv = sweep.hydra_argv(plan, overrides, store / "sweeps" / "x")
    assert not any(a.startswith("hydra.launcher.n_jobs") for a in argv)


def test_slurm_launcher_config_is_hydras_submitit_plugin():
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="launcher.configs", version_base=None):
        cfg = compose(
            "launch", ["hydra/launcher=submitit_slurm", "hydra.launcher.gpus_per_node=1"], return_hydra_config=True
        )
    assert cfg.hydra.launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert cfg.hydra.launcher.gpus_per_node == 1


def test_joblib_gets_one_worker_per_slot_never_more_than_jobs(store):
    plan = sweep.prepare(["+seed=range(4)", _store_arg(store)], gpus=[], cores=CORES2)
    assert "hydra.launcher.n_jobs=2" in sweep.hydra_argv(plan, [], store)
    plan = sweep.prepare(["+seed=7", _store_arg(store)], gpus=[], cores=CORES2)
    assert "hydra.launcher.n_jobs=1" in sweep.hydra_argv(plan, [], store)


HOSTILE = ["/tmp/run store 'x'", 'a"b', "a\\b", "end\\", 'q\\"', "x=y,z", "new\nline", "[a]"]


@pytest.mark.parametrize("value", HOSTILE)
def test_hydra_quote_survives_hydras_parser(value):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides([f"k={sweep.hydra_quote(value)}"])[0]
    assert parsed.value() == value


def test_worker_env_covers_what_joblib_sets_in_its_workers():
    from joblib._parallel_backends import ParallelBackendBase

    expected = {*ParallelBackendBase.MAX_NUM_THREADS_VARS, ParallelBackendBase.TBB_ENABLE_IPC_VAR}
    assert expected | {"KMP_INIT_AT_FORK"} <= set(sweep.WORKER_ENV)


# ---------------------------------------------------------------- a job in its worker
class FakeJob:
    """Stands in for ``launcher.run.pipeline.run``; refuses arguments the sweep must not pass."""

    def __init__(self, status="complete", error: Exception | None = None):
        self.calls: list[dict] = []
        self.status, self.error = status, error

    def run(self, cfg, options, *, store_root, on_created=None):
        from launcher.run import pipeline

        unset = (options.replay_of, options.replay_notes, options.resume, options.python, options.cpu)
        assert unset == (None,) * 5 and options.signing_key is pipeline.COMPOSED, options
        self.calls.append(
            dict(
                store_root=store_root,
                cwd=options.cwd,
                cpus=options.cpus,
                echo=options.echo,
                track=options.track,
                extra_env=options.extra_env,
                env=dict(__import__("os").environ),
            )
        )
        if on_created is not None:
            on_created(Path(store_root) / "run-1")
        if self.error:
            raise self.error
        result = {"final_metrics": {"loss": 0.5}, "weights_sha256": "ab" * 32}
        return Outcome(
            Path(store_root) / "run-1",
            self.status,
            int(cfg.seed),
            result=result,
            error=None if self.status == "complete" else "boom",
        )


def _sweep_dir(tmp_path: Path, slot_list, **extra) -> Path:
    d = tmp_path / "sweep"
    (d / sweep.JOBS).mkdir(parents=True)
    meta = {
        "slots": [s.to_dict() for s in slot_list],
        "store_root": str(tmp_path),
        "cwd": str(tmp_path),
        "swept": ["+seed"],
        "worker_env": {},
        **extra,
    }
    runs.write_json(d / sweep.SWEEP, meta)
    return d


def test_run_job_runs_in_a_slot_and_records_the_outcome(tmp_path, monkeypatch):
    fake = FakeJob()
    monkeypatch.setattr("launcher.run.pipeline.run", fake.run)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # as a joblib worker has it
    d = _sweep_dir(tmp_path, slots.plan("auto", [], CORES2))
    record = sweep.run_job(OmegaConf.create({"seed": 3}), d, 7, ["+seed=3"])
    assert record["status"] == "complete" and record["slot"] == "cpu 0"
    assert record["weights_sha256"] == "ab" * 32 and record["final_metrics"] == {"loss": 0.5}
    (call,) = fake.calls
    assert call["cpus"] == frozenset({0}) and call["echo"] is False and call["extra_env"] == {}
    assert call["track"] is False  # MLflow: the sweep logs its jobs as its children, at the end
    assert "OMP_NUM_THREADS" not in call["env"]  # launch's environment, not the worker's
    assert json.loads((d / "jobs" / "007.json").read_text()) == record


@pytest.mark.parametrize("launcher_name,restored", [("joblib", True), ("submitit_slurm", False)])
def test_what_the_sweeps_own_imports_set_never_reaches_a_job(tmp_path, monkeypatch, launcher_name, restored):
    # `import optuna` imports scikit-learn where it is installed, which sets KMP_DUPLICATE_LIB_OK.
    fake = FakeJob()
    monkeypatch.setattr("launcher.run.pipeline.run", fake.run)
    monkeypatch.setenv("KMP_AFFINITY", "compact")
    monkeypatch.delenv("KMP_DUPLICATE_LIB_OK", raising=False)
    launch_env = environment.allowed_env(__import__("os").environ)
    monkeypatch.setenv("KMP_DUPLICATE_LIB_OK", "True")  # set after launch started
    monkeypatch.setenv("KMP_AFFINITY", "scatter")  # changed after launch started
    d = _sweep_dir(tmp_path, [], launch_env=launch_env, launcher=launcher_name)
    sweep.run_job(OmegaConf.create({"seed": 0}), d, 0, ["+seed=0"])
    env = fake.calls[0]["env"]
    if restored:
        assert "KMP_DUPLICATE_LIB_OK" not in env and env["KMP_AFFINITY"] == "compact"
    else:  # a cluster node's environment is its own
        assert env["KMP_DUPLICATE_LIB_OK"] == "True" and env["KMP_AFFINITY"] == "scatter"


def test_a_gpu_slot_sets_cuda_visible_devices(tmp_path, monkeypatch):
    fake = FakeJob()
    monkeypatch.setattr("launcher.run.pipeline.run", fake.run)
    d = _sweep_dir(tmp_path, slots.plan(1, GPUS, CORES2))
    sweep.run_job(OmegaConf.create({"seed": 0}), d, 0, ["+seed=0"])
    assert fake.calls[0]["extra_env"] == {"CUDA_VISIBLE_DEVICES": "0"}
    assert fake.calls[0]["cpus"] is None


@pytest.mark.parametrize("error", [ConfigError("bad store"), RuntimeError("bug")])
def test_a_job_that_raises_becomes_a_failed_record(tmp_path, monkeypatch, error):
    monkeypatch.setattr("launcher.run.pipeline.run", FakeJob(error=error).run)
    d = _sweep_dir(tmp_path, [])
    record = sweep.run_job(OmegaConf.create({"seed": 1}), d, 0, ["+seed=1"])
    assert record["status"] == "failed" and str(error) in record["error"]
    assert json.loads((d / "jobs" / "000.json").read_text())["status"] == "failed"


def test_after_ctrl_c_queued_jobs_do_not_start(tmp_path, monkeypatch):
    fake = FakeJob()
    monkeypatch.setattr("launcher.run.pipeline.run", fake.run)
    d = _sweep_dir(tmp_path, slots.plan("auto", [], CORES2))
    (d / sweep.STOP).write_text("{}")
    record = sweep.run_job(OmegaConf.create({"seed": 2}), d, 2, ["+seed=2"])
    assert record["status"] == "interrupted" and "not started" in record["error"]
    assert fake.calls == []


def test_first_ctrl_c_asks_to_stop_the_second_aborts(tmp_path, capsys):
    import os
    import signal

    try:
        with sweep._stop_on_ctrl_c(tmp_path):
            os.kill(os.getpid(), signal.SIGINT)  # the first: no KeyboardInterrupt, a STOP file
            time.sleep(0.1)
            assert (tmp_path / sweep.STOP).exists()
            assert "queued jobs will not start" in capsys.readouterr().err
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)  # the second aborts
                time.sleep(1)
    except KeyboardInterrupt:
        pytest.fail("the first Ctrl-C raised KeyboardInterrupt: it must only ask the sweep to stop")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# ---------------------------------------------------------------- summary
def _record(num, status="complete", metrics=None, weights=None, seed=None):
    rec = sweep.pending_record(num, [f"+seed={num}"], num if seed is None else seed)
    rec.update(status=status, final_metrics=metrics or {}, weights_sha256=weights)
    return rec


def test_summary_stats_over_completed_jobs_and_distinct_hashes():
    records = [
        _record(0, metrics={"loss": 1.0, "acc": 0.5}, weights="a" * 64),
        _record(1, metrics={"loss": 3.0, "acc": 0.7}, weights="b" * 64),
        _record(2, metrics={"loss": 2.0, "acc": 0.6}, weights="a" * 64),
        _record(3, status="failed"),
    ]
    s = sweep_report.summarize(records)
    assert s["metrics"]["loss"] == {"n": 3, "mean": 2.0, "std": 1.0, "min": 1.0, "max": 3.0}
    assert s["distinct_weights"] == 2 and s["ok"] is False
    assert s["counts"] == {"complete": 3, "failed": 1}
    table = sweep_report.render({**s, "sweep_dir": "/s"})
    lines = table.splitlines()
    assert lines[0].split() == ["job", "seed", "status", "acc", "loss", "weights_sha256"]
    assert lines[1].split() == ["000", "0", "complete", "0.5000", "1.0000", "a" * 16]
    assert lines[4].split()[:3] == ["003", "3", "failed"]
    assert lines[5].split() == ["mean", "0.6000", "2.0000"]
    assert lines[-1] == "3 of 4 jobs complete; 2 distinct weight hash(es); summary: /s/summary.json"


def test_a_job_that_never_ran_is_not_ok():
    s = sweep_report.summarize([_record(0, weights="a" * 64), _record(1, status="pending")])
    assert not s["ok"] and s["counts"] == {"complete": 1, "pending": 1}
    assert not sweep_report.summarize([])["ok"]


def test_finalize_writes_summary_once(tmp_path, capsys):
    d = _sweep_dir(tmp_path, [])
    runs.write_json(sweep.job_path(d, 0), _record(0, metrics={"loss": 1.0}, weights="c" * 64))
    first = sweep.finalize(d)
    assert first["ok"] and json.loads((d / "summary.json").read_text()) == first
    assert sweep.finalize(d) == first
    assert capsys.readouterr().out.count("1 of 1 jobs complete") == 1


def test_callback_summarizes_the_sweep_dir_hydra_ran(tmp_path, capsys):
    d = _sweep_dir(tmp_path, [])
    runs.write_json(sweep.job_path(d, 0), _record(0, status="failed"))
    sweep.SweepSummary().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(d)}}}))
    assert json.loads((d / "summary.json").read_text())["counts"] == {"failed": 1}


# ---------------------------------------------------------------- verify
class FakeReplay(types.ModuleType):
    """Stands in for ``launcher.verdict.replay``: verdicts by run directory name."""

    def __init__(self, verdicts: dict[str, str]):
        super().__init__("launcher.verdict.replay")
        self.verdicts, self.calls = verdicts, []

    def replay(self, run_dir, *, allow_mismatch=False, echo=True, cpus=None):
        self.calls.append((run_dir.name, allow_mismatch, echo))
        verdict = self.verdicts[run_dir.name]
        if verdict == "RAISE":
            raise NotComparable("key differs: software.tensorflow", [])
        return types.SimpleNamespace(
            original=run_dir, new_run=run_dir.parent / "new", verdict=verdict, exit_code=0, detail="", comparison=None
        )


@pytest.fixture
def fake_replay(monkeypatch):
    def install(verdicts):
        fake = FakeReplay(verdicts)
        monkeypatch.setitem(sys.modules, "launcher.verdict.replay", fake)
        # `from launcher.verdict import replay` reads the package attribute once the real module was imported.
        monkeypatch.setattr(launcher.verdict, "replay", fake, raising=False)
        return fake

    return install


def _replay_sweep(tmp_path, statuses):
    d = _sweep_dir(tmp_path, [])
    for num, status in enumerate(statuses):
        rec = _record(num, status=status, weights="a" * 64)
        rec["run_dir"] = str(tmp_path / f"run{num}")
        runs.write_json(sweep.job_path(d, num), rec)
    return d


def test_sweep_replay_counts_reproduced_jobs(tmp_path, fake_replay, capsys):
    d = _replay_sweep(tmp_path, ["complete", "complete"])
    fake = fake_replay({"run0": "REPRODUCED", "run1": "REPRODUCED"})
    assert cli.main(["sweep", "replay", str(d)]) == 0
    assert fake.calls == [("run0", False, False), ("run1", False, False)]
    out, err = capsys.readouterr()
    assert "2 of 2 jobs reproduced bit for bit" in out and "note" not in err
    (report,) = (d / "verify").iterdir()
    assert json.loads(report.read_text())["reproduced"] == 2


def test_sweep_verify_is_the_old_word_for_replay_for_one_more_release(tmp_path, fake_replay, capsys):
    d = _replay_sweep(tmp_path, ["complete"])
    fake = fake_replay({"run0": "REPRODUCED"})
    assert cli.main(["sweep", "verify", str(d)]) == 0
    assert fake.calls == [("run0", False, False)]
    out, err = capsys.readouterr()
    assert "[launch] note: sweep verify is now sweep replay (the old spelling goes in the next release)" in err
    assert "1 of 1 jobs reproduced bit for bit" in out
    assert "verify" not in cli.usage().split("launch sweep")[1].splitlines()[0]  # the old word is not offered


def test_sweep_replay_exit_codes(tmp_path, fake_replay):
    d = _replay_sweep(tmp_path, ["complete", "complete", "failed"])
    fake_replay({"run0": "REPRODUCED", "run1": "DIVERGED"})
    assert sweep_replay.replay(d) == 1
    d2 = _replay_sweep(tmp_path / "b", ["complete", "complete"])
    fake_replay({"run0": "REPRODUCED", "run1": "RAISE"})
    assert sweep_replay.replay(d2) == 3
    report = json.loads(next((d2 / "verify").iterdir()).read_text())
    assert [j["verdict"] for j in report["jobs"]] == ["REPRODUCED", "NOT COMPARABLE"]


def test_sweep_replay_rejects_what_is_not_a_sweep(tmp_path, capsys):
    assert cli.main(["sweep", "replay", str(tmp_path)]) == 2
    assert "is not a sweep directory" in capsys.readouterr().err
    assert cli.main(["sweep", "frobnicate", str(tmp_path)]) == 2


def test_a_sweep_whose_jobs_seed_themselves_says_the_seed_did_not_reach_them():
    from launcher.sweep import report

    jobs = [
        {"num": i, "seed": i, "status": "complete", "weights_sha256": "ab" * 32, "final_metrics": {}} for i in range(3)
    ]
    summary = report.summarize(jobs)
    summary["seeds_set_by_jobs"] = [{"call": "keras.utils.set_random_seed", "value": 42, "where": "train.py:7"}]
    note = report.seed_note(summary)
    assert note and "3 seeds gave 1 distinct" in note and "keras.utils.set_random_seed(42) at train.py:7" in note
    assert note in report.render(summary)
    summary["seeds_set_by_jobs"] = []
    assert report.seed_note(summary) is None  # one hash for three seeds, but no call to name: nothing claimed


def test_a_requeued_job_finds_the_run_its_earlier_attempt_started(tmp_path):
    from launcher.job.training import checkpoints

    d = _sweep_dir(tmp_path, [])
    assert sweep.requeued_run(d, 0) is None  # a first attempt
    run_dir = runs.create(tmp_path / "store")
    runs.write_bytes(run_dir / "config.yaml", b"seed: 0\ntrain:\n  name: script\n")
    runs.set_status(run_dir, "interrupted")
    runs.write_json(sweep.job_path(d, 0), {**sweep.pending_record(0, ["+seed=0"], 0), "run_dir": str(run_dir)})
    assert sweep.requeued_run(d, 0) is None  # no checkpoint: the job starts afresh
    path = run_dir / layout.CHECKPOINTS / checkpoints.name(1)
    path.mkdir(parents=True)
    runs.write_json(path / checkpoints.MANIFEST, {"epoch": 1, "files": {}})
    assert sweep.requeued_run(d, 0) == run_dir
