"""PII detection and redaction: e-mail addresses, phone numbers, public IP addresses, card numbers.

Pure functions over `str`, no I/O: a stage calls `redact_batch` inside a Ray task. Each
`Redaction` is also the audit record of one replacement: its kind, its span in the original
text, its length and the rule version, never the value (nor a hash of it).

Rules of `pii_v1` (bump `PII_RULES_VERSION` whenever the output for the same text would change):

- Detectors run in priority order: e-mail, IPv6, IPv4, credit card, phone. Every span a detector
  claims, redacted or kept, is masked before the next one runs, so spans never overlap and a
  later rule never re-reads part of an earlier match (an IP is never also a phone number).
- E-mail: an ASCII local part of 1-64 characters `[A-Za-z0-9._%+-]`, `@`, 1-8 dot-separated
  ASCII labels and an alphabetic top-level domain of 2-24 letters. Internationalized (UTF-8)
  local parts and non-punycode domains are not detected.
- IP: dotted-quad IPv4 (no leading zeros, not part of a longer dotted number such as a version
  `1.2.3.4.5` or `v1.2.3.4`) and IPv6 as parsed by `ipaddress` (at least three non-empty
  groups, so `a::b` in code is not an address). Only public addresses are redacted; everything
  in `NON_PUBLIC_NETWORKS` (private, loopback, link-local, shared/CGNAT, documentation,
  benchmarking, multicast, reserved, unspecified) is kept. The table is explicit rather than
  `ipaddress.is_global` because that table changes between Python releases, which would change
  the output without a version bump. An IPv4-mapped IPv6 address is judged by its IPv4 address.
- Credit card: 12-19 digits, optionally grouped by one consistent separator (space or dash),
  that pass the Luhn check and have an issuer prefix that exists for that length (see
  `_card_issuer_ok`): 13-19 digits starting 3-6, 16-digit Mastercard 2221-2720, 15-digit
  JCB 2131 and 15-digit UATP/JCB starting 1; 12-digit Maestro only for prefixes 50 and 56-69.
  Numbers failing Luhn are kept. When a grouped run is longer than a card (an expiry date
  written after the number), the longest leading groups that form a card are taken.
- Phone: 7-15 digits (E.164's maximum), optionally `+country`, a `(0)` trunk, a parenthesized
  area code (after a national prefix: `8 (495)`, `1 (800)`), groups joined by one consistent
  separator (space, dot or dash) and an extension (`x123`, `ext. 123`). Date-shaped numbers
  (`2024-01-31`, `31.01.2024`) are never phones. Shapes that are phone numbers on their own
  are redacted anywhere: an international prefix, an area code in parentheses, an extension,
  North American 3-3-4 (optionally after `1`), national numbers with a trunk `0`
  (`0490 75 40 81`; not the US SSN shape `0dd-dd-dddd`), four or more two-digit groups joined by
  dots or dashes (`01.84.17.61.18`). Any other shape (`467 3395`, a bare `9498777106`) is
  redacted only with a phone word (`_PHONE_WORD_LIST`: phone, tel, mobile, fax, call, ...; and
  电话, 携帯, ... in scripts without spaces) in the 48 characters before or 16 after it,
  because bare digit groups are more often amounts, IDs or addresses.

Every scan is linear in the text: quantifiers are bounded, and each pattern begins with one
character class (so `re` skips to candidate characters in C) followed by look-behinds that reject
the inside of a longer token. A 5 MB single line of digits, hex, `@`s or binary junk is scanned
in about a second; see `bench/results/pii.md`.
"""

from __future__ import annotations

import bisect
import ipaddress
import itertools
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

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

NON_PUBLIC_NETWORKS: Final = tuple(
    ipaddress.ip_network(network)
    for network in (
        # IPv4 (IANA IPv4 special-purpose registry, plus multicast)
        "0.0.0.0/8",  # "this network"
        "10.0.0.0/8",  # private
        "100.64.0.0/10",  # shared address space (carrier-grade NAT)
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local
        "172.16.0.0/12",  # private
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # documentation (TEST-NET-1)
        "192.168.0.0/16",  # private
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # documentation (TEST-NET-2)
        "203.0.113.0/24",  # documentation (TEST-NET-3)
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, including broadcast 255.255.255.255
        # IPv6 (IANA IPv6 special-purpose registry, plus multicast and deprecated site-local)
        "::/128",  # unspecified
        "::1/128",  # loopback
        "100::/64",  # discard-only
        "2001:db8::/32",  # documentation
        "3fff::/20",  # documentation
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated)
        "ff00::/8",  # multicast
    )
)


def _address_ranges(version: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """First and last addresses of the non-public networks of one IP version, sorted."""
    networks = sorted(
        (n for n in NON_PUBLIC_NETWORKS if n.version == version), key=lambda n: n.network_address
    )
    for before, after in itertools.pairwise(networks):
        if before.overlaps(after):
            raise ValueError(f"NON_PUBLIC_NETWORKS: {before} overlaps {after}; merge them")
    firsts = tuple(int(n.network_address) for n in networks)
    return firsts, tuple(int(n.broadcast_address) for n in networks)


# A bisect over integer ranges: far cheaper than `address in network` for every network.
_V4_FIRSTS, _V4_LASTS = _address_ranges(4)
_V6_FIRSTS, _V6_LASTS = _address_ranges(6)

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


# --- e-mail -------------------------------------------------------------------------------------

_EMAIL_RE: Final = re.compile(
    r"[A-Za-z0-9._%+-](?<![A-Za-z0-9._%+-][A-Za-z0-9._%+-])"
    r"[A-Za-z0-9._%+-]{0,63}"
    r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.){1,8}"
    r"(?:[A-Za-z]{2,24}|xn--[A-Za-z0-9-]{1,59})"
    r"(?![A-Za-z0-9-])"
)


def _emails(text: str) -> Iterator[tuple[int, int, bool]]:
    if "@" not in text:  # a C scan, much cheaper than running the pattern over the text
        return
    for match in _EMAIL_RE.finditer(text):
        yield match.start(), match.end(), True


# --- IP addresses -------------------------------------------------------------------------------

# Not preceded by a letter, digit or dot and not followed by one or by ".digit": `v1.2.3.4` and
# the first four parts of `1.2.3.4.5` are version numbers, not addresses. Octets are checked in
# Python (at most 255, no leading zero).
_IPV4_RE: Final = re.compile(
    r"[0-9](?<![0-9A-Za-z.][0-9])[0-9]{0,2}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}"
    r"(?![0-9A-Za-z]|\.[0-9])"
)
_IPV6_RE: Final = re.compile(
    r"[0-9A-Fa-f:](?<![0-9A-Za-z:.][0-9A-Fa-f:])"
    # At least two colons, checked in bounded time.
    r"(?=(?<=:)[0-9A-Fa-f]{0,4}:|[0-9A-Fa-f]{0,3}:[0-9A-Fa-f]{0,4}:)"
    r"[0-9A-Fa-f:]{1,38}"
    r"(?:(?<=:)(?:[0-9]{1,3}\.){3}[0-9]{1,3})?"  # IPv4-embedded form ::ffff:192.0.2.1
    r"(?![0-9A-Za-z:]|\.[0-9])"
)


def _is_public_v4(value: int) -> bool:
    index = bisect.bisect_right(_V4_FIRSTS, value) - 1
    return index < 0 or value > _V4_LASTS[index]


def _is_public_v6(address: ipaddress.IPv6Address) -> bool:
    if address.ipv4_mapped is not None:
        return _is_public_v4(int(address.ipv4_mapped))
    value = int(address)
    index = bisect.bisect_right(_V6_FIRSTS, value) - 1
    return index < 0 or value > _V6_LASTS[index]


def _ipv4s(text: str) -> Iterator[tuple[int, int, bool]]:
    for match in _IPV4_RE.finditer(text):
        value = 0
        for octet in match.group().split("."):
            if (octet[0] == "0" and len(octet) > 1) or int(octet) > 255:
                break
            value = value << 8 | int(octet)
        else:
            yield match.start(), match.end(), _is_public_v4(value)


def _ipv6s(text: str) -> Iterator[tuple[int, int, bool]]:
    if "::" not in text and text.count(":") < 7:
        return
    for match in _IPV6_RE.finditer(text):
        candidate = match.group()
        try:
            address = ipaddress.IPv6Address(candidate)
        except ValueError:
            continue
        # `a::b` and `::` parse, but in prose they are code or punctuation far more often.
        groups = [group for group in candidate.split(":") if group]
        if len(groups) + (1 if "." in candidate else 0) < 3:
            continue
        yield match.start(), match.end(), _is_public_v6(address)


# --- credit cards -------------------------------------------------------------------------------

_CARD_RE: Final = re.compile(
    r"[0-9](?<![0-9A-Za-z+][0-9])(?<![0-9][ .-][0-9])"
    r"(?=(?:[ -]?[0-9]){11})"  # at least 12 digits, checked in bounded time
    r"[0-9]{0,18}(?:(?P<sep>[ -])[0-9]{1,19}(?:(?P=sep)[0-9]{1,19}){0,8})?"
    r"(?![0-9A-Za-z])"
)


_LUHN_DOUBLED: Final = {str(d): (2 * d - 9 if d > 4 else 2 * d) for d in range(10)}


def _luhn_ok(digits: str) -> bool:
    total = sum(map(int, digits[-1::-2])) + sum(_LUHN_DOUBLED[c] for c in digits[-2::-2])
    return total % 10 == 0


def _card_issuer_ok(digits: str) -> bool:
    """Whether a card network issues numbers of this length with this prefix."""
    length = len(digits)
    first, two, four = digits[0], int(digits[:2]), int(digits[:4])
    if length == 12:
        return two == 50 or 56 <= two <= 69  # Maestro
    if not 13 <= length <= 19:
        return False
    if first in "3456":
        return True
    if first == "2":
        return (2221 <= four <= 2720 and length == 16) or (four == 2131 and length == 15)
    return first == "1" and length == 15  # UATP, JCB 1800


def _cards(text: str) -> Iterator[tuple[int, int, bool]]:
    for match in _CARD_RE.finditer(text):
        sep = match.group("sep")
        groups = match.group().split(sep) if sep else [match.group()]
        # Longest run of leading groups that is a card: "4111 1111 1111 1111 12 27" (a card
        # then its expiry) still yields the card.
        for count in range(len(groups), 0, -1):
            digits = "".join(groups[:count])
            if len(digits) < 12:
                break
            if len(digits) <= 19 and _card_issuer_ok(digits) and _luhn_ok(digits):
                end = match.start() + len((sep or "").join(groups[:count]))
                yield match.start(), end, True
                break


# --- phone numbers ------------------------------------------------------------------------------

_PHONE_RE: Final = re.compile(
    r"""
    (?<![0-9A-Za-z+])(?<![0-9][ .-])         # not the inside of a longer number or word
    (?=(?:[ .()+-]{0,4}[0-9]){7})            # at least 7 digits, checked in bounded time
    (?P<intl>\+[0-9]{1,3}[ .-]?)?
    (?P<trunk>\(0\)[ .-]?)?
    (?:(?P<lead>[0-9]{1,2}[ ]?)?(?P<area>\([0-9]{1,4}\)[ .-]?))?   # 8 (495), 1 (800)
    (?P<main>[0-9]{1,15}(?:(?P<sep>[ .-])[0-9]{1,15}(?:(?P=sep)[0-9]{1,15}){0,5})?)
    (?P<ext>[ ]?(?:x|ext\.?)[ ]?[0-9]{1,6})?
    (?![0-9A-Za-z]|[ .-][0-9])               # nor the head of one
    """,
    re.VERBOSE,
)
# Where `_PHONE_RE` may start: it cannot begin with a character class, so `re` would try it at
# every position of the text; this one can, and skips to the candidates in C.
_PHONE_START_RE: Final = re.compile(
    r"[0-9+(](?<![0-9A-Za-z+][0-9+(])(?<![0-9][ .-][0-9+(])(?=(?:[ .()+-]{0,4}[0-9]){6})"
)
# Words that make a bare digit group (467 3395) a phone number when near it. Generic verbs such
# as "reach", "ring" or "answer" are left out: near numbers they are mostly arithmetic.
_PHONE_WORD_LIST: Final = """
    phone phones telephone telefone mobile mob cell cellphone fax desk office landline hotline
    tel call calls called calling dial dialed dialing answering sms text whatsapp contact
    message messages telefon telefono teléfono téléphone tél handy móvil телефон тел
"""
_PHONE_WORDS: Final = frozenset(_PHONE_WORD_LIST.split())
# Scripts written without spaces between words: found as substrings, not as words.
_PHONE_WORDS_UNSPACED: Final = ("電話", "电话", "手机", "手機", "携帯", "전화")
_WORD_RE: Final = re.compile(r"[^\W\d_]+")
_PHONE_CONTEXT_BEFORE: Final = 48
_PHONE_CONTEXT_AFTER: Final = 16


def _is_date(groups: list[str]) -> bool:
    lengths = [len(group) for group in groups]
    return len(groups) == 3 and (
        (lengths[0] == 4 and lengths[1] <= 2 and lengths[2] <= 2)
        or (lengths[0] <= 2 and lengths[1] <= 2 and lengths[2] == 4)
    )


def _phone_shape(match: re.Match[str]) -> str:
    """'strong' (a phone on its own), 'weak' (needs a phone word nearby) or 'none'."""
    intl, _, lead, area, main, sep, ext = match.groups()
    groups = main.split(sep) if sep else [main]
    digits = len(main) - len(groups) + 1
    if intl:
        digits += sum(char.isdigit() for char in intl)
    if area:
        digits += sum(char.isdigit() for char in (lead or "") + area)
    if not 7 <= digits <= 15:
        return "none"
    if not intl and not area and sep in ("-", ".") and _is_date(groups):
        return "none"
    lengths = [len(group) for group in groups]
    if intl or main.startswith("00"):
        return "strong" if digits >= 8 else "weak"
    if area or ext:
        return "strong"
    if lengths in ([3, 3, 4], [1, 3, 3, 4]) and (len(lengths) == 3 or groups[0] == "1"):
        return "strong"
    # A national number after its trunk 0 (0490 75 40 81, 0341 8387176). Two groups need ten
    # digits: a shorter pair is as often a house number; 0dd-dd-dddd is a US SSN's shape.
    if main.startswith("0") and (
        (len(groups) == 2 and 10 <= digits <= 12)
        or (len(groups) >= 3 and 9 <= digits <= 12 and not (sep == "-" and lengths == [3, 2, 4]))
    ):
        return "strong"
    if sep in (".", "-") and len(groups) >= 4 and all(length == 2 for length in lengths):
        return "strong"
    return "weak"


def _near_phone_word(text: str, start: int, end: int) -> bool:
    window = (
        text[max(0, start - _PHONE_CONTEXT_BEFORE) : start]
        + " "
        + text[end : end + _PHONE_CONTEXT_AFTER]
    )
    if any(word in _PHONE_WORDS for word in _WORD_RE.findall(window.lower())):
        return True
    return any(word in window for word in _PHONE_WORDS_UNSPACED)


def _phones(text: str) -> Iterator[tuple[int, int, bool]]:
    position = 0
    for start in _PHONE_START_RE.finditer(text):
        match = _PHONE_RE.match(text, start.start()) if start.start() >= position else None
        if match is None:
            continue
        position = match.end()
        shape = _phone_shape(match)
        if shape == "strong" or (
            shape == "weak" and _near_phone_word(text, match.start(), match.end())
        ):
            yield match.start(), match.end(), True


_DETECTORS: Final[tuple[tuple[str, Callable[[str], Iterator[tuple[int, int, bool]]]], ...]] = (
    (EMAIL, _emails),
    (IP_ADDRESS, _ipv6s),
    (IP_ADDRESS, _ipv4s),
    (CREDIT_CARD, _cards),
    (PHONE, _phones),
)
