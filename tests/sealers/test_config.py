"""sealer_from_env(): BERTH_KMS and BERTH_KEYRING."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import berth
from berth.kms import AwsKms, GcpKms, LocalKms

GCP = "projects/p/locations/global/keyRings/r/cryptoKeys/k"
ARN = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"


@pytest.fixture
def keyring_path(tmp_path: Path) -> Path:
    path = tmp_path / "keyring.json"
    berth.Keyring.generate().save(path)
    return path


def test_nothing_set_is_none() -> None:
    assert berth.sealer_from_env({}) is None
    assert berth.sealer_from_env({"BERTH_KMS": " ", "BERTH_KEYRING": ""}) is None


def test_gcpkms() -> None:
    sealer = berth.sealer_from_env({"BERTH_KMS": f"gcpkms://{GCP}"})
    assert isinstance(sealer, berth.KmsSealer) and isinstance(sealer.kms, GcpKms)
    assert sealer.key_id == GCP


@pytest.mark.parametrize("target", [ARN, "alias/berth", "arn:aws:kms:eu-west-1:111122223333:alias/berth"])
def test_awskms(target: str) -> None:
    sealer = berth.sealer_from_env({"BERTH_KMS": f"awskms://{target}"})
    assert isinstance(sealer, berth.KmsSealer) and isinstance(sealer.kms, AwsKms)
    assert sealer.key_id == target


def test_local(keyring_path: Path) -> None:
    sealer = berth.sealer_from_env({"BERTH_KMS": f"local://{keyring_path}"})
    assert isinstance(sealer, berth.KmsSealer) and isinstance(sealer.kms, LocalKms)
    assert sealer.key_id == berth.Keyring.load(keyring_path).primary


def test_keyring(keyring_path: Path) -> None:
    sealer = berth.sealer_from_env({"BERTH_KEYRING": str(keyring_path)})
    assert isinstance(sealer, berth.AesGcmSealer)
    assert sealer.key_id == berth.Keyring.load(keyring_path).primary


def test_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch, keyring_path: Path) -> None:
    monkeypatch.delenv("BERTH_KMS", raising=False)
    monkeypatch.setenv("BERTH_KEYRING", str(keyring_path))
    assert isinstance(berth.sealer_from_env(), berth.AesGcmSealer)


def test_kms_and_keyring_together_seal_with_the_kms_and_open_both(keyring_path: Path) -> None:
    sealer = berth.sealer_from_env({"BERTH_KMS": f"gcpkms://{GCP}", "BERTH_KEYRING": str(keyring_path)})
    assert isinstance(sealer, berth.MultiSealer)
    assert (sealer.name, sealer.key_id) == ("kms", GCP)
    assert sealer.can_open("aes-gcm", berth.Keyring.load(keyring_path).primary)


def test_several_keks_the_first_seals(keyring_path: Path) -> None:
    sealer = berth.sealer_from_env({"BERTH_KMS": f"awskms://alias/new, awskms://alias/old,local://{keyring_path}"})
    assert isinstance(sealer, berth.MultiSealer) and sealer.key_id == "alias/new"
    assert sealer.can_open("kms", "alias/old") and len(sealer.members) == 3


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("projects/p/locations/l/keyRings/r/cryptoKeys/k", "is not a KMS URL"),
        ("vault://secret/berth", "unknown scheme 'vault'"),
        ("gcpkms://", "is not a KMS URL"),
        ("gcpkms://projects/p/keyRings/r", "is not a CryptoKey name"),
        ("awskms://arn:aws:s3:::bucket", "is not a KMS key id"),
        ("local://relative/keyring.json", "must be absolute"),
        ("local:///nonexistent/keyring.json", "cannot read the keyring"),
        ("awskms://alias/a,,awskms://alias/b", "is not a KMS URL"),
    ],
)
def test_bad_values_are_one_line_value_errors(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        berth.sealer_from_env({"BERTH_KMS": value})
    text = str(info.value)
    assert "\n" not in text and text.startswith("BERTH_KMS=")


def test_bad_keyring_files_are_one_line_value_errors(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not a keyring")
    (tmp_path / "bad.json").chmod(0o600)
    for path, message in ((tmp_path / "missing.json", "cannot read"), (tmp_path / "bad.json", "not a berth keyring")):
        with pytest.raises(ValueError, match=message) as info:
            berth.sealer_from_env({"BERTH_KEYRING": str(path)})
        assert "\n" not in str(info.value) and str(info.value).startswith("BERTH_KEYRING=")


def test_import_berth_imports_no_cloud_client() -> None:
    code = (
        "import sys, berth, berth.kms; berth.sealer_from_env({'BERTH_KMS': 'awskms://alias/x,gcpkms://" + GCP + "'});"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore') or m.startswith('google.cloud')];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("variable", ["BERTH_KEYRING", "BERTH_KMS"])
def test_a_readable_keyring_is_refused_unless_the_environment_allows_it(keyring_path: Path, variable: str) -> None:
    keyring_path.chmod(0o644)
    value = str(keyring_path) if variable == "BERTH_KEYRING" else f"local://{keyring_path}"
    with pytest.raises(ValueError, match=r"mode 0644.*chmod 600"):
        berth.sealer_from_env({variable: value})
    assert berth.sealer_from_env({variable: value, "BERTH_KEYRING_ALLOW_READABLE": "1"}) is not None
    with pytest.raises(ValueError, match="chmod 600"):
        berth.sealer_from_env({variable: value, "BERTH_KEYRING_ALLOW_READABLE": "0"})
