"""A held-out PII evaluation set, generated fresh: Faker values in sentence templates written for
this evaluation, never used to write or tune the rules (`pii_v1` predates them).

presidio-synth-v2, the in-sample set, was itself made from Faker values in presidio's templates;
this set differs in its templates (written here: support tickets, logs, forms, chat, invoices),
in its locales (phone numbers and addresses of ten countries) and in its distractors: numbers a
redactor must leave alone (dates, times, prices, ISBNs, IBANs, postcodes, versions, order numbers,
private and loopback IP addresses), labelled so that a prediction on them counts as a false
positive. Card numbers are Faker's (Luhn-valid, every issuer it knows), written plain, in groups
of four, or with dashes. Each document's gold spans are recorded as the values are placed.

    from bench.pii_heldout import generate
    documents = generate()               # 1,500 sentences, seed 2025: the same set every run

Scored by `bench.pii.score`; `bench/results/pii.md` reports it next to presidio-synth-v2 and
`tests/test_pii.py` gates on it.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any, Final

from bench.pii import GOLD_KINDS, Document, GoldSpan, is_public_ip

SEED: Final = 2025
LOCALES: Final = (
    "en_US",
    "en_GB",
    "en_AU",
    "en_IN",
    "de_DE",
    "fr_FR",
    "es_ES",
    "it_IT",
    "nl_NL",
    "pt_BR",
)
CARD_TYPES: Final = (
    "visa16",
    "visa13",
    "visa19",
    "mastercard",
    "amex",
    "discover",
    "diners",
    "jcb15",
    "jcb16",
    "maestro",
)

# Slots: {email} {phone} {ip} {ipv6} {card} are personal data; {private_ip} {date} {time}
# {price} {isbn} {iban} {postcode} {version} {order} {year} {count} must be left alone; {name}
# {city} {company} are filler (names are not a kind these rules redact).
TEMPLATES: Final = (
    "Hi {name}, your ticket #{order} is open. We will reply to {email} within two working days.",
    "For urgent issues call our hotline on {phone} (weekdays, {time} to 18:00).",
    "Contact person: {name}, {company}, tel. {phone}, e-mail {email}.",
    "Failed login for admin from {ip} at {time}; the account was locked for {count} minutes.",
    "The load balancer forwards {ip} to the backend at {private_ip} on port 8443.",
    "Blocked {ipv6} after {count} requests in one second.",
    "Payment received: {price} charged to card {card} on {date}.",
    "Please confirm the card number {card} and the billing postcode {postcode}.",
    "Refund of {price} issued to the card ending in the number {card}.",
    "Wire the deposit to IBAN {iban} before {date}, quoting order {order}.",
    "Version {version} was released on {date} and fixes {count} bugs.",
    "The book (ISBN {isbn}) costs {price} and ships from {city}.",
    "Meeting moved to {date} at {time}, room {count}, building {postcode}.",
    "You can text me at {phone} or just reply here.",
    "my new number is {phone}, the old one stopped working",
    "Send the signed form to {email}; questions go to {phone}.",
    "Internal test host {private_ip} answers, but the public address {ip} times out.",
    "Health check from 127.0.0.1 and {private_ip}: all {count} services are up.",
    "Order {order} of {date}: {count} items, {price} in total, paid by card.",
    "Our office in {city} opened in {year} and now employs {count} people.",
    "{name} wrote from {email}: the invoice of {date} is still unpaid.",
    "Customer {name} (card {card}) asked to change the delivery address in {city}.",
    "Reach the {company} reception on {phone} or by fax on {phone}.",
    "Visitor {ip} downloaded release {version} {count} times.",
    "The firewall rule allows {ipv6} and denies every other address.",
    "Temperature at {time}: {count} degrees; next reading at the same time tomorrow.",
    "Subscription renewed on {date} for {price}; the receipt went to {email}.",
    "Dial {phone} and press 2 for billing, 3 for technical support.",
    "Flight {order} leaves {city} at {time} on {date}.",
    "Your verification code is {order}. It expires in {count} minutes.",
    "Card {card} was declined; please try another one or call {phone}.",
    "Members since {year}: {count}. Dues of {price} are payable by {date}.",
)

_SLOT: Final = re.compile(r"\{(\w+)\}")


def _grouped(number: str, separator: str) -> str:
    """A card number in groups of four joined by `separator` (Amex as 4-6-5)."""
    if len(number) == 15 and number[:2] in ("34", "37"):
        return separator.join((number[:4], number[4:10], number[10:]))
    return separator.join(number[i : i + 4] for i in range(0, len(number), 4))


def _values(fake: Any, rng: random.Random) -> dict[str, Callable[[], tuple[str, str | None]]]:
    """slot -> a function giving (value, gold label or None for filler)."""

    def card() -> tuple[str, str]:
        number = fake.credit_card_number(card_type=rng.choice(CARD_TYPES))
        style = rng.choice(("plain", "spaces", "dashes"))
        shown = number if style == "plain" else _grouped(number, " " if style == "spaces" else "-")
        return shown, "CREDIT_CARD"

    def public_ip() -> tuple[str, str]:
        return fake.ipv4_public(), "IP_ADDRESS"

    def ipv6() -> tuple[str, str]:
        address = fake.ipv6()
        return address, "IP_ADDRESS" if is_public_ip(address) else "NON_PUBLIC_IP"

    return {
        "email": lambda: (
            rng.choice((fake.email, fake.free_email, fake.company_email))(),
            "EMAIL_ADDRESS",
        ),
        "phone": lambda: (fake.phone_number(), "PHONE_NUMBER"),
        "ip": public_ip,
        "ipv6": ipv6,
        "card": card,
        "private_ip": lambda: (fake.ipv4_private(), "NON_PUBLIC_IP"),
        "date": lambda: (fake.date(), "DATE_TIME"),
        "time": lambda: (fake.time(pattern="%H:%M"), "DATE_TIME"),
        "price": lambda: (fake.pricetag(), "PRICE"),
        "isbn": lambda: (fake.isbn13(), "ISBN"),
        "iban": lambda: (fake.iban(), "IBAN_CODE"),
        "postcode": lambda: (fake.postcode(), "POSTCODE"),
        "version": lambda: (
            f"{rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 99)}",
            "VERSION",
        ),
        "order": lambda: (str(rng.randint(10_000, 99_999_999)), "ORDER_NUMBER"),
        "year": lambda: (str(rng.randint(1950, 2024)), "DATE_TIME"),
        "count": lambda: (str(rng.randint(2, 500)), None),
        "name": lambda: (fake.name(), None),
        "city": lambda: (fake.city(), None),
        "company": lambda: (fake.company(), None),
    }


def generate(n: int = 1_500, seed: int = SEED) -> list[Document]:
    """`n` sentences with gold spans: template and locale drawn per sentence, values by Faker."""
    from faker import Faker

    rng = random.Random(seed)
    fakers = {}
    for index, locale in enumerate(LOCALES):
        fake = Faker(locale)
        fake.seed_instance(seed + index)
        fakers[locale] = fake
    documents = []
    for _ in range(n):
        locale = rng.choice(LOCALES)
        values = _values(fakers[locale], rng)
        template = rng.choice(TEMPLATES)
        text, gold, position = [], [], 0
        for match in _SLOT.finditer(template):
            literal = template[position : match.start()]
            text.append(literal)
            start = sum(map(len, text))
            value, label = values[match.group(1)]()
            text.append(value)
            if label is not None:
                gold.append(
                    GoldSpan(label, GOLD_KINDS.get(label), start, start + len(value), value)
                )
            position = match.end()
        text.append(template[position:])
        documents.append(Document("".join(text), tuple(gold)))
    return documents
