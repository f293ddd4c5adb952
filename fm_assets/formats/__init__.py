"""Landed input files -> records for the `raw_documents` stage; nothing is lost silently.

    file bytes --sniff (gzip magic, WARC/, filedesc://, "{", extension)--> format
        |
        +-- gunzip (tolerant: every byte before damage is kept) --> ContentStream
        |
        +-- warc / wet  --> fast_archive.py (fastwarc) --+
        |                     `-- from the first record it cannot vouch for: archive.py
        +-- arc         --> archive.py (warcio)        --+
        +-- jsonl       --> jsonl.py (per line)        --+--> ParsedRecord | UnreadableRecord
        +-- html / text --> whole_file.py              --+    (index 0..n-1, at least one)

Bad input never raises: each problem becomes an `UnreadableRecord` whose `rule` is a `Rule`
code and whose `reason` says what was wrong and where. Archive records that are not documents
are skipped and counted: iterate a `FileRecordReader` to read `skipped_non_documents`.
"""

from fm_assets.formats.reader import DEFAULT_MAX_RECORD_BYTES, FileRecordReader, iter_file_records
from fm_assets.formats.records import FileItem, ParsedRecord, ReadStats, Rule, UnreadableRecord
from fm_assets.formats.sniff import detect_format

__all__ = [
    "DEFAULT_MAX_RECORD_BYTES",
    "FileItem",
    "FileRecordReader",
    "ParsedRecord",
    "ReadStats",
    "Rule",
    "UnreadableRecord",
    "detect_format",
    "iter_file_records",
]
