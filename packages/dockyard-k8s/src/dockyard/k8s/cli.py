"""`dockyard-k8s`: render and validate Kubernetes deployments offline.

    dockyard-k8s render --recipe RECIPE.yaml --infra INFRA.yaml -o DIR [--crd-dir CRDS]
    dockyard-k8s validate DIR_OR_FILE [--kubernetes-version 1.31] [--crd-dir CRDS] [-v]
    dockyard-k8s config --recipe RECIPE.yaml --infra INFRA.yaml   # the config the pods get

Exit status: 0 ok, 1 validation errors, 2 a recipe/infra/config error (the message names the field).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from dockyard.k8s.build import build_context, load_infra, load_recipe, render, write_manifests
from dockyard.k8s.errors import SpecError, SpecErrors
from dockyard.k8s.validate import validate_dir, validate_objects


def _render(args: argparse.Namespace) -> int:
    recipe = load_recipe(args.recipe)
    infra = load_infra(args.infra)
    objects = render(build_context(recipe, infra, Path(args.recipe).resolve().parent))
    report = validate_objects(
        objects, kubernetes_version=infra.kubernetes_version, crd_dir=args.crd_dir
    )
    if not report.ok and not args.force:
        print(report.format(), file=sys.stderr)
        print(
            "not written: the rendered objects do not validate (see above; --force writes anyway)",
            file=sys.stderr,
        )
        return 1
    paths = write_manifests(objects, args.output)
    for w in report.warnings:
        print(f"warning: {w[1].ref}: {w[1].path}: {w[1].message}", file=sys.stderr)
    print(
        f"wrote {len(paths)} manifests to {args.output} (validated against Kubernetes {infra.kubernetes_version})"
    )
    return 0 if report.ok else 1


def _validate(args: argparse.Namespace) -> int:
    report = validate_dir(
        args.path, kubernetes_version=args.kubernetes_version, crd_dir=args.crd_dir
    )
    print(report.format(verbose=args.verbose))
    return 0 if report.ok else 1


def _config(args: argparse.Namespace) -> int:
    recipe = load_recipe(args.recipe)
    config = build_context(
        recipe, load_infra(args.infra), Path(args.recipe).resolve().parent
    ).config
    print(yaml.safe_dump(config, sort_keys=False), end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dockyard-k8s", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("render", help="Render a recipe + infra spec to manifests (validated).")
    p.add_argument("--recipe", required=True, type=Path)
    p.add_argument("--infra", required=True, type=Path)
    p.add_argument("-o", "--output", required=True, type=Path, help="Directory for the manifests.")
    p.add_argument(
        "--crd-dir", type=Path, default=None, help="Full KubeRay CRDs to validate against."
    )
    p.add_argument("--force", action="store_true", help="Write even when validation fails.")
    p.set_defaults(func=_render)

    p = sub.add_parser(
        "validate", help="Validate manifests offline (Kubernetes + KubeRay schemas)."
    )
    p.add_argument("path", type=Path, help="A YAML file or a directory of them.")
    p.add_argument("--kubernetes-version", default="1.31")
    p.add_argument(
        "--crd-dir", type=Path, default=None, help="Full KubeRay CRDs (default: vendored)."
    )
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=_validate)

    p = sub.add_parser("config", help="Print the dockyard config the pods of a deployment get.")
    p.add_argument("--recipe", required=True, type=Path)
    p.add_argument("--infra", required=True, type=Path)
    p.set_defaults(func=_config)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (SpecError, SpecErrors) as e:
        for line in str(e).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
