"""What both halves of the DynamoDB backend share, without I/O: sizes, the error table, versions,
names, expressions, URL options, and the TTL a frame's items carry (read from its cleartext header)."""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

from berth._codec import peek_header
from berth._errors import BackendError, BerthError, InvalidKey, StoreMissing
from berth._token import Token
from berth.backends._errmap import ErrorMap, Row, described, precondition_rows

__all__ = [
    "ATTRS",
    "ERRORS",
    "GET_BATCH",
    "HEAD_BYTES",
    "ITEM_BYTES",
    "LOST",
    "MISSING",
    "ORPHAN_MS",
    "TABLE_NAME",
    "THROTTLED",
    "TTL_ATTRIBUTE",
    "TTL_GRACE",
    "URL_OPTIONS",
    "WRITE_BATCH",
    "absent",
    "at_version",
    "attr_names",
    "backoff",
    "blob",
    "error_code",
    "expiry",
    "new_version",
    "num",
    "part_key",
    "parts_of",
    "split_name",
    "version_of",
]

ITEM_BYTES = 384 * 1024
"""Frame bytes one item holds (an inline frame, or one part): DynamoDB's item limit is 400 KB."""
HEAD_BYTES = 1024
"""A frame's first bytes, kept apart (`head`) so a listing reads them alone."""
ORPHAN_MS = 3600_000  # a part-set no manifest names is an orphan once it is this old
GET_BATCH = 16  # parts per BatchGetItem: 16 x 384 KiB stays under its 16 MB response limit
WRITE_BATCH = 25  # BatchWriteItem's limit
THROTTLED = {"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"}
MISSING = "ResourceNotFoundException"
LOST = "ConditionalCheckFailedException"
TABLE_NAME = re.compile(r"[A-Za-z0-9_.-]{3,255}")
TTL_ATTRIBUTE = "expires_at"
"""The TTL attribute every item of a frame carries unless `ttl_attribute` names another (empty: none)."""
TTL_GRACE = 3600
"""Seconds after a frame's deadline that its items' TTL falls: berth refuses it at the deadline itself."""


def error_code(exc: BaseException) -> str:
    return str(exc.response.get("Error", {}).get("Code") or "") if isinstance(exc, ClientError) else ""


def _detail(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        return f"{error_code(exc)}: {str(exc.response.get('Error', {}).get('Message') or exc)[:200]}"
    return described(exc)


ERRORS = ErrorMap(
    "dynamodb",
    [
        *precondition_rows(ClientError, lambda exc: error_code(exc) == LOST),
        Row(
            ClientError,
            StoreMissing,
            "dynamodb backend could not {op} {name!r}: its table does not exist (`berth setup` creates it; {detail})",
            lambda exc, call: error_code(exc) == MISSING,
        ),
        Row(
            ClientError,
            BackendError,
            "dynamodb backend could not {op} {name!r}: throttled, retry later ({detail})",
            lambda exc, call: error_code(exc) in THROTTLED,
        ),
        Row((ClientError, BotoCoreError, OSError)),
    ],
    detail=_detail,
    retried=lambda exc: (
        isinstance(exc, ClientError) and int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts") or 0) > 0
    ),
)


def new_version(parts: int) -> str:
    """A fresh version: milliseconds since the epoch (so an orphaned part-set's age shows), random bits,
    and for a frame in parts their count."""
    made = f"{time.time_ns() // 1_000_000:012x}{os.urandom(10).hex()}"
    return f"{made}.{parts}" if parts else made


def parts_of(version: str) -> int:
    _, dot, count = version.partition(".")
    return int(count) if dot and count.isdigit() else 0


def split_name(name: str) -> tuple[str, str]:
    pk, sep, sk = name.partition("/")
    if not (pk and sep and sk) or len(pk.encode()) > 1024 or len(sk.encode()) > 1024:
        raise InvalidKey(f"dynamodb backend stores names identity/key (each 1..1024 bytes), not {name!r}")
    return pk, sk


def blob(item: dict[str, Any], attr: str) -> bytes:
    value = item.get(attr)
    return bytes(value["B"]) if value else b""


def num(item: dict[str, Any], attr: str) -> int:
    value = item.get(attr)
    return int(value["N"]) if value else 0


URL_OPTIONS: dict[str, Callable[[str], Any]] = {
    "region": str,
    "region_name": str,
    "endpoint_url": str,
    "profile_name": str,
    "retry_attempts": int,
    "connect_timeout": float,
    "read_timeout": float,
    "page_size": int,
    "ttl_attribute": str,
}

ATTRS = {"#pk": "pk", "#sk": "sk", "#v": "ver", "#h": "head", "#b": "body", "#z": "size", "#d": "digest"}


def attr_names(text: str) -> dict[str, str]:
    """The `ExpressionAttributeNames` an expression uses (DynamoDB refuses one it does not)."""
    return {alias: attr for alias, attr in ATTRS.items() if re.search(re.escape(alias) + r"\b", text)}


def absent(attr: str) -> dict[str, Any]:
    return {"ConditionExpression": "attribute_not_exists(#a)", "ExpressionAttributeNames": {"#a": attr}}


def at_version(version: str) -> dict[str, Any]:
    return {
        "ConditionExpression": "#v = :v",
        "ExpressionAttributeNames": {"#v": "ver"},
        "ExpressionAttributeValues": {":v": {"S": version}},
    }


def backoff(attempt: int) -> float:
    return random.uniform(0, min(0.05 * 2**attempt, 2.0))


def part_key(version: str, index: int) -> str:
    return f"{version}/{index:06d}"


def version_of(token: Token) -> str:
    return token.value if isinstance(token.value, str) and token.value else ""


def expiry(data: bytes | memoryview, pk: str, sk: str) -> dict[str, Any] | None:
    """The TTL value (epoch seconds) for a frame's items: its header's deadline plus `TTL_GRACE`, or None
    when `data` is no frame berth reads or has no deadline (never an error: the put goes on without one)."""
    try:
        deadline = peek_header(data, pk, sk)[0].deadline
    except BerthError:
        return None
    return None if deadline is None else {"N": str(int(deadline.timestamp()) + TTL_GRACE)}
