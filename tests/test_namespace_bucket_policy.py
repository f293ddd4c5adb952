"""The example bucket policy for data namespaces (deploy/iam/namespaces.example.json) keeps each
role to the namespaces it may touch, outside the code, on the object keys the platform writes.

The keys come from the platform's own layout functions (landing data prefix, shard-set prefix,
the catalog namespace of each data namespace's tables, below which their files live), which
tests/test_namespaces_e2e.py checks on a real run. The policy is evaluated with IAM's rules for
what it uses: an explicit Deny wins, then some Allow must match, else access is denied.
"""

from __future__ import annotations

import fnmatch
import json
from typing import Any

import pytest

from fm_assets.settings import load_settings
from fm_assets.shards.build import shard_set_prefix
from fm_assets.storage.catalog import catalog_namespace
from fm_assets.storage.landing import data_prefix
from tests.paths import REPO

POLICY = json.loads((REPO / "deploy" / "iam" / "namespaces.example.json").read_text())
ACCOUNT = "arn:aws:iam::111122223333:role/"
BUCKET = "arn:aws:s3:::fm-data/"
CONFIG = "0123456789ab-s2048"
SETTINGS = load_settings({"FM_HOME": "/nonexistent/fm"})  # the default platform namespace, `fm`


def _listed(value: Any) -> list[str]:
    return value if isinstance(value, list) else [value]


def _applies(statement: dict[str, Any], role: str, action: str, key: str) -> bool:
    principal = statement["Principal"]
    if principal != "*" and ACCOUNT + role not in _listed(principal["AWS"]):
        return False
    if action not in _listed(statement["Action"]):
        return False
    if not any(fnmatch.fnmatchcase(BUCKET + key, r) for r in _listed(statement["Resource"])):
        return False
    for operator, tests in statement.get("Condition", {}).items():
        if operator != "ArnNotLike" or set(tests) != {"aws:PrincipalArn"}:
            raise ValueError(f"the test's evaluator does not know {operator} {set(tests)}")
        if any(fnmatch.fnmatchcase(ACCOUNT + role, p) for p in tests["aws:PrincipalArn"]):
            return False
    return True


def allowed(role: str, action: str, key: str) -> bool:
    matching = [s for s in POLICY["Statement"] if _applies(s, role, action, key)]
    if any(s["Effect"] == "Deny" for s in matching):
        return False
    return any(s["Effect"] == "Allow" for s in matching)


def shards(namespaces: list[str]) -> str:
    return f"prod/{shard_set_prefix('web@v3', CONFIG, namespaces)}/shard.00000.mds"


def landed(namespace: str) -> str:
    return f"prod/{data_prefix(namespace, 'b-0123456789abcdef0123')}/0123456789abcdef-a.warc.gz"


def data_file(namespace: str) -> str:
    return (
        f"prod-warehouse/{catalog_namespace(SETTINGS, namespace)}/raw_documents/data/"
        f"batch_id=b-0123456789abcdef0123/namespace={namespace}/00000-0-6e0a.parquet"
    )


CATALOG = (
    f"prod-warehouse/{catalog_namespace(SETTINGS, None)}/shard_sets/metadata/00003-1f.metadata.json"
)


@pytest.mark.parametrize(
    ("role", "key", "expected"),
    [
        ("fm-trainers-cloud", shards(["cloud"]), True),
        ("fm-trainers-cloud", CATALOG, True),  # make_dataset resolves web@v3 in the catalog
        ("fm-trainers-cloud", shards(["on-device"]), False),
        ("fm-trainers-cloud", shards(["cloud", "on-device"]), False),
        ("fm-trainers-cloud", landed("cloud"), False),  # trainers read shard sets only
        ("fm-trainers-on-device", shards(["on-device"]), True),
        ("fm-trainers-on-device", shards(["cloud", "on-device"]), True),
        ("fm-trainers-on-device", shards(["cloud"]), True),
        ("fm-trainers-on-device", landed("on-device"), False),
        ("fm-analysts-cloud", landed("cloud"), True),
        ("fm-analysts-cloud", data_file("cloud"), True),
        ("fm-analysts-cloud", landed("on-device"), False),
        ("fm-analysts-cloud", data_file("on-device"), False),
        ("fm-analysts-cloud", data_file("web-unverified"), False),
        ("fm-trainers-on-device", data_file("on-device"), False),  # trainers read shard sets only
        ("fm-analysts-cloud", shards(["on-device"]), False),
    ],
)
def test_each_role_reads_only_its_namespaces(role: str, key: str, expected: bool) -> None:
    assert allowed(role, "s3:GetObject", key) is expected


def test_no_role_but_the_platform_writes_on_device_data() -> None:
    for role in ("fm-trainers-cloud", "fm-analysts-cloud", "fm-trainers-on-device"):
        assert not allowed(role, "s3:PutObject", landed("on-device"))
    deny = next(s for s in POLICY["Statement"] if s["Effect"] == "Deny")
    assert not _applies(deny, "fm-platform-prod", "s3:PutObject", landed("on-device"))
