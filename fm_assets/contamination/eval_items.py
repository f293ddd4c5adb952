"""Read an eval set's items from JSONL, JSONL.gz, Arrow (IPC file or stream) or Parquet.

Every row is an item, numbered from 0; its text is its named fields joined with newlines, and
empty rows are kept and listed (docs/contamination.md).
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

SUPPORTED_SUFFIXES = (".jsonl", ".jsonl.gz", ".arrow", ".parquet")
_ARROW_FILE_MAGIC = b"ARROW1"


@dataclass(frozen=True)
class EvalItem:
    """One row of an eval set: the text values of each named field, in field order."""

    item_id: int  # row number in the file, from 0 (blank JSONL lines are not rows)
    values: tuple[tuple[str, ...], ...]  # one tuple per named field; a list field has several

    @property
    def text(self) -> str:
        """All values of all named fields, joined with newlines."""
        return "\n".join(value for field in self.values for value in field)

    @property
    def is_empty(self) -> bool:
        """True when no named field has any text."""
        return not any(self.values)


@dataclass(frozen=True)
class EvalSet:
    """The items of one eval-set file and the file's identity."""

    path: str
    fields: tuple[str, ...]
    sha256: str  # of the file's bytes as stored (compressed, for .jsonl.gz)
    items: tuple[EvalItem, ...]

    @property
    def count(self) -> int:
        """Number of items (rows), empty ones included."""
        return len(self.items)

    @property
    def empty_item_ids(self) -> tuple[int, ...]:
        """Items whose named fields are all empty: nothing in them can be matched."""
        return tuple(item.item_id for item in self.items if item.is_empty)


def read_eval_set(path: str | Path, fields: Sequence[str]) -> EvalSet:
    """Read every row of an eval-set file as an `EvalItem` of the named `fields`.

    Raises ValueError naming the file when the format is unknown, a row is not valid JSON, or a
    named field is missing (with the fields that are there).
    """
    path = Path(path)
    fields = tuple(fields)
    if not fields or any(not f for f in fields):
        raise ValueError(f"{path}: name at least one field to read, e.g. fields=['question']")
    name = path.name.lower()
    if not name.endswith(SUPPORTED_SUFFIXES):
        raise ValueError(
            f"{path}: unknown eval-set format; supported suffixes: {', '.join(SUPPORTED_SUFFIXES)}"
        )
    data = path.read_bytes()
    sha256 = hashlib.sha256(data).hexdigest()
    if name.endswith((".jsonl", ".jsonl.gz")):
        rows: Iterator[tuple[int, dict[str, object]]] = _jsonl_rows(path, data)
        items = tuple(_item(path, index, row, fields) for index, row in rows)
    else:  # .arrow or .parquet
        table = _read_table(path, data)
        for field in fields:
            _check_arrow_field(path, table.schema, field)
        columns = {top: table.column(top).to_pylist() for top in _top_level(table, fields)}
        items = tuple(
            _item(path, index, {top: values[index] for top, values in columns.items()}, fields)
            for index in range(table.num_rows)
        )
    return EvalSet(path=str(path), fields=fields, sha256=sha256, items=items)


def _jsonl_rows(path: Path, data: bytes) -> Iterator[tuple[int, dict[str, object]]]:
    if path.name.lower().endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise ValueError(f"{path}: not a readable gzip file: {exc}") from exc
    index = 0
    for line_number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: line {line_number} is not valid JSON: {exc}") from exc
        if not isinstance(row, dict):
            raise ValueError(
                f"{path}: line {line_number} is a JSON {type(row).__name__}, not an object"
            )
        yield index, row
        index += 1


def _read_table(path: Path, data: bytes) -> pa.Table:
    try:
        if path.name.lower().endswith(".parquet"):
            return pq.read_table(pa.BufferReader(data))
        if data.startswith(_ARROW_FILE_MAGIC):
            return ipc.open_file(pa.BufferReader(data)).read_all()
        # Hugging Face datasets' .arrow files are IPC streams, not IPC files.
        return ipc.open_stream(pa.BufferReader(data)).read_all()
    except pa.ArrowInvalid as exc:
        raise ValueError(f"{path}: not a readable Arrow/Parquet file: {exc}") from exc


def _top_level(table: pa.Table, fields: tuple[str, ...]) -> list[str]:
    names = set(table.column_names)
    tops = [f if f in names else f.split(".", 1)[0] for f in fields]
    return list(dict.fromkeys(tops))


def _check_arrow_field(path: Path, schema: pa.Schema, field: str) -> None:
    if field in schema.names:
        return
    parts = field.split(".")
    if parts[0] not in schema.names:
        raise ValueError(f"{path}: no field {field!r}; the file has: {', '.join(schema.names)}")
    kind: pa.DataType = schema.field(parts[0]).type
    for depth, part in enumerate(parts[1:], start=1):
        while pa.types.is_list(kind) or pa.types.is_large_list(kind):
            kind = kind.value_type
        if not pa.types.is_struct(kind) or kind.get_field_index(part) < 0:
            where = ".".join(parts[:depth])
            inside = (
                ", ".join(kind.field(i).name for i in range(kind.num_fields))
                if pa.types.is_struct(kind)
                else f"nothing (it is {kind})"
            )
            raise ValueError(f"{path}: no field {field!r}; {where!r} holds: {inside}")
        kind = kind.field(part).type


def _item(path: Path, index: int, row: dict[str, object], fields: tuple[str, ...]) -> EvalItem:
    return EvalItem(item_id=index, values=tuple(_field_values(path, index, row, f) for f in fields))


def _field_values(path: Path, index: int, row: dict[str, object], field: str) -> tuple[str, ...]:
    if field in row:
        found: list[object] = [row[field]]
    else:
        found = [row]
        for depth, part in enumerate(field.split(".")):
            found = _descend(path, index, field, depth, part, found)
    texts: list[str] = []
    for value in found:
        _collect_texts(path, index, field, value, texts)
    return tuple(texts)


def _descend(
    path: Path, index: int, field: str, depth: int, part: str, values: list[object]
) -> list[object]:
    out: list[object] = []
    stack = list(values)
    while stack:
        value = stack.pop(0)
        if isinstance(value, list):
            stack[:0] = value  # through lists of records, in order
        elif isinstance(value, dict) and part in value:
            out.append(value[part])
        elif value is None:
            continue
        else:
            where = ".".join(field.split(".")[:depth]) or "the row"
            has = ", ".join(map(str, value)) if isinstance(value, dict) else type(value).__name__
            raise ValueError(f"{path}: item {index} has no field {field!r}; {where} has: {has}")
    return out


def _collect_texts(path: Path, index: int, field: str, value: object, out: list[str]) -> None:
    if value is None:
        return
    if isinstance(value, str):
        if value.strip():
            out.append(value)
    elif isinstance(value, bool | int | float):
        out.append(str(value))
    elif isinstance(value, list | tuple):
        for element in value:
            _collect_texts(path, index, field, element, out)
    elif isinstance(value, dict):
        keys = ", ".join(f"{field}.{key}" for key in value)
        raise ValueError(
            f"{path}: field {field!r} of item {index} is a record; name its text field: {keys}"
        )
    else:
        raise ValueError(
            f"{path}: field {field!r} of item {index} is a {type(value).__name__}, not text"
        )
