"""Detectors of e-mail and IP addresses: spans `(start, end, is_pii)`; an IP address is PII only
when public (`NON_PUBLIC_NETWORKS` lists what is kept).

Each pattern starts with one character class and has bounded quantifiers, so a scan is linear
in the text. Rules: docs/curation.md (PII).
"""

from __future__ import annotations

import bisect
import ipaddress
import itertools
import re
from collections.abc import Iterator
from typing import Final

# --- e-mail -------------------------------------------------------------------------------------

_EMAIL_RE: Final = re.compile(
    r"[A-Za-z0-9._%+-](?<![A-Za-z0-9._%+-][A-Za-z0-9._%+-])"
    r"[A-Za-z0-9._%+-]{0,63}"
    r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.){1,8}"
    r"(?:[A-Za-z]{2,24}|xn--[A-Za-z0-9-]{1,59})"
    r"(?![A-Za-z0-9-])"
)


def email_spans(text: str) -> Iterator[tuple[int, int, bool]]:
    """Spans of e-mail addresses in `text`, each `(start, end, True)`."""
    if "@" not in text:  # a C scan, much cheaper than running the pattern over the text
        return
    for match in _EMAIL_RE.finditer(text):
        yield match.start(), match.end(), True


# --- IP addresses -------------------------------------------------------------------------------

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


def ipv4_spans(text: str) -> Iterator[tuple[int, int, bool]]:
    """Spans of IPv4 addresses in `text`: `(start, end, is public)`."""
    for match in _IPV4_RE.finditer(text):
        value = 0
        for octet in match.group().split("."):
            if (octet[0] == "0" and len(octet) > 1) or int(octet) > 255:
                break
            value = value << 8 | int(octet)
        else:
            yield match.start(), match.end(), _is_public_v4(value)


def ipv6_spans(text: str) -> Iterator[tuple[int, int, bool]]:
    """Spans of IPv6 addresses in `text`: `(start, end, is public)`."""
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
