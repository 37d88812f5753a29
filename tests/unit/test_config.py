import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf, open_dict

from launcher.errors import ConfigError
from launcher.run import config, schema
from launcher.run.composition import compose


def test_default_composition_is_strict_mnist_on_the_sample():
    cfg = compose([])
    assert cfg.train.name == "mnist" and cfg.train.data == "sample"
    assert cfg.determinism.level == "strict" and cfg.runtime.name == "local"
    assert "seed" not in cfg  # so that +seed=N works as users type it


def test_plus_seed_overrides_the_level_default():
    assert config.resolve(compose(["+seed=42"])).seed == 42
    assert config.resolve(compose([])).seed == 0


def test_off_draws_a_seed_and_records_it():
    a = config.resolve(compose(["determinism=off"]))
    b = config.resolve(compose(["determinism=off"]))
    assert isinstance(a.seed, int) and a.seed != b.seed


def test_auto_threads_resolve_once_to_a_number():
    cfg = compose(["determinism.intra_op_threads=auto"])
    resolved = config.resolve(cfg, cpu_count=48)
    assert resolved.determinism.intra_op_threads == 48
    # Resolving the stored config again (a replay on another machine) keeps the number.
    assert config.resolve(resolved, cpu_count=2).determinism.intra_op_threads == 48


def test_config_hash_ignores_the_store_but_not_the_threads():
    a = config.resolve(compose(["store.root=/a"]))
    b = config.resolve(compose(["store.root=/b"]))
    c = config.resolve(compose(["determinism.intra_op_threads=2"]))
    assert config.config_hash(a) == config.config_hash(b) != config.config_hash(c)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["train.epochs=0"], "train.epochs must be a positive integer"),
        (["train.epochs=-3"], "train.epochs must be a positive integer"),
        (["train.batch_size=abc"], "train.batch_size: Value 'abc' of type 'str' could not be converted to Integer"),
        (["+seed=abc"], "seed must be an integer"),
        (["+seed=1.5"], "seed must be an integer"),
        (["determinism.intra_op_threads=0"], "determinism.intra_op_threads"),
        (["determinism.intra_op_threads=null"], "must be set in strict mode"),
        (["train=custom"], "train.entrypoint=package.module:function"),
        (["train=script", "train.script=/nonexistent.py"], "is not a file"),
        (["store=/tmp/runs"], r"store is a set of settings.*store\.root, store\.snapshot_max_mb"),
        (["sweep=val_loss"], r"sweep is a set of settings.*sweep\.objective"),
    ],
)
def test_invalid_values_are_named(overrides, message):
    with pytest.raises(ConfigError, match=message):
        config.validate(compose(overrides))


@pytest.mark.parametrize(
    "overrides", [["train.nope=1"], ["train=nope"], ["determinism=maybe"], ["seed=1"], ["bad override"]]
)
def test_unknown_options_are_one_line_config_errors(overrides):
    with pytest.raises(ConfigError) as info:
        compose(overrides)
    assert "\n" not in str(info.value)


def test_resolved_config_is_plain_yaml():
    resolved = config.resolve(compose(["+seed=5"]))
    assert OmegaConf.to_yaml(resolved).count("seed: 5") == 1


def test_the_trace_and_the_slots_are_not_in_the_config_hash_but_the_pipeline_is():
    base = config.config_hash(config.resolve(compose([])))
    assert config.config_hash(config.resolve(compose(["determinism.trace_every=1"]))) == base
    assert config.config_hash(config.resolve(compose(["runtime.slots=1"]))) == base
    assert config.config_hash(config.resolve(compose(["train.data_parallel_calls=autotune"]))) != base
    assert config.config_hash(config.resolve(compose(["determinism.jit_compile=true"]))) != base


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("determinism.trace_every=-1", "trace_every must be an integer >= 0"),
        ("determinism.jit_compile=maybe", "determinism.jit_compile: Value 'maybe' is not a valid bool"),
        ("determinism.deterministic_data=1", "deterministic_data must be true, false or null"),
        ("train.data_parallel_calls=0", "data_parallel_calls"),
        ("train.data_parallel_calls=fast", "data_parallel_calls"),
    ],
)
def test_bad_knob_values_are_named(override, message):
    with pytest.raises(ConfigError, match=message):
        config.resolve(compose([override]))


def test_xla_on_is_refused_for_user_code_which_compiles_its_own_model():
    with pytest.raises(ConfigError, match="jit_compile applies to train=mnist"):
        config.resolve(compose(["train=custom", "train.entrypoint=m:f", "determinism.jit_compile=true"]))
    config.resolve(compose(["train=custom", "train.entrypoint=m:f"]))  # strict's own false is fine


def test_an_entrypoint_that_cannot_be_found_is_bad_input_before_any_run(tmp_path, monkeypatch):
    """Found as the job would find it (train.path, else the launch directory), without importing it."""
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("raise SystemExit('imported!')\n")  # must never run here
    (tmp_path / "mypkg" / "train.py").write_text("def main(cfg, seed): pass\n")
    config.check_entrypoint(compose(["train=custom", "train.entrypoint=mypkg.train:main"]), str(tmp_path))
    config.check_entrypoint(
        compose(["train=custom", "train.entrypoint=mypkg.train:main", f"train.path={tmp_path}"]), "/"
    )
    with pytest.raises(ConfigError, match=r"mypkg has no module 'trian'"):
        config.check_entrypoint(compose(["train=custom", "train.entrypoint=mypkg.trian:main"]), str(tmp_path))
    with pytest.raises(ConfigError, match=r"no module 'mypgk' in .* set train.path=DIR"):
        config.check_entrypoint(compose(["train=custom", "train.entrypoint=mypgk.train:main"]), str(tmp_path))
    config.check_entrypoint(compose(["train=custom", "train.entrypoint=json:loads"]), str(tmp_path))  # installed


def test_tracking_with_mlflow_missing_is_refused_before_training(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(ConfigError, match=r"tracking=mlflow needs mlflow: pip install 'tf-repro-launcher\[mlflow\]'"):
        config.validate(compose(["tracking=mlflow"]))


def test_the_config_hash_is_of_canonical_json_so_a_stored_runs_hash_is_recomputed_alike():
    """A stored run's ``config_sha256`` is recomputed by every later launcher (replay, compare):
    sorted keys, no spaces, so key order and JSON formatting never change it."""
    import hashlib

    a = {"train": {"name": "mnist", "epochs": 2}, "determinism": {"level": "strict"}}
    b = {"determinism": {"level": "strict"}, "train": {"epochs": 2, "name": "mnist"}}
    canonical = '{"determinism":{"level":"strict"},"train":{"epochs":2,"name":"mnist"}}'
    assert config.config_hash(a) == config.config_hash(b) == hashlib.sha256(canonical.encode()).hexdigest()


def test_the_hashed_part_resolves_interpolations_and_treats_a_config_without_runtime_as_local():
    base = {"lr": 0.1, "train": {"name": "mnist", "learning_rate": "${lr}"}, "image": {"name": "tf-cpu"}}
    literal = {"lr": 0.1, "train": {"name": "mnist", "learning_rate": 0.1}, "image": {"name": "tf-cpu"}}
    assert config.hashed_part(OmegaConf.create(base)) == config.hashed_part(OmegaConf.create(literal))
    changed = OmegaConf.create({**base, "lr": 0.2})
    assert config.hashed_part(changed)["train"]["learning_rate"] == 0.2  # the value a run computes with
    # No runtime node (an old run's config): local, so the image settings are not part of it.
    assert "image" not in config.hashed_part(literal)
    # A node that is no mapping where a left-out key would be (a user's config) is kept as it is.
    odd = {"determinism": "strict", "train": "mine", "store": {"root": "x"}}
    assert config.hashed_part(odd) == {"determinism": "strict", "train": "mine"}


@pytest.mark.parametrize(
    "section,value,message",
    [
        ("train.name", "nope", "train='nope' is unknown; choose one of mnist, custom, script, notebook"),
        ("determinism.level", "nope", "determinism='nope' is unknown; choose one of off, seeded, strict, portable"),
        ("runtime.name", "nope", "runtime='nope' is unknown; choose one of local, docker"),
    ],
)
def test_a_name_no_group_option_has_is_refused_with_the_options(section, value, message):
    """A config written by hand, or by an older launcher, reaches validate without Hydra's own check."""
    cfg = compose([])
    OmegaConf.update(cfg, section, value)
    with pytest.raises(ConfigError) as info:
        config.validate(cfg)
    assert str(info.value) == message


@pytest.mark.parametrize("seed,valid", [(0, True), (2**32 - 1, True), (2**32, False), (2**33 - 1, False), (-1, False)])
def test_a_seed_is_any_32_bit_unsigned_integer(seed, valid):
    if valid:
        config.validate(compose([f"+seed={seed}"]))
    else:  # refused as the config is composed
        with pytest.raises(ConfigError, match=r"seed must be an integer in \[0, 2\*\*32\)"):
            compose([f"+seed={seed}"])


_SCRIPT = str(Path(__file__).resolve())  # any existing file is a script to validate
REFUSALS = [  # every refusal of config.validate, word for word: the line the user reads (docs/errors.md)
    (["determinism.seed=-1"], "determinism.seed must be a non-negative integer, got -1"),
    # a value its type does not take: OmegaConf's words, as Hydra's for a schema's field
    (["determinism.seed=1.5"], "determinism.seed: Value '1.5' of type 'float' could not be converted to Integer"),
    (
        ["determinism=portable", "determinism.intra_op_threads=null"],
        "determinism.intra_op_threads must be set in portable mode (an integer or auto)",
    ),
    (
        ["determinism=portable", "determinism.inter_op_threads=null"],
        "determinism.inter_op_threads must be set in portable mode (an integer or auto)",
    ),
    (["determinism.inter_op_threads=0"], "determinism.inter_op_threads must be an integer >= 1 or auto, got 0"),
    (
        ["determinism.intra_op_threads=many"],
        "determinism.intra_op_threads must be an integer >= 1 or auto, got 'many'",
    ),
    (
        ["determinism=portable", "determinism.isa_baseline=x86-64-v4"],
        "determinism.isa_baseline: Invalid value 'x86-64-v4', expected one of [x86-64-v3]",
    ),
    (
        ["determinism.random_ops=sometimes"],
        "determinism.random_ops: Invalid value 'sometimes', expected one of [num_random_ops, constant]",
    ),
    (["determinism.onednn_opts=maybe"], "determinism.onednn_opts: Value 'maybe' is not a valid bool (type str)"),
    # a value its type would take as another (1 as true): refused, never kept as the string or number it is
    (["determinism.jit_compile=1"], "determinism.jit_compile must be true, false or null, got 1"),
    (["determinism.deterministic_data=yes"], "determinism.deterministic_data must be true, false or null, got 'yes'"),
    (
        ["train=script", f"train.script={_SCRIPT}", "determinism.jit_compile=true"],
        "determinism.jit_compile applies to train=mnist; train=script code passes jit_compile to its own "
        "model.compile()",
    ),
    (["determinism.trace_every=-1"], "determinism.trace_every must be an integer >= 0 (0 = no trace), got -1"),
    (
        ["determinism.trace_every=true"],
        "determinism.trace_every: Value 'True' of type 'bool' could not be converted to Integer",
    ),
    (["train.checkpoint_every=-1"], "train.checkpoint_every must be an integer >= 0, got -1"),
    (
        ["train.checkpoint_every=true"],
        "train.checkpoint_every: Value 'True' of type 'bool' could not be converted to Integer",
    ),
    (["train.epochs='3'"], "train.epochs must be an integer, got '3'"),
    (["train=custom", "train.entrypoint=m:f", "train.observe=no"], "train.observe must be true or false, got 'no'"),
    (["runtime=docker", "runtime.mounts=[1]"], "runtime.mounts must be a list of strings, got [1]"),
    (["store.require_signed=yes"], "store.require_signed must be true or false, got 'yes'"),
    (
        ["store.snapshot_max_files=-1"],
        "store.snapshot_max_files must be a whole number, 0 or more (null: no cap), got -1",
    ),
    (["train.checkpoint_keep=0"], "train.checkpoint_keep must be a positive integer, got 0"),
    (["train.max_samples=0"], "train.max_samples must be a positive integer, got 0"),
    (["train.learning_rate=0"], "train.learning_rate must be a positive number, got 0"),
    (["train.data=''"], "train.data must be sample, full, or a path to an .npz file or IDX directory, got ''"),
    (["train.data=/nonexistent.npz"], "train.data '/nonexistent.npz' does not exist (use sample, full, or a path)"),
    (["train.data_parallel_calls=0"], "train.data_parallel_calls must be a positive integer or autotune, got 0"),
    (["train=custom", "train.entrypoint=mypkg.train"], "train=custom needs train.entrypoint=package.module:function"),
    (["train=script"], "train=script needs train.script=path/to/train.py"),
    (["store.root=''"], "store.root must be a directory path, got ''"),
]


@pytest.mark.parametrize("overrides,message", REFUSALS)
def test_each_refusal_says_what_is_wrong_and_what_is_allowed(overrides, message):
    with pytest.raises(ConfigError) as info:
        config.validate(compose(overrides))
    assert str(info.value) == message


@pytest.mark.parametrize(
    "overrides",
    [
        ["determinism.intra_op_threads=auto", "determinism.inter_op_threads=auto"],
        ["determinism=seeded", "determinism.intra_op_threads=null", "determinism.inter_op_threads=null"],
        ["determinism=off", "determinism.intra_op_threads=null"],
        ["train.data_parallel_calls=autotune"],
        ["train.max_samples=null"],
        ["+seed=0"],
        ["determinism.seed=0"],
        ["determinism.onednn_opts=true", "determinism.deterministic_data=false", "determinism.jit_compile=null"],
        ["train.checkpoint_every=0"],
        ["train=script", f"train.script={_SCRIPT}"],
    ],
)
def test_what_the_docs_allow_is_valid(overrides):
    config.validate(compose(overrides))


def test_an_unknown_tracker_is_refused_with_the_trackers():
    cfg = compose([])
    OmegaConf.update(cfg, "tracking.name", "wandb")
    with pytest.raises(ConfigError) as info:
        config.validate(cfg)
    assert str(info.value) == "tracking='wandb' is unknown; choose one of none, mlflow"


def test_a_config_from_before_the_trace_setting_is_valid():
    """An older run's config has no determinism.trace_every (replay and resume validate it): no trace."""
    cfg = compose([])
    with open_dict(cfg):
        del cfg.determinism["trace_every"]
    config.validate(cfg)


@pytest.mark.parametrize("runtime,refused", [("local", False), ("docker", True)])
def test_train_data_full_is_checked_where_the_job_will_download_it(runtime, refused, tmp_path, monkeypatch):
    """``full`` is a name, not a path: downloaded by the job, which a local job can do (the server
    answers here) and a container, without network, cannot."""
    from launcher.errors import DataError
    from launcher.job import data

    monkeypatch.setattr(data, "keras_cache", lambda: [tmp_path / "mnist.npz"])
    monkeypatch.setattr(data, "_unreachable", lambda url: None)
    data._check_full.cache_clear()
    cfg = compose([f"runtime={runtime}", "train.data=full"])
    try:
        if refused:
            with pytest.raises(DataError, match="a job's container has no network"):
                config.validate(cfg)
        else:
            config.validate(cfg)
    finally:
        data._check_full.cache_clear()


def test_a_config_from_before_the_data_parallel_calls_setting_is_valid():
    cfg = compose([])
    with open_dict(cfg):
        del cfg.train["data_parallel_calls"]
    config.validate(cfg)


def test_tracking_needs_mlflow_only_when_it_is_mlflow(monkeypatch):
    """Checked before training (not a warning after it); a config without tracking (an older run's)
    or with tracking=none never asks for mlflow."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(ConfigError) as info:
        config.validate(compose(["tracking=mlflow"]))
    assert str(info.value) == "tracking=mlflow needs mlflow: pip install 'tf-repro-launcher[mlflow]'"
    config.validate(compose(["tracking=none"]))
    cfg = compose([])
    with open_dict(cfg):
        del cfg["tracking"]
    config.validate(cfg)


# ---------------------------------------------------------------- the schemas (launcher.run.schema)
OPTIONS = sorted(
    (group.name, path.stem)
    for group in (Path(config.__file__).parents[1] / "configs").iterdir()
    if group.name in schema.SCHEMAS
    for path in group.glob("*.yaml")
)


@pytest.mark.parametrize("group,option", OPTIONS)
def test_every_key_of_every_launcher_option_has_its_typed_field_in_the_order_of_its_yaml(group, option):
    """A key added to an option's YAML without a field in its schema would go unchecked."""
    keys = list(OmegaConf.load(Path(config.__file__).parents[1] / "configs" / group / f"{option}.yaml"))
    assert [f.name for f in dataclasses.fields(schema.SCHEMAS[group][1][option])] == keys


def test_the_store_block_of_launch_yaml_has_its_typed_fields_in_order():
    assert [f.name for f in dataclasses.fields(schema.StoreSettings)] == list(compose([]).store)


def test_the_schemas_are_in_hydras_config_store():
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    assert OmegaConf.get_type(store.load("schema/train/mnist.yaml").node) is schema.MnistTrain
    assert OmegaConf.get_type(store.load("schema/determinism/portable.yaml").node) is schema.PortableDeterminism
    assert OmegaConf.get_type(store.load("schema/store.yaml").node) is schema.StoreSettings


@pytest.mark.parametrize(
    "overrides,key,value",
    [
        (["train.learning_rate=1"], "learning_rate", 1),  # a float field would make it 1.0, and another hash
        (["train=script", f"train.script={_SCRIPT}", "train.args=[--epochs,3]"], "args", ["--epochs", 3]),
    ],
)
def test_the_schemas_check_the_config_and_never_shape_it(overrides, key, value):
    cfg = compose(overrides)
    config.validate(cfg)
    assert OmegaConf.get_type(cfg.train) is dict  # no schema under it: its keys, order and types are the YAML's
    assert repr(OmegaConf.to_container(cfg.train)[key]) == repr(value)  # 1, not 1.0; 3, not '3'


def test_a_stored_config_is_checked_by_the_same_schemas():
    """A run's config.yaml read back (replay, resume) never went through Hydra's composition."""
    stored = OmegaConf.create(OmegaConf.to_container(compose(["train=custom", "train.entrypoint=m:f"])))
    stored.train.observe = "yes"  # a string the job would read as true, whatever it says
    with pytest.raises(ConfigError) as info:
        config.validate(stored)
    assert str(info.value) == "train.observe must be true or false, got 'yes'"
