"""``launch image build|list|prune|bootstrap-base|lock``: argument parsing only (``launch lock``, the old
spelling of ``launch image lock``, is ``launcher.cli.main``'s ``RENAMED``).

The work is done by ``imagebuild`` (build), ``baseimage`` (bootstrap-base, lock) and
``containers`` (list, prune); each imports the Docker SDK only when it runs.
"""

from __future__ import annotations

from launcher.cli.args import old_spelling, parser
from launcher.console import table
from launcher.errors import ExitCode


def _spec(overrides: list[str]):
    from omegaconf import OmegaConf

    from launcher.docker import images
    from launcher.run.composition import compose

    cfg = compose(overrides)
    return images.spec_from_config(OmegaConf.to_container(cfg.image, resolve=True))


def build_parser():
    """``launch image``'s parser: its actions, each a subparser (``launch image ACTION --help``)."""
    p = parser("image", "Build, list and prune the launcher's Docker images; pin their packages.")
    sub = p.add_subparsers(dest="action", required=True, metavar="{build,list,prune,bootstrap-base,lock}")

    def action(name: str, what: str):
        return sub.add_parser(name, help=what, description=what[0].upper() + what[1:] + ".")

    build = action("build", "build the image of the config (or reuse it)")
    build.add_argument(
        "--force",
        dest="rebuild",
        action="store_true",
        help="build with no cache even when the tag exists; check the packages match",
    )
    old_spelling(build, "--rebuild", "--force", "rebuild")
    build.add_argument(
        "overrides", nargs="*", metavar="OVERRIDES", help="config overrides, e.g. image=tf-cpu image.base=local"
    )
    action("list", "the launcher's images and the local base")
    prune = action("prune", "remove older images, builder stages, orphan containers")
    prune.add_argument("--keep", type=int, default=1, help="images kept per name, newest first (default 1)")
    prune.add_argument("--dry-run", action="store_true", help="say what would be removed")
    base = action("bootstrap-base", "make the local base image (debootstrap, no registry)")
    base.add_argument("--suite", default="bookworm", help="Debian suite (default bookworm)")
    base.add_argument("--mirror", default="http://deb.debian.org/debian", help="Debian mirror URL")
    base.add_argument("--force", action="store_true", help="make it again even when it exists")
    lock = action("lock", "pin an image's packages: lockfiles/NAME.txt from its .in file, with pip-compile")
    lock.add_argument(
        "--host", action="store_true", help="lock with this host's Python (must be the image's: 3.11, linux x86_64)"
    )
    lock.add_argument("overrides", nargs="*", metavar="OVERRIDES", help="config overrides: image=NAME (default tf-cpu)")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.action == "build":
        from launcher.docker import imagebuild

        info = imagebuild.ensure_image(_spec(args.overrides), rebuild=args.rebuild)
        print(info.ref)
        return ExitCode.OK
    if args.action == "list":
        return _list()
    if args.action == "prune":
        return _prune(args.keep, args.dry_run)
    from launcher.docker import baseimage

    if args.action == "lock":
        baseimage.lock(_spec(args.overrides), on_host=args.host)
    else:
        baseimage.bootstrap_base(suite=args.suite, mirror=args.mirror, force=args.force)
    return ExitCode.OK


def _list() -> int:
    from launcher.docker import containers, images

    cli = containers.client(timeout=60)
    rows = []
    for attrs in containers.managed_images(cli):
        labels = containers.labels_of(attrs)
        role = labels.get("launch.role")
        if role not in ("image", "base") or (role == "base" and not attrs.get("RepoTags")):
            continue  # builder stages: removed by prune
        refs = [t for t in attrs.get("RepoTags") or [] if ":unverified-" not in t] or ["<none>"]
        packages = labels.get("launch.packages_sha256", "") if role == "image" else "(base)"
        size = f"{attrs.get('Size', 0) / 1e9:.2f} GB"
        rows.append((refs[0], attrs["Id"][7:19], size, attrs.get("Created", "")[:19], packages[:16]))
    if not rows:
        print(f"no launch images; make the base with `launch image bootstrap-base` ({images.LOCAL_BASE})")
        return ExitCode.OK
    for line in table(("IMAGE", "ID", "SIZE", "CREATED", "PACKAGES"), sorted(rows)):
        print(line)
    return ExitCode.OK


def _prune(keep: int, dry_run: bool) -> int:
    from launcher.docker import containers
    from launcher.errors import ConfigError

    if keep < 0:
        raise ConfigError("launch image prune: --keep must be 0 or more")
    cli = containers.client(timeout=600)
    if not dry_run:
        for name in containers.reap_orphans(cli):
            print(f"removed orphan job container {name}")
    by_name: dict[str, list[dict]] = {}
    for attrs in containers.managed_images(cli):
        labels = containers.labels_of(attrs)
        if labels.get("launch.role") != "image":
            continue  # the base is removed with docker rmi only: it takes a debootstrap to remake
        by_name.setdefault(labels["launch.image"], []).append(attrs)
    for _name, group in sorted(by_name.items()):
        group.sort(key=lambda a: (bool(a.get("RepoTags")), a.get("Created", "")), reverse=True)
        tagged = [a for a in group if a.get("RepoTags")]
        for attrs in tagged[keep:] + [a for a in group if not a.get("RepoTags")]:
            for ref in attrs.get("RepoTags") or [attrs["Id"]]:
                print(f"{'would remove' if dry_run else 'removed'} {ref}")
                if not dry_run:
                    containers.remove_image(cli, ref)
    if not dry_run:
        print(f"removed {containers.prune_builder_cache(cli)} builder stage image(s)")
    return ExitCode.OK
