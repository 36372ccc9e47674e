"""An in-process fake of the Cloud Storage JSON API, for the preconditions no emulator honours.

fake-gcs-server ignores `ifGenerationMatch` on delete, so a claim race cannot
be tested against it. This fake serves the handful of JSON API calls the
official google-cloud-storage client makes for berth (multipart upload, media
download with a Range, metadata get, delete, paged list) from a thread of the
test process, on loopback, and reproduces what GCS does with them:

- every write gets a fresh generation (one counter, never reused);
- `ifGenerationMatch` and `ifGenerationNotMatch` are honoured on upload,
  download, get and delete as the JSON API reference states them (match 0:
  "no live object"; not-match on a missing object fails); a failed
  precondition is 412 (304 for a not-match on a read); reading or deleting a
  missing object is 404 whatever its preconditions; any other precondition
  parameter is refused (501), never ignored;
- object names over 1024 bytes of UTF-8, or holding CR or LF, are 400;
- listing is in name order, `maxResults` per page with a `nextPageToken`.

Because it is real HTTP, the real client and the real `GcsBackend` run
unchanged, and other processes can reach it (the multi-process claim race).
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import google_crc32c

__all__ = ["FakeGcs"]

MAX_NAME_BYTES = 1024
_PRECONDITIONS = {"ifGenerationMatch", "ifGenerationNotMatch"}


@dataclass
class _Object:
    name: str
    data: bytes
    generation: int
    metadata: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/octet-stream"

    def resource(self, bucket: str) -> dict[str, Any]:
        crc = base64.b64encode(google_crc32c.Checksum(self.data).digest()).decode()
        md5 = base64.b64encode(hashlib.md5(self.data).digest()).decode()
        out: dict[str, Any] = {
            "kind": "storage#object",
            "id": f"{bucket}/{self.name}/{self.generation}",
            "name": self.name,
            "bucket": bucket,
            "generation": str(self.generation),
            "metageneration": "1",
            "contentType": self.content_type,
            "size": str(len(self.data)),
            "crc32c": crc,
            "md5Hash": md5,
        }
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        return out


class _Error(Exception):
    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


class FakeGcs:
    """`with FakeGcs() as gcs:` a JSON API endpoint at `gcs.url`; buckets via `gcs.create_bucket(name)`."""

    def __init__(self) -> None:
        self._buckets: dict[str, dict[str, _Object]] = {}
        self._generation = 1_764_000_000_000_000  # microseconds, as GCS's look; one counter, never reused
        self._lock = threading.Lock()
        self.requests = 0
        self._conns: set[socket.socket] = set()
        self._port = 0
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> None:
        """Serve (again, on the same port after `stop`, with the same objects)."""
        self._server = ThreadingHTTPServer(("127.0.0.1", self._port), self._handler())
        self._server.daemon_threads = True
        self._server.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
        self._port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Stop serving and cut every open connection, as a crashed server would; the objects stay."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        with self._lock:
            conns, self._conns = self._conns, set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> FakeGcs:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def create_bucket(self, name: str) -> None:
        with self._lock:
            self._buckets.setdefault(name, {})

    def seed(self, bucket: str, name: str, data: bytes, metadata: dict[str, str] | None = None) -> None:
        """Store an object directly, as another tool writing to the bucket would."""
        with self._lock:
            self._generation += 1
            self._buckets[bucket][name] = _Object(name, data, self._generation, dict(metadata or {}))

    def names(self, bucket: str) -> list[str]:
        with self._lock:
            return sorted(self._buckets[bucket])

    # --- the API ----------------------------------------------------------------------

    def _bucket(self, name: str) -> dict[str, _Object]:
        bucket = self._buckets.get(name)
        if bucket is None:
            raise _Error(404, "notFound", "The specified bucket does not exist.")
        return bucket

    @staticmethod
    def _check_name(name: str) -> None:
        if not name or len(name.encode()) > MAX_NAME_BYTES or "\r" in name or "\n" in name or name in (".", ".."):
            raise _Error(400, "invalid", "The specified object name is not valid.")

    @staticmethod
    def _precondition(current: _Object | None, query: dict[str, str], *, read: bool = False) -> None:
        unknown = sorted(k for k in query if k.startswith("if") and k not in _PRECONDITIONS)
        if unknown:
            raise _Error(501, "notImplemented", f"the fake does not implement {', '.join(unknown)}")
        have = current.generation if current is not None else 0
        want = query.get("ifGenerationMatch")
        if want is not None and int(want) != have:
            raise _Error(412, "conditionNotMet", "At least one of the pre-conditions you specified did not hold.")
        avoid = query.get("ifGenerationNotMatch")
        if avoid is not None and (current is None or int(avoid) == have):
            if read and current is not None:
                raise _Error(304, "notModified", "The object's generation matches ifGenerationNotMatch.")
            raise _Error(412, "conditionNotMet", "At least one of the pre-conditions you specified did not hold.")

    def _found(self, bucket: str, name: str, query: dict[str, str], *, read: bool = False) -> _Object:
        current = self._bucket(bucket).get(name)
        if "generation" in query and current is not None and current.generation != int(query["generation"]):
            current = None
        if current is None:
            raise _Error(404, "notFound", f"No such object: {bucket}/{name}")
        self._precondition(current, query, read=read)
        return current

    def upload(self, bucket: str, query: dict[str, str], content_type: str, body: bytes) -> dict[str, Any]:
        if query.get("uploadType") != "multipart":
            raise _Error(501, "notImplemented", "the fake takes multipart uploads only")
        meta, data, media_type = _split_multipart(content_type, body)
        name = meta.get("name") or query.get("name", "")
        self._check_name(name)
        for algo, want in (("crc32c", meta.get("crc32c")), ("md5Hash", meta.get("md5Hash"))):
            if want is not None and _Object(name, data, 0).resource(bucket)[algo] != want:
                raise _Error(400, "invalid", f"Provided {algo} does not match the data.")
        with self._lock:
            objects = self._bucket(bucket)
            self._precondition(objects.get(name), query)
            self._generation += 1
            obj = _Object(
                name, data, self._generation, dict(meta.get("metadata") or {}), meta.get("contentType") or media_type
            )
            objects[name] = obj
            return obj.resource(bucket)

    def delete(self, bucket: str, name: str, query: dict[str, str]) -> None:
        with self._lock:
            self._found(bucket, name, query)
            del self._buckets[bucket][name]

    def get(self, bucket: str, name: str, query: dict[str, str]) -> _Object:
        with self._lock:
            return self._found(bucket, name, query, read=True)

    def list(self, bucket: str, query: dict[str, str]) -> dict[str, Any]:
        prefix = query.get("prefix", "")
        page = max(1, min(int(query.get("maxResults") or 1000), 1000))
        after = base64.urlsafe_b64decode(query["pageToken"]).decode() if query.get("pageToken") else None
        with self._lock:
            names = sorted((n for n in self._bucket(bucket) if n.startswith(prefix)), key=lambda n: n.encode())
            if after is not None:
                names = [n for n in names if n.encode() > after.encode()]
            items = [self._buckets[bucket][n].resource(bucket) for n in names[:page]]
        out: dict[str, Any] = {"kind": "storage#objects", "items": items}
        if len(names) > page:
            out["nextPageToken"] = base64.urlsafe_b64encode(names[page - 1].encode()).decode()
        return out

    # --- HTTP -------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def setup(self) -> None:
                super().setup()
                with fake._lock:
                    fake._conns.add(self.connection)

            def finish(self) -> None:
                with fake._lock:
                    fake._conns.discard(self.connection)
                super().finish()

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with fake._lock:
                    fake.requests += 1
                parts = urlsplit(self.path)
                segs = [unquote(s) for s in parts.path.split("/")[1:]]
                query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
                try:
                    self._route(segs, query, body)
                except _Error as exc:
                    if exc.code == 304:  # Not Modified carries no body
                        self._send(304, b"", [])
                        return
                    error = {
                        "error": {
                            "code": exc.code,
                            "message": exc.message,
                            "errors": [{"reason": exc.reason, "message": exc.message}],
                        }
                    }
                    self._json(exc.code, error)

            def _route(self, segs: list[str], query: dict[str, str], body: bytes) -> None:
                method = self.command
                if method == "POST" and segs[:4] == ["upload", "storage", "v1", "b"] and segs[5:] == ["o"]:
                    ctype = self.headers.get("Content-Type", "")
                    self._json(200, fake.upload(segs[4], query, ctype, body))
                elif method == "GET" and segs[:4] == ["download", "storage", "v1", "b"] and len(segs) == 7:
                    self._media(fake.get(segs[4], segs[6], query))
                elif segs[:3] == ["storage", "v1", "b"] and len(segs) == 5 and segs[4] == "o" and method == "GET":
                    self._json(200, fake.list(segs[3], query))
                elif segs[:3] == ["storage", "v1", "b"] and len(segs) == 6 and segs[4] == "o":
                    if method == "DELETE":
                        fake.delete(segs[3], segs[5], query)
                        self._send(204, b"", [])
                    elif method == "GET" and query.get("alt") == "media":
                        self._media(fake.get(segs[3], segs[5], query))
                    elif method == "GET":
                        self._json(200, fake.get(segs[3], segs[5], query).resource(segs[3]))
                    else:
                        raise _Error(405, "notAllowed", f"{method} is not supported by the fake")
                else:
                    raise _Error(404, "notFound", f"the fake does not serve {method} {self.path}")

            def _media(self, obj: _Object) -> None:
                headers = [
                    ("Content-Type", obj.content_type),
                    ("X-Goog-Generation", str(obj.generation)),
                    ("X-Goog-Metageneration", "1"),
                    ("X-Goog-Stored-Content-Length", str(len(obj.data))),
                ]
                rng = self.headers.get("Range")
                if not rng:
                    res = obj.resource("")
                    headers.append(("X-Goog-Hash", f"crc32c={res['crc32c']},md5={res['md5Hash']}"))
                    self._send(200, obj.data, headers)
                    return
                start_s, _, end_s = rng.removeprefix("bytes=").partition("-")
                start = int(start_s or 0)
                end = min(int(end_s) if end_s else len(obj.data) - 1, len(obj.data) - 1)
                if start >= len(obj.data):
                    raise _Error(416, "requestedRangeNotSatisfiable", "The requested range cannot be satisfied.")
                headers.append(("Content-Range", f"bytes {start}-{end}/{len(obj.data)}"))
                self._send(206, obj.data[start : end + 1], headers)

            def _json(self, status: int, doc: dict[str, Any]) -> None:
                self._send(status, json.dumps(doc).encode(), [("Content-Type", "application/json; charset=UTF-8")])

            def _send(self, status: int, data: bytes, headers: list[tuple[str, str]]) -> None:
                self.send_response_only(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve

        return Handler


def _split_multipart(content_type: str, body: bytes) -> tuple[dict[str, Any], bytes, str]:
    """The JSON metadata part and the media part of a `multipart/related` upload."""
    boundary = ""
    for param in content_type.split(";")[1:]:
        key, _, value = param.strip().partition("=")
        if key.lower() == "boundary":
            boundary = value.strip('"')
    if not boundary:
        raise _Error(400, "invalid", "multipart upload without a boundary")
    delim = b"--" + boundary.encode()
    parts = body.split(delim)
    # ['', meta part, media part, '--\r\n' or '--']
    if len(parts) < 4:
        raise _Error(400, "invalid", "multipart upload with fewer than two parts")

    def split(part: bytes) -> tuple[dict[str, str], bytes]:
        head, _, payload = part.partition(b"\r\n\r\n")
        headers = {}
        for line in head.decode("latin-1").strip().split("\r\n"):
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        return headers, payload[:-2] if payload.endswith(b"\r\n") else payload

    _, meta_raw = split(parts[1])
    media_headers, data = split(parts[2])
    return json.loads(meta_raw), data, media_headers.get("content-type", "application/octet-stream")
