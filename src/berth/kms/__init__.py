"""KMS clients for `berth.KmsSealer`: wrap and unwrap data keys under keys that never leave the KMS.

    LocalKms(keyring)      AES-256-GCM under a local `berth.Keyring`; no cloud (development, on-premises)
    GcpKms(key_name)       Google Cloud KMS (extra `gcpkms`: google-cloud-kms)
    AwsKms(key_id)         AWS KMS (extra `awskms`: boto3)

A host may bring its own: anything with the four members of `Kms`. Every
client binds a `context` (the frame's identity and key) to each wrapped key,
so the KMS refuses to unwrap it for any other frame and its audit log names
the run. Client errors are mapped to berth's: a wrapped key the KMS will not
open for this context is `IntegrityError`; a KMS that is down or refuses the
caller is `BackendError`. The cloud client libraries are imported only when a
client first talks to its KMS.
"""

from __future__ import annotations

from berth.kms._base import Kms, Wrapped, encode_context
from berth.kms.aws import AwsKms
from berth.kms.gcp import GcpKms
from berth.kms.local import LocalKms

__all__ = ["AwsKms", "GcpKms", "Kms", "LocalKms", "Wrapped", "encode_context"]
