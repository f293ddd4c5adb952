"""PII detection and redaction (`fm_assets.curation.pii`): each kind, what is kept, audit records,
robustness on large and odd input, and the quality targets on the real presidio-synth-v2 file.

Fast: no Ray. The presidio file is read in place from ../shared/data/pii; its scoring is the one
`python -m bench.pii` reports, imported from `bench.pii` so the rule is defined once.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.pii import HELD_OUT_FLOORS, load_documents, score
from fm_assets.curation.pii.redaction import (
    CREDIT_CARD,
    EMAIL,
    IP_ADDRESS,
    PHONE,
    PII_RULES_VERSION,
    REPLACEMENT_TOKENS,
    Redaction,
    find_pii,
    redact,
    redact_batch,
)
from tests.paths import SHARED_DATA

PRESIDIO_FILE = SHARED_DATA / "pii" / "presidio-synth-v2.json"


def found(text: str) -> list[tuple[str, str]]:
    """(kind, original substring) of every redaction in `text`."""
    return [(r.kind, text[r.start : r.end]) for r in find_pii(text)]


# --- each kind ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "email",
    [
        "jane.doe@example.com",
        "UtaKortig@jourrapide.com",
        "first+tag@sub.domain.co.uk",
        "x_y-z%1@xn--bcher-kva.example",
    ],
)
def test_email_addresses_are_redacted(email: str) -> None:
    text = f"Write to {email}, please."
    assert found(text) == [(EMAIL, email)]
    assert redact(text)[0] == "Write to <EMAIL>, please."


@pytest.mark.parametrize("text", ["user@localhost", "a @ b.com", "@handle on social", "x@y.c"])
def test_not_email_addresses(text: str) -> None:
    assert found(text) == []


@pytest.mark.parametrize(
    "phone",
    [
        "+1-984-182-0190",  # international, North America
        "+44 20 7946 0958",  # UK, international
        "+447700 921 916",
        "+41 (0)96 471 07 95",  # with trunk
        "+46 (0)8 928 571 38",
        "001-518-640-0854",  # international dialling prefix
        "(579)888-3058",  # US, area code in parentheses
        "(08) 8747 6301",
        "1 (800) 555-0199",
        "8 (495) 123-45-67",  # Russian national
        "905-674-3793",  # US 3-3-4
        "259.735.7502x459",  # with extension
        "345-899-3560 ext. 4587",
        "020 7946 0958",  # UK national
        "07700 063 966",
        "0490 75 40 81",  # EU national with trunk 0
        "0961-7596216",
        "01.84.17.61.18",  # French, dotted pairs
        "60-56-85-91",
    ],
)
def test_phone_numbers_that_stand_alone_are_redacted(phone: str) -> None:
    text = f"Details: {phone}."
    assert found(text) == [(PHONE, phone)]


@pytest.mark.parametrize("bare", ["467 3395", "9472 7916", "9498777106", "21 284 698 2548"])
def test_bare_digit_groups_are_phones_only_next_to_a_phone_word(bare: str) -> None:
    assert found(f"Phone: {bare}") == [(PHONE, bare)]
    assert found(f"{bare} fax") == [(PHONE, bare)]
    assert found(f"電話{bare}") == [(PHONE, bare)]
    assert found(f"We counted {bare} visitors.") == []


@pytest.mark.parametrize(
    "text",
    [
        "Date: 1978-04-13 12:20:39",
        "born 13.04.1978 in Bern",
        "Call the office about 2024-01-31 please",
        "Here's my SSN: 054-28-6917",
        "population 1 234 567 in 2020",
        "see 1200-1000=200 feet",
        "ISBN 978 0 306 40615 7",
    ],
)
def test_not_phone_numbers(text: str) -> None:
    assert [kind for kind, _ in found(text)] == []


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "106.31.73.20", "172.61.42.192", "2001:4860:4860::8888", "::ffff:1.1.1.1"],
)
def test_public_ip_addresses_are_redacted(address: str) -> None:
    text = f"blocked {address} today"
    assert found(text) == [(IP_ADDRESS, address)]
    assert redact(text)[0] == "blocked <IP_ADDRESS> today"


@pytest.mark.parametrize(
    "address",
    [
        "10.0.0.7",  # private
        "172.16.5.4",
        "192.168.1.1",
        "127.0.0.1",  # loopback
        "169.254.10.20",  # link-local
        "100.64.0.1",  # carrier-grade NAT
        "192.0.2.15",  # documentation
        "203.0.113.9",
        "224.0.0.251",  # multicast
        "255.255.255.255",  # broadcast
        "0.0.0.0",
        "::1",  # IPv6 loopback
        "fe80::1:2:3",  # link-local
        "fd12:3456:789a::1",  # unique local
        "2001:db8::8:800:200c:417a",  # documentation
        "::ffff:192.168.0.1",  # IPv4-mapped private
    ],
)
def test_non_public_ip_addresses_are_kept(address: str) -> None:
    text = f"server at {address}, port 80"
    assert find_pii(text) == []
    assert redact(text)[0] == text


def test_a_kept_ip_is_not_read_as_a_phone_number_either() -> None:
    assert find_pii("phone home from 192.168.100.200 now") == []


@pytest.mark.parametrize(
    "text", ["v1.2.3.4", "version 1.2.3.4.5", "256.1.1.1", "01.02.03.04", "12:30:45", "a::b"]
)
def test_not_ip_addresses(text: str) -> None:
    assert [kind for kind, _ in found(text)] != [IP_ADDRESS]


@pytest.mark.parametrize(
    "card",
    [
        "4111111111111111",  # Visa 16
        "4111 1111 1111 1111",
        "4111-1111-1111-1111",
        "378282246310005",  # Amex 15
        "3782 822463 10005",
        "30569309025904",  # Diners 14
        "6011000990139424",  # Discover
        "2223000048400011",  # Mastercard 2-series
        "4222222222222",  # Visa 13
        "4131034282458809939",  # 19 digits
        "630427373398",  # Maestro 12
    ],
)
def test_luhn_valid_card_numbers_are_redacted(card: str) -> None:
    text = f"my card {card} expires"
    assert found(text) == [(CREDIT_CARD, card)]
    assert redact(text)[0] == "my card <CREDIT_CARD> expires"


@pytest.mark.parametrize(
    "number",
    [
        "4111111111111112",  # fails Luhn
        "4111 1111 1111 1112",
        "4111-1111-1111-1113",
        "1234567812345678",  # fails Luhn
        "7992739871300000",  # passes Luhn, but no card network issues 7...
        "1700000000000",  # passes Luhn: a millisecond timestamp, not a card
        "41111111111111111111",  # 20 digits
    ],
)
def test_numbers_that_are_not_cards_are_kept(number: str) -> None:
    assert [kind for kind, _ in found(f"ref {number} end")] != [CREDIT_CARD]


def test_a_card_followed_by_its_expiry_is_still_found() -> None:
    text = "card 4111 1111 1111 1111 12 27 cvc"
    assert found(text) == [(CREDIT_CARD, "4111 1111 1111 1111")]


# --- spans, tokens and audit records ------------------------------------------------------------

MIXED = (
    "Hi, I'm at jane@example.com or +1-984-182-0190 (office 0490 75 40 81). "
    "Card 4111 1111 1111 1111, server 8.8.8.8 behind 10.0.0.1; "
    "old card 4111 1111 1111 1112."
)
MIXED_PII = [
    (EMAIL, "jane@example.com"),
    (PHONE, "+1-984-182-0190"),
    (PHONE, "0490 75 40 81"),
    (CREDIT_CARD, "4111 1111 1111 1111"),
    (IP_ADDRESS, "8.8.8.8"),
]


def test_spans_map_to_the_original_text_and_are_sorted_and_disjoint() -> None:
    redactions = find_pii(MIXED)
    assert [(r.kind, MIXED[r.start : r.end]) for r in redactions] == MIXED_PII
    for before, after in itertools.pairwise(redactions):
        assert before.end <= after.start


def test_redact_replaces_each_span_with_its_token() -> None:
    redacted, redactions = redact(MIXED)
    assert redacted == (
        "Hi, I'm at <EMAIL> or <PHONE> (office <PHONE>). "
        "Card <CREDIT_CARD>, server <IP_ADDRESS> behind 10.0.0.1; "
        "old card 4111 1111 1111 1112."
    )
    assert redactions == find_pii(MIXED)
    assert {r.kind: r.token for r in redactions} == {
        kind: REPLACEMENT_TOKENS[kind] for kind, _ in MIXED_PII
    }


def test_audit_records_hold_no_pii() -> None:
    for redaction in find_pii(MIXED):
        fields = dataclasses.asdict(redaction)
        assert set(fields) == {"kind", "start", "end", "rule_version"}
        assert fields["rule_version"] == PII_RULES_VERSION
        assert redaction.length == redaction.end - redaction.start
        record = repr(redaction) + repr(fields)
        for _, value in MIXED_PII:
            assert value not in record
            assert value.replace(" ", "").replace("-", "") not in record


def test_redaction_rejects_unknown_kinds_and_empty_spans() -> None:
    with pytest.raises(ValueError, match="unknown PII kind"):
        Redaction("SSN", 0, 3)
    with pytest.raises(ValueError, match="bad span"):
        Redaction(EMAIL, 5, 5)


def test_redact_batch_keeps_order_and_handles_empty_texts() -> None:
    texts = ["", "nothing here", MIXED, "mail a@b.org"]
    redacted, redactions = redact_batch(texts)
    assert redacted == [redact(text)[0] for text in texts]
    assert redactions == [find_pii(text) for text in texts]
    assert redact_batch([]) == ([], [])


def test_text_without_pii_comes_back_unchanged() -> None:
    assert redact("") == ("", [])
    assert redact("Nothing to see: 42 apples, 3.5 kg, 2024-01-31.") == (
        "Nothing to see: 42 apples, 3.5 kg, 2024-01-31.",
        [],
    )


def test_non_str_input_is_rejected() -> None:
    with pytest.raises(TypeError, match="expects str"):
        find_pii(b"a@b.com")  # type: ignore[arg-type]


# --- robustness ---------------------------------------------------------------------------------


def test_binary_junk_decoded_as_text() -> None:
    rng = random.Random(45)
    junk = bytes(rng.getrandbits(8) for _ in range(200_000))
    for text in (
        junk.decode("utf-8", errors="replace"),
        junk.decode("utf-8", errors="surrogateescape"),
        junk.decode("latin-1"),
    ):
        redacted, redactions = redact(text + " mail jo@example.com ")
        assert redactions[-1].kind == EMAIL
        assert redacted.endswith(" mail <EMAIL> ")


def test_mixed_scripts() -> None:
    text = "用户邮箱user@example.com，电话13812345678。Связь: тел. 8 (495) 123-45-67. مرحبا 8.8.8.8"
    assert found(text) == [
        (EMAIL, "user@example.com"),
        (PHONE, "13812345678"),
        (PHONE, "8 (495) 123-45-67"),
        (IP_ADDRESS, "8.8.8.8"),
    ]


PII_ISH_TEXT = st.text(alphabet=st.sampled_from(list("0123456789 .-+()@:/xabcdf\x00é電")))


@given(st.one_of(st.text(), PII_ISH_TEXT))
def test_any_text_gives_sorted_disjoint_spans_that_rebuild_the_redaction(text: str) -> None:
    redacted, redactions = redact(text)
    position = 0
    rebuilt = []
    for r in redactions:
        assert position <= r.start < r.end <= len(text)
        rebuilt += [text[position : r.start], r.token]
        position = r.end
    assert "".join([*rebuilt, text[position:]]) == redacted


FIVE_MB_LINES: dict[str, Callable[[], str]] = {
    "prose with PII": lambda: (
        (
            "Call +1-984-182-0190 or mail jo.doe@example.com; server 8.8.8.8 (lan 10.0.0.7), "
            "card 4111 1111 1111 1111. Then some ordinary words follow here. "
        )
        * 35_000
    ),
    "one run of digits": lambda: "7" * 5_000_000,
    "digits and single spaces": lambda: "12 34 56 " * 560_000,
    "hex and colons": lambda: "ab:cd:" * 840_000,
    "at-signs": lambda: "a@b" * 1_700_000,
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(FIVE_MB_LINES))
def test_a_5_mb_single_line_completes(name: str) -> None:
    text = FIVE_MB_LINES[name]()
    assert len(text) >= 5_000_000 and "\n" not in text
    redacted, redactions = redact(text)
    if name == "prose with PII":
        assert len(redactions) == 4 * 35_000
    else:
        assert redactions == [] and redacted == text


# --- quality on the real presidio-synth-v2 file --------------------------------------------------


def test_presidio_synth_recall_and_precision_targets() -> None:
    documents = load_documents(PRESIDIO_FILE)
    assert len(documents) == 1_500
    scores = score(documents, [find_pii(d.text) for d in documents])
    targets = {EMAIL: (0.95, 0.9), IP_ADDRESS: (0.95, 0.9), CREDIT_CARD: (0.95, 0.9)}
    targets[PHONE] = (0.85, 0.9)
    for kind, (min_recall, min_precision) in targets.items():
        s = scores[kind]
        assert s.gold > 0, f"no gold {kind} spans in {PRESIDIO_FILE}"
        assert s.recall >= min_recall, f"{kind} recall {s.recall:.3f} ({s.missed_shapes})"
        assert s.precision >= min_precision, (
            f"{kind} precision {s.precision:.3f} ({s.false_positive_labels})"
        )


def test_held_out_recall_and_precision_floors() -> None:
    """On sentences generated fresh (Faker values in templates written for the evaluation, not
    for the rules): the in-sample targets, except phone recall, gated at its measured level."""
    from bench.pii_heldout import generate

    documents = generate()
    assert len(documents) == 1_500 and generate()[:50] == documents[:50]  # the same set each run
    scores = score(documents, [find_pii(d.text) for d in documents])
    for kind, (min_recall, min_precision) in HELD_OUT_FLOORS.items():
        s = scores[kind]
        assert s.gold >= 200, f"the generated set holds only {s.gold} {kind} spans"
        assert s.recall >= min_recall, f"{kind} recall {s.recall:.3f} ({s.missed_shapes})"
        assert s.precision >= min_precision, (
            f"{kind} precision {s.precision:.3f} ({s.false_positive_labels})"
        )
