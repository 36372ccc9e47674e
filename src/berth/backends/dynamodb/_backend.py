"""`DynamoDbBackend`: frames as items of one table (the design: this package's docstring)."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from typing import Any
from urllib.parse import urlsplit

from botocore.exceptions import ClientError  # type: ignore[import-untyped]

from berth._boto import client as boto_client
from berth._errors import BackendError, BerthError, IntegrityError, TokenMismatch
from berth._token import Token
from berth.backends import Backend
from berth.backends._bulk import Data, Frame, Head, upper_bound
from berth.backends._url import own_options
from berth.backends.dynamodb._wire import (
    ATTRS,
    ERRORS,
    GET_BATCH,
    HEAD_BYTES,
    ITEM_BYTES,
    LOST,
    ORPHAN_MS,
    TABLE_NAME,
    THROTTLED,
    TTL_ATTRIBUTE,
    URL_OPTIONS,
    WRITE_BATCH,
    absent,
    at_version,
    attr_names,
    backoff,
    blob,
    error_code,
    expiry,
    new_version,
    num,
    part_key,
    parts_of,
    split_name,
    version_of,
)

__all__ = ["DynamoDbBackend"]

log = logging.getLogger("berth")


class DynamoDbBackend(Backend):
    """Frames as items of one DynamoDB table (partition `identity`, sort key `key`)."""

    creates = True
    """It takes `create=False` (read-only commands: the table is checked at open, `StoreMissing` when it
    is not there); an open never creates the table either way: `setup` does."""

    def __init__(
        self,
        table: str,
        *,
        client: Any = None,
        put_client: Any = None,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        profile_name: str | None = None,
        retry_attempts: int = 5,
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
        page_size: int = 1000,
        create: bool = True,
        ttl_attribute: str = TTL_ATTRIBUTE,
    ):
        """Open a table (it must exist: `setup` creates it, never an open).

        Args:
            table: the table name (3-255 of `A-Z a-z 0-9 _ . -`).
            client: a ready boto3 DynamoDB client, used for every call (then the endpoint,
                region, profile, retry and timeout options are ignored).
            put_client: the client for unconditional puts (default: `client`, or a twin of the
                client berth builds with retries turned off).
            endpoint_url: default: boto3's (`AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL`, config).
            region_name: default: boto3's (`AWS_REGION`, `AWS_DEFAULT_REGION`, config), else us-east-1.
            profile_name: a named profile from the AWS config files.
            retry_attempts: total attempts of a call that is safe to repeat (botocore standard mode).
            connect_timeout: seconds to wait for a connection.
            read_timeout: seconds to wait for a response.
            page_size: items per `Query` page (1..1000; a page is at most 1 MB whatever this says).
            create: False: check at open that the table exists (`DescribeTable`), else `StoreMissing`.
            ttl_attribute: the Number attribute every item of a frame carries, its deadline plus
                `TTL_GRACE` in epoch seconds (DynamoDB's TTL, enabled on it by `setup`); "" sets none.

        Raises:
            BerthError: a bad option.
            StoreMissing: `create=False` and the table does not exist.
        """
        if not isinstance(table, str) or not TABLE_NAME.fullmatch(table):
            raise BerthError(f"dynamodb table name must be 3-255 of A-Z a-z 0-9 _ . -, got {table!r}")
        if not 1 <= page_size <= 1000:
            raise BerthError(f"dynamodb page_size must be 1..1000, got {page_size}")
        if not isinstance(ttl_attribute, str) or len(ttl_attribute.encode()) > 255 or ttl_attribute in ATTRS.values():
            raise BerthError(
                f"dynamodb ttl_attribute must be an attribute name of at most 255 bytes other than "
                f"{', '.join(sorted(ATTRS.values()))} (or empty: no TTL), got {ttl_attribute!r}"
            )
        self._ttl = ttl_attribute
        self.table = table
        self._page_size = page_size
        self._attempts = max(1, retry_attempts)
        self._owned: list[Any] = []
        if client is None:

            def make(attempts: int) -> Any:
                return boto_client(
                    "dynamodb",
                    profile_name=profile_name,
                    region_name=region_name,
                    endpoint_url=endpoint_url,
                    attempts=attempts,
                    connect_timeout=connect_timeout,
                    read_timeout=read_timeout,
                )

            client = make(retry_attempts)
            put_client = put_client or make(1)
            self._owned = [client, put_client]
        self._client = client
        self._put_client = put_client or client
        if not create:
            try:
                self._client.describe_table(TableName=table)
            except ERRORS.catches as exc:
                raise ERRORS.error(exc, "open", table) from exc

    @classmethod
    def from_url(cls, url: str, **options: Any) -> DynamoDbBackend:
        """Open `dynamodb://TABLE?region=...&endpoint_url=...` (options as for the constructor; a keyword wins)."""
        rest = own_options(url, URL_OPTIONS, options, "dynamodb")
        if "region" in options:
            options.setdefault("region_name", options.pop("region"))
        parts = urlsplit(rest)
        if parts.scheme.lower() != "dynamodb" or parts.path not in ("", "/") or parts.query or parts.fragment:
            raise BerthError(f"not a dynamodb://TABLE URL (options: {', '.join(sorted(URL_OPTIONS))}): {url!r}")
        return cls(parts.netloc, **options)

    def __repr__(self) -> str:
        return f"DynamoDbBackend('dynamodb://{self.table}')"

    # --- writes ---------------------------------------------------------------------

    def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        """Store `data` under `name` and return its new version (conditionally if asked).

        Raises:
            TokenMismatch: the condition did not hold (nothing written).
            StoreMissing: the table does not exist.
            BackendError: DynamoDB failed (a failed unconditional put leaves the previous frame).
        """
        pk, sk = split_name(name)
        old = None
        if if_match is not None:
            old = version_of(if_match)
            if if_absent or not old:
                raise TokenMismatch(f"{name!r} is not at version {if_match.value!r}")
        view = memoryview(data)
        parts = 0 if len(view) <= ITEM_BYTES else -(-len(view) // ITEM_BYTES)
        version = new_version(parts)
        item: dict[str, Any] = {
            "pk": {"S": pk},
            "sk": {"S": sk},
            "ver": {"S": version},
            "size": {"N": str(len(view))},
        }
        if len(view):
            item["head"] = {"B": bytes(view[:HEAD_BYTES])}
        ttl = expiry(view, pk, sk) if self._ttl else None
        if ttl is not None:
            item[self._ttl] = ttl
        if parts:
            self._write_parts(name, version, view, ttl)
            item["digest"] = {"B": hashlib.sha256(view).digest()}
        elif len(view) > HEAD_BYTES:
            item["body"] = {"B": bytes(view[HEAD_BYTES:])}
        try:
            if if_absent or old is not None:
                self._put_conditional(name, item, old)
            else:
                old = self._put_unconditional(name, item)
        except TokenMismatch:
            if parts:
                self._drop_parts(name, version)
            raise
        if old:
            self._drop_parts(name, old)
        if parts:
            self._drop_orphans(name, version)
        return Token(version)

    def _put_conditional(self, name: str, item: dict[str, Any], old: str | None) -> None:
        condition = absent("pk") if old is None else at_version(old)
        try:
            self._client.put_item(TableName=self.table, Item=item, **condition)
        except ERRORS.catches as exc:
            raise ERRORS.error(exc, "put", name, conditional=True) from exc

    def _put_unconditional(self, name: str, item: dict[str, Any]) -> str | None:
        """Put `item` whatever is there; the version of a frame in parts it replaced (None: none did).

        The item is put on condition that the one it replaces is not in parts; when it is, the
        put is made again on condition of that one's version, so its part-set is known and dropped.
        """
        old: str | None = None
        for _ in range(8):
            condition = absent("digest") if old is None else at_version(old)
            try:
                self._throttled(
                    self._put_client.put_item,
                    TableName=self.table,
                    Item=item,
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                    **condition,
                )
            except ClientError as exc:
                if error_code(exc) != LOST:
                    raise ERRORS.error(exc, "put", name) from exc
                found = exc.response.get("Item") or {}
                version = str(found.get("ver", {}).get("S", ""))
                old = version if parts_of(version) else None
                continue
            except ERRORS.catches as exc:
                raise ERRORS.error(exc, "put", name) from exc
            return old
        raise BackendError(f"dynamodb backend could not put {name!r}: it kept changing under 8 attempts")

    def _throttled(self, call: Callable[..., Any], **kwargs: Any) -> Any:
        # Repeated only when throttled: DynamoDB refuses such a call before applying anything.
        for attempt in range(self._attempts):
            try:
                return call(**kwargs)
            except ClientError as exc:
                if error_code(exc) not in THROTTLED or attempt + 1 >= self._attempts:
                    raise
                time.sleep(backoff(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def _write_parts(self, name: str, version: str, view: memoryview, ttl: dict[str, Any] | None) -> None:
        """Write the part-set of `version`, each part with the manifest's TTL (a part that DynamoDB deletes
        before its manifest leaves a torn frame, refused)."""
        extra = {self._ttl: ttl} if ttl is not None else {}
        requests = [
            {
                "PutRequest": {
                    "Item": {
                        "pk": {"S": name},
                        "sk": {"S": part_key(version, i)},
                        "body": {"B": bytes(view[at : at + ITEM_BYTES])},
                        **extra,
                    }
                }
            }
            for i, at in enumerate(range(0, len(view), ITEM_BYTES))
        ]
        self._batch_write(name, requests, "write the parts of")

    def _batched(self, op: str, name: str, requests: list[Any], size: int, *, read: bool) -> Iterator[Any]:
        """`requests` (keys to read, or writes) in batches of `size`, what DynamoDB left unprocessed sent
        again with backoff; every item read. Parts have keys of their own (a fresh version): a part
        written or deleted twice is harmless."""
        call = self._client.batch_get_item if read else self._client.batch_write_item
        left = "UnprocessedKeys" if read else "UnprocessedItems"
        for at in range(0, len(requests), size):
            chunk = requests[at : at + size]
            pending: Any = {self.table: {"Keys": chunk, "ConsistentRead": True} if read else chunk}
            for attempt in range(self._attempts * 4):
                try:
                    response = call(RequestItems=pending)
                except ERRORS.catches as exc:
                    raise ERRORS.error(exc, op, name) from exc
                yield from response.get("Responses", {}).get(self.table, [])
                pending = response.get(left) or {}
                if not pending:
                    break
                time.sleep(backoff(attempt))
            else:
                raise BackendError(f"dynamodb backend could not {op} {name!r}: DynamoDB left requests unprocessed")

    def _batch_write(self, name: str, requests: list[Any], op: str) -> None:
        for _ in self._batched(op, name, requests, WRITE_BATCH, read=False):
            pass

    def _drop_parts(self, name: str, version: str) -> None:
        """Delete the part-set of `version` (replaced, deleted or never committed): never fails the call."""
        keys = [
            {"DeleteRequest": {"Key": {"pk": {"S": name}, "sk": {"S": part_key(version, i)}}}}
            for i in range(parts_of(version))
        ]
        try:
            self._batch_write(name, keys, "drop the parts of")
        except BerthError as exc:
            log.warning("berth: %s (its orphaned parts are dropped by the next large save of it)", exc)

    def _drop_orphans(self, name: str, mine: str) -> None:
        """Delete part-sets under `name` an hour older than `mine` (no manifest names them any more)."""
        cutoff = f"{max(0, int(mine[:12], 16) - ORPHAN_MS):012x}"
        try:
            orphans = [
                {"DeleteRequest": {"Key": {"pk": {"S": name}, "sk": item["sk"]}}}
                for item in self._query(
                    name, {"KeyConditionExpression": "#pk = :p AND #sk < :c", ":p": name, ":c": cutoff}, "#sk"
                )
            ]
            self._batch_write(name, orphans, "drop the orphaned parts of")
        except BerthError as exc:
            log.warning("berth: %s", exc)

    def delete(self, name: str, token: Token) -> None:
        """Remove `name` only if its version is `token`.

        Raises:
            TokenMismatch: the frame changed, is gone, or never existed.
            StoreMissing: the table does not exist.
            BackendError: DynamoDB failed, or a retried delete's outcome is unknown.
        """
        version = version_of(token)
        if not version:
            raise TokenMismatch(f"{name!r} is not at version {token.value!r}")
        pk, sk = split_name(name)
        try:
            self._client.delete_item(
                TableName=self.table,
                Key={"pk": {"S": pk}, "sk": {"S": sk}},
                **at_version(version),
            )
        except ERRORS.catches as exc:
            raise ERRORS.error(exc, "delete", name, conditional=True) from exc
        if parts_of(version):
            self._drop_parts(name, version)

    # --- reads ----------------------------------------------------------------------

    def get(self, name: str) -> tuple[Data, Token] | None:
        """The frame under `name` and its version, or None.

        Raises:
            IntegrityError: a frame in parts whose parts are missing or changed (torn).
            StoreMissing: the table does not exist.
            BackendError: DynamoDB failed.
        """
        return self._opened(name, self._item(name))

    def _item(self, name: str, projection: str | None = None) -> dict[str, Any] | None:
        pk, sk = split_name(name)
        more = (
            {"ProjectionExpression": projection, "ExpressionAttributeNames": attr_names(projection)}
            if projection
            else {}
        )
        try:
            response = self._client.get_item(
                TableName=self.table, Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True, **more
            )
        except ERRORS.catches as exc:
            raise ERRORS.error(exc, "get", name) from exc
        found: dict[str, Any] | None = response.get("Item")
        return found

    def _opened(self, name: str, item: dict[str, Any] | None) -> tuple[bytes, Token] | None:
        for _ in range(8):
            if item is None:
                return None
            version = str(item["ver"]["S"])
            if not parts_of(version):
                return blob(item, "head") + blob(item, "body"), Token(version)
            data = self._assembled(name, version, item)
            if data is not None:
                return data, Token(version)
            again = self._item(name, "#v")
            if again is not None and again["ver"]["S"] == version:
                raise IntegrityError(
                    f"dynamodb frame {name!r} is torn: a part of version {version} is missing or changed"
                )
            item = self._item(name)  # replaced (or deleted) while its parts were read: read what is there now
        raise BackendError(f"dynamodb backend could not get {name!r}: it kept changing while its parts were read")

    def _assembled(self, name: str, version: str, item: dict[str, Any]) -> bytes | None:
        """The frame in parts that `item` names, or None when a part is missing or the whole does not match."""
        count = parts_of(version)
        keys = [{"pk": {"S": name}, "sk": {"S": part_key(version, i)}} for i in range(count)]
        found = {
            part["sk"]["S"]: blob(part, "body")
            for part in self._batched("read the parts of", name, keys, GET_BATCH, read=True)
        }
        pieces = [found.get(part_key(version, i)) for i in range(count)]
        if any(piece is None for piece in pieces):
            return None
        data = b"".join(pieces)  # type: ignore[arg-type]
        if len(data) != num(item, "size") or hashlib.sha256(data).digest() != blob(item, "digest"):
            return None
        return data

    def head(self, name: str, size: int) -> tuple[Data, Token] | None:
        """The first `size` bytes under `name` and its version (one read of `head` when it holds them)."""
        if size > HEAD_BYTES:
            found = self.get(name)
            return None if found is None else (found[0][:size], found[1])
        item = self._item(name, "#v, #h")
        return None if item is None else (blob(item, "head")[:size], Token(str(item["ver"]["S"])))

    def get_many(self, names: Sequence[str]) -> Sequence[tuple[Data, Token] | None]:
        """Every name's frame and version (or None), in order: `BatchGetItem`, 100 keys at a time.

        Raises:
            IntegrityError: a torn frame in parts.
            BackendError: DynamoDB failed.
        """
        split = [split_name(name) for name in names]
        keys = [{"pk": {"S": pk}, "sk": {"S": sk}} for pk, sk in dict.fromkeys(split)]
        got = self._batched("get", names[0] if names else "", keys, 100, read=True)
        items = {(item["pk"]["S"], item["sk"]["S"]): item for item in got}
        return [self._opened(name, items.get(key)) for name, key in zip(names, split, strict=True)]

    # --- listing ----------------------------------------------------------------------

    def _query(
        self, what: str, spec: dict[str, Any], projection: str | None, reverse: bool = False
    ) -> Iterator[dict[str, Any]]:
        """Every item a `Query` (or, without a key condition, a `Scan`) finds, a page at a time."""
        values = {k: {"S": v} for k, v in spec.items() if k.startswith(":")}
        kwargs: dict[str, Any] = {"TableName": self.table, "ConsistentRead": True, "Limit": self._page_size}
        text = " ".join(v for k, v in spec.items() if not k.startswith(":"))
        kwargs.update({k: v for k, v in spec.items() if not k.startswith(":")})
        kwargs["ExpressionAttributeNames"] = attr_names(f"{text} {projection or ''}")
        if values:
            kwargs["ExpressionAttributeValues"] = values
        if projection:
            kwargs["ProjectionExpression"] = projection
        scan = "KeyConditionExpression" not in spec
        if not scan:
            kwargs["ScanIndexForward"] = not reverse
        call = self._client.scan if scan else self._client.query
        while True:
            try:
                page = call(**kwargs)
            except ERRORS.catches as exc:
                raise ERRORS.error(exc, "list", what) from exc
            yield from page.get("Items", [])
            if "LastEvaluatedKey" not in page:
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _listed(
        self, prefix: str, projection: str, *, reverse: bool = False, before: str | None = None
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(name, item) of every frame under `prefix`, in name order (descending with `reverse`) but for a
        prefix with no `/`, names sorting before `before` only."""
        pk, sep, rest = prefix.partition("/")
        if not sep:  # no store lists this way: a table scan, frames only (a part's partition holds a '/')
            spec = (
                {"FilterExpression": "begins_with(#pk, :p) AND attribute_exists(#v)", ":p": prefix}
                if prefix
                else {"FilterExpression": "attribute_exists(#v)"}
            )
            for item in self._query(prefix, spec, f"#pk, #sk, {projection}"):
                name = f"{item['pk']['S']}/{item['sk']['S']}"
                if "/" not in item["pk"]["S"] and (before is None or name < before):
                    yield name, item
            return
        if not pk or len(rest.encode()) > 1024:
            return
        spec = {"KeyConditionExpression": "#pk = :p", ":p": pk}
        stop = before[len(pk) + 1 :] if before is not None and before.startswith(pk + "/") else None
        if before is not None and stop is None:
            if before <= prefix:
                return
            before = None  # every name under the prefix sorts before it
        if reverse and stop is not None:
            below = upper_bound(rest) if rest else None
            spec["KeyConditionExpression"] += " AND #sk < :s"
            spec[":s"] = stop if below is None or stop < below else below
        elif rest:
            spec["KeyConditionExpression"] += " AND begins_with(#sk, :s)"
            spec[":s"] = rest
        for item in self._query(prefix, spec, f"#sk, {projection}", reverse):
            sk = str(item["sk"]["S"])
            if not sk.startswith(rest):
                if reverse:
                    return
                continue
            if stop is not None and sk >= stop:
                if reverse:
                    continue
                return
            yield f"{pk}/{sk}", item

    def scan(self, prefix: str) -> Iterator[str]:
        """Every name under `prefix` (a `Query` of its identity's partition), in name order.

        Raises:
            BackendError: DynamoDB failed.
        """
        for name, _ in self._listed(prefix, "#v"):
            yield name

    def heads(self, prefix: str, size: int) -> Iterator[Head]:
        """(name, first `size` bytes, version, full size) under `prefix`: one `Query` reading `head` alone.

        Raises:
            BackendError: DynamoDB failed.
        """
        return self.sorted_heads(prefix, size, limit=None, reverse=False)

    def sorted_heads(self, prefix: str, size: int, *, limit: int | None, reverse: bool) -> Iterator[Head]:
        """Heads under `prefix` in name order straight from the `Query` (descending with `reverse`), the first `limit`.

        Raises:
            BackendError: DynamoDB failed.
        """
        rows = self._listed(prefix, "#v, #h, #z", reverse=reverse)
        for name, item in islice(rows, None if limit is None else max(0, limit)):
            stored, full = blob(item, "head"), num(item, "size")
            if size <= len(stored) or full <= len(stored):
                yield name, stored[:size], Token(str(item["ver"]["S"])), full
                continue
            try:  # a longer header than `head` holds: read the frame
                found = self.get(name)
            except IntegrityError as exc:  # one torn frame never stops a listing
                yield name, exc, Token.ZERO, 0
                continue
            if found is not None:
                yield name, bytes(found[0][:size]), found[1], full

    def sorted_frames(
        self, prefix: str, *, limit: int | None, reverse: bool, before: str | None = None
    ) -> Iterator[Frame]:
        """Whole frames under `prefix` in name order, straight from the `Query` (parts read for a large one).

        Raises:
            IntegrityError: a torn frame in parts.
            BackendError: DynamoDB failed.
        """
        rows = self._listed(prefix, "#v, #h, #b, #z, #d", reverse=reverse, before=before)
        for name, item in islice(rows, None if limit is None else max(0, limit)):
            found = self._opened(name, item)
            if found is not None:
                yield name, found[0], found[1]

    # --- the table ---------------------------------------------------------------------

    def setup(self) -> None:
        """Create the table (on-demand capacity, `pk`/`sk` strings) if it does not exist, and wait until it is active;
        on a table it creates, enable TTL on `ttl_attribute` (a table already there is left as it is).

        Raises:
            BackendError: DynamoDB refused (no `dynamodb:CreateTable` or `dynamodb:UpdateTimeToLive`,
                say), or a table of that name has another key schema.
        """
        created = False
        try:
            try:
                self._client.create_table(
                    TableName=self.table,
                    BillingMode="PAY_PER_REQUEST",
                    AttributeDefinitions=[
                        {"AttributeName": "pk", "AttributeType": "S"},
                        {"AttributeName": "sk", "AttributeType": "S"},
                    ],
                    KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
                )
                created = True
            except ClientError as exc:
                if error_code(exc) != "ResourceInUseException":
                    raise
            self._client.get_waiter("table_exists").wait(
                TableName=self.table, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
            )
            schema = self._client.describe_table(TableName=self.table)["Table"]["KeySchema"]
            if created and self._ttl:
                self._client.update_time_to_live(
                    TableName=self.table, TimeToLiveSpecification={"Enabled": True, "AttributeName": self._ttl}
                )
        except ERRORS.catches as exc:
            raise ERRORS.error(exc, "set up the table of", self.table) from exc
        keys = {(k["AttributeName"], k["KeyType"]) for k in schema}
        if keys != {("pk", "HASH"), ("sk", "RANGE")}:
            raise BackendError(f"dynamodb table {self.table!r} exists with another key schema: {sorted(keys)}")

    def close(self) -> None:
        """Close the connection pools of the clients berth built."""
        for client in self._owned:
            client.close()
        self._owned = []
