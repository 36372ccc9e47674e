"""The floors: each backend's raw client doing the same durable work by hand, as a careful engineer would.

Every floor stores the same 64 KiB chat state, encoded with orjson and sealed
with AES-256-GCM (`cryptography`, a random 96-bit nonce, the row name as
associated data), under a generation so that its delete is conditional, the
way a claim must be. They are the ceiling berth is measured against: no
envelope, no frame header, no validation, no error mapping.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import sqlite3
import struct
from pathlib import Path
from typing import Any

import orjson
from _common import KEY
from cryptography.hazmat.primitives.ciphers.aead import AESGCM


class Conflict(Exception):
    """The conditional delete lost: the generation changed or the row is gone."""


class _Sealed:
    def __init__(self) -> None:
        self.aead = AESGCM(KEY)

    def seal(self, name: str, obj: Any) -> bytes:
        nonce = os.urandom(12)
        return nonce + self.aead.encrypt(nonce, orjson.dumps(obj), name.encode())

    def open(self, name: str, data: bytes | memoryview) -> Any:
        view = memoryview(data)
        return orjson.loads(self.aead.decrypt(view[:12], view[12:], name.encode()))

    def seal_bytes(self, name: str, data: bytes) -> bytes:
        nonce = os.urandom(12)
        return nonce + self.aead.encrypt(nonce, data, name.encode())

    def open_bytes(self, name: str, data: bytes | memoryview) -> bytes:
        view = memoryview(data)
        return self.aead.decrypt(view[:12], view[12:], name.encode())


class _WriteRead(_Sealed):
    """A floor whose storage is `_write(name, sealed) -> gen` and `_read(name) -> (sealed, gen)`."""

    def _write(self, name: str, sealed: bytes) -> int:
        raise NotImplementedError

    def _read(self, name: str) -> tuple[bytes | memoryview, int] | None:
        raise NotImplementedError

    def save(self, name: str, obj: Any) -> int:
        return self._write(name, self.seal(name, obj))

    def save_bytes(self, name: str, data: bytes) -> int:
        return self._write(name, self.seal_bytes(name, data))

    def load(self, name: str) -> tuple[Any, int] | None:
        found = self._read(name)
        return None if found is None else (self.open(name, found[0]), found[1])

    def load_bytes(self, name: str) -> tuple[bytes, int] | None:
        found = self._read(name)
        return None if found is None else (self.open_bytes(name, found[0]), found[1])


# --- SQLite -------------------------------------------------------------------------------


class SqliteFloor(_Sealed):
    """WAL, synchronous=FULL, autocommit: INSERT OR REPLACE with a generation, SELECT, DELETE ... AND gen=?."""

    def __init__(self, path: str | os.PathLike[str]):
        super().__init__()
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS floor_frames (name TEXT PRIMARY KEY, gen INTEGER NOT NULL, data BLOB NOT NULL)"
        )

    def save(self, name: str, obj: Any) -> int:
        gen = secrets.randbits(62) + 1
        self.conn.execute(
            "INSERT OR REPLACE INTO floor_frames (name, gen, data) VALUES (?, ?, ?)", (name, gen, self.seal(name, obj))
        )
        return gen

    def save_bytes(self, name: str, data: bytes) -> int:
        gen = secrets.randbits(62) + 1
        sealed = self.seal_bytes(name, data)
        self.conn.execute("INSERT OR REPLACE INTO floor_frames (name, gen, data) VALUES (?, ?, ?)", (name, gen, sealed))
        return gen

    def load(self, name: str) -> tuple[Any, int] | None:
        row = self.conn.execute("SELECT gen, data FROM floor_frames WHERE name = ?", (name,)).fetchone()
        if row is None:
            return None
        return self.open(name, row[1]), row[0]

    def load_bytes(self, name: str) -> tuple[bytes, int] | None:
        row = self.conn.execute("SELECT gen, data FROM floor_frames WHERE name = ?", (name,)).fetchone()
        return None if row is None else (self.open_bytes(name, row[1]), row[0])

    def delete(self, name: str, gen: int) -> None:
        cur = self.conn.execute("DELETE FROM floor_frames WHERE name = ? AND gen = ?", (name, gen))
        if cur.rowcount != 1:
            raise Conflict(name)

    def close(self) -> None:
        self.conn.close()


# --- files --------------------------------------------------------------------------------

_GEN = struct.Struct(">Q")


class FileFloor(_WriteRead):
    """One file per key: temp file, fsync, rename, fsync the directory; a per-key flock for the conditional delete."""

    def __init__(self, root: str | os.PathLike[str]):
        super().__init__()
        self.root = Path(root)
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _path(self, name: str) -> Path:
        return self.root / hashlib.sha256(name.encode()).hexdigest()

    def _lock(self, path: Path) -> int:
        fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def _fsync_dir(self) -> None:
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _write(self, name: str, payload: bytes) -> int:
        path = self._path(name)
        gen = secrets.randbits(63) | 1
        lock = self._lock(path)
        try:
            tmp = f"{path}.tmp-{secrets.token_hex(6)}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, _GEN.pack(gen))
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            self._fsync_dir()
        finally:
            os.close(lock)
        return gen

    def _read(self, name: str) -> tuple[memoryview, int] | None:
        try:
            with open(self._path(name), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        return memoryview(data)[8:], _GEN.unpack_from(data)[0]

    def delete(self, name: str, gen: int) -> None:
        path = self._path(name)
        lock = self._lock(path)
        try:
            try:
                with open(path, "rb") as f:
                    current = _GEN.unpack(f.read(8))[0]
            except FileNotFoundError:
                raise Conflict(name) from None
            if current != gen:
                raise Conflict(name)
            os.unlink(path)
            self._fsync_dir()
        finally:
            os.close(lock)

    def close(self) -> None:
        pass


# --- PostgreSQL ---------------------------------------------------------------------------


class PostgresFloor(_WriteRead):
    """One autocommit psycopg connection: upsert with a generation, binary SELECT, DELETE ... AND gen = %s.

    The data column is `STORAGE EXTERNAL` (ciphertext does not compress) and
    statements are prepared by psycopg after their fifth use.
    """

    def __init__(self, dsn: str, table: str = "floor_frames"):
        import psycopg

        super().__init__()
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.table = table
        self.conn.execute(
            f'CREATE TABLE IF NOT EXISTS {table} (name text COLLATE "C" PRIMARY KEY, gen bigint NOT NULL, '
            "data bytea NOT NULL)"
        )
        self.conn.execute(f"ALTER TABLE {table} ALTER COLUMN data SET STORAGE EXTERNAL")
        self._put = (
            f"INSERT INTO {table} (name, gen, data) VALUES (%s, %s, %s) "
            "ON CONFLICT (name) DO UPDATE SET gen = EXCLUDED.gen, data = EXCLUDED.data"
        ).encode()
        self._get = f"SELECT gen, data FROM {table} WHERE name = %s".encode()
        self._delete = f"DELETE FROM {table} WHERE name = %s AND gen = %s".encode()

    def _write(self, name: str, sealed: bytes) -> int:
        gen = secrets.randbits(62) + 1
        self.conn.execute(self._put, (name, gen, sealed))
        return gen

    def _read(self, name: str) -> tuple[bytes, int] | None:
        row = self.conn.execute(self._get, (name,), binary=True).fetchone()
        return None if row is None else (row[1], row[0])

    def delete(self, name: str, gen: int) -> None:
        if self.conn.execute(self._delete, (name, gen)).rowcount != 1:
            raise Conflict(name)

    def close(self) -> None:
        self.conn.close()


# --- Redis --------------------------------------------------------------------------------

_CAD = """
if redis.call('GETRANGE', KEYS[1], 0, 7) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisFloor(_Sealed):
    """SET of generation + sealed bytes, GET, and a Lua compare-and-delete on the generation (EVALSHA)."""

    def __init__(self, url: str):
        import redis

        super().__init__()
        self.client = redis.Redis.from_url(url)
        self._cad = self.client.register_script(_CAD)

    def _write(self, name: str, sealed: bytes) -> bytes:
        gen = secrets.token_bytes(8)
        self.client.set(name, gen + sealed)
        return gen

    def save(self, name: str, obj: Any) -> bytes:
        return self._write(name, self.seal(name, obj))

    def load(self, name: str) -> tuple[Any, bytes] | None:
        data: Any = self.client.get(name)
        if data is None:
            return None
        view = memoryview(data)
        return self.open(name, view[8:]), bytes(view[:8])

    def delete(self, name: str, gen: bytes) -> None:
        if self._cad(keys=[name], args=[gen]) != 1:
            raise Conflict(name)

    def close(self) -> None:
        self.client.close()


class RedisClusterFloor(RedisFloor):
    """RedisFloor on redis-py's `RedisCluster`: SET, GET and EVALSHA each sent to the primary of the key's slot."""

    def __init__(self, url: str):
        from redis.cluster import ClusterNode, RedisCluster

        _Sealed.__init__(self)
        hosts = url.partition("://")[2].partition("/")[0].split(",")
        nodes = [ClusterNode(host, int(port)) for host, _, port in (h.rpartition(":") for h in hosts)]
        self.client = RedisCluster(startup_nodes=nodes)  # type: ignore[assignment]
        self._cad = self.client.register_script(_CAD)

    def close(self) -> None:
        from berth.backends.redis._sync import close_cluster

        close_cluster(self.client)  # a cluster client leaves its nodes' pools open


# --- S3 -----------------------------------------------------------------------------------


class S3Floor(_Sealed):
    """boto3: put_object, get_object (its ETag), delete_object(IfMatch=etag)."""

    def __init__(self, endpoint: str, bucket: str, prefix: str = "floor"):
        import boto3

        super().__init__()
        self.client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        self.bucket, self.prefix = bucket, prefix

    def save(self, name: str, obj: Any) -> str:
        r = self.client.put_object(Bucket=self.bucket, Key=f"{self.prefix}/{name}", Body=self.seal(name, obj))
        return str(r["ETag"])

    def load(self, name: str) -> tuple[Any, str] | None:
        from botocore.exceptions import ClientError

        try:
            r = self.client.get_object(Bucket=self.bucket, Key=f"{self.prefix}/{name}")
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "NoSuchKey":
                return None
            raise
        return self.open(name, r["Body"].read()), str(r["ETag"])

    def delete(self, name: str, etag: str) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.delete_object(Bucket=self.bucket, Key=f"{self.prefix}/{name}", IfMatch=etag)
        except ClientError as exc:
            raise Conflict(name) from exc

    def close(self) -> None:
        self.client.close()


# --- DynamoDB -----------------------------------------------------------------------------


class DynamoDbFloor(_Sealed):
    """boto3: put_item with a fresh version, get_item (consistent), delete_item on condition of the version.

    The same three requests as berth's cycle. berth's put also carries `attribute_not_exists(digest)`
    (so that a frame it replaces that was stored in parts is known and its parts dropped) and splits
    the frame into `head` and `body` attributes for listings; one item of 64 KiB needs neither, so
    the floor sends neither, and berth's ratio pays for both.
    """

    def __init__(self, endpoint: str, table: str, prefix: str = "floor"):
        import boto3

        super().__init__()
        self.client = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")
        self.table, self.prefix = table, prefix

    def _key(self, name: str) -> dict[str, Any]:
        return {"pk": {"S": self.prefix}, "sk": {"S": name}}

    def save(self, name: str, obj: Any) -> str:
        version = secrets.token_hex(16)
        item = {**self._key(name), "ver": {"S": version}, "body": {"B": self.seal(name, obj)}}
        self.client.put_item(TableName=self.table, Item=item)
        return version

    def load(self, name: str) -> tuple[Any, str] | None:
        item = self.client.get_item(TableName=self.table, Key=self._key(name), ConsistentRead=True).get("Item")
        return None if item is None else (self.open(name, item["body"]["B"]), str(item["ver"]["S"]))

    def delete(self, name: str, version: str) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.delete_item(
                TableName=self.table,
                Key=self._key(name),
                ConditionExpression="ver = :v",
                ExpressionAttributeValues={":v": {"S": version}},
            )
        except ClientError as exc:
            raise Conflict(name) from exc

    def close(self) -> None:
        self.client.close()


# --- Azure Blob Storage -------------------------------------------------------------------


class AzblobFloor(_Sealed):
    """azure-storage-blob: upload_blob (its ETag), download_blob, delete_blob(etag, IfNotModified).

    The same three requests as berth's cycle (one Put Blob, one Get Blob, one Delete Blob with If-Match),
    on the client's default settings where berth sets its timeouts, retry policy and content type.
    """

    def __init__(self, connection_string: str, container: str, prefix: str = "floor"):
        from azure.storage.blob import ContainerClient

        super().__init__()
        self.client = ContainerClient.from_connection_string(connection_string, container)
        self.prefix = prefix

    def save(self, name: str, obj: Any) -> str:
        blob = self.client.get_blob_client(f"{self.prefix}/{name}")
        return str(blob.upload_blob(self.seal(name, obj), overwrite=True)["etag"])

    def load(self, name: str) -> tuple[Any, str] | None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            downloader = self.client.get_blob_client(f"{self.prefix}/{name}").download_blob()
            data = downloader.readall()
        except ResourceNotFoundError:
            return None
        return self.open(name, data), str(downloader.properties.etag)

    def delete(self, name: str, etag: str) -> None:
        from azure.core import MatchConditions
        from azure.core.exceptions import HttpResponseError

        try:
            self.client.get_blob_client(f"{self.prefix}/{name}").delete_blob(
                etag=etag, match_condition=MatchConditions.IfNotModified
            )
        except HttpResponseError as exc:
            raise Conflict(name) from exc

    def close(self) -> None:
        self.client.close()


# --- GCS ----------------------------------------------------------------------------------


class GcsFloor(_Sealed):
    """google-cloud-storage: upload (its generation), download, delete(if_generation_match=generation)."""

    def __init__(self, bucket: str, prefix: str = "floor"):
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage  # type: ignore[attr-defined]

        super().__init__()
        self.client = storage.Client(project="bench", credentials=AnonymousCredentials())
        self.bucket = self.client.bucket(bucket)
        self.prefix = prefix

    def save(self, name: str, obj: Any) -> int:
        blob = self.bucket.blob(f"{self.prefix}/{name}")
        blob.upload_from_string(self.seal(name, obj), content_type="application/octet-stream")
        return int(blob.generation)

    def load(self, name: str) -> tuple[Any, int] | None:
        from google.api_core.exceptions import NotFound

        blob = self.bucket.blob(f"{self.prefix}/{name}")
        try:
            data = blob.download_as_bytes()
        except NotFound:
            return None
        return self.open(name, data), int(blob.generation)

    def delete(self, name: str, generation: int) -> None:
        from google.api_core.exceptions import GoogleAPICallError

        try:
            self.bucket.blob(f"{self.prefix}/{name}").delete(if_generation_match=generation)
        except GoogleAPICallError as exc:
            raise Conflict(name) from exc

    def close(self) -> None:
        self.client.close()
