"""Generator provenance: which model, prompt and sampling produced a synthetic document.

A synthetic batch lands like any other; its documents carry the generator that produced them,
given for the whole batch (`fm land --generator-model ...`, kept in the landing manifest) or per
record (a JSONL `generator` object, which wins over the batch's). Every document table holds it
in two provenance columns: `generator_model` (the model id: what revocations, policies and cards
group by) and `generator` (the whole record as canonical JSON). Natural documents hold null in
both.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

# Every field a generator record must have, in the order messages name them.
REQUIRED_FIELDS = (
    "model",
    "revision",
    "prompt_template_id",
    "prompt_template_sha256",
    "sampling_params",
    "seed",
)
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Generator:
    """The model (id and revision), prompt template (id and sha256 of its text), sampling
    parameters and seed that produced a synthetic document or batch."""

    model: str
    revision: str
    prompt_template_id: str
    prompt_template_sha256: str
    sampling_params: str  # canonical JSON of an object (temperature, top_p, max_tokens, ...)
    seed: int

    def as_dict(self) -> dict[str, Any]:
        """The record as a JSON object (sampling parameters as an object)."""
        return {**asdict(self), "sampling_params": json.loads(self.sampling_params)}

    def to_json(self) -> str:
        """Canonical JSON: what the `generator` column holds, equal for equal generators."""
        return json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_mapping(cls, raw: object, what: str) -> Generator:
        """Validate a generator record; a missing or malformed field raises ValueError naming
        every such field and what it must be."""
        if not isinstance(raw, Mapping):
            raise ValueError(f"{what} must be a JSON object with {', '.join(REQUIRED_FIELDS)}")
        missing = [name for name in REQUIRED_FIELDS if raw.get(name) in (None, "")]
        if missing:
            raise ValueError(
                f"{what} claims a generator but lacks {', '.join(missing)} (a generator needs "
                f"{', '.join(REQUIRED_FIELDS)})"
            )
        unknown = sorted(set(raw) - set(REQUIRED_FIELDS))
        if unknown:
            raise ValueError(f"{what} has unknown generator fields {unknown}")
        problems = []
        for name in REQUIRED_FIELDS[:4]:
            if not isinstance(raw[name], str):
                problems.append(f"{name} must be a string")
        if isinstance(raw["prompt_template_sha256"], str) and not _SHA256.fullmatch(
            raw["prompt_template_sha256"]
        ):
            problems.append("prompt_template_sha256 must be 64 lower-case hex digits")
        params = raw["sampling_params"]
        if isinstance(params, str):
            try:
                params = json.loads(params)
            except ValueError:
                params = None
        if not isinstance(params, Mapping):
            problems.append("sampling_params must be a JSON object")
        seed = raw["seed"]
        if isinstance(seed, bool) or not isinstance(seed, int):
            problems.append("seed must be an integer")
        if problems:
            raise ValueError(f"{what} has a malformed generator: {'; '.join(problems)}")
        return cls(
            model=str(raw["model"]),
            revision=str(raw["revision"]),
            prompt_template_id=str(raw["prompt_template_id"]),
            prompt_template_sha256=str(raw["prompt_template_sha256"]),
            sampling_params=json.dumps(params, sort_keys=True, separators=(",", ":")),
            seed=int(seed),
        )

    @classmethod
    def from_json(cls, text: str, what: str = "a recorded generator") -> Generator:
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{what} is not valid JSON: {exc}") from exc
        return cls.from_mapping(raw, what)


def generator_columns(generator: Generator | None) -> dict[str, str | None]:
    """The two provenance columns of a document produced by `generator` (None: natural)."""
    if generator is None:
        return {"generator_model": None, "generator": None}
    return {"generator_model": generator.model, "generator": generator.to_json()}
