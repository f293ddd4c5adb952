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
from fm_assets.shards.text_export import text_set_prefix
from fm_assets.storage.catalog import catalog_namespace
from fm_assets.storage.landing import data_prefix
from tests.paths import REPO

POLICY = json.loads((REPO / "deploy" / "iam" / "namespaces.example.json").read_text())
# The bucket's whole policy: its own statements and the data namespaces' added to them.
BUCKET_POLICY = json.loads((REPO / "deploy" / "iam" / "bucket-policy.example.json").read_text())
BUCKET_POLICY["Statement"] += POLICY["Statement"]
ACCOUNT = "arn:aws:iam::111122223333:role/"
BUCKET = "arn:aws:s3:::fm-data/"
CONFIG = "0123456789ab-s2048"
SETTINGS = load_settings({"FM_HOME": "/nonexistent/fm"})  # the default platform namespace, `fm`


def _listed(value: Any) -> list[str]:
    return value if isinstance(value, list) else [value]


def _applies(statement: dict[str, Any], role: str, action: str, key: str) -> bool:
    """Whether `statement` speaks of `role` doing `action` on `key` over HTTPS."""
    principal = statement["Principal"]
    if principal != "*" and ACCOUNT + role not in _listed(principal["AWS"]):
        return False
    if not any(fnmatch.fnmatchcase(action, a) for a in _listed(statement["Action"])):
        return False
    if "NotResource" in statement:
        if any(fnmatch.fnmatchcase(BUCKET + key, r) for r in _listed(statement["NotResource"])):
            return False
    elif not any(fnmatch.fnmatchcase(BUCKET + key, r) for r in _listed(statement["Resource"])):
        return False
    for operator, tests in statement.get("Condition", {}).items():
        if operator == "Bool" and tests == {"aws:SecureTransport": "false"}:
            return False  # the platform's clients speak HTTPS
        if operator != "ArnNotLike" or set(tests) != {"aws:PrincipalArn"}:
            raise ValueError(f"the test's evaluator does not know {operator} {set(tests)}")
        if any(fnmatch.fnmatchcase(ACCOUNT + role, p) for p in tests["aws:PrincipalArn"]):
            return False
    return True


def allowed(role: str, action: str, key: str, policy: dict[str, Any] = POLICY) -> bool:
    matching = [s for s in policy["Statement"] if _applies(s, role, action, key)]
    if any(s["Effect"] == "Deny" for s in matching):
        return False
    return any(s["Effect"] == "Allow" for s in matching)


def shards(namespaces: list[str]) -> str:
    return f"prod/{shard_set_prefix('web@v3', CONFIG, namespaces)}/shard.00000.mds"


def texts(namespaces: list[str]) -> str:
    return f"prod/{text_set_prefix('web@v3', namespaces)}/shard.00000.mds"


def landed(namespace: str) -> str:
    return f"prod/{data_prefix(namespace, 'b-0123456789abcdef0123')}/0123456789abcdef-a.warc.gz"


def data_file(namespace: str) -> str:
    return (
        f"prod-warehouse/{catalog_namespace(SETTINGS, namespace)}/raw_documents/data/"
        f"batch_id=b-0123456789abcdef0123/namespace={namespace}/00000-0-6e0a.parquet"
    )


def metadata(namespace: str | None, table: str) -> str:
    prefix = f"prod-warehouse/{catalog_namespace(SETTINGS, namespace)}/{table}"
    return f"{prefix}/metadata/00003-1f.metadata.json"


CATALOG = metadata(None, "shard_sets")
TEXT_CATALOG = metadata(None, "text_sets")


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
        # text sets (make_dataset(..., tokenize_online=True)) like shard sets
        ("fm-trainers-cloud", texts(["cloud"]), True),
        ("fm-trainers-cloud", TEXT_CATALOG, True),
        ("fm-trainers-cloud", texts(["on-device"]), False),
        ("fm-trainers-cloud", texts(["cloud", "on-device"]), False),
        ("fm-trainers-on-device", texts(["cloud", "on-device"]), True),
        ("fm-analysts-cloud", texts(["on-device"]), False),
        # batches landed into `quarantine` wait for a person: only reviewers read them
        ("fm-quarantine-reviewers", landed("quarantine"), True),
        ("fm-quarantine-reviewers", data_file("quarantine"), True),
        ("fm-quarantine-reviewers", landed("cloud"), False),
        ("fm-analysts-cloud", landed("quarantine"), False),
        ("fm-trainers-on-device", data_file("quarantine"), False),
    ],
)
def test_each_role_reads_only_its_namespaces(role: str, key: str, expected: bool) -> None:
    assert allowed(role, "s3:GetObject", key) is expected


def test_no_role_but_the_platform_writes_on_device_data() -> None:
    for role in ("fm-trainers-cloud", "fm-analysts-cloud", "fm-trainers-on-device"):
        assert not allowed(role, "s3:PutObject", landed("on-device"))
    deny = next(s for s in POLICY["Statement"] if s["Effect"] == "Deny")
    assert not _applies(deny, "fm-platform-prod", "s3:PutObject", landed("on-device"))


# What the Ray workers may do, by the bucket's whole policy (bucket-policy.example.json with the
# namespaces' statements): they parse untrusted input of every namespace, so they read all of it,
# create table data files and nothing else. tests/test_storage_identities.py holds a real store
# to the same rule.
@pytest.mark.parametrize(
    ("action", "key", "expected"),
    [
        ("s3:GetObject", landed("on-device"), True),
        ("s3:GetObject", landed("quarantine"), True),
        ("s3:GetObject", data_file("on-device"), True),
        ("s3:PutObject", data_file("cloud"), True),
        ("s3:PutObject", data_file("on-device"), True),
        ("s3:PutObject", metadata("cloud", "raw_documents"), False),
        ("s3:PutObject", CATALOG, False),
        ("s3:PutObject", landed("cloud"), False),
        ("s3:PutObject", shards(["cloud"]), False),
        ("s3:PutObject", texts(["cloud"]), False),
        ("s3:DeleteObject", data_file("cloud"), False),
        ("s3:DeleteObjectVersion", data_file("cloud"), False),
        ("s3:DeleteObject", landed("cloud"), False),
        ("s3:GetObject", "staging/landing/x", False),
    ],
)
def test_ray_workers_create_data_files_and_delete_nothing(
    action: str, key: str, expected: bool
) -> None:
    assert allowed("fm-ray-workers-prod", action, key, BUCKET_POLICY) is expected


def test_the_control_plane_commits_and_deletes_what_workers_may_not() -> None:
    for action in ("s3:PutObject", "s3:DeleteObject"):
        for key in (metadata("cloud", "raw_documents"), landed("on-device"), shards(["cloud"])):
            assert allowed("fm-platform-prod", action, key, BUCKET_POLICY), (action, key)
