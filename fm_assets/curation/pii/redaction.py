"""PII redaction: run the detectors in priority order over a text, replace each span with its
kind's token, and return a `Redaction` (the audit record: kind, span, rule version, never the
value) for each. Pure functions over `str`: a stage calls `redact_batch` inside a Ray task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from fm_assets.curation.pii.addresses import email_spans, ipv4_spans, ipv6_spans
from fm_assets.curation.pii.numbers import card_spans, phone_spans

# Bump whenever the output for the same text would change (docs/curation.md, PII).
PII_RULES_VERSION: Final = "pii_v1"

EMAIL: Final = "EMAIL"
PHONE: Final = "PHONE"
IP_ADDRESS: Final = "IP_ADDRESS"
CREDIT_CARD: Final = "CREDIT_CARD"
PII_KINDS: Final = (EMAIL, PHONE, IP_ADDRESS, CREDIT_CARD)

EMAIL_TOKEN: Final = "<EMAIL>"
PHONE_TOKEN: Final = "<PHONE>"
IP_ADDRESS_TOKEN: Final = "<IP_ADDRESS>"
CREDIT_CARD_TOKEN: Final = "<CREDIT_CARD>"
REPLACEMENT_TOKENS: Final[Mapping[str, str]] = MappingProxyType(
    {
        EMAIL: EMAIL_TOKEN,
        PHONE: PHONE_TOKEN,
        IP_ADDRESS: IP_ADDRESS_TOKEN,
        CREDIT_CARD: CREDIT_CARD_TOKEN,
    }
)

# Detected spans are overwritten with NUL before the next detector runs: no pattern matches it,
# and every pattern's boundary checks treat it as a separator.
_MASK: Final = "\x00"


@dataclass(frozen=True, slots=True)
class Redaction:
    """One redacted span: `original_text[start:end]` was PII of `kind` (one of `PII_KINDS`).

    This is also the audit record of the redaction. It never holds the value.
    """

    kind: str
    start: int
    end: int
    rule_version: str = PII_RULES_VERSION

    def __post_init__(self) -> None:
        if self.kind not in REPLACEMENT_TOKENS:
            raise ValueError(f"unknown PII kind {self.kind!r}: expected one of {PII_KINDS}")
        if not 0 <= self.start < self.end:
            raise ValueError(f"bad span [{self.start}, {self.end}): need 0 <= start < end")

    @property
    def length(self) -> int:
        """Characters of the original text this redaction replaced."""
        return self.end - self.start

    @property
    def token(self) -> str:
        """The replacement written in place of the span."""
        return REPLACEMENT_TOKENS[self.kind]


def find_pii(text: str) -> list[Redaction]:
    """Spans of `text` to redact, sorted by start and non-overlapping."""
    if not isinstance(text, str):
        raise TypeError(f"find_pii expects str, got {type(text).__name__}")
    found: list[Redaction] = []
    working = text
    for kind, detect in _DETECTORS:
        claimed: list[tuple[int, int]] = []
        for start, end, is_pii in detect(working):
            claimed.append((start, end))
            if is_pii:
                found.append(Redaction(kind, start, end))
        if claimed:
            working = _masked(working, claimed)
    found.sort(key=lambda r: r.start)
    return found


def redact(text: str) -> tuple[str, list[Redaction]]:
    """`text` with every PII span replaced by its kind's token, and the redactions made.

    Spans in the redactions refer to the original `text`, not to the redacted one.
    """
    redactions = find_pii(text)
    if not redactions:
        return text, redactions
    parts: list[str] = []
    position = 0
    for redaction in redactions:
        parts.append(text[position : redaction.start])
        parts.append(redaction.token)
        position = redaction.end
    parts.append(text[position:])
    return "".join(parts), redactions


def redact_batch(texts: list[str]) -> tuple[list[str], list[list[Redaction]]]:
    """`redact` over a batch: the redacted texts and each text's redactions, in input order."""
    redacted: list[str] = []
    redactions: list[list[Redaction]] = []
    for text in texts:
        new_text, found = redact(text)
        redacted.append(new_text)
        redactions.append(found)
    return redacted, redactions


def _masked(text: str, spans: list[tuple[int, int]]) -> str:
    parts: list[str] = []
    position = 0
    for start, end in spans:
        parts.append(text[position:start])
        parts.append(_MASK * (end - start))
        position = end
    parts.append(text[position:])
    return "".join(parts)


_DETECTORS: Final[tuple[tuple[str, Callable[[str], Iterator[tuple[int, int, bool]]]], ...]] = (
    (EMAIL, email_spans),
    (IP_ADDRESS, ipv6_spans),
    (IP_ADDRESS, ipv4_spans),
    (CREDIT_CARD, card_spans),
    (PHONE, phone_spans),
)
