"""Detectors of credit-card and phone numbers: spans `(start, end, is_pii)`.

Each pattern starts with one character class and has bounded quantifiers, so a scan is linear
in the text. Rules: docs/curation.md (PII).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

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


def card_spans(text: str) -> Iterator[tuple[int, int, bool]]:
    """Spans of card numbers (Luhn-valid, known issuer prefix), each `(start, end, True)`."""
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


def phone_spans(text: str) -> Iterator[tuple[int, int, bool]]:
    """Spans of phone numbers, each `(start, end, True)`; see docs/curation.md for the shapes."""
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
