"""An in-process fake of Cloud KMS's KeyManagementServiceClient that honours AAD, and the same over REST."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import google_crc32c
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.api_core import exceptions as gexc
from google.cloud import kms_v1


def _crc(data: bytes) -> int:
    return int(google_crc32c.value(data))


class FakeKmsClient:
    """Stands in for `kms_v1.KeyManagementServiceClient`: encrypt/decrypt with versions, AAD and CRC32C checks.

    Like Cloud KMS it takes only request objects of the real library, refuses a
    ciphertext under another AAD with INVALID_ARGUMENT, and answers with the
    real response types. `fail_with` makes every call raise (an outage).
    """

    def __init__(self) -> None:
        self.keys: dict[str, list[bytes]] = {}
        self.requests: list[Any] = []
        self.fail_with: Exception | None = None

    def create_key(self, name: str) -> str:
        self.keys[name] = [AESGCM.generate_key(bit_length=256)]
        return name

    def rotate(self, name: str) -> None:
        self.keys[name].append(AESGCM.generate_key(bit_length=256))

    def _versions(self, name: str) -> list[bytes]:
        if self.fail_with is not None:
            raise self.fail_with
        if name not in self.keys:
            raise gexc.NotFound(f"CryptoKey {name} not found.")
        return self.keys[name]

    @staticmethod
    def _check_crc(data: bytes, crc: int | None, field: str) -> None:
        if crc is not None and crc != _crc(data):
            raise gexc.InvalidArgument(f"The checksum in field {field} did not match the data in field {field[:-7]}.")

    def encrypt(self, request: kms_v1.EncryptRequest, *, timeout: float | None = None) -> kms_v1.EncryptResponse:
        assert isinstance(request, kms_v1.EncryptRequest), type(request)
        self.requests.append(request)
        versions = self._versions(request.name)
        pt, aad = bytes(request.plaintext), bytes(request.additional_authenticated_data)
        self._check_crc(pt, request.plaintext_crc32c, "plaintext_crc32c")
        self._check_crc(aad, request.additional_authenticated_data_crc32c, "additional_authenticated_data_crc32c")
        version = len(versions)
        nonce = os.urandom(12)
        ciphertext = version.to_bytes(4, "big") + nonce + AESGCM(versions[-1]).encrypt(nonce, pt, aad)
        return kms_v1.EncryptResponse(
            name=f"{request.name}/cryptoKeyVersions/{version}",
            ciphertext=ciphertext,
            ciphertext_crc32c=_crc(ciphertext),
            verified_plaintext_crc32c="plaintext_crc32c" in request,
            verified_additional_authenticated_data_crc32c="additional_authenticated_data_crc32c" in request,
        )

    def decrypt(self, request: kms_v1.DecryptRequest, *, timeout: float | None = None) -> kms_v1.DecryptResponse:
        assert isinstance(request, kms_v1.DecryptRequest), type(request)
        self.requests.append(request)
        versions = self._versions(request.name)
        ct, aad = bytes(request.ciphertext), bytes(request.additional_authenticated_data)
        self._check_crc(ct, request.ciphertext_crc32c, "ciphertext_crc32c")
        self._check_crc(aad, request.additional_authenticated_data_crc32c, "additional_authenticated_data_crc32c")
        version = int.from_bytes(ct[:4], "big")
        try:
            if not 1 <= version <= len(versions):
                raise InvalidTag
            pt = AESGCM(versions[version - 1]).decrypt(ct[4:16], ct[16:], aad)
        except (InvalidTag, ValueError):
            raise gexc.InvalidArgument("Decryption failed: the ciphertext is invalid.") from None
        return kms_v1.DecryptResponse(plaintext=pt, plaintext_crc32c=_crc(pt), used_primary=version == len(versions))


@contextmanager
def rest_server(fake: FakeKmsClient) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Serve `fake` as Cloud KMS's REST API on loopback; yields the endpoint and the JSON bodies received."""
    bodies: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            name, _, op = urlsplit(self.path).path.removeprefix("/v1/").rpartition(":")
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            bodies.append({"path": self.path, **json.loads(raw)})
            try:
                if op == "encrypt":
                    req = kms_v1.EncryptRequest.from_json(raw, ignore_unknown_fields=True)
                    req.name = name
                    out = kms_v1.EncryptResponse.to_json(fake.encrypt(request=req))
                elif op == "decrypt":
                    req2 = kms_v1.DecryptRequest.from_json(raw, ignore_unknown_fields=True)
                    req2.name = name
                    out = kms_v1.DecryptResponse.to_json(fake.decrypt(request=req2))
                else:
                    raise gexc.NotFound(f"no method {op}")
                status = 200
            except gexc.GoogleAPICallError as exc:
                status = int(exc.code or 500)
                code = exc.grpc_status_code
                out = json.dumps({"error": {"code": status, "message": exc.message, "status": code and code.name}})
            data = out.encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
