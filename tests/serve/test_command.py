"""`berth serve` as a user runs it: the console script, the settings, the audit log, a graceful stop."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import httpx

import berth
from tests._net import free_port, wait_http

BERTH = Path(sys.executable).parent / "berth"


def test_serve_answers_audits_and_stops_gracefully_on_sigterm(tmp_path: Path) -> None:
    keyring = tmp_path / "keys.json"
    berth.Keyring.generate().save(keyring)
    url = f"sqlite:///{tmp_path}/berth.db"
    sealer = berth.AesGcmSealer(berth.Keyring.load(keyring))
    with (
        berth.open_store(url, identity="ops", sealer=sealer) as store,
        berth.open_questions(url, identity="ops", sealer=sealer) as qs,
    ):
        env = berth.Envelope(provider="p", provider_state={"secret": "SEALED"}, run_id="r1")
        berth.Coordinator(store, qs).suspend("deploy/7", env, question="Roll out to EU?")
        question = qs.pending("deploy/7")
    assert question is not None
    secret = secrets.token_urlsafe(32)
    token = "carol:" + secret
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("BERTH_")} | {
        "BERTH_URL": url,
        "BERTH_IDENTITY": "ops",
        "BERTH_KEYRING": str(keyring),
        "BERTH_SERVE_TOKEN": token,
    }
    proc = subprocess.Popen(
        [str(BERTH), "serve", "--port", str(port), "--identity", "ops", "--identity", "other"],
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        assert wait_http(base + "/health"), "berth serve did not start"
        auth = {"Authorization": "Bearer " + secret}
        listed = httpx.get(base + "/api/questions", headers=auth).json()
        assert [(d["identity"], d["key"], d["prompt"]) for d in listed] == [("ops", "deploy/7", "Roll out to EU?")]
        r = httpx.post(
            base + "/api/answers",
            json={"identity": "ops", "key": "deploy/7", "question_id": question.id, "text": "go"},
            headers=auth,
        )
        assert r.status_code == 201 and r.json()["by"] == "carol"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    # uvicorn finishes what is in flight, runs the app's shutdown (closing the stores), then re-raises
    # the signal so the exit status says how it ended, as a service manager expects
    assert proc.returncode in (0, -signal.SIGTERM), err
    assert "Application shutdown complete" in err and "Finished server process" in err
    assert f"http://127.0.0.1:{port}/" in err
    audit = [line for line in err.splitlines() if "berth.serve.audit" in line]
    assert len(audit) == 1 and "key='deploy/7'" in audit[0] and "by='carol'" in audit[0] and "'go'" not in audit[0]
    assert "SEALED" not in out + err
