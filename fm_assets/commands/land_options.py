"""`fm land`'s generator and team options: what produced a synthetic batch, and who pays for it.

The generator is given by six flags or by one JSON file (`--generator FILE.json` holding the
same fields: model, revision, prompt_template_id, prompt_template_sha256, sampling_params,
seed); a batch that claims a generator with some of them missing is refused, naming them.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from fm_assets.settings import Settings
from fm_assets.storage.generators import Generator

# (record field, flag) of every generator field.
FLAGS = (
    ("model", "--generator-model"),
    ("revision", "--generator-revision"),
    ("prompt_template_id", "--prompt-template-id"),
    ("prompt_template_sha256", "--prompt-template-sha256"),
    ("sampling_params", "--sampling-params"),
    ("seed", "--seed"),
)


@dataclass(frozen=True)
class LandProvenance:
    """What `fm land` was told beside the files: the batch's generator and team."""

    generator: Generator | None
    team: str | None  # None: FM_TEAM

    def team_for(self, settings: Settings) -> str:
        return self.team or settings.team


def _generator(values: dict[str, Any], file: str | None) -> Generator | None:
    given = {field: values[field] for field, _ in FLAGS if values[field] is not None}
    if file is not None:
        if given:
            raise ValueError("give the generator either as --generator FILE or as flags, not both")
        try:
            raw = json.loads(Path(file).read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"--generator {file}: not a readable JSON object ({exc})") from exc
        return Generator.from_mapping(raw, f"--generator {file}")
    if not given:
        return None
    missing = [flag for field, flag in FLAGS if field not in given]
    if missing:
        raise ValueError(
            f"a batch claiming a generator needs every generator flag; missing {', '.join(missing)}"
        )
    return Generator.from_mapping(given, "the generator flags")


def land_provenance_options(command: Callable[..., None]) -> Callable[..., None]:
    """Add the generator and team options to `command`, handed to it as `provenance`."""

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> None:
        values = {field: kwargs.pop(field) for field, _ in FLAGS}
        generator = _generator(values, kwargs.pop("generator_file"))
        kwargs["provenance"] = LandProvenance(generator, kwargs.pop("team"))
        command(**kwargs)

    options = [
        click.option("--team", default=None, help="Team charged for the batch (default FM_TEAM)."),
        click.option(
            "--generator",
            "generator_file",
            type=click.Path(exists=True, dir_okay=False),
            default=None,
            help="JSON file with the generator fields (instead of the flags below).",
        ),
        click.option("--seed", type=int, default=None, help="Generator: sampling seed."),
        click.option(
            "--sampling-params",
            default=None,
            help='Generator: a JSON object, e.g. {"temperature":0.7}.',
        ),
        click.option(
            "--prompt-template-sha256", default=None, help="Generator: sha256 of the template."
        ),
        click.option("--prompt-template-id", default=None, help="Generator: prompt template id."),
        click.option(
            "--generator-revision", "revision", default=None, help="Generator: model revision."
        ),
        click.option(
            "--generator-model",
            "model",
            default=None,
            help="Generator: model id of a synthetic batch (with every generator flag).",
        ),
    ]
    for option in options:
        wrapper = option(wrapper)
    return wrapper


def check_provenance(settings: Settings, provenance: LandProvenance) -> str:
    """The batch's team, once the team name and the generator passed the policy."""
    from fm_assets.curation.generators import load_generator_policy
    from fm_assets.storage.teams import check_team_name

    model = provenance.generator.model if provenance.generator else None
    load_generator_policy(settings).refuse_batch(model, "this batch")
    return check_team_name(provenance.team_for(settings))
