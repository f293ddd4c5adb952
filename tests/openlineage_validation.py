"""Validate OpenLineage events against the JSON Schema files in tests/openlineage_schema/."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import jsonschema
from referencing import Registry, Resource

from tests.paths import REPO

SCHEMAS = REPO / "tests" / "openlineage_schema"
CORE = "https://openlineage.io/spec/2-0-2/OpenLineage.json"


def _registry() -> Registry:
    documents = [SCHEMAS / "OpenLineage.json", *sorted((SCHEMAS / "facets").glob("*.json"))]
    documents.append(REPO / "docs" / "openlineage" / "FmCodeRunFacet.json")
    resources = []
    for path in documents:
        schema = json.loads(Path(path).read_text())
        resources.append((schema["$id"], Resource.from_contents(schema)))
    return Registry().with_resources(resources)


REGISTRY = _registry()
# jsonschema checks `uri` and `date-time` only with optional packages this environment lacks:
# both are checked here, with the standard library.
FORMATS = jsonschema.FormatChecker(["uuid"])


@FORMATS.checks("date-time", raises=ValueError)
def _date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    parsed = dt.datetime.fromisoformat(value)
    return "T" in value.upper() and parsed.tzinfo is not None


@FORMATS.checks("uri")
def _uri(value: object) -> bool:
    return not isinstance(value, str) or bool(urlparse(value).scheme)


def _validate(instance: Any, url: str) -> None:
    """Validate against the schema `url` names (a document's `$id` and a `#/$defs/...` pointer)."""
    document, _, pointer = url.partition("#")
    if document not in REGISTRY:
        raise AssertionError(f"no schema for {url} in {SCHEMAS}")
    schema = {"$ref": url} if pointer else {"$ref": document}
    validator = jsonschema.Draft202012Validator(schema, registry=REGISTRY, format_checker=FORMATS)
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.path))
    if errors:
        raise AssertionError(f"{url}: " + "; ".join(f"{list(e.path)}: {e.message}" for e in errors))


def _facets(event: dict[str, Any]) -> list[dict[str, Any]]:
    found = list((event["run"].get("facets") or {}).values())
    found += list((event["job"].get("facets") or {}).values())
    for dataset in [*event.get("inputs", []), *event.get("outputs", [])]:
        for key in ("facets", "inputFacets", "outputFacets"):
            found += list((dataset.get(key) or {}).values())
    return found


def validate_event(event: dict[str, Any]) -> None:
    """Raise AssertionError naming what in `event` breaks the OpenLineage schema."""
    _validate(event, CORE)
    for facet in _facets(event):
        _validate(facet, facet["_schemaURL"])
